#include "server/http/generation_queue.h"

namespace streamd::http {

GenerationCallbacks GenerationQueue::Callbacks() {
  GenerationCallbacks c;
  c.on_text = [self = shared_from_this()](const std::string& text) { self->Push(text); };
  c.on_done = [self = shared_from_this()](const GenerationEnd& end) { self->End(end); };
  return c;
}

void GenerationQueue::Push(const std::string& text) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (pieces_ >= max_pieces_) {
      overflowed_ = true;
      return;
    }
    text_ += text;
    ++pieces_;
  }
  cv_.notify_one();
}

void GenerationQueue::End(const GenerationEnd& end) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    end_ = end;
  }
  cv_.notify_one();
}

GenerationQueue::Taken GenerationQueue::Take(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !text_.empty() || end_ || overflowed_; });
  Taken t;
  t.text.swap(text_);
  pieces_ = 0;
  t.end = end_;
  t.overflowed = overflowed_;
  return t;
}

}  // namespace streamd::http
