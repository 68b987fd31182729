#include "server/http/http_errors.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace streamd::http {
namespace {

nlohmann::json ErrorOf(const HttpError& e) { return nlohmann::json::parse(e.body)["error"]; }

TEST(HttpErrorsTest, EveryCodeHasItsStatus) {
  const std::pair<StatusCode, int> cases[] = {
      {StatusCode::kInvalidArgument, 400},   {StatusCode::kOutOfRange, 400},
      {StatusCode::kUnauthenticated, 401},   {StatusCode::kPermissionDenied, 403},
      {StatusCode::kNotFound, 404},          {StatusCode::kFailedPrecondition, 409},
      {StatusCode::kAborted, 409},           {StatusCode::kAlreadyExists, 409},
      {StatusCode::kResourceExhausted, 429}, {StatusCode::kUnavailable, 503},
      {StatusCode::kDeadlineExceeded, 504},  {StatusCode::kInternal, 500},
      {StatusCode::kDataLoss, 500},
  };
  for (const auto& [code, http] : cases) {
    EXPECT_EQ(ToHttpError(Status(code, "m")).status, http) << StatusCodeName(code);
  }
}

TEST(HttpErrorsTest, BodyIsOpenAIShapedAndNamesTheParam) {
  const HttpError e = ToHttpError(InvalidArgumentError("max_tokens = 0 is outside [1, 4096]"));
  const nlohmann::json j = ErrorOf(e);
  EXPECT_EQ(j["message"], "max_tokens = 0 is outside [1, 4096]");
  EXPECT_EQ(j["type"], "invalid_request_error");
  EXPECT_EQ(j["param"], "max_tokens");
  EXPECT_TRUE(j["code"].is_null());
  EXPECT_EQ(e.retry_after_s, 0);
}

TEST(HttpErrorsTest, QuotaAndDrainSayWhenToRetry) {
  const HttpError quota = ToHttpError(ResourceExhaustedError("tenant a is over its quota"));
  EXPECT_EQ(quota.status, 429);
  EXPECT_GT(quota.retry_after_s, 0);
  EXPECT_EQ(ErrorOf(quota)["type"], "rate_limit_error");
  EXPECT_TRUE(ErrorOf(quota)["param"].is_null());
  EXPECT_EQ(ToHttpError(ResourceExhaustedError("generate: tenant a is over its quota "
                                               "tokens_per_second = 1; retry in 19.2 s"))
                .retry_after_s,
            20);
  const HttpError drain = ToHttpError(UnavailableError("streamd is shutting down"));
  EXPECT_EQ(drain.status, 503);
  EXPECT_GT(drain.retry_after_s, 0);
  EXPECT_EQ(ErrorOf(ToHttpError(Status(StatusCode::kUnauthenticated, "no key")))["code"],
            "invalid_api_key");
}

TEST(HttpErrorsTest, ParamOfReadsOnlyLeadingFieldPaths) {
  EXPECT_EQ(ParamOf("messages[2].content[0].type = \"x\" is not supported"),
            "messages[2].content[0].type");
  EXPECT_EQ(ParamOf("stop[1] is empty"), "stop[1]");
  EXPECT_EQ(ParamOf("tools: tool calling is not supported"), "tools");
  EXPECT_EQ(ParamOf("messages must be an array"), "messages");
  EXPECT_EQ(ParamOf("session 7f3a does not exist"), "");  // prose, not a field
  EXPECT_EQ(ParamOf("The model"), "");
  EXPECT_EQ(ParamOf(""), "");
  // A malformed body names no parameter.
  EXPECT_TRUE(
      ErrorOf(ToHttpError(InvalidArgumentError("body is not valid JSON: x")))["param"].is_null());
}

TEST(HttpErrorsTest, InvalidUtf8InAMessageStillMakesJson) {
  const HttpError e = ToHttpError(InvalidArgumentError("model \xff is unknown"));
  EXPECT_TRUE(nlohmann::json::accept(e.body));
}

}  // namespace
}  // namespace streamd::http
