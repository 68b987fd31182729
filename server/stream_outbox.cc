#include "server/stream_outbox.h"

#include <string>
#include <utility>

namespace streamd::server {

StreamOutbox::PushResult StreamOutbox::PushToken(const std::string& request_id, int32_t token,
                                                 const std::string& text, int64_t index) {
  std::unique_lock<std::mutex> lock(mu_);
  if (finish_ || detached_) return PushResult::kClosed;
  if (queued_tokens_ >= max_queued_tokens_) return PushResult::kFull;
  v1::TokenDelta* delta = nullptr;
  if (!queue_.empty() && queue_.back().has_token_delta() &&
      queue_.back().token_delta().request_id() == request_id) {
    delta = queue_.back().mutable_token_delta();  // coalesce behind the write in flight
  } else {
    queue_.emplace_back();
    delta = queue_.back().mutable_token_delta();
    delta->set_request_id(request_id);
    delta->set_index(index);
  }
  delta->add_token_ids(token);
  delta->mutable_text()->append(text);
  ++queued_tokens_;
  Pump(lock);
  return PushResult::kQueued;
}

bool StreamOutbox::Push(v1::ServerMessage message) {
  std::unique_lock<std::mutex> lock(mu_);
  if (finish_ || detached_) return false;
  if (queue_.size() >= kMaxQueuedMessages) {
    // A client that sends and never reads: each bad message is answered, and the answers would
    // pile up without end. The stream ends instead (its session stays resumable).
    queue_.clear();
    queued_tokens_ = 0;
    finish_ = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                           "client too slow: " + std::to_string(kMaxQueuedMessages) +
                               " messages were queued unread; the stream ends");
    Pump(lock);
    return false;
  }
  queue_.push_back(std::move(message));
  Pump(lock);
  return true;
}

void StreamOutbox::Finish(const grpc::Status& status) {
  std::unique_lock<std::mutex> lock(mu_);
  if (finish_ || detached_) return;
  finish_ = status;
  Pump(lock);
}

void StreamOutbox::Abort(const grpc::Status& status) {
  std::unique_lock<std::mutex> lock(mu_);
  if (detached_) return;
  queue_.clear();
  queued_tokens_ = 0;
  if (!finish_) finish_ = status;
  Pump(lock);
}

void StreamOutbox::OnWriteDone(bool ok) {
  std::unique_lock<std::mutex> lock(mu_);
  writing_ = false;
  if (!ok) {
    queue_.clear();
    queued_tokens_ = 0;
    if (!finish_) finish_ = grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
  }
  Pump(lock);
}

void StreamOutbox::Detach() {
  std::lock_guard<std::mutex> lock(mu_);
  detached_ = true;
  queue_.clear();
  queued_tokens_ = 0;
}

int64_t StreamOutbox::queued_tokens() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queued_tokens_;
}

bool StreamOutbox::closed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finish_.has_value() || detached_;
}

void StreamOutbox::Pump(std::unique_lock<std::mutex>& lock) {
  if (writing_ || finished_ || detached_) return;
  if (!queue_.empty()) {
    current_ = std::move(queue_.front());
    queue_.pop_front();
    if (current_.has_token_delta()) queued_tokens_ -= current_.token_delta().token_ids_size();
    writing_ = true;
    lock.unlock();
    writer_->StartWrite(&current_);
    return;
  }
  if (finish_) {
    finished_ = true;
    const grpc::Status status = *finish_;
    lock.unlock();
    writer_->Finish(status);
  }
}

}  // namespace streamd::server
