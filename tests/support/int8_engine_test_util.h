// Helpers of the int8 KV cache engine tests: an engine of the tiny synthetic model (the same
// weights every time, engine_test_util.h's TinyModel) with an int8 or f16 cache, scales
// calibrated on its own K/V, and the snapshot context of such an engine.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "engine/cache/kv_scales.h"
#include "engine/snapshot/snapshot_format.h"
#include "kernels/cpu/quant_blocks.h"
#include "tests/support/engine_test_util.h"

namespace streamd::testing {

// An engine of the tiny synthetic model whose cache is int8 with `scales` (null: f16).
inline std::unique_ptr<Engine> MakeCacheEngine(std::shared_ptr<const KvInt8Scales> scales,
                                               int64_t pool_bytes = 32 << 20) {
  auto model = MakeSyntheticModel(TinyModel());
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_TRUE((*model)->SetInt8KvCache(std::move(scales)).ok());
  auto vocab = tokenizer::Tokenizer::FromGguf((*model)->file());
  EXPECT_TRUE(vocab.ok());
  EngineConfig config;
  config.pool_bytes = pool_bytes;
  config.max_chunk = 64;
  config.threads = 2;
  config.planner = {128, 64};
  auto engine = Engine::Create(std::move(model).value(), std::move(vocab).value(), config);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  return std::move(engine).value();
}

// Scales that hold `image`'s values (each channel's largest magnitude / 127) times `widen`.
inline std::shared_ptr<const KvInt8Scales> ScalesFor(const KvImage& image, float widen) {
  const size_t per = static_cast<size_t>(image.n_kv_heads) * image.head_dim;
  std::vector<float> k(image.n_layers * per, 1e-3f), v(k.size(), 1e-3f);
  for (int32_t l = 0; l < image.n_layers; ++l) {
    for (int32_t kv = 0; kv < 2; ++kv) {
      for (int32_t h = 0; h < image.n_kv_heads; ++h) {
        for (int64_t t = 0; t < image.n_tokens; ++t) {
          for (int32_t c = 0; c < image.head_dim; ++c) {
            const float x = kernels::HalfToFloat(image.data[image.Offset(l, kv, h, t) + c]);
            float& s = (kv == 0 ? k : v)[l * per + h * image.head_dim + c];
            s = std::max(s, widen * std::fabs(x) / 127);
          }
        }
      }
    }
  }
  auto scales = KvInt8Scales::Make(image.n_layers, image.n_kv_heads, image.head_dim, k, v);
  EXPECT_TRUE(scales.ok()) << scales.status().ToString();
  return *scales;
}

inline SnapshotContext ContextOf(const Engine& engine) {
  const LlamaConfig& c = engine.model().config();
  SnapshotContext ctx;
  ctx.model_fingerprint = "tiny";
  ctx.model_name = "tiny";
  ctx.n_layers = c.n_layers;
  ctx.n_kv_heads = c.n_kv_heads;
  ctx.head_dim = c.head_dim;
  ctx.block_size = engine.config().block_size;
  ctx.streamd_version = "test";
  return ctx;
}

// Scales calibrated on an f16 session of the same model (ScalesFor its K/V).
inline std::shared_ptr<const KvInt8Scales> CalibratedScales(float widen) {
  auto f16 = MakeCacheEngine(nullptr);
  auto id = f16->Open(Greedy());
  EXPECT_TRUE(id.ok());
  EXPECT_TRUE(f16->Append(*id, RandomTokens(200, 3)).ok());
  Collector events;
  GenerateN(*f16, events, *id, 2);
  auto state = f16->Capture(*id);
  EXPECT_TRUE(state.ok());
  return ScalesFor(state->kv, widen);
}

}  // namespace streamd::testing
