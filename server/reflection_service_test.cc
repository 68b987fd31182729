// ReflectionService: each kind of request answered from the generated pool (files with their
// dependencies, once each; services; extensions; errors), a stream answering requests in order
// on a real gRPC server, and a closed gate that refuses a stream without a valid key before
// any response.
#include "server/reflection_service.h"

#include <google/protobuf/descriptor.pb.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <set>
#include <vector>

namespace streamd::server {
namespace {

namespace reflection = grpc::reflection::v1alpha;
using Request = ReflectionService::Request;
using Response = ReflectionService::Response;
using namespace std::chrono_literals;

const std::vector<std::string> kServices = {"streamd.v1.Streamd", "grpc.health.v1.Health"};

// The names of the files of a file_descriptor_response, in order.
std::vector<std::string> FileNames(const Response& r) {
  std::vector<std::string> names;
  for (const std::string& bytes : r.file_descriptor_response().file_descriptor_proto()) {
    google::protobuf::FileDescriptorProto file;
    EXPECT_TRUE(file.ParseFromString(bytes));
    names.push_back(file.name());
  }
  return names;
}

TEST(ReflectionServiceTest, ListsTheServicesItWasGiven) {
  const ReflectionService service(kServices);
  Request request;
  request.set_host("h");
  request.set_list_services("");
  const Response r = service.Answer(request);
  ASSERT_TRUE(r.has_list_services_response());
  std::vector<std::string> names;
  for (const auto& s : r.list_services_response().service()) names.push_back(s.name());
  EXPECT_EQ(names, kServices);
  EXPECT_EQ(r.valid_host(), "h");
  EXPECT_EQ(r.original_request().list_services(), "");
  EXPECT_TRUE(r.original_request().has_list_services());
}

TEST(ReflectionServiceTest, AFileComesFirstWithEveryDependencyOnce) {
  const ReflectionService service(kServices);
  Request request;
  request.set_file_containing_symbol("streamd.v1.Streamd");
  const Response by_symbol = service.Answer(request);
  const std::vector<std::string> names = FileNames(by_symbol);
  ASSERT_FALSE(names.empty()) << by_symbol.ShortDebugString();
  EXPECT_EQ(names[0], "streamd/v1/streamd.proto");
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size());
  // Everything the file imports is there, so a client can build its descriptors.
  google::protobuf::FileDescriptorProto first;
  ASSERT_TRUE(first.ParseFromString(by_symbol.file_descriptor_response().file_descriptor_proto(0)));
  for (const std::string& dependency : first.dependency()) {
    EXPECT_NE(std::find(names.begin(), names.end(), dependency), names.end()) << dependency;
  }
  // A nested symbol (a message, a method) finds the same file; so does its name.
  request.set_file_containing_symbol("streamd.v1.Streamd.Session");
  EXPECT_EQ(FileNames(service.Answer(request)), names);
  request.set_file_by_filename("streamd/v1/streamd.proto");
  EXPECT_EQ(FileNames(service.Answer(request)), names);
  request.set_file_containing_symbol("grpc.health.v1.HealthCheckRequest");
  EXPECT_EQ(FileNames(service.Answer(request)),
            std::vector<std::string>{"grpc/health/v1/health.proto"});
  // Imports of imports, each once: api.proto imports source_context.proto and type.proto,
  // which imports any.proto and source_context.proto again (libprotobuf links them all).
  request.set_file_containing_symbol("google.protobuf.Api");
  const std::vector<std::string> api = FileNames(service.Answer(request));
  ASSERT_FALSE(api.empty());
  EXPECT_EQ(api[0], "google/protobuf/api.proto");
  EXPECT_EQ(std::set<std::string>(api.begin(), api.end()),
            (std::set<std::string>{"google/protobuf/api.proto", "google/protobuf/any.proto",
                                   "google/protobuf/source_context.proto",
                                   "google/protobuf/type.proto"}));
  EXPECT_EQ(api.size(), 4u);
}

TEST(ReflectionServiceTest, UnknownNamesAndEmptyRequestsAreErrors) {
  const ReflectionService service(kServices);
  Request request;
  request.set_file_containing_symbol("streamd.v1.Nothing");
  Response r = service.Answer(request);
  ASSERT_TRUE(r.has_error_response());
  EXPECT_EQ(r.error_response().error_code(), static_cast<int>(grpc::StatusCode::NOT_FOUND));
  EXPECT_NE(r.error_response().error_message().find("streamd.v1.Nothing"), std::string::npos);
  request.set_file_by_filename("nothing.proto");
  EXPECT_EQ(service.Answer(request).error_response().error_code(),
            static_cast<int>(grpc::StatusCode::NOT_FOUND));
  request.mutable_file_containing_extension()->set_containing_type("streamd.v1.Open");
  request.mutable_file_containing_extension()->set_extension_number(1000);
  EXPECT_EQ(service.Answer(request).error_response().error_code(),
            static_cast<int>(grpc::StatusCode::NOT_FOUND));
  request.set_all_extension_numbers_of_type("streamd.v1.Nothing");
  EXPECT_EQ(service.Answer(request).error_response().error_code(),
            static_cast<int>(grpc::StatusCode::NOT_FOUND));
  EXPECT_EQ(service.Answer(Request{}).error_response().error_code(),
            static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
}

TEST(ReflectionServiceTest, ExtensionNumbersOfAType) {
  const ReflectionService service(kServices);
  Request request;
  // descriptor.proto's option messages are extendable; nothing linked here extends them.
  request.set_all_extension_numbers_of_type("google.protobuf.FileOptions");
  const Response r = service.Answer(request);
  ASSERT_TRUE(r.has_all_extension_numbers_response()) << r.ShortDebugString();
  EXPECT_EQ(r.all_extension_numbers_response().base_type_name(), "google.protobuf.FileOptions");
  EXPECT_EQ(r.all_extension_numbers_response().extension_number_size(), 0);
}

class ReflectionStreamTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now() + 1s);
    if (!dir_.empty()) std::system(("rm -rf " + dir_).c_str());
  }
  void Start(KeyGate gate = {}) {
    service_ = std::make_unique<ReflectionService>(kServices, gate);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = reflection::ServerReflection::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  }
  // Sends `requests` on one stream (with `key` when not empty); the responses and the status.
  grpc::Status Exchange(const std::vector<Request>& requests, std::vector<Response>* responses,
                        const std::string& key = "") {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    if (!key.empty()) ctx.AddMetadata("authorization", "Bearer " + key);
    auto stream = stub_->ServerReflectionInfo(&ctx);
    for (const Request& r : requests) stream->Write(r);
    stream->WritesDone();
    Response r;
    while (stream->Read(&r)) responses->push_back(r);
    return stream->Finish();
  }

  std::string dir_;
  std::unique_ptr<Authenticator> auth_;
  std::unique_ptr<ReflectionService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<reflection::ServerReflection::Stub> stub_;
};

TEST_F(ReflectionStreamTest, AnswersEveryRequestInOrderThenEndsOk) {
  Start();
  Request list, symbol, unknown;
  list.set_list_services("*");
  symbol.set_file_containing_symbol("grpc.health.v1.Health");
  unknown.set_file_by_filename("nothing.proto");
  std::vector<Response> responses;
  const grpc::Status status = Exchange({list, symbol, unknown}, &responses);
  EXPECT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(responses.size(), 3u);
  EXPECT_TRUE(responses[0].has_list_services_response());
  EXPECT_EQ(FileNames(responses[1]), std::vector<std::string>{"grpc/health/v1/health.proto"});
  EXPECT_TRUE(responses[2].has_error_response());
}

TEST_F(ReflectionStreamTest, AClosedGateRefusesAStreamWithoutAValidKey) {
  char tmpl[] = "/tmp/streamd-reflection-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  dir_ = tmpl;
  // `printf %s test | sha256sum`
  std::ofstream(dir_ + "/keys.yaml")
      << "keys:\n  - {tenant: ops, role: user, sha256: "
         "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08}\n";
  std::vector<AuthFailure> refused;
  auto auth =
      Authenticator::Create(dir_ + "/keys.yaml", [&](AuthFailure why) { refused.push_back(why); });
  ASSERT_TRUE(auth.ok()) << auth.status().ToString();
  auth_ = std::move(auth).value();
  Start(KeyGate(auth_.get(), nullptr));
  Request list;
  list.set_list_services("");
  for (const std::string& key : {std::string(), std::string("wrong")}) {
    std::vector<Response> responses;
    EXPECT_EQ(Exchange({list}, &responses, key).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_TRUE(responses.empty()) << "answered without a key: " << key;
  }
  EXPECT_EQ(refused, (std::vector<AuthFailure>{AuthFailure::kMissing, AuthFailure::kUnknownKey}));
  std::vector<Response> responses;
  EXPECT_TRUE(Exchange({list}, &responses, "test").ok());
  ASSERT_EQ(responses.size(), 1u);
  EXPECT_TRUE(responses[0].has_list_services_response());
}

}  // namespace
}  // namespace streamd::server
