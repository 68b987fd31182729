// A scripted HttpSessions for the HTTP server's tests (no model, no engine): every session
// writes what it was asked into a Journal the test reads, and generates "Hel", "lo", " \"you\"\n"
// (or, with Journal::endless, up to 1,500 pieces 20 ms apart, until cancelled).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "server/http/http_sessions.h"

namespace streamd::http::scripted {

// What every scripted session did, for the test to read.
struct Journal {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<TurnRole, std::string>> appended;
  std::map<std::string, std::string> metadata;  // by session id
  std::map<std::string, int64_t> context;       // tokens, by session id
  int closed = 0;
  int detached = 0;
  int cancelled = 0;
  // Generations run until cancelled (or for 30 s, so that a test whose cancellation never
  // comes fails instead of hanging in the server's shutdown).
  bool endless = false;
  std::vector<std::pair<std::string, int>> answered;  // HttpServerOptions::on_answered
};

class ScriptedSession : public Session {
 public:
  ScriptedSession(Journal& j, std::string id) : j_(j), id_(std::move(id)) {}
  ~ScriptedSession() override {
    if (worker_.joinable()) worker_.join();
    std::lock_guard<std::mutex> lock(j_.mu);
    if (!closed_) ++j_.detached;
    j_.cv.notify_all();
  }
  std::string id() const override { return id_; }
  int64_t ContextTokens() const override {
    std::lock_guard<std::mutex> lock(j_.mu);
    return j_.context[id_];
  }
  Status Append(TurnRole role, const std::string& text) override {
    std::lock_guard<std::mutex> lock(j_.mu);
    j_.appended.emplace_back(role, text);
    j_.context[id_] += 10;
    j_.cv.notify_all();  // tests wait for the request to reach its session
    return OkStatus();
  }
  Status Generate(const GenerateParams& p, GenerationCallbacks cb) override {
    bool endless;
    {
      std::lock_guard<std::mutex> lock(j_.mu);
      endless = j_.endless;
      j_.context[id_] += 2;
    }
    worker_ = std::thread([this, cb, endless, max = p.max_tokens] {
      const char* pieces[] = {"Hel", "lo", " \"you\"\n"};
      int64_t n = 0;
      for (int i = 0; endless ? i < 1500 : i < 3; ++i) {
        if (cancel_.load()) {
          cb.on_done({DoneReason::kCancelled, OkStatus(), "", n});
          return;
        }
        cb.on_text(pieces[i % 3]);
        ++n;
        std::this_thread::sleep_for(std::chrono::milliseconds(endless ? 20 : 1));
      }
      cb.on_done({max == 3 ? DoneReason::kLength : DoneReason::kStop, OkStatus(), "!", n});
    });
    return OkStatus();
  }
  void Cancel() override {
    cancel_.store(true);
    std::lock_guard<std::mutex> lock(j_.mu);
    ++j_.cancelled;
    j_.cv.notify_all();
  }
  Status Close() override {
    if (worker_.joinable()) worker_.join();
    std::lock_guard<std::mutex> lock(j_.mu);
    closed_ = true;
    ++j_.closed;
    j_.cv.notify_all();
    return OkStatus();
  }
  std::string Metadata() override {
    std::lock_guard<std::mutex> lock(j_.mu);
    return j_.metadata[id_];
  }
  Status SetMetadata(const std::string& value) override {
    std::lock_guard<std::mutex> lock(j_.mu);
    j_.metadata[id_] = value;
    return OkStatus();
  }

 private:
  Journal& j_;
  const std::string id_;
  std::thread worker_;
  std::atomic<bool> cancel_{false};
  bool closed_ = false;
};

class ScriptedSessions : public HttpSessions {
 public:
  explicit ScriptedSessions(Journal& j) : j_(j) {}
  // One key, "k", of tenant "t"; no header is the anonymous admin (keys off) unless required.
  StatusOr<HttpCaller> Authenticate(const std::string* authorization) const override {
    if (authorization == nullptr && !keys_required) return HttpCaller{};
    if (authorization != nullptr && *authorization == "Bearer k") {
      return HttpCaller{"t", false, true, ""};
    }
    return Status(StatusCode::kUnauthenticated, "authorization: not a valid key");
  }
  StatusOr<std::unique_ptr<Session>> Open(const HttpCaller&) override {
    return std::unique_ptr<Session>(new ScriptedSession(j_, std::string(31, '0') + "1"));
  }
  StatusOr<std::unique_ptr<Session>> Resume(const HttpCaller&, const std::string& id) override {
    std::lock_guard<std::mutex> lock(j_.mu);
    if (!j_.metadata.count(id)) return NotFoundError("session " + id + " does not exist");
    return std::unique_ptr<Session>(new ScriptedSession(j_, id));
  }
  Status Serving() const override {
    return draining ? UnavailableError("streamd is shutting down") : OkStatus();
  }
  std::string ModelName() const override { return "scripted"; }
  bool draining = false;
  bool keys_required = false;

 private:
  Journal& j_;
};

// Waits (at most 10 s) until `pred` holds on the journal.
template <typename Pred>
bool Eventually(Journal& journal, Pred pred) {
  std::unique_lock<std::mutex> lock(journal.mu);
  return journal.cv.wait_for(lock, std::chrono::seconds(10), [&] { return pred(journal); });
}

}  // namespace streamd::http::scripted
