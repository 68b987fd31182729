// `streamctl sessions list|get|close` and `streamctl health`: unary calls.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/util/session_id.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tools/streamctl/commands.h"
#include "tools/streamctl/session_client.h"

namespace streamd::streamctl {
namespace {

const char* ModeName(v1::CacheMode m) {
  switch (m) {
    case v1::CACHE_MODE_DENSE:
      return "dense";
    case v1::CACHE_MODE_WINDOW:
      return "window";
    case v1::CACHE_MODE_SINK:
      return "sink";
    default:
      return "unspecified";
  }
}

nlohmann::json SessionJson(const v1::SessionInfo& s) {
  return {{"session_id", s.session_id()},
          {"cache_mode", ModeName(s.settings().cache_mode())},
          {"sinks", s.settings().sinks()},
          {"window", s.settings().window()},
          {"tokens_seen", s.cache().tokens_seen()},
          {"tokens_cached", s.cache().tokens_cached()},
          {"tokens_evicted", s.cache().tokens_evicted()},
          {"blocks_held", s.cache().blocks_held()},
          {"attached", s.attached()},
          {"generating", s.generating()},
          {"idle_s", s.idle_s()}};
}

void PrintSession(const v1::SessionInfo& s) {
  std::printf("%s %-6s sinks=%-3d window=%-5d seen=%-8lld cached=%-6lld evicted=%-8lld %s%s\n",
              s.session_id().c_str(), ModeName(s.settings().cache_mode()),
              s.settings().sinks(), s.settings().window(),
              static_cast<long long>(s.cache().tokens_seen()),
              static_cast<long long>(s.cache().tokens_cached()),
              static_cast<long long>(s.cache().tokens_evicted()),
              s.attached() ? "attached" : "detached", s.generating() ? " generating" : "");
}

grpc::ClientContext* WithDeadline(grpc::ClientContext* c) {
  c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return c;
}

}  // namespace

int SessionsCommand(int argc, char** argv) {
  // streamctl sessions [list | get ID | close ID] [flags]
  std::string action = "list";
  SessionId id;
  int first_flag = 2;
  if (argc > 2 && argv[2][0] != '-') {
    action = argv[2];
    first_flag = 3;
    if (action == "get" || action == "close") {
      if (argc <= 3 || argv[3][0] == '-') {
        return Fail(InvalidArgumentError("sessions " + action + " needs a session id"));
      }
      auto parsed = SessionId::Parse(argv[3], "sessions " + action);
      if (!parsed.ok()) return Fail(parsed.status());
      id = *parsed;
      first_flag = 4;
    } else if (action != "list") {
      return Fail(InvalidArgumentError("sessions: unknown action \"" + action +
                                       "\" (list, get ID, close ID)"));
    }
  }
  CommonFlags common;
  tools::FlagParser flags("streamctl sessions [list | get ID | close ID] [--json]");
  common.Register(flags);
  if (Status s = flags.Parse(argc, argv, first_flag); !s.ok()) return Fail(s);
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return 0;
  }
  auto stub = v1::Streamd::NewStub(MakeChannel(common.address));
  grpc::ClientContext context;
  if (action == "list") {
    v1::ListSessionsResponse response;
    const grpc::Status s = stub->ListSessions(WithDeadline(&context), {}, &response);
    if (!s.ok()) return Fail(FromGrpc(s));
    if (common.json) {
      nlohmann::json all = nlohmann::json::array();
      for (const auto& info : response.sessions()) all.push_back(SessionJson(info));
      std::cout << nlohmann::json({{"sessions", all}}).dump() << "\n";
    } else {
      for (const auto& info : response.sessions()) PrintSession(info);
    }
    return 0;
  }
  if (action == "get") {
    v1::GetSessionRequest request;
    request.set_session_id(id.ToString());
    v1::SessionInfo info;
    const grpc::Status s = stub->GetSession(WithDeadline(&context), request, &info);
    if (!s.ok()) return Fail(FromGrpc(s));
    if (common.json) {
      std::cout << SessionJson(info).dump() << "\n";
    } else {
      PrintSession(info);
    }
    return 0;
  }
  v1::CloseSessionRequest request;
  request.set_session_id(id.ToString());
  v1::CloseSessionResponse response;
  const grpc::Status s = stub->CloseSession(WithDeadline(&context), request, &response);
  if (!s.ok()) return Fail(FromGrpc(s));
  if (common.json) {
    std::cout << nlohmann::json({{"closed", id.ToString()}}).dump() << "\n";
  } else {
    std::printf("closed session %s\n", id.ToString().c_str());
  }
  return 0;
}

int HealthCommand(int argc, char** argv) {
  CommonFlags common;
  std::string service;
  tools::FlagParser flags(
      "streamctl health [--service NAME] [--json]\n"
      "Asks grpc.health.v1.Health; exits 0 when SERVING, 1 otherwise.");
  common.Register(flags);
  flags.String("service", &service, "service name (\"\" = the whole server)");
  if (Status s = flags.Parse(argc, argv, 2); !s.ok()) return Fail(s);
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return 0;
  }
  auto stub = grpc::health::v1::Health::NewStub(MakeChannel(common.address));
  grpc::ClientContext context;
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status s = stub->Check(WithDeadline(&context), request, &response);
  if (!s.ok()) return Fail(FromGrpc(s));
  const std::string status =
      grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status());
  if (common.json) {
    std::cout << nlohmann::json({{"status", status}}).dump() << "\n";
  } else {
    std::cout << status << "\n";
  }
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : 1;
}

}  // namespace streamd::streamctl
