// `streamctl sessions list|get|close|export|import` and `streamctl health`: unary calls, and
// the snapshot transfers (ExportSession streams a snapshot out, ImportSession streams one in).
// `sessions truncate|fork` are stream commands (rollback_commands.cc).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

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
          {"offloaded", s.offloaded()},
          {"idle_s", s.idle_s()}};
}

// One line per session; "offloaded" = only on disk (its next Resume reads it back).
void PrintSession(const v1::SessionInfo& s) {
  std::printf("%s %-6s sinks=%-3d window=%-5d seen=%-8lld cached=%-6lld evicted=%-8lld %-9s %s%s\n",
              s.session_id().c_str(), ModeName(s.settings().cache_mode()), s.settings().sinks(),
              s.settings().window(), static_cast<long long>(s.cache().tokens_seen()),
              static_cast<long long>(s.cache().tokens_cached()),
              static_cast<long long>(s.cache().tokens_evicted()),
              s.offloaded() ? "offloaded" : "resident", s.attached() ? "attached" : "detached",
              s.generating() ? " generating" : "");
}

grpc::ClientContext* WithDeadline(grpc::ClientContext* c) {
  c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return c;
}

// Snapshots stream in pieces of this size, as the daemon sends them (server/snapshot_transfer.h).
constexpr size_t kChunkBytes = 1 << 20;
// A transfer moves up to sessions.max_snapshot_bytes (default 1 GiB): minutes, not seconds.
constexpr std::chrono::minutes kTransferDeadline{10};

// `what`: the errno text of a failed call (errno is read before anything can change it).
Status ErrnoError(int err, const std::string& what) {
  return Status(err == ENOENT ? StatusCode::kNotFound : StatusCode::kInvalidArgument,
                what + ": " + std::strerror(err));
}

Status WriteAll(int fd, const std::string& data, const std::string& where) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      return ErrnoError(err, "sessions export: cannot write " + where);
    }
    done += static_cast<size_t>(n);
  }
  return OkStatus();
}

// Up to `buf.size()` bytes: fewer only at the end of the input (a pipe's reads return less).
StatusOr<size_t> ReadChunk(int fd, std::vector<char>& buf, const std::string& where) {
  size_t n = 0;
  while (n < buf.size()) {
    const ssize_t got = ::read(fd, buf.data() + n, buf.size() - n);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int err = errno;
      return ErrnoError(err, "sessions import: cannot read " + where);
    }
    if (got == 0) break;
    n += static_cast<size_t>(got);
  }
  return n;
}

// `streamctl sessions export ID [--out FILE]`: the snapshot bytes to FILE or stdout. A file is
// written under a temporary name and renamed when complete, so a failed export leaves nothing.
int ExportCommand(v1::Streamd::Stub& stub, SessionId id, const std::string& out,
                  const CommonFlags& common) {
  const bool to_stdout = out.empty() || out == "-";
  if (to_stdout && ::isatty(STDOUT_FILENO)) {
    return Fail(FailedPreconditionError(
        "sessions export: stdout is a terminal and a snapshot is binary; redirect it "
        "(> FILE) or pass --out FILE"));
  }
  const std::string partial = to_stdout ? std::string() : out + ".partial";
  int fd = STDOUT_FILENO;
  if (!to_stdout) {
    // 0600: a snapshot holds a conversation's K/V, as the daemon's own files do.
    fd = ::open(partial.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
      const int err = errno;
      return Fail(ErrnoError(err, "sessions export: cannot create \"" + partial + "\""));
    }
  }
  const std::string where = to_stdout ? std::string("stdout") : "\"" + partial + "\"";
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kTransferDeadline);
  SetSessionAffinity(&context, id.ToString());
  v1::ExportSessionRequest request;
  request.set_session_id(id.ToString());
  auto reader = stub.ExportSession(&context, request);
  v1::SnapshotChunk chunk;
  int64_t bytes = 0;
  Status status;
  while (status.ok() && reader->Read(&chunk)) {
    status = WriteAll(fd, chunk.data(), where);
    bytes += static_cast<int64_t>(chunk.data().size());
  }
  if (!status.ok()) context.TryCancel();
  const grpc::Status end = reader->Finish();
  if (status.ok()) status = FromGrpc(end);
  if (!to_stdout) {
    if (status.ok() && ::fsync(fd) != 0) {
      const int err = errno;
      status = ErrnoError(err, "sessions export: cannot fsync " + where);
    }
    if (::close(fd) != 0 && status.ok()) {
      const int err = errno;
      status = ErrnoError(err, "sessions export: cannot close " + where);
    }
    if (status.ok() && ::rename(partial.c_str(), out.c_str()) != 0) {
      const int err = errno;
      status = ErrnoError(err, "sessions export: cannot rename " + where + " to \"" + out + "\"");
    }
    if (!status.ok()) ::unlink(partial.c_str());
  }
  if (!status.ok()) return Fail(status);
  if (to_stdout) return 0;  // stdout holds the snapshot and nothing else
  if (common.json) {
    std::cout
        << nlohmann::json({{"exported", id.ToString()}, {"bytes", bytes}, {"out", out}}).dump()
        << "\n";
  } else {
    std::printf("exported session %s: %lld bytes to %s\n", id.ToString().c_str(),
                static_cast<long long>(bytes), out.c_str());
  }
  return 0;
}

// `streamctl sessions import FILE|-`: streams the snapshot in chunks of kChunkBytes and prints
// the session it created. A daemon that refuses it early (over limits.max_snapshot_bytes) ends
// the call before the rest is sent; its status says why.
int ImportCommand(v1::Streamd::Stub& stub, const std::string& path, const CommonFlags& common) {
  const bool from_stdin = path == "-";
  const std::string where = from_stdin ? std::string("stdin") : "\"" + path + "\"";
  if (from_stdin && ::isatty(STDIN_FILENO)) {
    return Fail(FailedPreconditionError(
        "sessions import -: stdin is a terminal; pipe a snapshot in (< FILE) or name the file"));
  }
  const int fd = from_stdin ? STDIN_FILENO : ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return Fail(ErrnoError(err, "sessions import: cannot open " + where));
  }
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kTransferDeadline);
  v1::ImportSessionResponse response;
  auto writer = stub.ImportSession(&context, &response);
  std::vector<char> buf(kChunkBytes);
  v1::SnapshotChunk chunk;
  int64_t sent = 0;
  Status status;
  while (true) {
    StatusOr<size_t> n = ReadChunk(fd, buf, where);
    if (!n.ok()) {
      status = n.status();
      break;
    }
    if (*n == 0) break;
    chunk.set_data(buf.data(), *n);
    if (!writer->Write(chunk)) break;  // the daemon ended the call: Finish says why
    sent += static_cast<int64_t>(*n);
    if (*n < buf.size()) break;  // the end of the input
  }
  if (!from_stdin) ::close(fd);
  if (status.ok() && sent == 0) {
    status = InvalidArgumentError("sessions import: " + where +
                                  " is empty (0 bytes); expected a session snapshot");
  }
  if (!status.ok()) {
    context.TryCancel();
    (void)writer->Finish();
    return Fail(status);
  }
  writer->WritesDone();
  const grpc::Status end = writer->Finish();
  if (!end.ok()) return Fail(FromGrpc(end));
  const v1::SessionInfo& info = response.session();
  if (common.json) {
    nlohmann::json j = SessionJson(info);
    j["resident"] = response.resident();
    std::cout << j.dump() << "\n";
  } else {
    std::printf("imported session %s (%s)\n", info.session_id().c_str(),
                response.resident()
                    ? "resident: loaded into memory"
                    : "offloaded: on disk, the KV pool has no room now; Resume reads it back");
    PrintSession(info);
  }
  return 0;
}

}  // namespace

int SessionsCommand(int argc, char** argv) {
  // streamctl sessions [list | get ID | close ID | export ID | import FILE] [flags]
  std::string action = "list";
  SessionId id;
  std::string import_path;
  int first_flag = 2;
  if (argc > 2 && argv[2][0] != '-') {
    action = argv[2];
    first_flag = 3;
    // Stream commands with flags of their own (rollback_commands.cc).
    if (action == "truncate") return TruncateCommand(argc, argv);
    if (action == "fork") return ForkCommand(argc, argv);
    if (action == "get" || action == "close" || action == "export") {
      if (argc <= 3 || argv[3][0] == '-') {
        return Fail(InvalidArgumentError("sessions " + action + " needs a session id"));
      }
      auto parsed = SessionId::Parse(argv[3], "sessions " + action);
      if (!parsed.ok()) return Fail(parsed.status());
      id = *parsed;
      first_flag = 4;
    } else if (action == "import") {
      // "-" is stdin, not a flag.
      if (argc <= 3 || (argv[3][0] == '-' && std::strcmp(argv[3], "-") != 0)) {
        return Fail(InvalidArgumentError("sessions import needs a snapshot file (or - for stdin)"));
      }
      import_path = argv[3];
      first_flag = 4;
    } else if (action != "list") {
      return Fail(InvalidArgumentError("sessions: unknown action \"" + action +
                                       "\" (list, get ID, close ID, export ID, import FILE, "
                                       "truncate ID, fork ID)"));
    }
  }
  CommonFlags common;
  std::string out;
  tools::FlagParser flags(
      "streamctl sessions [list | get ID | close ID | export ID [--out FILE] | import FILE|-] "
      "[--json]\n"
      "(truncate ID and fork ID take flags of their own: streamctl sessions truncate --help)\n"
      "export writes the session's snapshot to stdout (never a terminal) or --out FILE; import\n"
      "creates the session of a snapshot (same id) on this daemon, which must serve the same\n"
      "model.");
  common.Register(flags);
  flags.String("out", &out, "sessions export: write the snapshot to this file (default stdout)");
  if (Status s = flags.Parse(argc, argv, first_flag); !s.ok()) return Fail(s);
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return 0;
  }
  if (flags.was_set("out") && action != "export") {
    return Fail(InvalidArgumentError("--out is for sessions export only"));
  }
  auto channel = common.Connect();
  if (!channel.ok()) return Fail(channel.status());
  auto stub = v1::Streamd::NewStub(*channel);
  if (action == "export") return ExportCommand(*stub, id, out, common);
  if (action == "import") return ImportCommand(*stub, import_path, common);
  grpc::ClientContext context;
  if (action != "list") SetSessionAffinity(&context, id.ToString());
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
  double timeout_s = 10;
  tools::FlagParser flags(
      "streamctl health [--service NAME] [--timeout SECONDS] [--json]\n"
      "Asks grpc.health.v1.Health; exits 0 when SERVING, 1 otherwise (NOT_SERVING, no answer\n"
      "within the timeout, a refused connection or handshake). As a probe: --service liveness\n"
      "(the backend can run) or --service readiness (room for a new session now).");
  common.Register(flags);
  flags.String("service", &service,
               "service name: \"\" (the whole server), streamd.v1.Streamd, liveness, readiness");
  // Below a probe's own timeout, so that a slow answer is reported (DEADLINE_EXCEEDED) rather
  // than the process being killed without a word.
  flags.Float("timeout", &timeout_s, 0.001, 3600, "seconds to wait for the answer");
  if (Status s = flags.Parse(argc, argv, 2); !s.ok()) return Fail(s);
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return 0;
  }
  auto channel = common.Connect();
  if (!channel.ok()) return Fail(channel.status());
  auto stub = grpc::health::v1::Health::NewStub(*channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::microseconds(static_cast<int64_t>(timeout_s * 1e6)));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status s = stub->Check(&context, request, &response);
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
