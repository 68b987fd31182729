// Helpers for the snapshot tests and the fuzzer (tests/fuzz/snapshot_fuzz.cc): random valid
// states, and byte surgery on encoded snapshots. Not for the daemon: nothing here checks
// anything.
#pragma once

#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "engine/snapshot/session_state.h"
#include "engine/snapshot/snapshot_format.h"
#include "engine/snapshot/snapshot_layout.h"

namespace streamd::snapshot_testing {

// Recomputes the header's checksum and every section's, in place, as far as the sections'
// lengths can be followed: crafted bytes then reach the checks behind the checksums.
inline void RewriteChecksums(std::span<uint8_t> b) {
  namespace L = snapshot_layout;
  if (b.size() < L::kHeaderSize) return;
  const uint64_t header = XXH3_64bits(b.data(), L::kHeaderChecksummed);
  std::memcpy(b.data() + L::kHeaderChecksumOffset, &header, sizeof(header));
  size_t pos = L::kHeaderSize;
  while (b.size() - pos >= L::kSectionHeaderSize) {
    uint64_t length = 0;
    std::memcpy(&length, b.data() + pos + L::kSectionLengthOffset, sizeof(length));
    const size_t start = pos + L::kSectionHeaderSize;
    if (length > b.size() - start) return;
    const uint64_t sum = XXH3_64bits(b.data() + start, length);
    std::memcpy(b.data() + pos + L::kSectionChecksumOffset, &sum, sizeof(sum));
    const uint64_t next = start + L::PaddedLength(length);
    if (next > b.size()) return;
    pos = next;
  }
}

struct SectionSpan {
  uint32_t tag = 0;
  size_t header = 0;   // offset of its header
  size_t payload = 0;  // offset of its payload
  size_t length = 0;   // payload bytes (padding not counted)
  size_t end = 0;      // offset after its padding
};

// The sections of a well-formed snapshot, in file order.
inline std::vector<SectionSpan> Sections(std::span<const uint8_t> b) {
  namespace L = snapshot_layout;
  std::vector<SectionSpan> out;
  size_t pos = L::kHeaderSize;
  while (b.size() >= pos + L::kSectionHeaderSize) {
    SectionSpan s;
    std::memcpy(&s.tag, b.data() + pos, sizeof(s.tag));
    uint64_t length = 0;
    std::memcpy(&length, b.data() + pos + L::kSectionLengthOffset, sizeof(length));
    s.header = pos;
    s.payload = pos + L::kSectionHeaderSize;
    if (length > b.size() - s.payload) break;
    s.length = static_cast<size_t>(length);
    s.end = s.payload + static_cast<size_t>(L::PaddedLength(length));
    if (s.end > b.size()) break;
    out.push_back(s);
    pos = s.end;
  }
  return out;
}

// `bytes` with one more section, carrying `tag` and `payload`, just before END (which a
// well-formed snapshot ends with): what a later writer's optional section looks like.
inline std::vector<uint8_t> InsertSectionBeforeEnd(std::span<const uint8_t> bytes, uint32_t tag,
                                                   std::span<const uint8_t> payload) {
  namespace L = snapshot_layout;
  const size_t end = bytes.size() - L::kSectionHeaderSize;
  std::vector<uint8_t> out(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(end));
  auto put = [&](const void* p, size_t n) {
    out.insert(out.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
  };
  const uint32_t reserved = 0;
  const uint64_t length = payload.size();
  const uint64_t sum = XXH3_64bits(payload.data(), payload.size());
  put(&tag, sizeof(tag));
  put(&reserved, sizeof(reserved));
  put(&length, sizeof(length));
  put(&sum, sizeof(sum));
  put(payload.data(), payload.size());
  out.resize(L::PaddedLength(out.size()), 0);
  out.insert(out.end(), bytes.begin() + static_cast<ptrdiff_t>(end), bytes.end());
  return out;
}

// Bytes of a random UTF-8 string of up to max_chars characters (ASCII, 2- and 3-byte ones).
inline std::string RandomUtf8(std::mt19937_64& rng, size_t max_chars) {
  std::string s;
  const size_t n = std::uniform_int_distribution<size_t>(0, max_chars)(rng);
  for (size_t i = 0; i < n; ++i) {
    switch (rng() % 4) {
      case 0:
        s += "\xc3\xa9";  // U+00E9
        break;
      case 1:
        s += "\xe2\x82\xac";  // U+20AC
        break;
      default:
        s += static_cast<char>('a' + rng() % 26);
    }
  }
  return s;
}

// Any bytes at all, NUL and 0xff included.
inline std::string RandomBytes(std::mt19937_64& rng, size_t min_len, size_t max_len) {
  std::string s(std::uniform_int_distribution<size_t>(min_len, max_len)(rng), '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

inline SamplingParams RandomSampling(std::mt19937_64& rng) {
  auto real = [&](float lo, float hi) {
    return std::uniform_real_distribution<float>(lo, hi)(rng);
  };
  SamplingParams p;
  p.temperature = rng() % 4 == 0 ? 0.0f : real(0.0f, 2.0f);
  p.top_k = static_cast<int32_t>(rng() % 101);
  p.top_p = rng() % 3 == 0 ? 1.0f : real(0.05f, 1.0f);
  p.min_p = real(0.0f, 1.0f);
  p.repetition_penalty = real(0.5f, 2.0f);
  p.presence_penalty = real(-2.0f, 2.0f);
  p.frequency_penalty = real(-2.0f, 2.0f);
  p.penalty_last_n = static_cast<int32_t>(rng() % 257);
  p.seed = rng();
  return p;
}

// Cached tokens for these settings (session_state.h: the keys the next query reads).
inline int64_t HeldTokens(int64_t tokens_seen, int32_t sinks, int32_t window, CacheMode mode) {
  return CachedSpanOf({mode, sinks, window, 1}, tokens_seen).size();
}

// A valid state of the given mode and the context's K/V layout. max_window bounds its size.
inline SessionState RandomState(std::mt19937_64& rng, const SnapshotContext& context,
                                CacheMode mode, int32_t max_window = 40) {
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  SessionState s;
  do {
    s.id = SessionId{rng(), rng()};
  } while (!s.id.valid());
  s.tenant = rng() % 3 == 0 ? "" : RandomUtf8(rng, 12);
  s.mode = mode;
  s.sinks = mode == CacheMode::kSink ? static_cast<int32_t>(pick(0, 8)) : 0;
  s.window = static_cast<int32_t>(pick(1, max_window));
  s.sampling = RandomSampling(rng);
  const int64_t full = int64_t{s.sinks} + s.window;
  if (mode == CacheMode::kDense) {
    s.tokens_seen = pick(0, s.window);
  } else {
    switch (rng() % 4) {
      case 0:
        s.tokens_seen = pick(0, s.sinks);
        break;
      case 1:
        s.tokens_seen = pick(0, full);
        break;
      case 2:
        s.tokens_seen = pick(full, full + 3);
        break;
      default:
        s.tokens_seen = pick(full, int64_t{1} << 40);  // long after eviction began
    }
  }
  const int64_t n = HeldTokens(s.tokens_seen, s.sinks, s.window, s.mode);
  for (int64_t i = 0; i < n; ++i) s.cached_tokens.push_back(static_cast<int32_t>(pick(0, 49151)));
  const int64_t n_pending = rng() % 3 == 0 ? 0 : pick(1, 5);
  for (int64_t i = 0; i < n_pending; ++i) s.pending.push_back(static_cast<int32_t>(pick(0, 49151)));
  s.kv.n_layers = context.n_layers;
  s.kv.n_kv_heads = context.n_kv_heads;
  s.kv.head_dim = context.head_dim;
  s.kv.n_tokens = n;
  s.kv.data.resize(static_cast<size_t>(s.kv.elements()));
  for (uint16_t& h : s.kv.data) h = static_cast<uint16_t>(rng());  // any bits: NaNs too
  const int64_t n_metadata = pick(0, 6);
  for (int64_t i = 0; i < n_metadata; ++i) {
    s.metadata[RandomBytes(rng, 1, 12)] = RandomBytes(rng, 0, 40);
  }
  s.revision = rng();
  s.created_unix_ms = pick(0, int64_t{2} << 40);
  s.saved_unix_ms = s.created_unix_ms + pick(0, 1000000);
  return s;
}

// Scales of the context's K/V shape: random finite values in [1e-3, 1).
inline std::shared_ptr<const KvInt8Scales> RandomScales(std::mt19937_64& rng,
                                                        const SnapshotContext& context) {
  const size_t n = static_cast<size_t>(context.n_layers) * context.n_kv_heads * context.head_dim;
  std::uniform_real_distribution<float> u(1e-3f, 1.0f);
  std::vector<float> k(n), v(n);
  for (float& x : k) x = u(rng);
  for (float& x : v) x = u(rng);
  auto scales = KvInt8Scales::Make(context.n_layers, context.n_kv_heads, context.head_dim,
                                   std::move(k), std::move(v));
  return scales.ok() ? *scales : nullptr;
}

// `s` as the session of an int8 KV cache: its K/V become random int8 values (any of the 256)
// with random scales, in the same dimensions.
inline void MakeInt8(std::mt19937_64& rng, const SnapshotContext& context, SessionState* s) {
  s->kv.dtype = kernels::KvDtype::kInt8;
  s->kv.data.clear();
  s->kv.data_i8.resize(static_cast<size_t>(s->kv.elements()));
  for (int8_t& q : s->kv.data_i8) q = static_cast<int8_t>(rng());
  s->kv.scales = RandomScales(rng, context);
}

// A small state with something in every section.
inline SessionState SmallState(std::mt19937_64& rng, const SnapshotContext& ctx) {
  SessionState s = RandomState(rng, ctx, CacheMode::kSink, 12);
  s.tokens_seen = 5000;
  const int64_t n = HeldTokens(s.tokens_seen, s.sinks, s.window, s.mode);
  s.cached_tokens.assign(static_cast<size_t>(n), 0);
  for (int32_t& id : s.cached_tokens) id = static_cast<int32_t>(rng() % 49152);
  s.pending = {1, 2};
  s.kv.n_tokens = n;
  s.kv.data.resize(static_cast<size_t>(s.kv.elements()));
  for (uint16_t& h : s.kv.data) h = static_cast<uint16_t>(rng());
  s.metadata = {{"chat", "{\"turns\": 3}"}, {std::string("\x00\xff", 2), "odd"}};
  s.tenant = "tenant-a";
  return s;
}

}  // namespace streamd::snapshot_testing
