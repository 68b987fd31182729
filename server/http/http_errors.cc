#include "server/http/http_errors.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

namespace streamd::http {
namespace {

const char* TypeOf(int http_status) {
  switch (http_status) {
    case 400:
    case 404:
    case 405:
    case 409:
    case 413:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 429:
      return "rate_limit_error";
    case 503:
      return "service_unavailable";
    default:
      break;
  }
  return "server_error";
}

// OpenAI's machine-readable `code` where one fits.
const char* CodeOf(int http_status) {
  switch (http_status) {
    case 401:
      return "invalid_api_key";
    case 404:
      return "not_found";
    case 409:
      return "conflict";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_exceeded";
    case 503:
      return "unavailable";
    default:
      break;
  }
  return nullptr;
}

int HttpStatusOf(StatusCode code) {
  switch (code) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
      return 400;
    case StatusCode::kUnauthenticated:
      return 401;
    case StatusCode::kPermissionDenied:
      return 403;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kAlreadyExists:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kAborted:
      return 409;
    case StatusCode::kResourceExhausted:
      return 429;
    case StatusCode::kUnavailable:
      return 503;
    case StatusCode::kDeadlineExceeded:
      return 504;
    default:
      break;
  }
  return 500;
}

}  // namespace

std::string ParamOf(std::string_view m) {
  size_t i = 0;
  while (i < m.size()) {
    const char c = m[i];
    const auto u = static_cast<unsigned char>(c);
    if (std::islower(u) || std::isdigit(u) || c == '_' || c == '.' || c == '[' || c == ']') {
      ++i;
    } else {
      break;
    }
  }
  if (i == 0 || i == m.size() || (m[i] != ' ' && m[i] != ':')) return {};
  // A plain word ("session 7f3a...", "tenant ...") is prose, not a field: fields are the
  // request's keys, which this layer's messages name first, with "=", " is", " must", ":".
  const std::string_view rest = m.substr(i);
  if (rest.starts_with(" =") || rest.starts_with(":") || rest.starts_with(" is ") ||
      rest.starts_with(" must ") || rest.starts_with(" has ") || rest.starts_with(" names ") ||
      rest.starts_with(" differ")) {
    return std::string(m.substr(0, i));
  }
  return {};
}

HttpError MakeHttpError(int http_status, const std::string& message, std::string_view param) {
  nlohmann::json error = {
      {"message", message}, {"type", TypeOf(http_status)}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) error["param"] = std::string(param);
  if (const char* code = CodeOf(http_status)) error["code"] = code;
  HttpError out;
  out.status = http_status;
  // Invalid UTF-8 (echoed from a request) is replaced rather than failing the answer.
  out.body = nlohmann::json{{"error", error}}.dump(-1, ' ', false,
                                                   nlohmann::json::error_handler_t::replace);
  // Quotas refill continuously and a draining daemon's replacement is seconds away.
  if (http_status == 429 || http_status == 503) out.retry_after_s = 1;
  return out;
}

// Quota messages say when the bucket is positive again ("... retry in 20.0 s"): Retry-After
// says the same, rounded up to whole seconds.
int RetryAfterOf(std::string_view message) {
  const size_t at = message.find("retry in ");
  if (at == std::string_view::npos) return 1;
  const std::string number(message.substr(at + 9, 16));
  const double seconds = std::strtod(number.c_str(), nullptr);
  if (!std::isfinite(seconds) || seconds <= 1) return 1;
  return static_cast<int>(std::min(3600.0, std::ceil(seconds)));
}

HttpError ToHttpError(const Status& status) {
  const int http_status = HttpStatusOf(status.code());
  // 400 and 409 (a history or response id that does not fit the session) name the field.
  std::string param =
      http_status == 400 || http_status == 409 ? ParamOf(status.message()) : std::string();
  if (param == "body") param.clear();  // the whole body is no parameter (malformed JSON)
  HttpError e = MakeHttpError(http_status, status.message(), param);
  if (e.retry_after_s > 0) e.retry_after_s = RetryAfterOf(status.message());
  return e;
}

}  // namespace streamd::http
