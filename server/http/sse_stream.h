// Streams an Answer as server-sent events over httplib's chunked content provider. The
// provider runs on the HTTP worker thread of the request after its handler returned: it waits
// for the generation's text (GenerationQueue), writes the events the format makes of it, and
// ends with the format's closing events. A write that fails (the client went away) cancels the
// generation; so does a client too slow to take the text (the queue overflowed). While the
// model is busy with a long prompt, an SSE comment every few seconds finds a client that left.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "server/http/answer.h"

namespace httplib {
struct Response;
}

namespace streamd::http {

struct SseFormat {
  std::string opening;                                       // events before any text
  std::function<std::string(const std::string& text)> text;  // events for a piece of text
  // Events after the end (an error event for a cancelled or failed generation; [DONE]...).
  // Called before the answer is finished (a stateless session is still open).
  std::function<std::string(Answer& answer, const GenerationEnd& end, const std::string& all)>
      closing;
};

void StreamAnswer(std::shared_ptr<Answer> answer, SseFormat format, httplib::Response& res);

}  // namespace streamd::http
