#include "server/grpc_status.h"

#include <gtest/gtest.h>

namespace streamd::server {
namespace {

TEST(GrpcStatusTest, KeepsCodeAndMessage) {
  EXPECT_TRUE(ToGrpcStatus(OkStatus()).ok());
  const grpc::Status s = ToGrpcStatus(InvalidArgumentError("generate.max_tokens = 0 is bad"));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "generate.max_tokens = 0 is bad");
  EXPECT_EQ(ToGrpcStatus(NotFoundError("x")).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(ToGrpcStatus(Status(StatusCode::kAborted, "x")).error_code(),
            grpc::StatusCode::ABORTED);
  EXPECT_EQ(ToGrpcStatus(UnavailableError("x")).error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST(GrpcStatusTest, FieldOfReadsTheLeadingPath) {
  EXPECT_EQ(FieldOf(InvalidArgumentError("generate.sampling.top_p = 2 is out of range")),
            "generate.sampling.top_p");
  EXPECT_EQ(FieldOf(InvalidArgumentError("append.tokens[3] = -1 is outside")), "append.tokens[3]");
  EXPECT_EQ(FieldOf(InvalidArgumentError("append: text and tokens are both empty")), "append");
  EXPECT_EQ(FieldOf(NotFoundError("session 3 does not exist")), "");
  EXPECT_EQ(FieldOf(InvalidArgumentError("")), "");
}

TEST(GrpcStatusTest, NamingRequestGivesAFieldToMessagesWithoutOne) {
  const Status engine = FailedPreconditionError("session 7f3a has no context to continue");
  const Status named = NamingRequest("generate", engine);
  EXPECT_EQ(named.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(named.message(), "generate: session 7f3a has no context to continue");
  EXPECT_EQ(FieldOf(named), "generate");
  // A message that names its field keeps it; OK stays OK.
  const Status fielded = InvalidArgumentError("truncate.keep_tokens = 9 is outside [0, 3]");
  EXPECT_EQ(NamingRequest("truncate", fielded).message(), fielded.message());
  EXPECT_TRUE(NamingRequest("fork", OkStatus()).ok());
}

TEST(GrpcStatusTest, ProtoErrorCarriesEverything) {
  const v1::Error e =
      ToProtoError(InvalidArgumentError("open.sinks = 99 is outside [0, 64]"), "r1");
  EXPECT_EQ(e.code(), 3);
  EXPECT_EQ(e.field(), "open.sinks");
  EXPECT_EQ(e.request_id(), "r1");
}

}  // namespace
}  // namespace streamd::server
