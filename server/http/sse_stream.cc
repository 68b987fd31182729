#include "server/http/sse_stream.h"

#include <httplib.h>

#include <chrono>

namespace streamd::http {
namespace {

constexpr std::chrono::milliseconds kPoll{250};
// An idle stream sends a comment this often: a write to a client that left fails soon after.
constexpr std::chrono::seconds kKeepAlive{3};

struct StreamState {
  std::shared_ptr<Answer> answer;
  SseFormat format;
  bool opened = false;
  bool done = false;
  bool cancelled = false;
  std::string all;  // every piece of text sent
  std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();
};

}  // namespace

void StreamAnswer(std::shared_ptr<Answer> answer, SseFormat format, httplib::Response& res) {
  auto state = std::make_shared<StreamState>();
  state->answer = std::move(answer);
  state->format = std::move(format);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [state](size_t, httplib::DataSink& sink) {
        StreamState& s = *state;
        const auto write = [&](const std::string& bytes) {
          if (bytes.empty()) return true;
          s.last_write = std::chrono::steady_clock::now();
          if (sink.write(bytes.data(), bytes.size())) return true;
          // The client went away: stop the generation, and this stream.
          if (!s.cancelled) s.answer->Cancel();
          s.cancelled = true;
          return false;
        };
        if (!s.opened) {
          s.opened = true;
          if (!write(s.format.opening)) return false;
        }
        if (!s.cancelled && s.answer->drain_cancels()) {
          s.cancelled = true;
          s.answer->Cancel();  // shutting down, and the grace period is over
        }
        GenerationQueue::Taken t = s.answer->queue().Take(kPoll);
        if (t.overflowed && !s.cancelled) {
          s.cancelled = true;
          s.answer->Cancel();  // too slow: the end (kCancelled) follows
        }
        if (!t.text.empty()) {
          s.all += t.text;
          if (!write(s.format.text(t.text))) return false;
        }
        if (t.end) {
          GenerationEnd end = *t.end;
          if (t.overflowed && end.status.ok()) {
            end.status = ResourceExhaustedError(
                "client too slow: it did not read the stream; the generation was cancelled");
          }
          if (!end.tail_text.empty()) {
            s.all += end.tail_text;
            if (!write(s.format.text(end.tail_text))) return false;
          }
          const std::string closing = s.format.closing(*s.answer, end, s.all);
          s.answer->Finish(s.all);
          s.done = true;
          if (!write(closing)) return false;
          sink.done();
          return true;
        }
        if (std::chrono::steady_clock::now() - s.last_write > kKeepAlive) {
          return write(": keep-alive\n\n");
        }
        return true;
      },
      // After the last call, or when the connection failed first: a generation still running
      // is cancelled; the Answer (and with it the session) goes when the state does.
      [state](bool) {
        if (!state->done && state->opened && !state->cancelled) state->answer->Cancel();
      });
}

}  // namespace streamd::http
