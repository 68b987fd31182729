// The snapshot writer (the reader is snapshot_reader.cc). It writes the state as given; see
// snapshot_format.h for why it validates nothing.
#include "engine/snapshot/snapshot_format.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string_view>

#include "engine/snapshot/snapshot_layout.h"
#include "kernels/common/check.h"

namespace streamd {
namespace {

namespace L = snapshot_layout;

uint32_t ModeCode(CacheMode mode) {
  switch (mode) {
    case CacheMode::kDense:
      return L::kModeDense;
    case CacheMode::kWindow:
      return L::kModeWindow;
    case CacheMode::kSink:
      return L::kModeSink;
  }
  return 0xffffffffu;  // not a CacheMode: written so that the reader refuses it
}

bool IsInt8(const SessionState& state) { return state.kv.dtype == kernels::KvDtype::kInt8; }

template <typename T>
std::span<const uint8_t> AsBytes(const std::vector<T>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(T)};
}

template <typename T>
void Store(std::vector<uint8_t>* out, size_t offset, T value) {
  std::memcpy(out->data() + offset, &value, sizeof(T));
}

void AppendString(std::vector<uint8_t>* out, std::string_view s) {
  const uint32_t n = static_cast<uint32_t>(s.size());
  const size_t at = out->size();
  out->resize(at + sizeof(n) + s.size());
  std::memcpy(out->data() + at, &n, sizeof(n));
  if (!s.empty()) std::memcpy(out->data() + at + sizeof(n), s.data(), s.size());
}

size_t MetaLength(const SessionState& state, const SnapshotContext& context) {
  return L::meta::kFixedSize + 4 * sizeof(uint32_t) + context.streamd_version.size() +
         context.model_fingerprint.size() + context.model_name.size() + state.tenant.size();
}

std::vector<uint8_t> MetaPayload(const SessionState& state, const SnapshotContext& context) {
  namespace M = L::meta;
  std::vector<uint8_t> out(M::kFixedSize, 0);
  out.reserve(MetaLength(state, context));
  Store<uint32_t>(&out, M::kKvDtype, IsInt8(state) ? L::kKvDtypeInt8 : L::kKvDtypeF16);
  Store<int32_t>(&out, M::kNLayers, state.kv.n_layers);
  Store<int32_t>(&out, M::kNKvHeads, state.kv.n_kv_heads);
  Store<int32_t>(&out, M::kHeadDim, state.kv.head_dim);
  Store<int32_t>(&out, M::kBlockSize, context.block_size);
  Store<uint32_t>(&out, M::kCacheMode, ModeCode(state.mode));
  Store<int32_t>(&out, M::kSinks, state.sinks);
  Store<int32_t>(&out, M::kWindow, state.window);
  Store<uint64_t>(&out, M::kIdHi, state.id.hi);
  Store<uint64_t>(&out, M::kIdLo, state.id.lo);
  Store<int64_t>(&out, M::kTokensSeen, state.tokens_seen);
  Store<int64_t>(&out, M::kKvTokens, state.kv.n_tokens);
  Store<int64_t>(&out, M::kNCached, static_cast<int64_t>(state.cached_tokens.size()));
  Store<int64_t>(&out, M::kNPending, static_cast<int64_t>(state.pending.size()));
  Store<int64_t>(&out, M::kNMetadata, static_cast<int64_t>(state.metadata.size()));
  Store<uint64_t>(&out, M::kRevision, state.revision);
  Store<int64_t>(&out, M::kCreated, state.created_unix_ms);
  Store<int64_t>(&out, M::kSaved, state.saved_unix_ms);
  const SamplingParams& s = state.sampling;
  Store<float>(&out, M::kTemperature, s.temperature);
  Store<int32_t>(&out, M::kTopK, s.top_k);
  Store<float>(&out, M::kTopP, s.top_p);
  Store<float>(&out, M::kMinP, s.min_p);
  Store<float>(&out, M::kRepetitionPenalty, s.repetition_penalty);
  Store<float>(&out, M::kPresencePenalty, s.presence_penalty);
  Store<float>(&out, M::kFrequencyPenalty, s.frequency_penalty);
  Store<int32_t>(&out, M::kPenaltyLastN, s.penalty_last_n);
  Store<uint64_t>(&out, M::kSeed, s.seed);
  AppendString(&out, context.streamd_version);
  AppendString(&out, context.model_fingerprint);
  AppendString(&out, context.model_name);
  AppendString(&out, state.tenant);
  return out;
}

size_t MetadataLength(const SessionState& state) {
  size_t n = 0;
  for (const auto& [key, value] : state.metadata)
    n += 2 * sizeof(uint32_t) + key.size() + value.size();
  return n;
}

std::vector<uint8_t> MetadataPayload(const SessionState& state) {
  std::vector<uint8_t> out;
  out.reserve(MetadataLength(state));
  for (const auto& [key, value] : state.metadata) {  // std::map: ascending key order
    AppendString(&out, key);
    AppendString(&out, value);
  }
  return out;
}

// Appends to a caller's buffer (sized beforehand) or to a vector reserved beforehand: either
// way every byte, the K/V image included, is written once.
class Writer {
 public:
  explicit Writer(uint8_t* buffer) : buffer_(buffer) {}
  explicit Writer(std::vector<uint8_t>* vec) : vec_(vec) {}

  size_t pos() const { return pos_; }

  void Bytes(const void* p, size_t n) {
    if (n == 0) return;
    if (vec_ != nullptr) {
      const auto* b = static_cast<const uint8_t*>(p);
      vec_->insert(vec_->end(), b, b + n);
    } else {
      std::memcpy(buffer_ + pos_, p, n);
    }
    pos_ += n;
  }
  template <typename T>
  void Put(T value) {
    Bytes(&value, sizeof(T));
  }

  // A section whose payload of `length` bytes is already in place after its header: only the
  // header (with the checksum of those bytes) and the padding are written.
  void SectionInPlace(uint32_t tag, size_t length) {
    const uint8_t* payload = buffer_ + pos_ + L::kSectionHeaderSize;
    Put<uint32_t>(tag);
    Put<uint32_t>(0);
    Put<uint64_t>(length);
    Put<uint64_t>(XXH3_64bits(payload, length));
    pos_ += length;
    static constexpr uint8_t kZeros[L::kAlignment] = {};
    Bytes(kZeros, L::PaddedLength(pos_) - pos_);
  }

  // One section: header, the payload's parts back to back, zero padding.
  void Section(uint32_t tag, std::initializer_list<std::span<const uint8_t>> parts) {
    XXH3_state_t state;
    XXH3_INITSTATE(&state);
    (void)XXH3_64bits_reset(&state);
    uint64_t length = 0;
    for (std::span<const uint8_t> part : parts) {
      (void)XXH3_64bits_update(&state, part.data(), part.size());
      length += part.size();
    }
    Put<uint32_t>(tag);
    Put<uint32_t>(0);
    Put<uint64_t>(length);
    Put<uint64_t>(XXH3_64bits_digest(&state));
    for (std::span<const uint8_t> part : parts) Bytes(part.data(), part.size());
    static constexpr uint8_t kZeros[L::kAlignment] = {};
    Bytes(kZeros, L::PaddedLength(pos_) - pos_);
  }

 private:
  uint8_t* buffer_ = nullptr;
  std::vector<uint8_t>* vec_ = nullptr;
  size_t pos_ = 0;
};

// The K/V payload's bytes: of the image's vector, or (in place) of its dimensions.
size_t KvBytesOf(const SessionState& state, bool kv_in_place) {
  const int64_t elems = kv_in_place ? state.kv.elements() : state.kv.held();
  return static_cast<size_t>(elems) * static_cast<size_t>(kernels::KvDtypeBytes(state.kv.dtype));
}

// The KVSC payload of an int8 state: K's scales then V's (none when the state has no scales:
// written so that the reader refuses it).
size_t ScalesBytesOf(const SessionState& state) {
  if (!IsInt8(state) || state.kv.scales == nullptr) return 0;
  return (state.kv.scales->k().size() + state.kv.scales->v().size()) * sizeof(float);
}

// The sections before the K/V values: header, META, TOKENS, and for int8 KVSC.
size_t BeforeKvValues(const SessionState& state, const SnapshotContext& context) {
  const size_t tokens = (state.cached_tokens.size() + state.pending.size()) * sizeof(int32_t);
  size_t n = L::kHeaderSize + 2 * L::kSectionHeaderSize +
             L::PaddedLength(MetaLength(state, context)) + L::PaddedLength(tokens);
  if (IsInt8(state)) n += L::kSectionHeaderSize + L::PaddedLength(ScalesBytesOf(state));
  return n;
}

size_t EncodedSize(const SessionState& state, const SnapshotContext& context, bool kv_in_place) {
  return BeforeKvValues(state, context) + 3 * L::kSectionHeaderSize +
         L::PaddedLength(KvBytesOf(state, kv_in_place)) + L::PaddedLength(MetadataLength(state));
}

// Offset of the K/V values' payload (KV16 or KVI8).
size_t KvOffset(const SessionState& state, const SnapshotContext& context) {
  return BeforeKvValues(state, context) + L::kSectionHeaderSize;
}

void Encode(const SessionState& state, const SnapshotContext& context, Writer* w,
            bool kv_in_place = false) {
  const bool int8 = IsInt8(state);
  // The lowest version that holds the state (snapshot_layout.h): f16 snapshots stay readable
  // by version-1 readers.
  const uint32_t version = int8 ? L::kFormatVersionInt8 : L::kFormatVersionF16;
  uint8_t header[L::kHeaderChecksummed] = {};
  std::memcpy(header, L::kMagic, sizeof(L::kMagic));
  std::memcpy(header + L::kHeaderVersionOffset, &version, sizeof(uint32_t));
  w->Bytes(header, sizeof(header));
  w->Put<uint64_t>(XXH3_64bits(header, sizeof(header)));

  const std::vector<uint8_t> meta = MetaPayload(state, context);
  w->Section(L::kTagMeta, {meta});
  w->Section(L::kTagTokens, {AsBytes(state.cached_tokens), AsBytes(state.pending)});
  if (int8) {
    if (state.kv.scales != nullptr) {
      w->Section(L::kTagKvScales, {AsBytes(state.kv.scales->k()), AsBytes(state.kv.scales->v())});
    } else {
      w->Section(L::kTagKvScales, {});
    }
  }
  const uint32_t kv_tag = int8 ? L::kTagKvInt8 : L::kTagKv;
  if (kv_in_place) {
    w->SectionInPlace(kv_tag, KvBytesOf(state, true));
  } else if (int8) {
    w->Section(kv_tag, {AsBytes(state.kv.data_i8)});
  } else {
    w->Section(kv_tag, {AsBytes(state.kv.data)});
  }
  const std::vector<uint8_t> metadata = MetadataPayload(state);
  w->Section(L::kTagMetadata, {metadata});
  w->Section(L::kTagEnd, {});
}

}  // namespace

size_t EncodedSnapshotSize(const SessionState& state, const SnapshotContext& context) {
  return EncodedSize(state, context, false);
}

size_t EncodedSnapshotSizeForKv(const SessionState& state, const SnapshotContext& context) {
  return EncodedSize(state, context, true);
}

size_t SnapshotKvOffset(const SessionState& state, const SnapshotContext& context) {
  return KvOffset(state, context);
}

StatusOr<size_t> EncodeSnapshotAroundKv(const SessionState& state, const SnapshotContext& context,
                                        std::span<uint8_t> out) {
  const size_t size = EncodedSize(state, context, true);
  if (out.size() < size) {
    return InvalidArgumentError("snapshot buffer of " + std::to_string(out.size()) +
                                " bytes is too small: the snapshot needs " + std::to_string(size));
  }
  Writer w(out.data());
  Encode(state, context, &w, /*kv_in_place=*/true);
  STREAMD_CHECK_MSG(w.pos() == size, "EncodedSize and Encode disagree");
  return size;
}

StatusOr<size_t> EncodeSnapshotTo(const SessionState& state, const SnapshotContext& context,
                                  std::span<uint8_t> out) {
  const size_t size = EncodedSize(state, context, false);
  if (out.size() < size) {
    return InvalidArgumentError("snapshot buffer of " + std::to_string(out.size()) +
                                " bytes is too small: the snapshot needs " + std::to_string(size));
  }
  Writer w(out.data());
  Encode(state, context, &w);
  STREAMD_CHECK_MSG(w.pos() == size, "EncodedSize and Encode disagree");
  return size;
}

std::vector<uint8_t> EncodeSnapshot(const SessionState& state, const SnapshotContext& context) {
  const size_t size = EncodedSize(state, context, false);
  std::vector<uint8_t> out;
  out.reserve(size);
  Writer w(&out);
  Encode(state, context, &w);
  STREAMD_CHECK_MSG(out.size() == size, "EncodedSize and Encode disagree");
  return out;
}

}  // namespace streamd
