// An engine on a model with local layers (Gemma 3's native sliding window) keeps their K/V in a
// pool of their own (EngineConfig::local_layer_caches, KvPools): its sessions generate the same
// tokens as an engine that keeps every layer in one pool, its states restore into such an
// engine and back, and the same budget admits more sessions.
#include <gtest/gtest.h>

#include <random>

#include "tests/support/engine_test_util.h"

namespace streamd {
namespace {

using namespace streamd::testing;

const int32_t kSpan = SmallGemma3Shape().sliding_window;

SyntheticModelSpec GemmaWithVocab(uint64_t seed) {
  SyntheticModelSpec spec = SmallGemma3Shape();  // six local layers, one global
  spec.with_vocab = TinyModel().with_vocab;
  spec.vocab_size = TinyModel().vocab_size;
  spec.seed = seed;
  return spec;
}

std::unique_ptr<Engine> GemmaEngine(uint64_t seed, bool local_layer_caches,
                                    int64_t pool_bytes = 16 << 20, int32_t default_window = 1020) {
  auto model = MakeSyntheticModel(GemmaWithVocab(seed));
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  auto vocab = tokenizer::Tokenizer::FromGguf((*model)->file());
  EXPECT_TRUE(vocab.ok()) << vocab.status().ToString();
  EngineConfig config;
  config.pool_bytes = pool_bytes;
  config.max_chunk = 64;
  config.threads = 2;
  config.planner = {128, 64};
  config.local_layer_caches = local_layer_caches;
  config.default_window = default_window;
  auto engine = Engine::Create(std::move(model).value(), std::move(vocab).value(), config);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  return std::move(engine).value();
}

TEST(EngineLocalLayersTest, SessionsGenerateWhatOnePoolGenerates) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  auto split = GemmaEngine(seed, true);
  auto shared = GemmaEngine(seed, false);
  EXPECT_GT(split->Stats().local_blocks_total, 0);
  EXPECT_EQ(shared->Stats().local_blocks_total, 0);
  // Three sessions at once (so steps batch them), windows past, at and under the span.
  Collector split_events, shared_events;
  std::vector<SessionId> split_ids, shared_ids;
  for (int32_t window : {40, kSpan, 9}) {
    auto a = split->Open(Greedy(window));
    auto b = shared->Open(Greedy(window));
    ASSERT_TRUE(a.ok() && b.ok());
    split_ids.push_back(*a);
    shared_ids.push_back(*b);
    const std::vector<int32_t> prompt = RandomTokens(150 + window, seed + window);
    ASSERT_TRUE(split->Append(*a, prompt).ok());
    ASSERT_TRUE(shared->Append(*b, prompt).ok());
  }
  const EngineStats st = split->Stats();
  EXPECT_GT(st.local_blocks_reserved, 0);
  EXPECT_LT(st.local_blocks_reserved, shared->Stats().blocks_reserved);
  for (size_t i = 0; i < split_ids.size(); ++i) {
    ASSERT_TRUE(split->Generate(split_ids[i], UpTo(30), split_events.Sink()).ok());
    ASSERT_TRUE(shared->Generate(shared_ids[i], UpTo(30), shared_events.Sink()).ok());
  }
  for (size_t i = 0; i < split_ids.size(); ++i) {
    split_events.WaitDone(split_ids[i]);
    shared_events.WaitDone(shared_ids[i]);
    EXPECT_EQ(split_events.Tokens(split_ids[i]), shared_events.Tokens(shared_ids[i]))
        << "session " << i;
  }
}

TEST(EngineLocalLayersTest, StatesMoveBetweenOnePoolAndTwo) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  auto split = GemmaEngine(seed, true);
  auto shared = GemmaEngine(seed, false);
  Collector events;
  auto id = split->Open(Greedy(40));
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(split->Append(*id, RandomTokens(200, seed)).ok());
  GenerateN(*split, events, *id, 10);
  // Split -> shared: the image carries every layer (the local layers' evicted rows as zeros).
  auto state = split->Capture(*id);
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  EXPECT_EQ(state->kv.n_layers, 7);
  ASSERT_TRUE(shared->Restore(*state).ok());
  EXPECT_EQ(GenerateN(*split, events, *id, 20), GenerateN(*shared, events, *id, 20));
  // Shared -> a second split engine, fork there, and carry on: still the same tokens.
  auto back = GemmaEngine(seed, true);
  auto again = shared->Capture(*id);
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE(back->Restore(*again).ok());
  auto fork = back->Fork(*id);
  ASSERT_TRUE(fork.ok()) << fork.status().ToString();
  const std::vector<int32_t> input = RandomTokens(30, seed + 1);
  ASSERT_TRUE(shared->Append(*id, input).ok());
  ASSERT_TRUE(back->Append(*fork, input).ok());
  EXPECT_EQ(GenerateN(*shared, events, *id, 20), GenerateN(*back, events, *fork, 20));
}

TEST(EngineLocalLayersTest, OnePoolWhenTheDefaultWindowIsUnderTheSpan) {
  // Such sessions' local layers would keep all they keep in one pool: a second pool would only
  // split the budget (KvPools::Create).
  EXPECT_EQ(GemmaEngine(1, true, 16 << 20, kSpan - 1)->Stats().local_blocks_total, 0);
  EXPECT_GT(GemmaEngine(1, true, 16 << 20, kSpan + 20)->Stats().local_blocks_total, 0);
}

TEST(EngineLocalLayersTest, TheSameBudgetAdmitsMoreSessions) {
  const uint64_t seed = std::random_device{}();
  int admitted[2] = {0, 0};
  for (bool local : {false, true}) {
    auto engine = GemmaEngine(seed, local, 4 << 20);
    // Sessions of the default shape (4 + 1020), each far past the span of 13.
    SessionOptions options;
    while (engine->Open(options).ok()) ++admitted[local];
    auto refused = engine->Open(options);
    EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
    EXPECT_NE(refused.status().message().find("reserved by open sessions"), std::string::npos)
        << refused.status().message();
  }
  std::printf(
      "sessions of 4 + 1020 in a 4 MiB pool: %d in one pool, %d with the local layers "
      "apart\n",
      admitted[0], admitted[1]);
  // Six of seven layers keep 13 positions instead of 1024: about 5x the sessions.
  EXPECT_GE(admitted[1], 4 * admitted[0]);
}

}  // namespace
}  // namespace streamd
