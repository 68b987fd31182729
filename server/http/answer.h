// Answer: one request's turn on a session. The request's new messages are appended (each one
// recorded in the session's Conversation as it lands, so the record always describes the
// context), a generation runs, and its end is recorded: the answer's text joins the
// conversation, the record is saved with the session, and a stateless session is closed
// (a lasting one is detached when the Answer goes, resumable by id).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/http/conversation.h"
#include "server/http/generation_queue.h"
#include "server/http/http_sessions.h"
#include "server/http/openai_response.h"

namespace streamd::http {

// The answers a server has in flight, for its drain (HttpServer::Drain): how many there are, and
// the flag that cancels the generations of all of them once the grace period is over.
struct InFlight {
  std::atomic<int32_t> answers{0};
  std::atomic<bool> cancel{false};
};

class Answer {
 public:
  // `stateless`: the session is closed once answered. `record`: the session's conversation.
  // `in_flight` (optional) counts this answer while it lives.
  Answer(std::unique_ptr<Session> session, bool stateless, Conversation record,
         InFlight* in_flight = nullptr);
  ~Answer();  // cancels a generation still running; closes or detaches the session

  Session& session() { return *session_; }
  const Conversation& record() const { return record_; }

  Status Append(const std::vector<ChatMessage>& turns);
  // Starts the generation; its text and end arrive in queue().
  Status Start(const GenerateParams& params, size_t max_queued_pieces);
  GenerationQueue& queue() { return *queue_; }

  // Waits for the whole generation (no streaming): its text, tail included, and end. Every
  // kClientCheck or so `client_gone` (when given) is asked whether the client hung up; once it
  // says so the generation is cancelled (it ends CANCELLED, its text kept as Finish records).
  struct Whole {
    std::string text;
    GenerationEnd end;
  };
  static constexpr std::chrono::milliseconds kClientCheck{200};
  Whole Collect(const std::function<bool()>& client_gone = nullptr);
  // The generation ended with `text` (all of it, as the client got it): recorded in the
  // conversation and saved; a stateless session is closed. Idempotent.
  void Finish(const std::string& text);
  // The client went away or was too slow: the generation is cancelled (Finish still records
  // what it produced once it ends).
  void Cancel() { session_->Cancel(); }
  // The server drains and its grace period is over: the generation is to be cancelled.
  bool drain_cancels() const { return in_flight_ != nullptr && in_flight_->cancel.load(); }

  // Token counts once the generation ended with `output_tokens`.
  Usage UsageAfter(int64_t output_tokens) const;
  int64_t cached_tokens() const { return cached_tokens_; }

 private:
  std::unique_ptr<Session> session_;
  const bool stateless_;
  Conversation record_;
  int64_t cached_tokens_ = 0;  // context before this request's input
  std::shared_ptr<GenerationQueue> queue_;
  InFlight* const in_flight_;
  bool started_ = false;
  bool finished_ = false;
};

// The error a generation that did not finish ended with: its own, or "cancelled".
Status EndStatus(const GenerationEnd& end);

}  // namespace streamd::http
