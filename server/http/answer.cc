#include "server/http/answer.h"

#include <algorithm>

namespace streamd::http {
namespace {

// How long Collect waits between looks at the queue (the generation's end wakes it at once).
constexpr std::chrono::milliseconds kPoll{500};

}  // namespace

Answer::Answer(std::unique_ptr<Session> session, bool stateless, Conversation record,
               InFlight* in_flight)
    : session_(std::move(session)), stateless_(stateless), record_(record), in_flight_(in_flight) {
  cached_tokens_ = session_->ContextTokens();
  if (in_flight_ != nullptr) ++in_flight_->answers;
}

Answer::~Answer() {
  if (started_ && !finished_) {
    session_->Cancel();
    // What the cancelled generation produced is in the context: it joins the record too.
    std::string text;
    for (;;) {
      GenerationQueue::Taken t = queue_->Take(kPoll);
      text += t.text;
      if (t.end) {
        text += t.end->tail_text;
        break;
      }
    }
    Finish(text);
  } else if (!finished_ && stateless_) {
    (void)session_->Close();
  }
  // A lasting session is detached by its Session's destructor, before the count goes down.
  session_.reset();
  if (in_flight_ != nullptr) --in_flight_->answers;
}

Status Answer::Append(const std::vector<ChatMessage>& turns) {
  Status status = OkStatus();
  for (const ChatMessage& m : turns) {
    status = session_->Append(m.role, m.content);
    if (!status.ok()) break;
    record_.Add(m.role, m.content);
  }
  if (!stateless_ && !turns.empty()) {
    // Saved even after a failure part-way: the record must describe the context as it is.
    Status saved = session_->SetMetadata(record_.Encode());
    if (status.ok()) status = saved;
  }
  return status;
}

Status Answer::Start(const GenerateParams& params, size_t max_queued_pieces) {
  queue_ = std::make_shared<GenerationQueue>(max_queued_pieces);
  STREAMD_RETURN_IF_ERROR(session_->Generate(params, queue_->Callbacks()));
  started_ = true;
  return OkStatus();
}

Answer::Whole Answer::Collect(const std::function<bool()>& client_gone) {
  Whole w;
  bool cancelled = false;
  // The first look at the client after kClientCheck: a short answer never looks.
  auto next_check = std::chrono::steady_clock::now() + kClientCheck;
  for (;;) {
    if (!cancelled && drain_cancels()) {
      cancelled = true;
      Cancel();
    }
    if (!cancelled && client_gone && std::chrono::steady_clock::now() >= next_check) {
      next_check = std::chrono::steady_clock::now() + kClientCheck;
      if (client_gone()) {
        cancelled = true;
        Cancel();
      }
    }
    GenerationQueue::Taken t = queue_->Take(cancelled || !client_gone ? kPoll : kClientCheck);
    w.text += t.text;
    if (t.end) {
      w.end = *t.end;
      w.text += t.end->tail_text;
      return w;
    }
  }
}

void Answer::Finish(const std::string& text) {
  if (finished_) return;
  finished_ = true;
  if (stateless_) {
    (void)session_->Close();
    return;
  }
  record_.Add(TurnRole::kAssistant, text);
  ++record_.responses;
  (void)session_->SetMetadata(record_.Encode());
}

Usage Answer::UsageAfter(int64_t output_tokens) const {
  Usage u;
  u.completion_tokens = output_tokens;
  u.cached_tokens = cached_tokens_;
  // The context now is everything the answer was generated from, and the answer.
  u.prompt_tokens = std::max<int64_t>(session_->ContextTokens() - output_tokens, cached_tokens_);
  return u;
}

Status EndStatus(const GenerationEnd& end) {
  if (!end.status.ok()) return end.status;
  return UnavailableError("the generation was cancelled");
}

}  // namespace streamd::http
