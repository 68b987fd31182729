// What client_message_fuzz checks in everything one Session stream writes, message by message:
// the promises of proto/streamd/v1/streamd.proto and server/README.md a client relies on.
//
//   - every message survives the trip through its bytes (serialized as the reactor does, then
//     parsed by a client): a proto3 string that is not UTF-8 fails the client's parse;
//   - a kind is set; Opened comes at most once per stream and before anything about a session;
//     session ids (Opened, Forked) are 32 lowercase hex digits, a fork's not the stream's own;
//   - an Error has a gRPC code (1-16), a message, and names the field its message starts with
//     (a GenerationDone's error, which blames no request field, may name none);
//   - the TokenDeltas of a generation carry its request_id, ids in the vocabulary, and indices
//     that continue where the last delta stopped (a gap only where the slow-client policy cut
//     tokens, which its GenerationDone then says); none follows its GenerationDone (a new
//     generation starts at index 0);
//   - a GenerationDone has a reason, an error when the reason is ERROR, and counts at least
//     the tokens sent (exactly those plus the end-of-generation token, unless tokens were cut);
//   - a CacheState adds up: tokens_seen = cached + evicted + pending, none negative;
//   - the call finishes once, with a valid code, and nothing is written after that.
// A broken promise prints "client_message_fuzz: property violated: ..." and traps.
#pragma once

#include <grpcpp/support/status.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "streamd/v1/streamd.pb.h"

namespace streamd::fuzz {

// Prints what broke (and `detail`, e.g. the message) and traps.
[[noreturn]] void PropertyViolated(std::string_view what, std::string_view detail = {});
#define STREAMD_FUZZ_CHECK(cond, detail)                             \
  do {                                                               \
    if (!(cond)) ::streamd::fuzz::PropertyViolated(#cond, (detail)); \
  } while (0)

bool IsSessionIdText(std::string_view id);  // 32 lowercase hex digits

// With CLIENT_MESSAGE_FUZZ_TRACE=1 in the environment, what each stream reads and writes goes
// to stderr (to read a finding's story; far too slow for fuzzing).
bool Tracing();
void Trace(int call, std::string_view what, std::string_view detail);

// Every session id the server handed out during one input (Opened, Forked), in order; the
// streams write from several threads.
class KnownIds {
 public:
  void Add(const std::string& id);
  // The i-th id (modulo how many there are); nullopt before the first.
  std::optional<std::string> Pick(size_t i) const;

 private:
  mutable std::mutex mu_;
  std::vector<std::string> ids_;
};

class ServerMessageChecker {
 public:
  // `vocab_size`: the model's; `ids`: shared by the streams of one input (Opened and Forked
  // add to it); `call`: which call of the input this is (for the trace).
  ServerMessageChecker(int32_t vocab_size, KnownIds* ids, int call)
      : vocab_size_(vocab_size), ids_(ids), call_(call) {}

  // A message the stream starts to write, in order.
  void OnWrite(const v1::ServerMessage& message);
  // The status the call finishes with.
  void OnFinish(const grpc::Status& status);

  const std::string& session_id() const { return session_id_; }  // empty before Opened

 private:
  void CheckError(const v1::Error& e, const v1::ServerMessage& m, bool answers_request) const;
  void CheckTokens(const v1::TokenDelta& delta, const v1::ServerMessage& m);
  void CheckDone(const v1::GenerationDone& done, const v1::ServerMessage& m);

  const int32_t vocab_size_;
  KnownIds* ids_;
  const int call_;
  std::string session_id_;
  bool finished_ = false;
  // The generation whose tokens are arriving: its request_id, the next index, how many tokens
  // were sent, and whether some were skipped.
  struct Generation {
    std::string request_id;
    int64_t next_index = 0;
    int64_t sent = 0;
    bool gap = false;
  };
  std::optional<Generation> generation_;
};

}  // namespace streamd::fuzz
