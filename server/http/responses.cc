// POST /v1/responses: every response is a turn of a lasting session. Without
// previous_response_id a new session is opened (closed after the answer when store is false);
// with it, the session that produced that response is resumed (the caller's tenant only:
// another tenant's id is 404, as a missing one) and only the new input is appended, so nothing
// is prefilled again. A response id is "resp_" + the session id + "_" + its turn index; only a
// session's latest response can be continued (its context has moved on past older ones).
#include <httplib.h>

#include <cctype>
#include <memory>

#include "server/http/answer.h"
#include "server/http/client_connection.h"
#include "server/http/handlers.h"
#include "server/http/http_errors.h"
#include "server/http/openai_response.h"
#include "server/http/sse_stream.h"

namespace streamd::http {
namespace {

std::string ResponseId(const std::string& session_id, int64_t index) {
  return "resp_" + session_id + "_" + std::to_string(index);
}

struct ResponseRef {
  std::string session_id;
  int64_t index = 0;
};

// "resp_<32 hex>_<n>".
StatusOr<ResponseRef> ParseResponseId(const std::string& id) {
  const auto bad = [&] {
    return InvalidArgumentError("previous_response_id = \"" + id.substr(0, 80) +
                                "\" is not a response id of streamd (resp_<session>_<n>)");
  };
  if (id.size() < 5 + 32 + 2 || id.rfind("resp_", 0) != 0 || id[5 + 32] != '_') return bad();
  ResponseRef ref;
  ref.session_id = id.substr(5, 32);
  const std::string n = id.substr(5 + 32 + 1);
  if (n.empty() || n.size() > 18) return bad();
  for (char c : n) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return bad();
  }
  ref.index = std::stoll(n);
  return ref;
}

StatusOr<std::unique_ptr<Answer>> Prepare(const HttpContext& ctx, const HttpCaller& caller,
                                          const ResponsesRequest& r) {
  if (r.previous_response_id.empty()) {
    STREAMD_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, ctx.sessions.Open(caller));
    return std::make_unique<Answer>(std::move(s), /*stateless=*/!r.store, Conversation{},
                                    ctx.in_flight);
  }
  STREAMD_ASSIGN_OR_RETURN(ResponseRef ref, ParseResponseId(r.previous_response_id));
  auto s = ctx.sessions.Resume(caller, ref.session_id);
  if (!s.ok()) {
    if (s.status().code() == StatusCode::kNotFound) {
      return NotFoundError("previous_response_id: response \"" + r.previous_response_id +
                           "\" not found (never made here, of another tenant, or its session "
                           "was closed or expired)");
    }
    return Status(s.status().code(), "previous_response_id: " + s.status().message());
  }
  STREAMD_ASSIGN_OR_RETURN(Conversation record, Conversation::Decode((*s)->Metadata()));
  if (ref.index != record.responses || ref.index == 0) {
    if (ref.index > record.responses || ref.index == 0) {
      return NotFoundError("previous_response_id: response \"" + r.previous_response_id +
                           "\" not found");
    }
    return FailedPreconditionError("previous_response_id names response " +
                                   std::to_string(ref.index) +
                                   " of its session, "
                                   "whose latest is " +
                                   ResponseId(ref.session_id, record.responses) +
                                   ": only the latest response of a session can be continued");
  }
  return std::make_unique<Answer>(std::move(s).value(), /*stateless=*/!r.store, record,
                                  ctx.in_flight);
}

}  // namespace

void HandleResponses(const HttpContext& ctx, const HttpCaller& caller, const httplib::Request& req,
                     httplib::Response& res) {
  auto parsed = ParseResponsesRequest(req.body, ctx.limits);
  if (!parsed.ok()) return WriteError(res, parsed.status());
  const ResponsesRequest& r = *parsed;
  auto prepared = Prepare(ctx, caller, r);
  if (!prepared.ok()) return WriteError(res, prepared.status());
  std::shared_ptr<Answer> answer = std::move(prepared).value();
  std::vector<ChatMessage> turns;
  if (!r.instructions.empty()) turns.push_back({TurnRole::kSystem, r.instructions});
  turns.insert(turns.end(), r.input.begin(), r.input.end());
  if (Status s = answer->Append(turns); !s.ok()) return WriteError(res, s);
  if (Status s = answer->Start(r.params, ctx.max_queued_tokens); !s.ok()) {
    return WriteError(res, s);
  }
  const std::string session_id = answer->session().id();
  res.set_header(kSessionHeader, session_id);
  AnswerHead head{ResponseId(session_id, answer->record().responses + 1), UnixSeconds(),
                  r.model.empty() ? ctx.sessions.ModelName() : r.model};
  ResponseParts base;
  base.previous_response_id = r.previous_response_id;
  base.instructions = r.instructions;
  const auto finished = [head, base](Answer& a, const GenerationEnd& end, const std::string& text) {
    ResponseParts parts = base;
    parts.status = end.reason == DoneReason::kLength ? "incomplete" : "completed";
    parts.text = text;
    parts.usage = a.UsageAfter(end.output_tokens);
    return ResponseJson(head, parts);
  };
  if (!r.stream) {
    // The answer is written only at its end: a client that left meanwhile is noticed by
    // looking at its connection, and its generation cancelled.
    const ClientConnection client(req);
    Answer::Whole whole = answer->Collect([&client] { return client.Gone(); });
    if (whole.end.reason == DoneReason::kCancelled || whole.end.reason == DoneReason::kError) {
      answer->Finish(whole.text);
      return WriteError(res, EndStatus(whole.end));
    }
    const std::string body = finished(*answer, whole.end, whole.text);
    answer->Finish(whole.text);
    return res.set_content(body, "application/json");
  }
  // The stream's events, numbered: the opening ones, a delta per piece of text, the closing
  // ones (or an error event).
  auto sequence = std::make_shared<int64_t>(0);
  const std::string item = MessageItemId(head.id);
  SseFormat format;
  {
    ResponseParts opening = base;
    opening.status = "in_progress";
    format.opening = ResponseStreamOpening(head, opening, sequence.get());
  }
  format.text = [item, sequence](const std::string& text) {
    return SseEvent(ResponseDeltaJson(item, text, (*sequence)++), "response.output_text.delta");
  };
  format.closing = [head, base, sequence](Answer& a, const GenerationEnd& end,
                                          const std::string& text) {
    if (end.reason == DoneReason::kCancelled || end.reason == DoneReason::kError) {
      const HttpError e = ToHttpError(EndStatus(end));
      // {"type": "error", "sequence_number", "error": {...}}
      return SseEvent("{\"type\":\"error\",\"sequence_number\":" + std::to_string((*sequence)++) +
                          "," + e.body.substr(1),
                      "error");
    }
    ResponseParts parts = base;
    parts.status = end.reason == DoneReason::kLength ? "incomplete" : "completed";
    parts.text = text;
    parts.usage = a.UsageAfter(end.output_tokens);
    return ResponseStreamClosing(head, parts, sequence.get());
  };
  StreamAnswer(std::move(answer), std::move(format), res);
}

}  // namespace streamd::http
