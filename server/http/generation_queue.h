// GenerationQueue: a generation's text and end, handed from the engine's thread (which must not
// block) to the HTTP worker that writes them (which may). Bounded: text pieces not yet taken
// beyond `max_pieces` (limits.max_queued_tokens) mark the queue overflowed and are dropped; the
// writer then cancels the generation ("client too slow"), as a gRPC stream does. One producer,
// one consumer.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "server/http/http_sessions.h"

namespace streamd::http {

class GenerationQueue : public std::enable_shared_from_this<GenerationQueue> {
 public:
  explicit GenerationQueue(size_t max_pieces) : max_pieces_(max_pieces) {}

  // The callbacks to give Session::Generate; they keep the queue alive.
  GenerationCallbacks Callbacks();

  struct Taken {
    std::string text;                  // everything queued since the last Take
    std::optional<GenerationEnd> end;  // set once the generation ended (after its text)
    bool overflowed = false;
  };
  // Waits up to `timeout` for text or the end, then takes what is there.
  Taken Take(std::chrono::milliseconds timeout);

 private:
  void Push(const std::string& text);
  void End(const GenerationEnd& end);

  const size_t max_pieces_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string text_;
  size_t pieces_ = 0;
  bool overflowed_ = false;
  std::optional<GenerationEnd> end_;
};

}  // namespace streamd::http
