#include "tests/e2e/durability_util.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "engine/core/model_snapshot_dir.h"
#include "engine/gguf/gguf_file.h"
#include "engine/snapshot/model_fingerprint.h"

namespace streamd::e2e {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

TempDir::TempDir() {
  char tmpl[] = "/tmp/streamd_durability_XXXXXX";
  const char* dir = mkdtemp(tmpl);
  path_ = dir != nullptr ? dir : "";
  EXPECT_FALSE(path_.empty()) << "mkdtemp failed";
}

TempDir::~TempDir() {
  std::error_code ignored;
  if (!path_.empty()) fs::remove_all(path_, ignored);
}

std::string TempDir::Sub(const std::string& name) const {
  const std::string p = path_ + "/" + name;
  fs::create_directories(p);
  return p;
}

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

void WriteBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

// File names in `dir` (not recursive), sorted.
std::string ModelDir(const std::string& root, const std::string& model_path) {
  auto file = gguf::GgufFile::Open(model_path, gguf::GgufRead::kAll);
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  if (!file.ok()) return root + "/(unreadable model)";
  return root + "/" + ModelSnapshotDirName(ModelFingerprint(**file));
}

std::vector<std::string> FilesIn(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_regular_file()) names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string Joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "(none)" : out;
}

// Temp files a writer leaves while it writes (WriteFileAtomically: .<id>.snap.<pid>.<random>.tmp).
std::vector<std::string> TempFilesIn(const std::string& dir) {
  std::vector<std::string> tmp;
  for (const std::string& n : FilesIn(dir)) {
    if (n.size() > 4 && n.ends_with(".tmp")) tmp.push_back(n);
  }
  return tmp;
}

// The summary of `dir`/<id>.snap as the daemon would read it; nullopt without a readable one.
std::optional<SnapshotSummary> StoredSummary(const std::string& dir, const std::string& id) {
  const std::vector<uint8_t> bytes = ReadBytes(dir + "/" + id + ".snap");
  if (bytes.empty()) return std::nullopt;
  auto summary = ReadSnapshotSummary(bytes);
  EXPECT_TRUE(summary.ok()) << id << ".snap: " << summary.status().ToString();
  if (!summary.ok()) return std::nullopt;
  return *summary;
}

grpc::Status GetSession(const DaemonProcess& d, const std::string& id, v1::SessionInfo* info) {
  auto stub = v1::Streamd::NewStub(d.Channel());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  v1::GetSessionRequest request;
  request.set_session_id(id);
  return stub->GetSession(&ctx, request, info);
}

std::map<std::string, v1::SessionInfo> ListSessions(const DaemonProcess& d) {
  auto stub = v1::Streamd::NewStub(d.Channel());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  v1::ListSessionsResponse response;
  const grpc::Status status = stub->ListSessions(&ctx, {}, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  std::map<std::string, v1::SessionInfo> out;
  for (const v1::SessionInfo& info : response.sessions()) out[info.session_id()] = info;
  return out;
}

// The bytes of ExportSession, and its status.
grpc::Status Export(const DaemonProcess& d, const std::string& id, std::vector<uint8_t>* bytes) {
  auto stub = v1::Streamd::NewStub(d.Channel());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 60s);
  v1::ExportSessionRequest request;
  request.set_session_id(id);
  auto reader = stub->ExportSession(&ctx, request);
  v1::SnapshotChunk chunk;
  bytes->clear();
  while (reader->Read(&chunk))
    bytes->insert(bytes->end(), chunk.data().begin(), chunk.data().end());
  return reader->Finish();
}

// ImportSession of `bytes` in chunks of `chunk` bytes.
ImportResult Import(const DaemonProcess& d, const std::vector<uint8_t>& bytes, size_t chunk) {
  auto stub = v1::Streamd::NewStub(d.Channel());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 60s);
  ImportResult r;
  auto writer = stub->ImportSession(&ctx, &r.response);
  v1::SnapshotChunk c;
  for (size_t at = 0; at < bytes.size(); at += chunk) {
    const size_t n = std::min(chunk, bytes.size() - at);
    c.set_data(bytes.data() + at, n);
    if (!writer->Write(c)) break;  // the server ended the call: Finish says why
    r.bytes_written += n;
  }
  writer->WritesDone();
  r.status = writer->Finish();
  return r;
}

// Greedy ids of one generation of up to n tokens on an attached stream.
Generation GenerateOn(RawStream& s, int32_t n) {
  EXPECT_TRUE(s.Write(GenerateMsg(n)));
  return ReadGeneration(s);
}

// The greedy continuation of `context` by a fresh session of `reference` (raw token ids), and
// how that generation ended.
Generation ReferenceContinuation(const DaemonProcess& reference,
                                 const std::vector<int32_t>& context, int32_t n) {
  RawStream s(reference.Channel());
  if (!s.Open()) return {};
  if (auto e = s.Append(TokensMsg(context).append())) {
    ADD_FAILURE() << "reference append: " << e->ShortDebugString();
    return {};
  }
  Generation g = GenerateOn(s, n);
  s.Write(CloseMsg());
  EXPECT_TRUE(s.Finish().ok());
  return g;
}

Resumed ResumeSession(const DaemonProcess& d, const std::string& id) {
  const auto deadline = Clock::now() + kWaitLimit;
  while (true) {
    Resumed r;
    r.stream = std::make_unique<RawStream>(d.Channel());
    EXPECT_TRUE(r.stream->Write(ResumeMsg(id)));
    auto reply = r.stream->Read();
    if (!reply) {
      ADD_FAILURE() << "resume " << id << ": the stream ended without an answer";
      return r;
    }
    if (reply->has_opened()) {
      r.opened = reply->opened();
      return r;
    }
    r.error = reply->error();
    const bool retry = r.error.code() == grpc::StatusCode::UNAVAILABLE ||
                       r.error.code() == grpc::StatusCode::FAILED_PRECONDITION;
    if (!retry || Clock::now() > deadline) return r;
    r.stream->WritesDone();
    r.stream->Finish();
    std::this_thread::sleep_for(100ms);
  }
}

// Ends a stream without closing its session (it stays resumable).
void DetachStream(RawStream& s) {
  s.WritesDone();
  EXPECT_TRUE(s.Finish().ok());
}

// Waits until the session's input is in its cache (one token per step: an append is prefilled
// over as many steps), so that a snapshot of it holds K/V, not pending tokens.
void WaitPrefilled(const DaemonProcess& d, const std::string& id) {
  v1::SessionInfo info;
  const bool done =
      WaitFor([&] { return GetSession(d, id, &info).ok() && info.cache().pending_tokens() <= 1; });
  EXPECT_TRUE(done) << id << " still has " << info.cache().pending_tokens() << " tokens pending";
}

// An executable of the base system, by name (the daemon's wrappers are exec'd by path).
std::string SystemTool(const std::string& name) {
  for (const char* dir : {"/usr/bin/", "/bin/", "/usr/sbin/", "/sbin/"}) {
    const std::string p = std::string(dir) + name;
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

// A wrapper that runs the daemon in a private mount namespace after `setup`, a shell command on
// "$0" (the snapshot directory); nullopt when this machine does not allow one (unshare -m needs
// root or CAP_SYS_ADMIN). Mounts made there are gone with the daemon; this process sees them
// through /proc/<pid>/root.
std::optional<std::vector<std::string>> InMountNamespace(const std::string& setup,
                                                         const std::string& dir) {
  const std::string unshare = SystemTool("unshare"), sh = SystemTool("sh");
  if (unshare.empty() || sh.empty()) return std::nullopt;
  if (RunProgram({unshare, "-m", sh, "-c", setup, dir}).exit_code != 0) return std::nullopt;
  return std::vector<std::string>{unshare, "-m", sh, "-c", setup + " && exec \"$@\"", dir};
}

}  // namespace streamd::e2e
