// The one mapping of streamd's Status (gRPC-numbered codes) to an HTTP answer in OpenAI's error
// shape: {"error": {"message", "type", "param", "code"}}. `param` is the field a validation
// message starts with ("max_tokens = 0 is outside ..." -> "max_tokens"), null when none.
#pragma once

#include <string>
#include <string_view>

#include "engine/util/status.h"

namespace streamd::http {

struct HttpError {
  int status = 500;
  std::string body;  // the JSON error object
  // > 0: send Retry-After (429, 503): the "retry in N s" of a quota's message, else 1.
  int retry_after_s = 0;
};

// 400 invalid argument / out of range, 401 unauthenticated, 403 permission denied, 404 not
// found, 409 failed precondition / aborted / already exists (a session busy or closed, a
// history that does not continue the session), 429 resource exhausted (a quota, the KV pool),
// 503 unavailable (draining, backend down), 504 deadline exceeded, 500 otherwise.
HttpError ToHttpError(const Status& status);
// An error that has no Status (httplib's own refusals: 404 route, 413 body, 405 method).
HttpError MakeHttpError(int http_status, const std::string& message, std::string_view param = {});

// The field a message starts with: a path of [a-z0-9_.] and [index] segments, followed by
// " " or ":"; empty when the message does not start with one.
std::string ParamOf(std::string_view message);

}  // namespace streamd::http
