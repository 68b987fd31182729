// Helpers of the SessionRegistry tests: a small synthetic engine (the same model every time, so
// that a "restart" gets an identical one), a persister over a temporary snapshot directory, an
// owner that records what it is told, and Attach waited for.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "engine/backends/cpu/synthetic_model.h"
#include "engine/sessions/session_registry.h"
#include "engine/snapshot/model_fingerprint.h"

namespace streamd::registry_testing {

using namespace std::chrono_literals;

struct TestEngine {
  std::unique_ptr<Engine> engine;
  SnapshotContext context;
};

// The same synthetic model every time (same seed): a "restart" gets an identical model.
inline TestEngine MakeEngine(int64_t pool_bytes = 16 << 20) {
  SyntheticModelSpec spec;
  spec.with_vocab = true;
  spec.vocab_size = 300;
  auto model = MakeSyntheticModel(spec);
  EXPECT_TRUE(model.ok());
  TestEngine out;
  out.context.model_fingerprint = ModelFingerprint((*model)->file());
  out.context.model_name = "synthetic";
  out.context.n_layers = (*model)->config().n_layers;
  out.context.n_kv_heads = (*model)->config().n_kv_heads;
  out.context.head_dim = (*model)->config().head_dim;
  out.context.block_size = 16;
  out.context.streamd_version = "test";
  auto vocab = tokenizer::Tokenizer::FromGguf((*model)->file());
  EXPECT_TRUE(vocab.ok());
  EngineConfig config;
  config.pool_bytes = pool_bytes;
  config.max_chunk = 32;
  config.threads = 1;
  config.planner = {64, 16};
  auto engine = Engine::Create(std::move(model).value(), std::move(vocab).value(), config);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  out.engine = std::move(engine).value();
  return out;
}

inline std::unique_ptr<SessionPersister> MakePersister(TestEngine& e, const std::string& dir,
                                                       int* rejected = nullptr) {
  auto store = SnapshotStore::Open(dir);
  EXPECT_TRUE(store.ok());
  PersisterHooks hooks;
  if (rejected != nullptr) {
    hooks.on_rejected = [rejected](const std::string&, const std::string&, const Status&) {
      ++*rejected;
    };
  }
  return std::make_unique<SessionPersister>(*e.engine, std::move(store).value(), e.context,
                                            PersisterOptions{10ms, 10ms}, hooks);
}

inline std::string TempDir() {
  char tmpl[] = "/tmp/streamd-registry-XXXXXX";
  return ::mkdtemp(tmpl);
}

struct FakeOwner : SessionOwner {
  void OnSessionClosed(SessionId id, const Status& why) override {
    closed_id = id;
    reason = why.message();
  }
  SessionId closed_id;
  std::string reason;
};

inline SessionOptions Small() {
  SessionOptions o;
  o.window = 32;
  o.sampling.temperature = 0.0f;
  return o;
}

inline RegistryOptions Timeouts(std::chrono::milliseconds idle, std::chrono::milliseconds offload) {
  RegistryOptions o;
  o.idle_timeout = idle;
  o.offload_after = offload;
  o.resume_wait = 10s;
  return o;
}

// Attach, waiting for the answer (it may come from the loader thread).
inline StatusOr<std::shared_ptr<SessionRecord>> AttachNow(SessionRegistry& registry, SessionId id,
                                                          std::shared_ptr<SessionOwner> owner) {
  std::promise<StatusOr<std::shared_ptr<SessionRecord>>> answer;
  registry.Attach(id, owner, [&](StatusOr<std::shared_ptr<SessionRecord>> s) {
    answer.set_value(std::move(s));
  });
  auto f = answer.get_future();
  EXPECT_EQ(f.wait_for(30s), std::future_status::ready);
  return f.get();
}

inline std::vector<int32_t> Bytes(size_t n, uint64_t seed) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((seed * 31 + i * 7) % 256);
  return t;
}

}  // namespace streamd::registry_testing
