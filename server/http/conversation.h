// What a lasting HTTP session remembers of its conversation, so that a client re-sending its
// whole history (as every Chat Completions client does) has only its new messages appended:
// the number of turns in the session and a running hash over them (role and exact text, in
// order), and how many responses it has given (the turn index of a Responses API id). Kept as
// the session's metadata string (HttpSessions::Session::SetMetadata): it is in the snapshot, so
// it survives restarts and moves between replicas, and it stays this small however long the
// conversation grows.
//
// The hash is FNV-1a over a length-prefixed encoding of each turn: stable across builds and
// machines (unlike std::hash). It tells "the client sent the history this session has" from
// "it did not"; it is not a security boundary (sessions are the tenant's own).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/util/status.h"
#include "server/http/openai_request.h"

namespace streamd::http {

struct Conversation {
  static constexpr uint64_t kEmptyHash = 14695981039346656037ull;  // FNV-1a offset basis
  int64_t turns = 0;
  uint64_t hash = kEmptyHash;
  int64_t responses = 0;  // answers given (Responses API ids count these)

  void Add(TurnRole role, std::string_view text);
  std::string Encode() const;
  // "" is a new conversation; anything else that is not Encode()'s output is DATA_LOSS.
  static StatusOr<Conversation> Decode(std::string_view text);
};

// Where the new messages start: messages[stored.turns..] when the first stored.turns messages
// are the session's history; FAILED_PRECONDITION naming `field` otherwise (fewer messages than
// the session holds, or a different history).
StatusOr<size_t> NewMessagesStart(const Conversation& stored,
                                  const std::vector<ChatMessage>& messages,
                                  const std::string& field = "messages");

}  // namespace streamd::http
