// An int8 KV cache's session moving to the CUDA backend, whose pools are f16: the K/V image of
// a CPU int8 pool (int8 values and their scales, as a snapshot holds them) goes into a CUDA pool
// dequantized with those scales, through the snapshot format, and lands where the kernels read
// it; the CUDA cache then decodes as a CPU f16 cache holding the same dequantized K/V does
// (within the backends' agreement, as in cuda_snapshot_test.cc). Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <span>
#include <vector>

#include "engine/backends/cpu/synthetic_model.h"
#include "engine/backends/cuda/cuda_model.h"
#include "engine/cache/kv_convert.h"
#include "engine/cache/kv_image.h"
#include "engine/core/step_runner.h"
#include "engine/snapshot/snapshot_format.h"
#include "tests/support/cuda_model_test_util.h"
#include "tests/support/cuda_test_util.h"
#include "tests/support/int8_engine_test_util.h"

namespace streamd::cuda {
namespace {

TEST(CudaInt8SnapshotTest, Int8ImagesGoIntoCudaPoolsDequantizedWithTheirScales) {
  STREAMD_SKIP_WITHOUT_CUDA_DEVICE();
  SyntheticModelSpec spec;
  spec.n_layers = 4;
  spec.dim = 256;
  spec.n_heads = 4;  // head_dim 64
  spec.n_kv_heads = 2;
  spec.ffn_dim = 512;
  spec.vocab_size = 1000;
  auto cpu = MakeSyntheticModel(spec);
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  (*cpu)->set_threads(2);
  auto gpu = CudaModel::FromCpuModel(**cpu);
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  const LlamaConfig& c = (*cpu)->config();
  const KvShape f16{c.n_layers, c.n_kv_heads, c.head_dim};
  const CacheSpec cs = SessionCache::Effective({CacheMode::kSink, 4, 37, 64}, c.context_length);
  const auto budget = [&](const KvShape& shape, int32_t b) {
    return (SessionCache::PeakBlocks(cs, b) + 4) * BlockPool::BlockBytes(shape, b);
  };
  std::mt19937 rng(7);
  const std::vector<int32_t> prompt = RandomTokens(rng, 150, c.vocab_size);

  // Scales from the f16 K/V of the prompt, then the same prompt through an int8 CPU pool.
  auto cpu_f16 = (*cpu)->CreatePool(f16, 16, budget(f16, 16));
  ASSERT_TRUE(cpu_f16.ok());
  auto calibration = SessionCache::Create(cpu_f16->get(), cs, c.context_length);
  ASSERT_TRUE(calibration.ok());
  Prefill(**cpu, **calibration, prompt);
  if (HasFatalFailure()) return;
  auto f16_image = ReadCacheKv(**calibration);
  ASSERT_TRUE(f16_image.ok());
  const KvShape i8{c.n_layers, c.n_kv_heads, c.head_dim, kernels::KvDtype::kInt8,
                   streamd::testing::ScalesFor(*f16_image, 1.2f)};
  auto cpu_i8 = (*cpu)->CreatePool(i8, 16, budget(i8, 16));
  ASSERT_TRUE(cpu_i8.ok()) << cpu_i8.status().ToString();
  auto source = SessionCache::Create(cpu_i8->get(), cs, c.context_length);
  ASSERT_TRUE(source.ok());
  Prefill(**cpu, **source, prompt);
  if (HasFatalFailure()) return;
  auto image = ReadCacheKv(**source);
  ASSERT_TRUE(image.ok());
  ASSERT_EQ(image->dtype, kernels::KvDtype::kInt8);

  // Through the snapshot format (K/V in place), into a CUDA pool of another block size.
  SessionState st;
  st.id = SessionId::Random();
  st.mode = cs.mode;
  st.sinks = cs.sinks;
  st.window = cs.window;
  st.tokens_seen = (*source)->tokens_seen();
  st.cached_tokens = (*source)->cached_ids();
  st.kv = *image;
  SnapshotContext ctx;
  ctx.model_fingerprint = "synthetic";
  ctx.n_layers = c.n_layers;
  ctx.n_kv_heads = c.n_kv_heads;
  ctx.head_dim = c.head_dim;
  ctx.block_size = 16;
  const std::vector<uint8_t> bytes = EncodeSnapshot(st, ctx);
  KvView view;
  auto decoded = DecodeSnapshot(bytes, ctx, &view);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  auto gpu_pool = (*gpu)->CreatePool(f16, 7, budget(f16, 7));
  ASSERT_TRUE(gpu_pool.ok()) << gpu_pool.status().ToString();
  for (int i = 0; i < 3; ++i) (void)(*gpu_pool)->Allocate();  // other block numbers
  auto on_gpu = SessionCache::Create(gpu_pool->get(), cs, c.context_length);
  ASSERT_TRUE(on_gpu.ok());
  ASSERT_TRUE((*on_gpu)->Restore(st.tokens_seen, st.cached_tokens).ok());
  const Status written = WriteCacheKv(**on_gpu, view);
  ASSERT_TRUE(written.ok()) << written.ToString();
  auto dequantized = DequantizedKv(*image);
  ASSERT_TRUE(dequantized.ok());
  auto from_gpu = ReadCacheKv(**on_gpu);
  ASSERT_TRUE(from_gpu.ok()) << from_gpu.status().ToString();
  EXPECT_TRUE(*from_gpu == *dequantized) << "the CUDA pool does not hold the dequantized K/V";

  // A CPU f16 cache of the same dequantized K/V: the reference for the CUDA decode.
  auto reference = SessionCache::Create(cpu_f16->get(), cs, c.context_length);
  ASSERT_TRUE(reference.ok());
  calibration->reset();  // its blocks back to the pool first
  ASSERT_TRUE((*reference)->Restore(st.tokens_seen, st.cached_tokens).ok());
  ASSERT_TRUE(WriteCacheKv(**reference, *dequantized).ok());
  const size_t vocab = static_cast<size_t>(c.vocab_size);
  std::vector<float> want(vocab), got(vocab, NAN);
  for (int32_t step = 0; step < 3; ++step) {
    const std::vector<int32_t> next = RandomTokens(rng, 1, c.vocab_size);
    ASSERT_TRUE(StepRunner(**cpu).Run(next, **reference, LogitsMode::kLast, want.data()).ok());
    ASSERT_TRUE(StepRunner(**gpu).Run(next, **on_gpu, LogitsMode::kLast, got.data()).ok());
    EXPECT_LT(RelativeL2(got.data(), want.data(), c.vocab_size), 1e-2) << "step " << step;
  }
}

}  // namespace
}  // namespace streamd::cuda
