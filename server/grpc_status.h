// The one place where engine errors (streamd::Status, gRPC-numbered codes) become gRPC statuses,
// and where any Status becomes the Error message of the wire contract.
#pragma once

#include <grpcpp/support/status.h>

#include <string>
#include <string_view>

#include "engine/util/status.h"
#include "streamd/v1/streamd.pb.h"

namespace streamd::server {

// Same code, same message. An OK status maps to grpc::Status::OK.
grpc::Status ToGrpcStatus(const Status& status);

// The field a validation message names: its leading path ("generate.sampling.top_p = 2 ..."
// -> "generate.sampling.top_p"); empty when the message does not start with one.
std::string FieldOf(const Status& status);

// `status` answering request `request` ("generate"), naming a field: a message that names none
// (the engine speaks of sessions: "session 7f3a... has no context to continue") is prefixed
// with the request's name, so that every Error a stream sends names the field at fault.
Status NamingRequest(std::string_view request, const Status& status);

// An Error message for the stream: code, message and the field it names.
v1::Error ToProtoError(const Status& status, std::string_view request_id = {});

}  // namespace streamd::server
