#include "server/reflection_service.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>

#include <set>
#include <utility>

#include "server/refused_reactor.h"

namespace streamd::server {
namespace {

namespace pb = google::protobuf;
namespace reflection = grpc::reflection::v1alpha;
using Request = ReflectionService::Request;
using Response = ReflectionService::Response;

// `file` and every file it imports, directly or not, each once, `file` first.
void AddFiles(const pb::FileDescriptor* file, std::set<std::string>* seen,
              reflection::FileDescriptorResponse* out) {
  if (!seen->insert(file->name()).second) return;
  pb::FileDescriptorProto proto;
  file->CopyTo(&proto);
  proto.SerializeToString(out->add_file_descriptor_proto());
  for (int i = 0; i < file->dependency_count(); ++i) AddFiles(file->dependency(i), seen, out);
}

void Error(Response* response, grpc::StatusCode code, const std::string& message) {
  response->mutable_error_response()->set_error_code(static_cast<int32_t>(code));
  response->mutable_error_response()->set_error_message(message);
}

// One request on a stream at a time: read, answer, write, read the next. The stream ends OK
// when the client closes its side.
class ReflectionReactor final : public grpc::ServerBidiReactor<Request, Response> {
 public:
  explicit ReflectionReactor(const ReflectionService& service) : service_(service) {
    StartRead(&request_);
  }
  void OnReadDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status::OK);  // the client is done (or gone)
      return;
    }
    response_ = service_.Answer(request_);
    StartWrite(&response_);
  }
  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status::CANCELLED);
      return;
    }
    StartRead(&request_);
  }
  void OnDone() override { delete this; }

 private:
  const ReflectionService& service_;
  Request request_;
  Response response_;
};

}  // namespace

ReflectionService::ReflectionService(std::vector<std::string> services, KeyGate gate)
    : services_(std::move(services)), gate_(gate) {}

grpc::ServerBidiReactor<Request, Response>* ReflectionService::ServerReflectionInfo(
    grpc::CallbackServerContext* context) {
  if (Status admitted = gate_.Admit(*context); !admitted.ok()) {
    return Refuse<grpc::ServerBidiReactor<Request, Response>>(admitted, nullptr);
  }
  return new ReflectionReactor(*this);
}

Response ReflectionService::Answer(const Request& request) const {
  const pb::DescriptorPool* pool = pb::DescriptorPool::generated_pool();
  Response response;
  response.set_valid_host(request.host());
  *response.mutable_original_request() = request;
  std::set<std::string> seen;
  const auto files = [&](const pb::FileDescriptor* file, const std::string& what) {
    if (file == nullptr) {
      Error(&response, grpc::StatusCode::NOT_FOUND, what + " not found");
      return;
    }
    AddFiles(file, &seen, response.mutable_file_descriptor_response());
  };
  switch (request.message_request_case()) {
    case Request::kListServices:
      for (const std::string& name : services_) {
        response.mutable_list_services_response()->add_service()->set_name(name);
      }
      break;
    case Request::kFileByFilename:
      files(pool->FindFileByName(request.file_by_filename()),
            "file \"" + request.file_by_filename() + "\"");
      break;
    case Request::kFileContainingSymbol:
      files(pool->FindFileContainingSymbol(request.file_containing_symbol()),
            "symbol \"" + request.file_containing_symbol() + "\"");
      break;
    case Request::kFileContainingExtension: {
      const reflection::ExtensionRequest& e = request.file_containing_extension();
      const pb::Descriptor* type = pool->FindMessageTypeByName(e.containing_type());
      const pb::FieldDescriptor* extension =
          type == nullptr ? nullptr : pool->FindExtensionByNumber(type, e.extension_number());
      files(extension == nullptr ? nullptr : extension->file(),
            "extension " + std::to_string(e.extension_number()) + " of \"" + e.containing_type() +
                "\"");
      break;
    }
    case Request::kAllExtensionNumbersOfType: {
      const pb::Descriptor* type =
          pool->FindMessageTypeByName(request.all_extension_numbers_of_type());
      if (type == nullptr) {
        Error(&response, grpc::StatusCode::NOT_FOUND,
              "type \"" + request.all_extension_numbers_of_type() + "\" not found");
        break;
      }
      std::vector<const pb::FieldDescriptor*> extensions;
      pool->FindAllExtensions(type, &extensions);
      reflection::ExtensionNumberResponse* out = response.mutable_all_extension_numbers_response();
      out->set_base_type_name(type->full_name());
      for (const pb::FieldDescriptor* f : extensions) out->add_extension_number(f->number());
      break;
    }
    case Request::MESSAGE_REQUEST_NOT_SET:
      Error(&response, grpc::StatusCode::INVALID_ARGUMENT, "the request asks nothing");
      break;
  }
  return response;
}

}  // namespace streamd::server
