// ReflectionService: grpc.reflection.v1alpha.ServerReflection, so that generic tools (grpcurl,
// grpc_cli, Postman) can list the daemon's services and read their descriptors without the
// .proto files. Served by streamd itself instead of gRPC's reflection plugin so that it can be
// closed to callers without an API key (auth.reflection_requires_key, KeyGate): a key is checked
// when the stream starts, and a refused stream ends UNAUTHENTICATED before any response.
//
// Every descriptor comes from the protobuf generated pool: the files compiled into the binary
// (streamd.v1, grpc.health.v1, this protocol and what they import). list_services answers the
// services the server registers (given at construction). A file_descriptor_response holds the
// file asked for, then every file it depends on, directly or not, once each; every request
// gets them all again (clients keep no state across requests then).
#pragma once

#include <string>
#include <vector>

#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "server/key_gate.h"

namespace streamd::server {

class ReflectionService final
    : public grpc::reflection::v1alpha::ServerReflection::CallbackService {
 public:
  using Request = grpc::reflection::v1alpha::ServerReflectionRequest;
  using Response = grpc::reflection::v1alpha::ServerReflectionResponse;

  // `services`: the full names of the services the server registers ("streamd.v1.Streamd").
  explicit ReflectionService(std::vector<std::string> services, KeyGate gate = {});

  grpc::ServerBidiReactor<Request, Response>* ServerReflectionInfo(
      grpc::CallbackServerContext* context) override;

  // The response to one request (what the stream writes).
  Response Answer(const Request& request) const;

 private:
  const std::vector<std::string> services_;
  const KeyGate gate_;
};

}  // namespace streamd::server
