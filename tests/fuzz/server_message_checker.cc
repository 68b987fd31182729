#include "tests/fuzz/server_message_checker.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace streamd::fuzz {

void PropertyViolated(std::string_view what, std::string_view detail) {
  std::fprintf(stderr, "client_message_fuzz: property violated: %.*s\n",
               static_cast<int>(what.size()), what.data());
  if (!detail.empty()) {
    std::fprintf(stderr, "  %.*s\n", static_cast<int>(detail.size()), detail.data());
  }
  __builtin_trap();
}

namespace {

// Built only when a check fails.
std::string Describe(const v1::ServerMessage& m) { return m.ShortDebugString(); }

}  // namespace

bool Tracing() {
  static const bool on = [] {
    const char* v = std::getenv("CLIENT_MESSAGE_FUZZ_TRACE");
    return v != nullptr && std::string_view(v) == "1";
  }();
  return on;
}

void Trace(int call, std::string_view what, std::string_view detail) {
  std::fprintf(stderr, "[call %d] %.*s %.*s\n", call, static_cast<int>(what.size()), what.data(),
               static_cast<int>(detail.size()), detail.data());
}

bool IsSessionIdText(std::string_view id) {
  return id.size() == 32 && std::all_of(id.begin(), id.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

void KnownIds::Add(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (std::find(ids_.begin(), ids_.end(), id) == ids_.end()) ids_.push_back(id);
}

std::optional<std::string> KnownIds::Pick(size_t i) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (ids_.empty()) return std::nullopt;
  return ids_[i % ids_.size()];
}

void ServerMessageChecker::OnWrite(const v1::ServerMessage& m) {
  if (Tracing()) Trace(call_, "writes", m.ShortDebugString());
  STREAMD_FUZZ_CHECK(!finished_, "written after the call finished: " + Describe(m));
  // What a client receives: the bytes, parsed again (proto3 strings must be UTF-8 to parse).
  std::string bytes;
  STREAMD_FUZZ_CHECK(m.SerializeToString(&bytes), Describe(m));
  v1::ServerMessage parsed;
  STREAMD_FUZZ_CHECK(parsed.ParseFromString(bytes), "a client cannot parse: " + Describe(m));
  STREAMD_FUZZ_CHECK(m.kind_case() != v1::ServerMessage::KIND_NOT_SET, Describe(m));
  if (m.kind_case() != v1::ServerMessage::kOpened && m.kind_case() != v1::ServerMessage::kError) {
    STREAMD_FUZZ_CHECK(!session_id_.empty(), "about a session before Opened: " + Describe(m));
  }
  switch (m.kind_case()) {
    case v1::ServerMessage::kOpened:
      STREAMD_FUZZ_CHECK(session_id_.empty(), "a second Opened on one stream: " + Describe(m));
      STREAMD_FUZZ_CHECK(IsSessionIdText(m.opened().session_id()), Describe(m));
      STREAMD_FUZZ_CHECK(m.opened().settings().max_blocks() > 0, Describe(m));
      session_id_ = m.opened().session_id();
      ids_->Add(session_id_);
      break;
    case v1::ServerMessage::kForked:
      STREAMD_FUZZ_CHECK(IsSessionIdText(m.forked().session_id()), Describe(m));
      STREAMD_FUZZ_CHECK(m.forked().session_id() != session_id_, Describe(m));
      ids_->Add(m.forked().session_id());
      break;
    case v1::ServerMessage::kError:
      CheckError(m.error(), m, /*answers_request=*/true);
      break;
    case v1::ServerMessage::kTokenDelta:
      CheckTokens(m.token_delta(), m);
      break;
    case v1::ServerMessage::kGenerationDone:
      CheckDone(m.generation_done(), m);
      break;
    case v1::ServerMessage::kCacheState: {
      const v1::CacheState& c = m.cache_state();
      STREAMD_FUZZ_CHECK(c.tokens_cached() >= 0 && c.tokens_evicted() >= 0 &&
                             c.pending_tokens() >= 0 && c.blocks_held() >= 0,
                         Describe(m));
      STREAMD_FUZZ_CHECK(
          c.tokens_seen() == c.tokens_cached() + c.tokens_evicted() + c.pending_tokens(),
          Describe(m));
      break;
    }
    case v1::ServerMessage::KIND_NOT_SET:
      break;
  }
}

void ServerMessageChecker::CheckError(const v1::Error& e, const v1::ServerMessage& m,
                                      bool answers_request) const {
  STREAMD_FUZZ_CHECK(e.code() >= 1 && e.code() <= 16, "not a gRPC error code: " + Describe(m));
  STREAMD_FUZZ_CHECK(!e.message().empty(), Describe(m));
  STREAMD_FUZZ_CHECK(e.message().rfind(e.field(), 0) == 0, Describe(m));
  // "Bad requests get an Error{code, message, field}" (server/README.md): the message starts
  // with the field's path. (A GenerationDone's error says why the server ended a generation:
  // a slow client, shutdown; no request field is to blame.)
  if (answers_request) {
    STREAMD_FUZZ_CHECK(!e.field().empty(), "an Error that names no field: " + Describe(m));
  }
}

void ServerMessageChecker::CheckTokens(const v1::TokenDelta& d, const v1::ServerMessage& m) {
  STREAMD_FUZZ_CHECK(d.token_ids_size() > 0, Describe(m));
  for (int32_t id : d.token_ids()) {
    STREAMD_FUZZ_CHECK(id >= 0 && id < vocab_size_,
                       "a token outside the vocabulary: " + Describe(m));
  }
  STREAMD_FUZZ_CHECK(d.index() >= 0, Describe(m));
  if (!generation_) {
    // A new generation starts at index 0, unless its first tokens were cut (the slow-client
    // bound counts the tokens of an earlier generation still unread): then its Done says so.
    generation_ = Generation{d.request_id(), 0, 0, false};
  }
  Generation& g = *generation_;
  STREAMD_FUZZ_CHECK(
      d.request_id() == g.request_id,
      "tokens of another generation before the Done of \"" + g.request_id + "\": " + Describe(m));
  STREAMD_FUZZ_CHECK(d.index() >= g.next_index, "tokens sent twice or backwards: " + Describe(m));
  g.gap = g.gap || d.index() > g.next_index;
  g.next_index = d.index() + d.token_ids_size();
  g.sent += d.token_ids_size();
}

void ServerMessageChecker::CheckDone(const v1::GenerationDone& done, const v1::ServerMessage& m) {
  STREAMD_FUZZ_CHECK(
      done.reason() >= v1::FINISH_REASON_LENGTH && done.reason() <= v1::FINISH_REASON_ERROR,
      Describe(m));
  if (done.reason() == v1::FINISH_REASON_ERROR) STREAMD_FUZZ_CHECK(done.has_error(), Describe(m));
  if (done.has_error()) CheckError(done.error(), m, /*answers_request=*/false);
  const Generation g = generation_.value_or(Generation{done.request_id(), 0, 0, false});
  generation_.reset();
  STREAMD_FUZZ_CHECK(
      done.request_id() == g.request_id,
      "the Done of another generation than its tokens' (\"" + g.request_id + "\"): " + Describe(m));
  const int64_t produced = done.usage().output_tokens();
  STREAMD_FUZZ_CHECK(produced >= g.sent, "more tokens sent than produced: " + Describe(m));
  // Tokens are only ever cut by the slow-client policy, and a Done after a cut says why.
  STREAMD_FUZZ_CHECK(!g.gap || done.has_error(), "tokens skipped without a word: " + Describe(m));
  if (!done.has_error()) {
    const bool eog = done.reason() == v1::FINISH_REASON_END_OF_GENERATION;
    STREAMD_FUZZ_CHECK(produced == g.sent + (eog ? 1 : 0),
                       "tokens produced but neither sent nor explained: " + Describe(m));
  }
}

void ServerMessageChecker::OnFinish(const grpc::Status& status) {
  if (Tracing()) {
    Trace(call_, "finishes", std::to_string(status.error_code()) + " " + status.error_message());
  }
  STREAMD_FUZZ_CHECK(!finished_, "finished twice");
  finished_ = true;
  const int code = static_cast<int>(status.error_code());
  STREAMD_FUZZ_CHECK(code >= 0 && code <= 16, status.error_message());
}

}  // namespace streamd::fuzz
