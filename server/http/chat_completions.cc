// POST /v1/chat/completions: a stateless completion (a session opened for the request and
// closed after it), or, with the x-streamd-session header, a turn of a lasting session: "new"
// opens one, an id resumes it, and only the messages after the session's stored turns are
// appended (conversation.h).
#include <httplib.h>

#include <memory>

#include "server/http/answer.h"
#include "server/http/client_connection.h"
#include "server/http/handlers.h"
#include "server/http/http_errors.h"
#include "server/http/openai_response.h"
#include "server/http/sse_stream.h"

namespace streamd::http {
namespace {

// The session the request runs on and the messages it adds to it.
struct Prepared {
  std::unique_ptr<Answer> answer;
  std::vector<ChatMessage> new_messages;
};

StatusOr<Prepared> Prepare(const HttpContext& ctx, const HttpCaller& caller,
                           const httplib::Request& req, ChatRequest& r) {
  Prepared p;
  const std::string named = req.get_header_value(kSessionHeader);
  if (named.empty() || named == "new") {
    STREAMD_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, ctx.sessions.Open(caller));
    p.answer = std::make_unique<Answer>(std::move(s), /*stateless=*/named.empty(), Conversation{},
                                        ctx.in_flight);
    p.new_messages = std::move(r.messages);
    return p;
  }
  auto s = ctx.sessions.Resume(caller, named);
  if (!s.ok()) {
    return Status(s.status().code(), std::string(kSessionHeader) + ": " + s.status().message());
  }
  STREAMD_ASSIGN_OR_RETURN(Conversation record, Conversation::Decode((*s)->Metadata()));
  STREAMD_ASSIGN_OR_RETURN(size_t start, NewMessagesStart(record, r.messages));
  if (start == r.messages.size()) {
    return InvalidArgumentError("messages has nothing after the session's " +
                                std::to_string(record.turns) +
                                " turns: add the new message to answer");
  }
  p.answer =
      std::make_unique<Answer>(std::move(s).value(), /*stateless=*/false, record, ctx.in_flight);
  p.new_messages.assign(std::make_move_iterator(r.messages.begin() + start),
                        std::make_move_iterator(r.messages.end()));
  return p;
}

// An error event in the stream (the status line went out with the first chunk).
std::string ErrorEvent(const Status& status) { return SseEvent(ToHttpError(status).body); }

}  // namespace

void WriteError(httplib::Response& res, const Status& status) {
  const HttpError e = ToHttpError(status);
  res.status = e.status;
  if (e.retry_after_s > 0) res.set_header("Retry-After", std::to_string(e.retry_after_s));
  res.set_content(e.body, "application/json");
}

void HandleChatCompletions(const HttpContext& ctx, const HttpCaller& caller,
                           const httplib::Request& req, httplib::Response& res) {
  auto parsed = ParseChatRequest(req.body, ctx.limits);
  if (!parsed.ok()) return WriteError(res, parsed.status());
  ChatRequest& r = *parsed;
  auto prepared = Prepare(ctx, caller, req, r);
  if (!prepared.ok()) return WriteError(res, prepared.status());
  std::shared_ptr<Answer> answer = std::move(prepared->answer);
  if (Status s = answer->Append(prepared->new_messages); !s.ok()) return WriteError(res, s);
  if (Status s = answer->Start(r.params, ctx.max_queued_tokens); !s.ok()) {
    return WriteError(res, s);
  }
  const std::string session_id = answer->session().id();
  if (!req.get_header_value(kSessionHeader).empty()) res.set_header(kSessionHeader, session_id);
  AnswerHead head{"chatcmpl-" + session_id + "-" + std::to_string(answer->record().responses),
                  UnixSeconds(), r.model.empty() ? ctx.sessions.ModelName() : r.model};
  if (!r.stream) {
    // The answer is written only at its end: a client that left meanwhile is noticed by
    // looking at its connection, and its generation cancelled.
    const ClientConnection client(req);
    Answer::Whole whole = answer->Collect([&client] { return client.Gone(); });
    if (whole.end.reason == DoneReason::kCancelled || whole.end.reason == DoneReason::kError) {
      answer->Finish(whole.text);
      return WriteError(res, EndStatus(whole.end));
    }
    const Usage usage = answer->UsageAfter(whole.end.output_tokens);
    answer->Finish(whole.text);
    return res.set_content(ChatCompletionJson(head, whole.text, whole.end.reason, usage),
                           "application/json");
  }
  SseFormat format;
  format.opening = SseEvent(ChatChunkJson(head, {.role = true}));
  format.text = [head](const std::string& text) {
    return SseEvent(ChatChunkJson(head, {.text = text}));
  };
  format.closing = [head, include_usage = r.include_usage](Answer& a, const GenerationEnd& end,
                                                           const std::string&) {
    if (end.reason == DoneReason::kCancelled || end.reason == DoneReason::kError) {
      return ErrorEvent(EndStatus(end)) + kSseDone;
    }
    std::string out = SseEvent(ChatChunkJson(head, {.reason = end.reason}));
    if (include_usage) {
      out += SseEvent(
          ChatChunkJson(head, {.usage = a.UsageAfter(end.output_tokens), .usage_only = true}));
    }
    return out + kSseDone;
  };
  StreamAnswer(std::move(answer), std::move(format), res);
}

}  // namespace streamd::http
