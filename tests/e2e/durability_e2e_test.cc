// End-to-end: durable sessions (docs/SESSIONS.md) with real `streamd serve` processes on
// loopback. What a client was told survives, and comes back token for token:
//   - SIGTERM: everything acknowledged is written, exactly;
//   - offload of idle sessions (blocks freed) and reload on Resume;
//   - ExportSession / ImportSession between two daemons, and the imports they must refuse;
//   - damaged, foreign and hostile files in the directory at start: refused, counted, moved
//     into rejected/, never deleted, and every good session still resumes;
//   - a full disk and a read-only directory: the daemon serves from memory and counts, logs and
//     cleans up its failed writes.
// kill -9 at random moments: durability_kill_e2e_test.cc. The reference for "continues exactly"
// is a daemon without a snapshot directory that gets the same context as raw token ids
// (Append.tokens: no BOS, no chat framing), or a twin session fed the same input. Every daemon
// runs one token per step (see Flags, durability_fixture.h). Small caches, short contexts and
// greedy decoding keep each daemon's work short: about 30 s on a 2-core machine.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/snapshot/snapshot_format.h"
#include "engine/snapshot/snapshot_layout.h"
#include "tests/e2e/daemon_process.h"
#include "tests/e2e/durability_fixture.h"
#include "tests/e2e/durability_util.h"
#include "tests/e2e/e2e_util.h"
#include "tests/support/snapshot_testing.h"

namespace streamd::e2e {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// With a snapshot interval of an hour only the detach and the drain can write: everything
// acknowledged before SIGTERM (a detached session, attached idle ones, one with input not yet
// prefilled, an empty one, one generating when the signal came) is on disk, exactly.
TEST_F(DurabilityE2eTest, SigtermWritesEverythingAcknowledged) {
  TempDir tmp;
  const std::string root = tmp.Sub("sessions"), dir = ModelDir(root);
  struct Known {
    std::string id;
    std::vector<int32_t> context;
  };
  std::vector<Known> known(5);
  {
    auto d = DaemonProcess::Start(
        Flags(root, {"--sessions.snapshot_interval=1h", "--server.shutdown_grace=300s"}));
    ASSERT_NE(d, nullptr);
    auto detached = MakeSession(*d, Words(0, 12), 6, &known[0].id, &known[0].context);
    auto idle = MakeSession(*d, Words(20, 9), 5, &known[1].id, &known[1].context);
    auto unprefilled = MakeSession(*d, Words(40, 7), 4, &known[2].id, &known[2].context);
    auto generating = MakeSession(*d, Words(60, 10), 0, &known[3].id, &known[3].context);
    auto empty = std::make_unique<RawStream>(d->Channel());
    ASSERT_TRUE(detached && idle && unprefilled && generating);
    auto opened = empty->Open();
    ASSERT_TRUE(opened);
    known[4].id = opened->session_id();
    DetachStream(*detached);
    // Each session's first write is due at once, the next one in an hour (or at the drain).
    for (const Known& k : known) {
      ASSERT_TRUE(WaitFor([&] { return fs::exists(dir + "/" + k.id + ".snap"); }))
          << k.id << " was never written";
    }
    // Until no write has happened for 300 ms: a touch during a first write queues a second.
    double writes = -1;
    ASSERT_TRUE(WaitFor([&] {
      const double now = MetricValue(d->ScrapeMetrics(), "streamd_snapshot_writes_total");
      if (now == writes) return true;
      writes = now;
      std::this_thread::sleep_for(300ms);
      return false;
    })) << "the daemon keeps writing snapshots";
    const std::vector<int32_t> more = Words(33, 4);
    ASSERT_FALSE(idle->Append(TokensMsg(more).append()));
    known[1].context.insert(known[1].context.end(), more.begin(), more.end());
    // Acknowledged, then SIGTERM before it is prefilled (one token per step: 30 steps).
    const std::vector<int32_t> long_input = Words(80, 30);
    ASSERT_FALSE(unprefilled->Append(TokensMsg(long_input).append()));
    known[2].context.insert(known[2].context.end(), long_input.begin(), long_input.end());
    // The attached sessions' changes are not written yet: the drain must do it.
    for (size_t i = 1; i < 3; ++i) {
      const auto stored = StoredSummary(dir, known[i].id);
      EXPECT_TRUE(!stored || SeenOf(*stored) < static_cast<int64_t>(known[i].context.size()))
          << "session " << i << " was written before the drain: the test proves nothing";
    }
    ASSERT_TRUE(generating->Write(GenerateMsg(24)));
    const Generation g = ReadGeneration(*generating, [&] { d->Terminate(); });
    ASSERT_TRUE(g.ended);
    EXPECT_EQ(g.done.reason(), v1::FINISH_REASON_LENGTH) << "finished within the grace period";
    known[3].context.insert(known[3].context.end(), g.ids.begin(), g.ids.end());
    for (RawStream* s : {idle.get(), unprefilled.get(), generating.get(), empty.get()}) {
      EXPECT_EQ(s->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
    }
    ASSERT_EQ(d->Wait(120s), 0) << d->Stderr();
  }
  for (const Known& k : known) {
    const auto stored = StoredSummary(dir, k.id);
    ASSERT_TRUE(stored) << k.id << " has no snapshot after SIGTERM";
    EXPECT_EQ(SeenOf(*stored), static_cast<int64_t>(k.context.size())) << k.id;
  }
  auto d = DaemonProcess::Start(Flags(root));
  ASSERT_NE(d, nullptr);
  const auto listed = ListSessions(*d);
  EXPECT_EQ(listed.size(), known.size());
  for (size_t i = 0; i < 4; ++i) ExpectResumesAndContinues(*d, known[i].id, known[i].context);
  Resumed r = ResumeSession(*d, known[4].id);
  ASSERT_TRUE(r.opened) << r.error.ShortDebugString();
  EXPECT_EQ(r.opened->cache().tokens_seen(), 0);
  r.stream->Write(CloseMsg());
  EXPECT_TRUE(r.stream->Finish().ok());
  d->Terminate();
  EXPECT_EQ(d->Wait(60s), 0) << d->Stderr();
}

// ---- Offload and reload ----------------------------------------------------------------------

TEST_F(DurabilityE2eTest, IdleSessionsAreOffloadedAndComeBackOnResume) {
  TempDir tmp;
  const std::string root = tmp.Sub("sessions"), dir = ModelDir(root);
  auto d = DaemonProcess::Start(Flags(root, {"--sessions.offload_after=200ms"}));
  ASSERT_NE(d, nullptr);
  std::string id, twin_id;
  std::vector<int32_t> context, twin_context;
  auto s = MakeSession(*d, Words(3, 40), 8, &id, &context);
  auto twin = MakeSession(*d, Words(3, 40), 8, &twin_id, &twin_context);  // stays attached
  ASSERT_TRUE(s && twin);
  ASSERT_EQ(context, twin_context) << "the same input gave different tokens";
  v1::SessionInfo before;
  ASSERT_TRUE(GetSession(*d, id, &before).ok());
  ASSERT_GT(before.cache().blocks_held(), 0);
  const double used_before = MetricValue(d->ScrapeMetrics(), "streamd_kv_used_blocks");
  DetachStream(*s);

  ASSERT_TRUE(WaitFor([&] { return ListSessions(*d)[id].offloaded(); }))
      << "the detached session was not offloaded after 200 ms (+ " << kWaitLimit.count() << " s)";
  const auto listed = ListSessions(*d);
  EXPECT_FALSE(listed.at(twin_id).offloaded()) << "an attached session was offloaded";
  v1::SessionInfo info;
  ASSERT_TRUE(GetSession(*d, id, &info).ok());
  EXPECT_TRUE(info.offloaded());
  EXPECT_FALSE(info.attached());
  EXPECT_EQ(info.cache().blocks_held(), 0);
  EXPECT_EQ(info.cache().tokens_seen(), static_cast<int64_t>(context.size()));
  const std::string metrics = d->ScrapeMetrics();
  EXPECT_EQ(MetricValue(metrics, "streamd_kv_used_blocks"),
            used_before - before.cache().blocks_held())
      << "the offloaded session's blocks were not freed";
  EXPECT_GE(MetricValue(metrics, "streamd_session_offloads_total"), 1);
  EXPECT_EQ(MetricValue(metrics, "streamd_sessions_offloaded"), 1);
  const auto stored = StoredSummary(dir, id);
  ASSERT_TRUE(stored);
  EXPECT_EQ(SeenOf(*stored), static_cast<int64_t>(context.size()));

  Resumed r = ResumeSession(*d, id);
  ASSERT_TRUE(r.opened) << r.error.ShortDebugString();
  EXPECT_EQ(r.opened->cache().tokens_seen(), static_cast<int64_t>(context.size()));
  ASSERT_TRUE(GetSession(*d, id, &info).ok());
  EXPECT_FALSE(info.offloaded());
  EXPECT_GT(info.cache().blocks_held(), 0);
  // One after the other, so that neither shares a step with the other.
  const Generation back = GenerateOn(*r.stream, kContinuation);
  const Generation never = GenerateOn(*twin, kContinuation);
  EXPECT_EQ(back.ids, never.ids) << "the reloaded session does not continue as its twin";
  EXPECT_EQ(back.ids.size(), static_cast<size_t>(kContinuation));
  for (RawStream* x : {r.stream.get(), twin.get()}) {
    x->Write(CloseMsg());
    EXPECT_TRUE(x->Finish().ok());
  }
  d->Terminate();
  EXPECT_EQ(d->Wait(60s), 0) << d->Stderr();
}

// ---- Export and import -----------------------------------------------------------------------

TEST_F(DurabilityE2eTest, ExportImportMovesASessionAndRefusesBadSnapshots) {
  TempDir tmp;
  const std::string root_b = tmp.Sub("b"), dir_b = ModelDir(root_b);
  auto a = DaemonProcess::Start(Flags(tmp.Sub("a")));
  // B takes snapshots of at most 1 MiB: ~45 cached tokens of SmolLM2-135M (23,040 bytes each).
  auto b = DaemonProcess::Start(Flags(root_b, {"--sessions.max_snapshot_bytes=1MiB"}));
  ASSERT_TRUE(a && b);
  std::string id, other_id, big_id;
  std::vector<int32_t> context, other_context, big_context;
  auto s = MakeSession(*a, Words(7, 14), 6, &id, &context);
  auto other = MakeSession(*a, Words(30, 10), 0, &other_id, &other_context);
  auto big = MakeSession(*a, Words(50, 70), 0, &big_id, &big_context);
  ASSERT_TRUE(s && other && big);
  WaitPrefilled(*a, other_id);
  WaitPrefilled(*a, big_id);

  std::vector<uint8_t> bytes, other_bytes, big_bytes;
  ASSERT_TRUE(Export(*a, id, &bytes).ok());
  ASSERT_TRUE(Export(*a, other_id, &other_bytes).ok());
  ASSERT_TRUE(Export(*a, big_id, &big_bytes).ok());
  auto summary = ReadSnapshotSummary(bytes);
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_EQ(summary->id.ToString(), id);
  EXPECT_EQ(SeenOf(*summary), static_cast<int64_t>(context.size()));
  ASSERT_LT(bytes.size(), size_t{1} << 20);
  ASSERT_GT(big_bytes.size(), size_t{1} << 20);

  // In 64 KiB chunks, so that the daemon puts several together.
  ImportResult imported = Import(*b, bytes, 64 << 10);
  ASSERT_TRUE(imported.status.ok()) << imported.status.error_message();
  EXPECT_TRUE(imported.response.resident());
  EXPECT_EQ(imported.response.session().session_id(), id);
  EXPECT_EQ(imported.response.session().cache().tokens_seen(),
            static_cast<int64_t>(context.size()));
  EXPECT_TRUE(fs::exists(dir_b + "/" + id + ".snap")) << "the import is not on B's disk";
  const ImportResult again = Import(*b, bytes);
  EXPECT_EQ(again.status.error_code(), grpc::StatusCode::ALREADY_EXISTS)
      << again.status.error_message();

  // B continues it as A does (export copies; A keeps the session).
  Resumed r = ResumeSession(*b, id);
  ASSERT_TRUE(r.opened) << r.error.ShortDebugString();
  EXPECT_EQ(r.opened->cache().tokens_seen(), static_cast<int64_t>(context.size()));
  const Generation on_b = GenerateOn(*r.stream, kContinuation);
  const Generation on_a = GenerateOn(*s, kContinuation);
  EXPECT_EQ(on_b.ids, on_a.ids) << "the imported session does not continue as the exported one";
  EXPECT_EQ(on_b.ids.size(), static_cast<size_t>(kContinuation));

  // Damaged bytes are refused and create nothing.
  const auto files_before = FilesIn(dir_b);
  const auto sessions_before = ListSessions(*b);
  std::vector<uint8_t> truncated(other_bytes.begin(), other_bytes.begin() + other_bytes.size() / 2);
  std::vector<uint8_t> flipped = other_bytes;
  const auto sections = snapshot_testing::Sections(flipped);
  const auto kv = std::find_if(sections.begin(), sections.end(),
                               [](const auto& sec) { return sec.tag == snapshot_layout::kTagKv; });
  ASSERT_NE(kv, sections.end());
  flipped[kv->payload + kv->length / 2] ^= 0x10;
  for (const auto* bad : {&truncated, &flipped}) {
    const ImportResult refused = Import(*b, *bad);
    EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::DATA_LOSS)
        << refused.status.error_message();
  }
  // Over limits.max_snapshot_bytes: refused before the rest is read. 64 MiB follow the
  // snapshot; the call ends long before they are sent.
  std::vector<uint8_t> huge = big_bytes;
  huge.resize(huge.size() + (size_t{64} << 20), 0x5a);
  const ImportResult over = Import(*b, huge);
  EXPECT_EQ(over.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << over.status.error_message();
  EXPECT_NE(over.status.error_message().find("max_snapshot_bytes"), std::string::npos)
      << over.status.error_message();
  EXPECT_LT(over.bytes_written, huge.size() / 2) << "the daemon read the whole oversized import";
  EXPECT_EQ(FilesIn(dir_b), files_before) << "a refused import left a file";
  EXPECT_EQ(ListSessions(*b).size(), sessions_before.size()) << "a refused import made a session";
  v1::SessionInfo info;
  EXPECT_EQ(GetSession(*b, other_id, &info).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(GetSession(*b, big_id, &info).error_code(), grpc::StatusCode::NOT_FOUND);

  // Export: unknown and malformed ids, and a session that is generating.
  std::vector<uint8_t> ignored;
  EXPECT_EQ(Export(*a, "0123456789abcdef0123456789abcdef", &ignored).error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Export(*a, "xyz", &ignored).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ASSERT_TRUE(s->Write(GenerateMsg(400)));
  grpc::Status during;
  const Generation long_one = ReadGeneration(*s, [&] {
    during = Export(*a, id, &ignored);
    s->Write(CancelMsg());
  });
  EXPECT_EQ(during.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << during.error_message();
  EXPECT_EQ(long_one.done.reason(), v1::FINISH_REASON_CANCELLED);

  for (RawStream* x : {s.get(), other.get(), big.get(), r.stream.get()}) {
    x->Write(CloseMsg());
    EXPECT_TRUE(x->Finish().ok());
  }
  for (DaemonProcess* d : {a.get(), b.get()}) {
    d->Terminate();
    EXPECT_EQ(d->Wait(60s), 0) << d->Stderr();
  }
}

// ---- Damaged, foreign and hostile files at start ---------------------------------------------

// The file `name` in `dir` (the model's directory) has been moved into rejected/ unchanged, and
// the log says why.
void ExpectRejected(const std::string& dir, const std::string& name,
                    const std::vector<uint8_t>& bytes, const std::string& code,
                    const std::string& log) {
  SCOPED_TRACE(name);
  EXPECT_FALSE(fs::exists(dir + "/" + name)) << "still in the snapshot directory";
  std::vector<std::string> moved;
  for (const std::string& f : FilesIn(dir + "/rejected")) {
    if (f.rfind(name + ".", 0) == 0) moved.push_back(f);
  }
  ASSERT_EQ(moved.size(), 1u) << "rejected/ holds " << Joined(FilesIn(dir + "/rejected"));
  EXPECT_EQ(ReadBytes(dir + "/rejected/" + moved[0]), bytes) << "the refused file was changed";
  EXPECT_NE(log.find("snapshot " + name + " refused (" + code + ")"), std::string::npos)
      << "no log line names the file and the reason";
}

double RejectedTotal(const std::string& metrics) {
  double n = 0;
  for (const char* reason : {"DATA_LOSS", "FAILED_PRECONDITION", "INVALID_ARGUMENT"}) {
    n += std::max(0.0,
                  MetricValue(metrics, std::string("streamd_snapshots_rejected_total{reason=\"") +
                                           reason + "\"}"));
  }
  return n;
}

TEST_F(DurabilityE2eTest, DamagedSnapshotsAreRefusedAndTheRestResume) {
  TempDir tmp;
  const std::string root = tmp.Sub("sessions"), dir = ModelDir(root);
  constexpr int kGood = 2, kSessions = 6;
  std::vector<std::string> ids(kSessions);
  std::vector<std::vector<int32_t>> contexts(kSessions);
  {
    auto d = DaemonProcess::Start(Flags(root));
    ASSERT_NE(d, nullptr);
    for (int i = 0; i < kSessions; ++i) {
      auto s = MakeSession(*d, Words(11 * i, 8 + i), i % 2 == 0 ? 4 : 0, &ids[i], &contexts[i]);
      ASSERT_TRUE(s);
      DetachStream(*s);
    }
    d->Terminate();
    ASSERT_EQ(d->Wait(60s), 0) << d->Stderr();
  }
  auto path = [&](int i) { return dir + "/" + ids[i] + ".snap"; };
  std::vector<std::vector<uint8_t>> bytes(kSessions);
  for (int i = 0; i < kSessions; ++i) {
    bytes[i] = ReadBytes(path(i));
    ASSERT_FALSE(bytes[i].empty()) << "no snapshot of session " << i;
  }
  namespace L = snapshot_layout;
  // 0: cut inside the K/V (its header and META still read: refused when it is loaded).
  bytes[0].resize(bytes[0].size() * 2 / 3);
  // 1: one flipped bit in the K/V.
  const auto sections = snapshot_testing::Sections(bytes[1]);
  const auto kv = std::find_if(sections.begin(), sections.end(),
                               [](const auto& sec) { return sec.tag == L::kTagKv; });
  ASSERT_NE(kv, sections.end());
  bytes[1][kv->payload + kv->length / 3] ^= 0x04;
  // 2: a format version this reader does not know, behind a valid header checksum.
  const uint32_t version = L::kNewestFormatVersion + 1;
  std::memcpy(bytes[2].data() + L::kHeaderVersionOffset, &version, sizeof(version));
  snapshot_testing::RewriteChecksums(bytes[2]);
  // 3: another model: one character of META's model fingerprint, META's checksum recomputed.
  const auto meta = snapshot_testing::Sections(bytes[3]).front();
  ASSERT_EQ(meta.tag, L::kTagMeta);
  uint32_t version_len = 0;
  std::memcpy(&version_len, bytes[3].data() + meta.payload + L::meta::kFixedSize, 4);
  const size_t fingerprint = meta.payload + L::meta::kFixedSize + 4 + version_len + 4;
  bytes[3][fingerprint] = bytes[3][fingerprint] == '0' ? '1' : '0';
  snapshot_testing::RewriteChecksums(bytes[3]);
  for (int i = 0; i < kSessions - kGood; ++i) WriteBytes(path(i), bytes[i]);
  // And a text file named like a snapshot.
  const std::string stray = "0123456789abcdef0123456789abcdef.snap";
  const std::string stray_text = "this is not a session snapshot\n";
  const std::vector<uint8_t> stray_bytes(stray_text.begin(), stray_text.end());
  WriteBytes(dir + "/" + stray, stray_bytes);

  auto d = DaemonProcess::Start(Flags(root));
  ASSERT_NE(d, nullptr);
  // Header-level damage is refused by the start-up scan, K/V damage when the background
  // restore reads the file.
  ASSERT_TRUE(WaitFor([&] { return RejectedTotal(d->ScrapeMetrics()) >= 5; }))
      << "not every damaged file was refused: " << d->Stderr();
  const std::string metrics = d->ScrapeMetrics();
  EXPECT_EQ(MetricValue(metrics, "streamd_snapshots_rejected_total{reason=\"DATA_LOSS\"}"), 3);
  EXPECT_EQ(
      MetricValue(metrics, "streamd_snapshots_rejected_total{reason=\"FAILED_PRECONDITION\"}"), 2);
  const std::string log = d->Stderr();
  ExpectRejected(dir, ids[0] + ".snap", bytes[0], "DATA_LOSS", log);
  ExpectRejected(dir, ids[1] + ".snap", bytes[1], "DATA_LOSS", log);
  ExpectRejected(dir, ids[2] + ".snap", bytes[2], "FAILED_PRECONDITION", log);
  // Another model's snapshot in this model's directory: refused, named, and left where it is
  // (never moved from under the model it belongs to).
  EXPECT_EQ(ReadBytes(path(3)), bytes[3]) << "another model's snapshot was moved or changed";
  EXPECT_NE(log.find("snapshot " + ids[3] + ".snap refused (FAILED_PRECONDITION)"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("left where it is"), std::string::npos) << log;
  ExpectRejected(dir, stray, stray_bytes, "DATA_LOSS", log);
  EXPECT_NE(log.find("is not supported"), std::string::npos) << "the version is not named";
  EXPECT_NE(log.find("another model"), std::string::npos) << "the model is not named";

  for (int i = kSessions - kGood; i < kSessions; ++i) {
    ExpectResumesAndContinues(*d, ids[i], contexts[i]);
  }
  // A Resume of a refused one says why (whether the scan or the load refused it).
  const char* reasons[] = {"truncated", "checksum mismatch", "is not supported", "another model"};
  for (int i = 0; i < kSessions - kGood; ++i) {
    SCOPED_TRACE("damaged session " + std::to_string(i));
    Resumed r = ResumeSession(*d, ids[i]);
    EXPECT_FALSE(r.opened);
    EXPECT_EQ(r.error.code(), grpc::StatusCode::DATA_LOSS) << r.error.ShortDebugString();
    EXPECT_EQ(r.error.field(), "resume.session_id");
    EXPECT_NE(r.error.message().find("could not be restored from its snapshot"), std::string::npos)
        << r.error.message();
    EXPECT_NE(r.error.message().find(reasons[i]), std::string::npos) << r.error.message();
  }
  // And it serves new sessions.
  std::string id;
  std::vector<int32_t> context;
  auto fresh = MakeSession(*d, Words(5, 6), 3, &id, &context);
  ASSERT_TRUE(fresh);
  fresh->Write(CloseMsg());
  EXPECT_TRUE(fresh->Finish().ok());
  d->Terminate();
  EXPECT_EQ(d->Wait(60s), 0) << d->Stderr();
}

TEST_F(DurabilityE2eTest, HostileFilesNeverCrashTheDaemon) {
  TempDir tmp;
  const std::string root = tmp.Sub("sessions"), dir = ModelDir(root);
  std::mt19937_64 rng(std::random_device{}());
  auto hex_name = [&] {
    std::string n;
    for (int i = 0; i < 32; ++i) n += "0123456789abcdef"[rng() % 16];
    return n + ".snap";
  };
  std::map<std::string, std::vector<uint8_t>> hostile;
  std::vector<uint8_t> random(4096 + rng() % 4096);
  for (uint8_t& b : random) b = static_cast<uint8_t>(rng());
  hostile[hex_name()] = random;
  hostile[hex_name()] = {};  // empty
  hostile[hex_name()] = {0x53};
  std::vector<uint8_t> magic(snapshot_layout::kMagic, snapshot_layout::kMagic + 8);
  magic.resize(2048);
  for (size_t i = 8; i < magic.size(); ++i) magic[i] = static_cast<uint8_t>(rng());
  hostile[hex_name()] = magic;  // the magic, then noise
  fs::create_directories(dir);  // this model's directory, where the daemon looks
  for (const auto& [name, b] : hostile) WriteBytes(dir + "/" + name, b);
  // Not snapshots by name: left alone.
  WriteBytes(dir + "/notes.txt", {'h', 'i'});
  fs::create_directories(dir + "/" + hex_name());

  auto d = DaemonProcess::Start(Flags(root));
  ASSERT_NE(d, nullptr);
  ASSERT_TRUE(WaitFor([&] { return RejectedTotal(d->ScrapeMetrics()) >= hostile.size(); }))
      << d->Stderr();
  EXPECT_EQ(
      MetricValue(d->ScrapeMetrics(), "streamd_snapshots_rejected_total{reason=\"DATA_LOSS\"}"),
      static_cast<double>(hostile.size()));
  const std::string log = d->Stderr();
  for (const auto& [name, b] : hostile) ExpectRejected(dir, name, b, "DATA_LOSS", log);
  EXPECT_TRUE(fs::exists(dir + "/notes.txt"));
  EXPECT_TRUE(ListSessions(*d).empty());
  std::string id;
  std::vector<int32_t> context;
  auto s = MakeSession(*d, Words(0, 5), 3, &id, &context);
  ASSERT_TRUE(s);
  s->Write(CloseMsg());
  EXPECT_TRUE(s->Finish().ok());
  d->Terminate();
  EXPECT_EQ(d->Wait(60s), 0) << d->Stderr();
}

// ---- A full disk and a read-only directory ---------------------------------------------------

double WriteErrors(const DaemonProcess& d, const std::string& reason) {
  return MetricValue(d.ScrapeMetrics(),
                     "streamd_snapshot_write_errors_total{reason=\"" + reason + "\"}");
}

// Resumes `id`, checks it is still resident (its offload failed) and continues as the reference.
void ExpectStillServed(const DaemonProcess& d, const DaemonProcess& reference,
                       const std::string& id, const std::vector<int32_t>& context) {
  SCOPED_TRACE("session " + id);
  v1::SessionInfo info;
  ASSERT_TRUE(GetSession(d, id, &info).ok());
  EXPECT_FALSE(info.offloaded()) << "offloaded although its snapshot could not be written";
  EXPECT_GT(info.cache().blocks_held(), 0);
  Resumed r = ResumeSession(d, id);
  ASSERT_TRUE(r.opened) << r.error.ShortDebugString();
  EXPECT_EQ(r.opened->cache().tokens_seen(), static_cast<int64_t>(context.size()));
  const Generation g = GenerateOn(*r.stream, kContinuation);
  EXPECT_EQ(g.ids, ReferenceContinuation(reference, context, kContinuation).ids);
  r.stream->Write(CloseMsg());
  EXPECT_TRUE(r.stream->Finish().ok());
}

TEST_F(DurabilityE2eTest, AFullDiskCostsSnapshotsNotSessions) {
  TempDir tmp;
  const std::string root = tmp.Sub("full");
  // A 256 KiB file system: a snapshot of more than ~11 cached tokens does not fit.
  std::vector<std::string> wrap;
  bool in_namespace = false;
  if (auto w = InMountNamespace("mount -t tmpfs -o size=256k,mode=0700 tmpfs \"$0\"", root)) {
    wrap = *w;
    in_namespace = true;
  } else if (const std::string prlimit = SystemTool("prlimit");
             !prlimit.empty() &&
             RunProgram({prlimit, "--fsize=262144", SystemTool("true")}).exit_code == 0) {
    wrap = {prlimit, "--fsize=262144"};  // writes past 256 KiB fail with EFBIG
  } else {
    GTEST_SKIP() << "neither unshare -m (a private tmpfs) nor prlimit --fsize works here";
  }
  std::printf("[ disk     ] %s\n", in_namespace ? "a 256 KiB tmpfs in a private mount namespace"
                                                : "a file size limit of 256 KiB (prlimit)");
  auto d = DaemonProcess::Start(Flags(root, {"--sessions.offload_after=300ms"}), wrap);
  ASSERT_NE(d, nullptr);
  const std::string seen_dir =
      ModelDir(in_namespace ? "/proc/" + std::to_string(d->pid()) + "/root" + root : root);
  std::string id, other_id;
  std::vector<int32_t> context, other_context;
  auto s = MakeSession(*d, Words(0, 40), 6, &id, &context);
  auto other = MakeSession(*d, Words(17, 30), 4, &other_id, &other_context);
  ASSERT_TRUE(s && other);
  WaitPrefilled(*d, id);
  WaitPrefilled(*d, other_id);
  DetachStream(*s);  // written at once: it does not fit
  DetachStream(*other);
  ASSERT_TRUE(WaitFor([&] { return WriteErrors(*d, "RESOURCE_EXHAUSTED") >= 2; }))
      << "no failed write was counted: " << d->Stderr();
  const double failed = WriteErrors(*d, "RESOURCE_EXHAUSTED");
  std::this_thread::sleep_for(600ms);  // past offload_after: an offload needs a write
  // The reaper asks to offload them every 30 ms meanwhile; a failed write waits for its
  // backoff (1 s, doubling) before the next attempt, whoever asks.
  EXPECT_LE(WriteErrors(*d, "RESOURCE_EXHAUSTED") - failed, 2)
      << "failed writes were retried without backoff: " << d->Stderr();
  EXPECT_NE(d->Stderr().find("not written (RESOURCE_EXHAUSTED)"), std::string::npos) << d->Stderr();
  EXPECT_TRUE(TempFilesIn(seen_dir).empty()) << "partial files: " << Joined(TempFilesIn(seen_dir));
  for (const std::string& f : FilesIn(seen_dir)) {  // what did fit is whole
    EXPECT_TRUE(ReadSnapshotSummary(ReadBytes(seen_dir + "/" + f)).ok()) << f;
  }
  ExpectStillServed(*d, *reference_, id, context);
  ExpectStillServed(*d, *reference_, other_id, other_context);
  EXPECT_TRUE(TempFilesIn(seen_dir).empty()) << "partial files: " << Joined(TempFilesIn(seen_dir));
  // The drain's writes fail too; it gives up after its flush timeout and exits cleanly.
  d->Terminate();
  EXPECT_EQ(d->Wait(60s), 0) << d->Stderr();
}

TEST_F(DurabilityE2eTest, AReadOnlyDirectoryCostsSnapshotsNotSessions) {
  TempDir tmp;
  const std::string root = tmp.Sub("ro"), dir = ModelDir(root);
  auto wrap =
      InMountNamespace("mount --bind \"$0\" \"$0\" && mount -o remount,bind,ro \"$0\"", root);
  if (!wrap) {
    GTEST_SKIP() << "unshare -m with a read-only bind mount is not allowed here (and a chmod "
                    "does not stop root)";
  }
  // A session written while the directory was writable: it still comes back.
  std::string old_id;
  std::vector<int32_t> old_context;
  {
    auto d = DaemonProcess::Start(Flags(root));
    ASSERT_NE(d, nullptr);
    auto s = MakeSession(*d, Words(9, 12), 4, &old_id, &old_context);
    ASSERT_TRUE(s);
    DetachStream(*s);
    d->Terminate();
    ASSERT_EQ(d->Wait(60s), 0) << d->Stderr();
  }
  const std::vector<std::string> files = FilesIn(dir);
  auto d = DaemonProcess::Start(Flags(root, {"--sessions.offload_after=300ms"}), *wrap);
  ASSERT_NE(d, nullptr);
  std::string id;
  std::vector<int32_t> context;
  auto s = MakeSession(*d, Words(30, 20), 5, &id, &context);
  ASSERT_TRUE(s);
  DetachStream(*s);
  ASSERT_TRUE(WaitFor([&] { return WriteErrors(*d, "PERMISSION_DENIED") >= 1; }))
      << "no failed write was counted: " << d->Stderr();
  const double failed = WriteErrors(*d, "PERMISSION_DENIED");
  std::this_thread::sleep_for(600ms);  // past offload_after
  EXPECT_LE(WriteErrors(*d, "PERMISSION_DENIED") - failed, 1)
      << "failed writes were retried without backoff: " << d->Stderr();
  EXPECT_NE(d->Stderr().find("not written (PERMISSION_DENIED)"), std::string::npos) << d->Stderr();
  ExpectStillServed(*d, *reference_, id, context);
  ExpectResumesAndContinues(*d, old_id, old_context);
  EXPECT_EQ(FilesIn(dir), files) << "the read-only directory changed";
  d->Terminate();
  EXPECT_EQ(d->Wait(60s), 0) << d->Stderr();
}

}  // namespace
}  // namespace streamd::e2e
