#include "server/grpc_status.h"

#include <cctype>

namespace streamd::server {

grpc::Status ToGrpcStatus(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // StatusCode carries gRPC's numbering by construction (engine/util/status.h).
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), status.message());
}

std::string FieldOf(const Status& status) {
  const std::string& m = status.message();
  size_t n = 0;
  while (n < m.size() && (std::isalnum(static_cast<unsigned char>(m[n])) || m[n] == '_' ||
                          m[n] == '.' || m[n] == '[' || m[n] == ']')) {
    ++n;
  }
  // A path is followed by ":" ("append: ..."), or by " " when it contains '.', '_' or '[' --
  // unlike the first word of a sentence ("session 3 does not exist").
  if (n == 0 || n == m.size() || (m[n] != ' ' && m[n] != ':')) return {};
  const std::string path = m.substr(0, n);
  if (m[n] == ' ' && path.find_first_of("._[") == std::string::npos) return {};
  return path;
}

Status NamingRequest(std::string_view request, const Status& status) {
  if (status.ok() || !FieldOf(status).empty()) return status;
  return Status(status.code(), std::string(request) + ": " + status.message());
}

v1::Error ToProtoError(const Status& status, std::string_view request_id) {
  v1::Error e;
  e.set_code(static_cast<int32_t>(status.code()));
  e.set_message(status.message());
  e.set_field(FieldOf(status));
  e.set_request_id(std::string(request_id));
  return e;
}

}  // namespace streamd::server
