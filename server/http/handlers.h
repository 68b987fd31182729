// The OpenAI-compatible endpoints, each a function of an authenticated caller and a request:
// chat_completions.cc (POST /v1/chat/completions), responses.cc (POST /v1/responses). The
// server (http_server.cc) authenticates, limits the body and routes; these only parse, drive
// an Answer and write it. Errors go out through WriteError (http_errors.h's mapping).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/util/status.h"
#include "server/http/answer.h"
#include "server/http/http_sessions.h"
#include "server/http/openai_request.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace streamd::http {

// The session-affinity header (proto/streamd/v1/session_affinity.h): a request names its
// session with it, and every answer about a lasting session carries it, so that HAProxy routes
// the next request of the conversation to the replica that holds it.
inline constexpr char kSessionHeader[] = "x-streamd-session";

struct HttpContext {
  HttpSessions& sessions;
  RequestLimits limits;
  size_t max_queued_tokens = 1024;  // limits.max_queued_tokens
  int64_t created = 0;              // Unix seconds the daemon started (the model's "created")
  InFlight* in_flight = nullptr;    // the server's answers, for its drain
};

void WriteError(httplib::Response& res, const Status& status);

void HandleChatCompletions(const HttpContext& ctx, const HttpCaller& caller,
                           const httplib::Request& req, httplib::Response& res);
void HandleResponses(const HttpContext& ctx, const HttpCaller& caller, const httplib::Request& req,
                     httplib::Response& res);

}  // namespace streamd::http
