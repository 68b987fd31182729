// Checks that Sample() allocates only on its first call, by counting global operator new.
//
// Replacing operator new affects the whole test binary; it only counts and forwards to malloc,
// so the other tests are unaffected.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <random>
#include <vector>

#include "engine/sampling/sampler.h"

namespace {
std::atomic<long> g_allocations{0};
}  // namespace

// GCC inlines these into std::allocator and then flags free() on memory from operator new,
// although this operator new got it from malloc: a known false positive for replacements.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
// The nothrow forms too (std::stable_sort's temporary buffer uses them): the standard's
// default forwards them to the operator new above, but ASan replaces them with its own, whose
// memory then reached the free() below (ASan: alloc-dealloc-mismatch).
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(size == 0 ? 1 : size);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace streamd {
namespace {

TEST(SamplerAllocTest, NoAllocationAfterTheFirstCall) {
  constexpr int32_t kVocab = 49152;
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  std::vector<float> logits(kVocab);
  struct Case {
    int32_t top_k;
    float top_p;
    float min_p;
    float presence;
  };
  for (const Case& c : {Case{40, 0.95f, 0.05f, 0.0f}, Case{0, 0.9f, 0.0f, 0.5f},
                        Case{0, 1.0f, 0.0f, 0.0f}, Case{1000, 0.99f, 0.01f, 0.2f}}) {
    SamplingParams params;
    params.top_k = c.top_k;
    params.top_p = c.top_p;
    params.min_p = c.min_p;
    params.presence_penalty = c.presence;
    params.penalty_last_n = 16;
    params.seed = 9;
    Sampler sampler(params, kVocab);
    for (float& l : logits) l = dist(rng);
    sampler.Accept(sampler.Sample(logits));
    const long before = g_allocations.load();
    for (int step = 0; step < 40; ++step) {
      for (float& l : logits) l = dist(rng);
      sampler.Accept(sampler.Sample(logits));
    }
    // Accept() reserves windows up to 1024 tokens on its first call, so neither allocates.
    EXPECT_EQ(g_allocations.load() - before, 0) << "top_k " << c.top_k;
  }
}

}  // namespace
}  // namespace streamd
