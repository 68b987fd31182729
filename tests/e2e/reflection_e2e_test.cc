// End-to-end: what generic gRPC tooling and orchestrators see of the daemon. Server reflection
// (grpcurl, grpc_cli, Postman) must list streamd.v1.Streamd and the standard health service and
// describe the Session stream; grpc.health.v1.Health (Kubernetes gRPC probes, `streamctl
// health`) must answer for "" and for "streamd.v1.Streamd", and turn NOT_SERVING for both as
// soon as a drain begins. The reflection client uses proto/grpc/reflection/v1alpha/, the
// protocol the daemon serves itself (server/reflection_service.h).
#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "grpc/health/v1/health.grpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "tests/e2e/daemon_process.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/shared_daemon_test.h"

namespace streamd::e2e {
namespace {

namespace reflection = grpc::reflection::v1alpha;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

constexpr char kStreamdService[] = "streamd.v1.Streamd";
constexpr char kHealthService[] = "grpc.health.v1.Health";
constexpr char kReflectionService[] = "grpc.reflection.v1alpha.ServerReflection";

// One request on a fresh ServerReflectionInfo stream; the response, or nullopt (and a test
// failure) when the stream gives none.
std::optional<reflection::ServerReflectionResponse> Reflect(
    DaemonProcess& d, const reflection::ServerReflectionRequest& request) {
  auto stub = reflection::ServerReflection::NewStub(d.Channel());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto stream = stub->ServerReflectionInfo(&ctx);
  EXPECT_TRUE(stream->Write(request));
  stream->WritesDone();
  reflection::ServerReflectionResponse response;
  const bool got = stream->Read(&response);
  reflection::ServerReflectionResponse extra;
  while (stream->Read(&extra)) {
    ADD_FAILURE() << "a second response to one request: " << extra.ShortDebugString();
  }
  const grpc::Status status = stream->Finish();
  EXPECT_TRUE(status.ok()) << status.error_code() << " " << status.error_message();
  if (!got) {
    ADD_FAILURE() << "no reflection response to " << request.ShortDebugString();
    return std::nullopt;
  }
  return response;
}

std::vector<std::string> ListServices(DaemonProcess& d) {
  reflection::ServerReflectionRequest request;
  request.set_list_services("");
  std::vector<std::string> names;
  const auto response = Reflect(d, request);
  if (!response) return names;
  EXPECT_TRUE(response->has_list_services_response()) << response->ShortDebugString();
  for (const auto& s : response->list_services_response().service()) names.push_back(s.name());
  return names;
}

// The health of `service` ("" = the whole server); the call's status code when it fails.
struct HealthAnswer {
  grpc::StatusCode code = grpc::StatusCode::OK;
  HealthCheckResponse::ServingStatus status = HealthCheckResponse::UNKNOWN;
};
HealthAnswer CheckHealth(DaemonProcess& d, const std::string& service) {
  auto stub = grpc::health::v1::Health::NewStub(d.Channel());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  HealthCheckRequest request;
  request.set_service(service);
  HealthCheckResponse response;
  const grpc::Status s = stub->Check(&ctx, request, &response);
  return {s.error_code(), s.ok() ? response.status() : HealthCheckResponse::UNKNOWN};
}

// One daemon for the read-only checks.
class ReflectionE2eTest : public SharedDaemonTest {};

TEST_F(ReflectionE2eTest, ListsStreamdHealthAndReflection) {
  const std::vector<std::string> names = ListServices(*daemon_);
  for (const char* expected : {kStreamdService, kHealthService, kReflectionService}) {
    EXPECT_NE(std::find(names.begin(), names.end(), expected), names.end())
        << expected << " missing from " << ::testing::PrintToString(names);
  }
}

// What grpcurl does before calling a method: fetch the file that declares the service and
// build descriptors from it. The Session method must come out as a bidirectional stream of
// ClientMessage -> ServerMessage.
TEST_F(ReflectionE2eTest, DescribesTheSessionStream) {
  reflection::ServerReflectionRequest request;
  request.set_file_containing_symbol(kStreamdService);
  const auto response = Reflect(*daemon_, request);
  ASSERT_TRUE(response);
  ASSERT_TRUE(response->has_file_descriptor_response()) << response->ShortDebugString();
  // The file and everything it imports, dependencies in any order: build until all are in.
  std::vector<google::protobuf::FileDescriptorProto> files;
  for (const std::string& bytes : response->file_descriptor_response().file_descriptor_proto()) {
    ASSERT_TRUE(files.emplace_back().ParseFromString(bytes));
  }
  google::protobuf::DescriptorPool pool;
  for (size_t round = 0; round < files.size(); ++round) {
    for (const auto& f : files) {
      if (pool.FindFileByName(f.name()) != nullptr) continue;
      bool deps_ready = true;
      for (const std::string& dep : f.dependency()) {
        deps_ready = deps_ready && pool.FindFileByName(dep) != nullptr;
      }
      if (deps_ready) {
        ASSERT_NE(pool.BuildFile(f), nullptr) << f.name();
      }
    }
  }
  const google::protobuf::ServiceDescriptor* service = pool.FindServiceByName(kStreamdService);
  ASSERT_NE(service, nullptr) << "no " << kStreamdService << " in " << files.size() << " files";
  const google::protobuf::MethodDescriptor* session = service->FindMethodByName("Session");
  ASSERT_NE(session, nullptr);
  EXPECT_TRUE(session->client_streaming());
  EXPECT_TRUE(session->server_streaming());
  EXPECT_EQ(session->input_type()->full_name(), "streamd.v1.ClientMessage");
  EXPECT_EQ(session->output_type()->full_name(), "streamd.v1.ServerMessage");
  // The unary calls are there too.
  for (const char* method : {"GetModelInfo", "ListSessions", "GetSession", "CloseSession"}) {
    EXPECT_NE(service->FindMethodByName(method), nullptr) << method;
  }
}

TEST_F(ReflectionE2eTest, UnknownSymbolIsNotFound) {
  reflection::ServerReflectionRequest request;
  request.set_file_containing_symbol("streamd.v1.NoSuchService");
  const auto response = Reflect(*daemon_, request);
  ASSERT_TRUE(response);
  ASSERT_TRUE(response->has_error_response()) << response->ShortDebugString();
  EXPECT_EQ(response->error_response().error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(ReflectionE2eTest, HealthAnswersForTheServerAndTheService) {
  for (const std::string service : {"", kStreamdService}) {
    const HealthAnswer a = CheckHealth(*daemon_, service);
    EXPECT_EQ(a.code, grpc::StatusCode::OK) << "service \"" << service << "\"";
    EXPECT_EQ(a.status, HealthCheckResponse::SERVING) << "service \"" << service << "\"";
  }
  // A name the server does not know is NOT_FOUND (what a misconfigured probe gets).
  EXPECT_EQ(CheckHealth(*daemon_, "streamd.v1.Nope").code, grpc::StatusCode::NOT_FOUND);
}

// What a Kubernetes readiness probe sees during a rolling update: SIGTERM while a generation
// runs turns both names NOT_SERVING while the port still answers; reflection keeps working
// during the drain; the daemon exits 0 once the last stream is gone.
TEST(ReflectionDrainE2eTest, HealthTurnsNotServingForBothNamesWhileDraining) {
  std::vector<std::string> flags = kSharedServerFlags;
  flags.push_back("--server.shutdown_grace=300s");
  auto d = DaemonProcess::Start(flags);
  ASSERT_NE(d, nullptr);
  RawStream s(d->Channel());
  ASSERT_TRUE(s.Open());
  ASSERT_FALSE(s.Append(TextMsg("Once upon a time").append()));
  ASSERT_TRUE(s.Write(GenerateMsg(4000)));
  auto first = s.Read();
  while (first && !first->has_token_delta()) first = s.Read();
  ASSERT_TRUE(first) << "the stream ended before the first token";
  d->Terminate();
  HealthAnswer server, service;
  for (int i = 0; i < 250; ++i) {
    server = CheckHealth(*d, "");
    service = CheckHealth(*d, kStreamdService);
    if (server.status == HealthCheckResponse::NOT_SERVING &&
        service.status == HealthCheckResponse::NOT_SERVING) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(server.status, HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(service.status, HealthCheckResponse::NOT_SERVING);
  // Still draining (the generation of 4000 tokens runs on): the port answers RPCs.
  const std::vector<std::string> names = ListServices(*d);
  EXPECT_NE(std::find(names.begin(), names.end(), kStreamdService), names.end());
  // The client goes away: its generation is cancelled, the drain ends, exit 0.
  s.Cancel();
  EXPECT_EQ(s.Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(d->Wait(std::chrono::seconds(120)), 0) << d->Stderr();
}

}  // namespace
}  // namespace streamd::e2e
