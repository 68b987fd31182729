// SessionRegistry over a small synthetic engine: one stream per session, detach/resume, close
// notifying the attached owner, the reaper's timeouts; with a snapshot directory: offload and
// resume, offload to make room, restore at start-up into a new engine, snapshots refused and
// moved aside while the rest load, closed sessions' snapshots deleted.
#include "engine/sessions/session_registry.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <thread>

#include "tests/support/session_registry_test_util.h"

namespace streamd {
namespace {

using namespace std::chrono_literals;
using namespace registry_testing;  // NOLINT: the registry tests' helpers

TEST(SessionRegistryTest, OneOwnerAtATimeAndResumeAfterDetach) {
  auto e = MakeEngine();
  SessionRegistry registry(*e.engine, Timeouts(10min, 10min));
  auto a = std::make_shared<FakeOwner>();
  auto b = std::make_shared<FakeOwner>();
  auto s = registry.Open(Small(), a);
  ASSERT_TRUE(s.ok());
  const SessionId id = (*s)->id;
  auto second = AttachNow(registry, id, b);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  registry.Detach(*s);
  auto resumed = AttachNow(registry, id, b);
  ASSERT_TRUE(resumed.ok());
  EXPECT_EQ(resumed->get(), s->get());  // the same session, state and all
  const SessionId unknown = SessionId::Random();
  const Status not_found = AttachNow(registry, unknown, a).status();
  EXPECT_EQ(not_found.code(), StatusCode::kNotFound);
  EXPECT_NE(not_found.message().find("session " + unknown.ToString() + " does not exist"),
            std::string::npos)
      << not_found.message();
}

TEST(SessionRegistryTest, CloseTellsTheAttachedOwnerButNotTheCaller) {
  auto e = MakeEngine();
  SessionRegistry registry(*e.engine, Timeouts(10min, 10min));
  auto owner = std::make_shared<FakeOwner>();
  auto s = registry.Open(Small(), owner);
  ASSERT_TRUE(s.ok());
  const SessionId id = (*s)->id;
  ASSERT_TRUE(registry.Close(id, CancelledError("closed by CloseSession")).ok());
  EXPECT_EQ(owner->closed_id, id);
  EXPECT_EQ(owner->reason, "closed by CloseSession");
  EXPECT_FALSE(e.engine->Get(id).ok());  // blocks freed
  EXPECT_EQ(registry.Close(id, CancelledError("again")).code(), StatusCode::kNotFound);

  auto self = std::make_shared<FakeOwner>();
  auto t = registry.Open(Small(), self);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(registry.Close((*t)->id, CancelledError("by its stream"), self.get()).ok());
  EXPECT_FALSE(self->closed_id.valid());  // the caller is not told
}

TEST(SessionRegistryTest, WithoutASnapshotDirectoryIdleSessionsAreClosed) {
  auto e = MakeEngine();
  SessionRegistry registry(*e.engine, Timeouts(10min, 60s));
  auto owner = std::make_shared<FakeOwner>();
  auto attached = registry.Open(Small(), owner);
  auto detached = registry.Open(Small(), owner);
  ASSERT_TRUE(attached.ok() && detached.ok());
  registry.Detach(*detached);
  const Clock::time_point now = Clock::now();
  EXPECT_EQ(registry.ReapIdle(now), 0);  // detached just now
  EXPECT_EQ(registry.ReapIdle(now + 61s), 1);
  EXPECT_EQ(registry.Find((*detached)->id), nullptr);
  EXPECT_NE(registry.Find((*attached)->id), nullptr);
  EXPECT_EQ(registry.All().size(), 1u);

  SessionRegistry never(*e.engine, Timeouts(0ms, 0ms));  // 0 = never
  auto s = never.Open(Small(), owner);
  ASSERT_TRUE(s.ok());
  never.Detach(*s);
  EXPECT_EQ(never.ReapIdle(Clock::now() + 1000h), 0);
}

TEST(SessionRegistryTest, OffloadedSessionsComeBackOnResumeAndGoAfterTheIdleTimeout) {
  auto e = MakeEngine();
  const std::string dir = TempDir();
  auto persister = MakePersister(e, dir);
  SessionRegistry registry(*e.engine, Timeouts(1h, 60s), persister.get());
  auto owner = std::make_shared<FakeOwner>();
  auto s = registry.Open(Small(), owner);
  ASSERT_TRUE(s.ok());
  const SessionId id = (*s)->id;
  ASSERT_TRUE(e.engine->Append(id, Bytes(100, 1)).ok());
  const auto before = e.engine->Get(id);
  ASSERT_TRUE(before.ok());
  registry.Detach(*s);
  EXPECT_EQ(registry.ReapIdle(Clock::now() + 61s), 1);
  {
    std::lock_guard<std::mutex> lock((*s)->mu);
    EXPECT_EQ((*s)->residency, Residency::kOffloaded);
  }
  EXPECT_FALSE(e.engine->Get(id).ok()) << "its blocks are free";
  // Freed once the step it may still be in (prefill of the pending input) has ended.
  for (int i = 0; i < 1000 && e.engine->Stats().blocks_used != 0; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(e.engine->Stats().blocks_used, 0);
  auto back = AttachNow(registry, id, owner);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  const auto after = e.engine->Get(id);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->tokens_seen, before->tokens_seen);  // all 100 tokens, prefilled or pending
  // Detached for longer than the idle timeout: closed, and its snapshot deleted.
  registry.Detach(*back);
  EXPECT_EQ(registry.ReapIdle(Clock::now() + 2h), 1);
  EXPECT_EQ(registry.Find(id), nullptr);
  ASSERT_TRUE(persister->WaitIdle(Clock::now() + 10s));
  EXPECT_EQ(persister->store().List()->size(), 0u);
}

// An open partial Append is memory-only: a session offloaded with one comes back with it as
// final input (the next Append goes after it), and the stream's bookkeeping says so too.
TEST(SessionRegistryTest, AnOffloadedSessionComesBackWithItsPartialAsFinalInput) {
  auto e = MakeEngine();
  auto persister = MakePersister(e, TempDir());
  SessionRegistry registry(*e.engine, Timeouts(1h, 60s), persister.get());
  auto owner = std::make_shared<FakeOwner>();
  auto s = registry.Open(Small(), owner);
  ASSERT_TRUE(s.ok());
  const SessionId id = (*s)->id;
  ASSERT_TRUE(e.engine->Append(id, Bytes(10, 1)).ok());
  ASSERT_TRUE(e.engine->Append(id, Bytes(6, 2), {}, Engine::AppendMode::kPartial).ok());
  {
    std::lock_guard<std::mutex> lock((*s)->mu);  // what SessionStream records for it
    (*s)->partial_open = true;
    (*s)->partial_tokens = Bytes(6, 2);
  }
  registry.Detach(*s);
  ASSERT_EQ(registry.ReapIdle(Clock::now() + 61s), 1);
  auto back = AttachNow(registry, id, owner);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  {
    std::lock_guard<std::mutex> lock((*back)->mu);
    EXPECT_FALSE((*back)->partial_open);
    EXPECT_TRUE((*back)->partial_tokens.empty());
  }
  // The engine's side of it: the next Append is added after the 16 tokens, replacing nothing.
  ASSERT_TRUE(e.engine->Append(id, Bytes(4, 3)).ok());
  EXPECT_EQ(e.engine->Get(id)->tokens_seen, 20);
}

TEST(SessionRegistryTest, AnOpenThatDoesNotFitOffloadsTheLeastRecentlyDetached) {
  // Room for two 4 + 32 sessions beside the prefill headroom.
  const int64_t block = BlockPool::BlockBytes({2, 2, 16}, 16);
  const int32_t bound = SessionCache::BoundBlocks({CacheMode::kSink, 4, 32, 32}, 16);
  auto e = MakeEngine(block * (2 * bound + DefaultPrefillHeadroom({64, 16}, 32, 16)));
  auto persister = MakePersister(e, TempDir());
  SessionRegistry registry(*e.engine, Timeouts(1h, 1h), persister.get());
  auto owner = std::make_shared<FakeOwner>();
  auto first = registry.Open(Small(), owner);
  auto second = registry.Open(Small(), owner);
  ASSERT_TRUE(first.ok() && second.ok());
  ASSERT_TRUE(e.engine->Append((*first)->id, Bytes(50, 2)).ok());
  registry.Detach(*first);
  std::this_thread::sleep_for(5ms);
  registry.Detach(*second);
  auto third = registry.Open(Small(), owner);
  ASSERT_TRUE(third.ok()) << third.status().ToString();
  {
    std::lock_guard<std::mutex> lock((*first)->mu);
    EXPECT_EQ((*first)->residency, Residency::kOffloaded) << "the least recently detached";
  }
  {
    std::lock_guard<std::mutex> lock((*second)->mu);
    EXPECT_EQ((*second)->residency, Residency::kResident);
  }
  // Resuming the offloaded one makes room again, by offloading the other detached session.
  auto back = AttachNow(registry, (*first)->id, owner);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(e.engine->Get((*first)->id)->tokens_seen, 50);
  std::lock_guard<std::mutex> lock((*second)->mu);
  EXPECT_EQ((*second)->residency, Residency::kOffloaded);
}

TEST(SessionRegistryTest, ARestartRestoresEverySnapshotAndSetsBadOnesAside) {
  const std::string dir = TempDir();
  std::vector<SessionId> ids;
  std::map<SessionId, int64_t> seen;
  {
    auto e = MakeEngine();
    auto persister = MakePersister(e, dir);
    SessionRegistry registry(*e.engine, Timeouts(1h, 1h), persister.get());
    auto owner = std::make_shared<FakeOwner>();
    for (int i = 0; i < 5; ++i) {
      auto s = registry.Open(Small(), owner);
      ASSERT_TRUE(s.ok());
      ASSERT_TRUE(e.engine->Append((*s)->id, Bytes(20 + 10 * i, i)).ok());
      registry.Touched(**s);
      ids.push_back((*s)->id);
      seen[(*s)->id] = 20 + 10 * i;
    }
    ASSERT_TRUE(registry.PersistAll(Clock::now() + 20s));
  }  // the process "ends": engine and registry gone
  // One file damaged, one foreign file: both are refused and moved aside, the rest load.
  {
    std::fstream f(dir + "/" + ids[1].ToString() + ".snap",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-64, std::ios::end);  // past META: the listing reads it, the load refuses it
    f.put('\x5a');
  }
  const SessionId foreign = SessionId::Random();
  std::ofstream(dir + "/" + foreign.ToString() + ".snap") << "not a snapshot";
  auto e = MakeEngine();
  int rejected = 0;
  auto persister = MakePersister(e, dir, &rejected);
  SessionRegistry registry(*e.engine, Timeouts(1h, 1h), persister.get());
  EXPECT_EQ(registry.RestoreFromStore(/*load=*/true), 5);  // the foreign file is not one
  auto owner = std::make_shared<FakeOwner>();
  for (size_t i = 0; i < ids.size(); ++i) {
    auto s = AttachNow(registry, ids[i], owner);
    if (i == 1) {
      EXPECT_EQ(s.status().code(), StatusCode::kDataLoss) << s.status().ToString();
      continue;
    }
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(e.engine->Get(ids[i])->tokens_seen, seen[ids[i]]);  // pending included
    registry.Detach(*s);
  }
  EXPECT_EQ(rejected, 2);
  // Refused by the start-up scan: a Resume is told why, not that it never existed.
  auto refused = AttachNow(registry, foreign, owner);
  EXPECT_EQ(refused.status().code(), StatusCode::kDataLoss) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("could not be restored from its snapshot: not a "
                                            "streamd snapshot"),
            std::string::npos)
      << refused.status().ToString();
  DIR* d = ::opendir((dir + "/rejected").c_str());
  ASSERT_NE(d, nullptr) << "refused files are moved aside, not deleted";
  int files = 0;
  while (const dirent* entry = ::readdir(d)) files += entry->d_name[0] != '.';
  ::closedir(d);
  EXPECT_EQ(files, 2);
}

// Two replicas sharing one snapshot directory: a session detached from one resumes on the
// other (found by its id in the directory), and when it comes back to the first, the first's
// older resident copy gives way to the newer snapshot.
TEST(SessionRegistryTest, ReplicasSharingADirectoryTakeOverEachOthersSessions) {
  const std::string dir = TempDir();
  auto a = MakeEngine();
  auto b = MakeEngine();
  auto persister_a = MakePersister(a, dir);
  auto persister_b = MakePersister(b, dir);
  SessionRegistry replica_a(*a.engine, Timeouts(1h, 1h), persister_a.get());
  SessionRegistry replica_b(*b.engine, Timeouts(1h, 1h), persister_b.get());
  auto owner = std::make_shared<FakeOwner>();
  auto s = replica_a.Open(Small(), owner);
  ASSERT_TRUE(s.ok());
  const SessionId id = (*s)->id;
  ASSERT_TRUE(a.engine->Append(id, Bytes(30, 1)).ok());
  replica_a.Detach(*s);
  ASSERT_TRUE(replica_a.PersistAll(Clock::now() + 10s));  // A drains
  auto on_b = AttachNow(replica_b, id, owner);
  ASSERT_TRUE(on_b.ok()) << on_b.status().ToString();
  EXPECT_EQ(b.engine->Get(id)->tokens_seen, 30);
  ASSERT_TRUE(b.engine->Append(id, Bytes(12, 2)).ok());
  replica_b.Touched(**on_b);
  replica_b.Detach(*on_b);
  ASSERT_TRUE(replica_b.PersistAll(Clock::now() + 10s));
  auto back_on_a = AttachNow(replica_a, id, owner);
  ASSERT_TRUE(back_on_a.ok()) << back_on_a.status().ToString();
  EXPECT_EQ(a.engine->Get(id)->tokens_seen, 42) << "A took B's newer snapshot, not its own copy";
}

// Replicas sharing a directory: a session that A served, detached, and that B has served since
// is not idle on A, however long ago it left A: A neither ends it nor deletes its snapshot
// while B writes it (a change) or touches it (used unchanged). It ends once the snapshot, too,
// has been left alone for the idle timeout. (ReapIdle is handed a time an hour ahead.)
TEST(SessionRegistryTest, AReplicaDoesNotEndASessionAnotherOneServedSince) {
  const std::string dir = TempDir();
  auto a = MakeEngine();
  auto b = MakeEngine();
  auto persister_a = MakePersister(a, dir);
  auto persister_b = MakePersister(b, dir);
  SessionRegistry replica_a(*a.engine, Timeouts(1h, 1h), persister_a.get());
  SessionRegistry replica_b(*b.engine, Timeouts(1h, 1h), persister_b.get());
  auto owner = std::make_shared<FakeOwner>();
  auto s = replica_a.Open(Small(), owner);
  ASSERT_TRUE(s.ok());
  const SessionId id = (*s)->id;
  ASSERT_TRUE(a.engine->Append(id, Bytes(10, 1)).ok());
  replica_a.Detach(*s);
  ASSERT_TRUE(replica_a.PersistAll(Clock::now() + 10s));
  const Clock::time_point left_a = Clock::now();
  const auto stored = [&] { return persister_a->store().ModifiedUnixMs(id).ok(); };

  // B changes it 200 ms later: at an hour and 100 ms after A, A's copy is not idle.
  std::this_thread::sleep_for(200ms);
  auto on_b = AttachNow(replica_b, id, owner);
  ASSERT_TRUE(on_b.ok()) << on_b.status().ToString();
  ASSERT_TRUE(b.engine->Append(id, Bytes(5, 2)).ok());
  replica_b.Touched(**on_b);
  replica_b.Detach(*on_b);
  ASSERT_TRUE(replica_b.PersistAll(Clock::now() + 10s));
  const Clock::time_point changed_on_b = Clock::now();
  replica_a.ReapIdle(left_a + 1h + 100ms);
  ASSERT_TRUE(persister_a->WaitIdle(Clock::now() + 10s));
  EXPECT_TRUE(stored()) << "A deleted the snapshot of a session B had just changed";
  const std::shared_ptr<SessionRecord> on_a = replica_a.Find(id);
  ASSERT_NE(on_a, nullptr);
  {
    std::lock_guard<std::mutex> lock(on_a->mu);  // the registry's lock is never taken inside
    EXPECT_EQ(on_a->residency, Residency::kOffloaded) << "A kept its older copy";
  }

  // B uses it unchanged 200 ms later: the touch keeps it too.
  std::this_thread::sleep_for(200ms);
  on_b = AttachNow(replica_b, id, owner);
  ASSERT_TRUE(on_b.ok()) << on_b.status().ToString();
  replica_b.Detach(*on_b);
  ASSERT_TRUE(replica_b.PersistAll(Clock::now() + 10s));
  replica_a.ReapIdle(changed_on_b + 1h + 100ms);
  ASSERT_TRUE(persister_a->WaitIdle(Clock::now() + 10s));
  EXPECT_TRUE(stored()) << "A deleted the snapshot of a session B had just used";

  // Left alone for the idle timeout everywhere: ended, its snapshot deleted.
  replica_a.ReapIdle(Clock::now() + 2h);
  ASSERT_TRUE(persister_a->WaitIdle(Clock::now() + 10s));
  EXPECT_FALSE(stored());
  EXPECT_EQ(replica_a.Find(id), nullptr);
}

// Detach's callback runs once the session's snapshot is on disk (a stream ends only then, so
// that a Resume on another replica reads what this one left), and without a snapshot directory
// at once.
TEST(SessionRegistryTest, DetachTellsWhenTheSnapshotIsWritten) {
  const std::string dir = TempDir();
  auto e = MakeEngine();
  auto persister = MakePersister(e, dir);
  SessionRegistry registry(*e.engine, Timeouts(1h, 1h), persister.get());
  auto owner = std::make_shared<FakeOwner>();
  auto s = registry.Open(Small(), owner);
  ASSERT_TRUE(s.ok());
  const SessionId id = (*s)->id;
  ASSERT_TRUE(e.engine->Append(id, Bytes(30, 1)).ok());
  std::promise<int64_t> stored;  // tokens in the snapshot when the callback runs
  registry.Detach(*s, [&] {
    auto summary = persister->Summary(id);
    stored.set_value(summary.ok() ? summary->tokens_seen + summary->pending_tokens : -1);
  });
  auto f = stored.get_future();
  ASSERT_EQ(f.wait_for(30s), std::future_status::ready);
  EXPECT_EQ(f.get(), 30);

  auto plain = MakeEngine();
  SessionRegistry memory_only(*plain.engine, Timeouts(1h, 1h));
  auto m = memory_only.Open(Small(), owner);
  ASSERT_TRUE(m.ok());
  bool told = false;
  memory_only.Detach(*m, [&] { told = true; });
  EXPECT_TRUE(told);
}

// A session's snapshot imported right after the session was closed: the closed session's file
// is still waiting for the writer thread to remove it, which must neither refuse the import
// (ALREADY_EXISTS) nor delete the imported file afterwards. Repeated, since the removal races
// the import.
TEST(SessionRegistryTest, ASnapshotCanBeImportedRightAfterItsSessionClosed) {
  const std::string dir = TempDir();
  auto e = MakeEngine();
  auto persister = MakePersister(e, dir);
  SessionRegistry registry(*e.engine, Timeouts(1h, 1h), persister.get());
  auto owner = std::make_shared<FakeOwner>();
  for (int round = 0; round < 20; ++round) {
    auto s = registry.Open(Small(), owner);
    ASSERT_TRUE(s.ok());
    const SessionId id = (*s)->id;
    ASSERT_TRUE(e.engine->Append(id, Bytes(20, round)).ok());
    auto bytes = persister->Export(id);  // written to the store too
    ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
    ASSERT_TRUE(registry.Close(id, CancelledError("closed")).ok());
    auto imported = persister->Import(*bytes);
    ASSERT_TRUE(imported.ok()) << "round " << round << ": " << imported.status().ToString();
    ASSERT_TRUE(persister->WaitIdle(Clock::now() + 10s));
    EXPECT_TRUE(persister->store().ModifiedUnixMs(id).ok())
        << "round " << round << ": the imported file was removed";
    EXPECT_EQ(e.engine->Get(id)->tokens_seen, 20);
    ASSERT_TRUE(e.engine->Close(id).ok());
    persister->Forget(id);
  }
}

// The chat state travels with the snapshot, set in the same step as the tokens it describes;
// a snapshot taken after the model closed its turn but before the server saved that (the
// turn's end-of-generation token is the context's last) restores the turn as closed.
TEST(SessionRegistryTest, RestoredSessionsKnowWhereTheChatTurnIs) {
  const std::string dir = TempDir();
  std::vector<SessionId> ids;
  {
    auto e = MakeEngine();
    auto persister = MakePersister(e, dir);
    SessionRegistry registry(*e.engine, Timeouts(1h, 1h), persister.get());
    auto owner = std::make_shared<FakeOwner>();
    for (int i = 0; i < 3; ++i) {
      auto s = registry.Open(Small(), owner);
      ASSERT_TRUE(s.ok());
      ids.push_back((*s)->id);
      // A user turn and the assistant header: the assistant's turn is open. The third: a system
      // message folded into the user turn to come (Gemma), which stays open across a restart.
      const ChatState chat = i < 2 ? ChatState::kAssistantOpen : ChatState::kSystemOpen;
      ASSERT_TRUE(e.engine->Append((*s)->id, Bytes(12, i), ChatMetadata(chat, true)).ok());
    }
    ASSERT_TRUE(e.engine->tokenizer().IsEndOfGeneration(kSyntheticImEnd));
    // The second session's turn ended with <|im_end|>; its chat state was not saved yet.
    ASSERT_TRUE(e.engine->Append(ids[1], std::vector<int32_t>{kSyntheticImEnd}).ok());
    for (SessionId id : ids) registry.Detach(registry.Find(id));
    ASSERT_TRUE(registry.PersistAll(Clock::now() + 10s));
  }
  auto e = MakeEngine();
  auto persister = MakePersister(e, dir);
  SessionRegistry registry(*e.engine, Timeouts(1h, 1h), persister.get());
  EXPECT_EQ(registry.RestoreFromStore(false), 3);
  auto owner = std::make_shared<FakeOwner>();
  const ChatState want[] = {ChatState::kAssistantOpen, ChatState::kAssistantClosed,
                            ChatState::kSystemOpen};
  for (int i = 0; i < 3; ++i) {
    auto s = AttachNow(registry, ids[i], owner);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    std::lock_guard<std::mutex> lock((*s)->mu);
    EXPECT_EQ((*s)->chat, want[i]) << "session " << i;
    EXPECT_TRUE((*s)->has_input);
  }
}

// The goal of idle offload: a pool sized for 64 active sessions holds 10,000 sessions, the
// rest offloaded to disk (each Open that does not fit offloads the least recently detached),
// and any of them resumes with its context intact.
TEST(SessionRegistryTest, TenThousandSessionsWithAPoolForSixtyFour) {
  const int32_t bound = SessionCache::BoundBlocks({CacheMode::kSink, 4, 32, 32}, 16);
  const int64_t block = BlockPool::BlockBytes({2, 2, 16}, 16);
  auto e = MakeEngine(block * (64 * bound + DefaultPrefillHeadroom({64, 16}, 32, 16)));
  // tmpfs when there is one: 10,000 fsyncs on a disk would take minutes, and the point here is
  // the bookkeeping, not the disk.
  std::string dir = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  char tmpl[64];
  std::snprintf(tmpl, sizeof(tmpl), "%s/streamd-10k-XXXXXX", dir.c_str());
  dir = ::mkdtemp(tmpl);
  auto persister = MakePersister(e, dir);
  SessionRegistry registry(*e.engine, Timeouts(1h, 1h), persister.get());
  auto owner = std::make_shared<FakeOwner>();
  constexpr int kSessions = 10000;
  std::vector<SessionId> ids;
  for (int i = 0; i < kSessions; ++i) {
    auto s = registry.Open(Small(), owner);
    ASSERT_TRUE(s.ok()) << "session " << i << ": " << s.status().ToString();
    ASSERT_TRUE(e.engine->Append((*s)->id, Bytes(20, i)).ok());
    registry.Detach(*s);
    ids.push_back((*s)->id);
  }
  EXPECT_EQ(registry.All().size(), static_cast<size_t>(kSessions));
  EXPECT_LE(e.engine->Stats().sessions, 64);
  int offloaded = 0;
  for (const auto& s : registry.All()) {
    std::lock_guard<std::mutex> lock(s->mu);
    offloaded += s->residency == Residency::kOffloaded;
  }
  EXPECT_GE(offloaded, kSessions - 64);
  std::mt19937 rng(7);
  for (int k = 0; k < 40; ++k) {
    const size_t i = rng() % ids.size();
    auto s = AttachNow(registry, ids[i], owner);
    ASSERT_TRUE(s.ok()) << "session " << i << ": " << s.status().ToString();
    EXPECT_EQ(e.engine->Get(ids[i])->tokens_seen, 20);
    registry.Detach(*s);
  }
  ASSERT_TRUE(persister->WaitIdle(Clock::now() + 60s));
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

}  // namespace
}  // namespace streamd
