// The snapshot reader: every byte is hostile. Each length is checked against the bytes that
// remain before it is used, and every size META declares is bounded (snapshot_format.h) and
// then must equal what its section holds exactly, so the largest allocation is the size of
// the input. Checksums are verified before a payload is parsed; the order of checks follows
// the order of the bytes, so an error names the first thing wrong.
#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

#include "engine/snapshot/snapshot_format.h"
#include "engine/snapshot/snapshot_kv_reader.h"
#include "engine/snapshot/snapshot_layout.h"

namespace streamd {
namespace {

namespace L = snapshot_layout;
namespace M = snapshot_layout::meta;

std::string Hex(uint64_t v, int digits = 16) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%0*llx", digits, static_cast<unsigned long long>(v));
  return buf;
}

// A string from the file, quoted, safe to put in a one-line message.
std::string Quote(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s.substr(0, 96)) {
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    }
  }
  return out + (s.size() > 96 ? "\"..." : "\"");
}

std::string TagName(uint32_t tag) {
  switch (tag) {
    case L::kTagMeta:
      return "META";
    case L::kTagTokens:
      return "TOKENS";
    case L::kTagKv:
      return "KV";
    case L::kTagKvScales:
      return "KV_SCALES";
    case L::kTagKvInt8:
      return "KV_INT8";
    case L::kTagMetadata:
      return "METADATA";
    case L::kTagEnd:
      return "END";
  }
  const char chars[4] = {static_cast<char>(tag), static_cast<char>(tag >> 8),
                         static_cast<char>(tag >> 16), static_cast<char>(tag >> 24)};
  return std::string(L::IsOptionalTag(tag) ? "optional " : "unknown ") + "tag " +
         Quote(std::string_view(chars, 4)) + " (" + Hex(tag, 8) + ")";
}

// Index of the first byte that does not start a valid UTF-8 sequence (overlong forms,
// surrogates and code points above U+10FFFF are invalid), or npos.
size_t FindInvalidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    uint32_t cp = 0, min = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      n = 1, cp = c & 0x1f, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
      n = 2, cp = c & 0x0f, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
      n = 3, cp = c & 0x07, min = 0x10000;
    } else {
      return i;
    }
    if (s.size() - i <= n) return i;
    for (size_t k = 1; k <= n; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80) return i;
      cp = cp << 6 | (cc & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
    i += n + 1;
  }
  return std::string_view::npos;
}

Status MetaError(std::string what) { return DataLossError("snapshot META: " + what); }

Status CheckRange(std::string_view field, int64_t value, int64_t lo, int64_t hi) {
  if (value >= lo && value <= hi) return OkStatus();
  return MetaError(std::string(field) + " = " + std::to_string(value) + " is out of range [" +
                   std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

// ---- file header and sections ----------------------------------------------------------------

// The format version on success.
StatusOr<uint32_t> CheckHeader(std::span<const uint8_t> bytes) {
  if (bytes.empty()) return DataLossError("not a streamd snapshot: it is empty (0 bytes)");
  const size_t have = std::min(bytes.size(), sizeof(L::kMagic));
  if (!std::equal(bytes.begin(), bytes.begin() + have, L::kMagic,
                  [](uint8_t a, char b) { return a == static_cast<uint8_t>(b); })) {
    return DataLossError(
        "not a streamd snapshot: it starts with " +
        Quote(std::string_view(reinterpret_cast<const char*>(bytes.data()), have)) +
        ", expected \"STRMDSNP\"");
  }
  if (bytes.size() < L::kHeaderSize) {
    return DataLossError("snapshot truncated: the header needs " + std::to_string(L::kHeaderSize) +
                         " bytes at offset 0, " + std::to_string(bytes.size()) + " remain");
  }
  uint64_t stored = 0;
  std::memcpy(&stored, bytes.data() + L::kHeaderChecksumOffset, sizeof(stored));
  const uint64_t computed = XXH3_64bits(bytes.data(), L::kHeaderChecksummed);
  if (stored != computed) {
    return DataLossError("snapshot header: checksum mismatch (stored " + Hex(stored) +
                         ", computed " + Hex(computed) + ")");
  }
  uint32_t version = 0, reserved = 0;
  std::memcpy(&version, bytes.data() + L::kHeaderVersionOffset, sizeof(version));
  std::memcpy(&reserved, bytes.data() + L::kHeaderVersionOffset + 4, sizeof(reserved));
  if (version != L::kFormatVersionF16 && version != L::kFormatVersionInt8) {
    return FailedPreconditionError("snapshot format version " + std::to_string(version) +
                                   " is not supported: this streamd reads versions " +
                                   std::to_string(L::kFormatVersionF16) + " and " +
                                   std::to_string(L::kFormatVersionInt8));
  }
  if (reserved != 0) {
    return DataLossError("snapshot header: reserved field is " + Hex(reserved, 8) + ", must be 0");
  }
  return version;
}

struct Section {
  uint32_t tag = 0;
  uint64_t offset = 0;  // of its header
  std::span<const uint8_t> payload;
};

// Walks the sections after the header, in file order, checking each one's framing.
class SectionReader {
 public:
  explicit SectionReader(std::span<const uint8_t> bytes) : bytes_(bytes) {}

  bool done() const { return pos_ == bytes_.size(); }
  uint64_t pos() const { return pos_; }

  // The next section, which must carry `want` (or, when `allow_optional`, any optional tag).
  Status Next(uint32_t want, bool allow_optional, Section* out) {
    const uint64_t remain = bytes_.size() - pos_;
    if (remain < L::kSectionHeaderSize) {
      return DataLossError("snapshot truncated: the header of section " + TagName(want) +
                           " needs " + std::to_string(L::kSectionHeaderSize) + " bytes at offset " +
                           std::to_string(pos_) + ", " + std::to_string(remain) + " remain");
    }
    const uint8_t* h = bytes_.data() + pos_;
    uint32_t tag = 0, reserved = 0;
    uint64_t length = 0, stored = 0;
    std::memcpy(&tag, h, sizeof(tag));
    std::memcpy(&reserved, h + 4, sizeof(reserved));
    std::memcpy(&length, h + L::kSectionLengthOffset, sizeof(length));
    std::memcpy(&stored, h + L::kSectionChecksumOffset, sizeof(stored));
    const std::string at = " at offset " + std::to_string(pos_);
    if (tag != want && !(allow_optional && L::IsOptionalTag(tag))) {
      return DataLossError("snapshot: expected section " + TagName(want) + at + ", found " +
                           TagName(tag));
    }
    const std::string name = "section " + TagName(tag);
    if (reserved != 0) {
      return DataLossError("snapshot " + name + at + ": reserved field is " + Hex(reserved, 8) +
                           ", must be 0");
    }
    const uint64_t start = pos_ + L::kSectionHeaderSize;
    const uint64_t left = remain - L::kSectionHeaderSize;
    if (length > left) {
      return DataLossError("snapshot truncated: " + name + " needs " + std::to_string(length) +
                           " bytes at offset " + std::to_string(start) + ", " +
                           std::to_string(left) + " remain");
    }
    const uint64_t padding = L::PaddedLength(length) - length;  // length <= left: no overflow
    if (padding > left - length) {
      return DataLossError("snapshot truncated: " + name + "'s padding needs " +
                           std::to_string(padding) + " bytes at offset " +
                           std::to_string(start + length) + ", " + std::to_string(left - length) +
                           " remain");
    }
    for (uint64_t i = start + length; i < start + length + padding; ++i) {
      if (bytes_[i] != 0) {
        return DataLossError("snapshot " + name + ": padding byte at offset " + std::to_string(i) +
                             " is " + std::to_string(bytes_[i]) + ", must be 0");
      }
    }
    const std::span<const uint8_t> payload = bytes_.subspan(start, length);
    const uint64_t computed = XXH3_64bits(payload.data(), payload.size());
    if (stored != computed) {
      return DataLossError("snapshot " + name + at + ": checksum mismatch (stored " + Hex(stored) +
                           ", computed " + Hex(computed) + ")");
    }
    *out = Section{tag, pos_, payload};
    pos_ = start + length + padding;
    return OkStatus();
  }

 private:
  std::span<const uint8_t> bytes_;
  uint64_t pos_ = L::kHeaderSize;
};

// Reads length-prefixed strings and fixed fields of one payload, never past its end.
class PayloadCursor {
 public:
  PayloadCursor(std::span<const uint8_t> payload, size_t pos, std::string_view section)
      : p_(payload), pos_(pos), section_(section) {}

  size_t left() const { return p_.size() - pos_; }

  Status String(std::string_view field, size_t max_len, std::string* out) {
    uint32_t n = 0;
    if (left() < sizeof(n)) return Short(field, sizeof(n));
    std::memcpy(&n, p_.data() + pos_, sizeof(n));
    pos_ += sizeof(n);
    if (n > max_len) {
      return DataLossError("snapshot " + std::string(section_) + ": " + std::string(field) +
                           " is " + std::to_string(n) + " bytes long, limit " +
                           std::to_string(max_len));
    }
    if (left() < n) return Short(field, n);
    out->assign(reinterpret_cast<const char*>(p_.data() + pos_), n);
    pos_ += n;
    return OkStatus();
  }

  Status Finish() const {
    if (left() == 0) return OkStatus();
    return DataLossError("snapshot " + std::string(section_) + ": " + std::to_string(left()) +
                         " bytes after its last field");
  }

 private:
  Status Short(std::string_view field, size_t need) const {
    return DataLossError("snapshot " + std::string(section_) + ": " + std::string(field) +
                         " needs " + std::to_string(need) + " bytes at payload offset " +
                         std::to_string(pos_) + ", " + std::to_string(left()) + " remain");
  }

  std::span<const uint8_t> p_;
  size_t pos_;
  std::string_view section_;
};

// ---- META ---------------------------------------------------------------------------------------

struct Meta {
  uint32_t version = 0;  // the file's format version
  kernels::KvDtype dtype = kernels::KvDtype::kF16;
  int32_t n_layers = 0, n_kv_heads = 0, head_dim = 0, block_size = 0;
  CacheMode mode = CacheMode::kSink;
  int32_t sinks = 0, window = 0;
  SessionId id;
  int64_t tokens_seen = 0, kv_tokens = 0, n_cached = 0, n_pending = 0, n_metadata = 0;
  uint64_t revision = 0;
  int64_t created = 0, saved = 0;
  SamplingParams sampling;
  std::string streamd_version, model_fingerprint, model_name, tenant;

  snapshot_internal::KvDeclared kv() const {
    return {n_layers, n_kv_heads, head_dim, kv_tokens, dtype};
  }
  uint64_t kv_bytes() const { return kv().value_bytes(); }  // every factor is bounded: < 2^61
};
static_assert(static_cast<uint64_t>(kMaxSnapshotLayers) * 2 * kMaxSnapshotKvHeads *
                  kMaxSnapshotCacheTokens * 2 * kMaxSnapshotHeadDim * 2 <
              (uint64_t{1} << 63));

template <typename T>
T Load(std::span<const uint8_t> p, size_t offset) {
  T v;
  std::memcpy(&v, p.data() + offset, sizeof(T));
  return v;
}

// Parses META (of a file of format `version`) and checks everything that needs no other section
// and no context.
Status ParseMeta(std::span<const uint8_t> p, uint32_t version, Meta* m) {
  if (p.size() < M::kFixedSize) {
    return MetaError("payload is " + std::to_string(p.size()) + " bytes, shorter than its " +
                     std::to_string(M::kFixedSize) + " fixed bytes");
  }
  m->version = version;
  const uint32_t dtype = Load<uint32_t>(p, M::kKvDtype);
  if (dtype == L::kKvDtypeF16) {
    m->dtype = kernels::KvDtype::kF16;
  } else if (dtype == L::kKvDtypeInt8 && version >= L::kFormatVersionInt8) {
    m->dtype = kernels::KvDtype::kInt8;
  } else if (dtype == L::kKvDtypeInt8) {
    // No version-1 writer wrote int8 K/V: the bytes are not what a writer made.
    return MetaError("K/V dtype int8 (" + std::to_string(L::kKvDtypeInt8) +
                     ") in a format version " + std::to_string(version) +
                     " file, which holds f16 K/V only (int8 takes version " +
                     std::to_string(L::kFormatVersionInt8) + ")");
  } else {
    return FailedPreconditionError("snapshot META: K/V dtype code " + std::to_string(dtype) +
                                   " is not supported: this streamd reads f16 (" +
                                   std::to_string(L::kKvDtypeF16) + ") and int8 (" +
                                   std::to_string(L::kKvDtypeInt8) + ")");
  }
  m->n_layers = Load<int32_t>(p, M::kNLayers);
  m->n_kv_heads = Load<int32_t>(p, M::kNKvHeads);
  m->head_dim = Load<int32_t>(p, M::kHeadDim);
  m->block_size = Load<int32_t>(p, M::kBlockSize);
  STREAMD_RETURN_IF_ERROR(CheckRange("n_layers", m->n_layers, 1, kMaxSnapshotLayers));
  STREAMD_RETURN_IF_ERROR(CheckRange("n_kv_heads", m->n_kv_heads, 1, kMaxSnapshotKvHeads));
  STREAMD_RETURN_IF_ERROR(CheckRange("head_dim", m->head_dim, 1, kMaxSnapshotHeadDim));
  STREAMD_RETURN_IF_ERROR(CheckRange("block_size", m->block_size, 1, kMaxSnapshotBlockSize));

  const uint32_t mode = Load<uint32_t>(p, M::kCacheMode);
  switch (mode) {
    case L::kModeDense:
      m->mode = CacheMode::kDense;
      break;
    case L::kModeWindow:
      m->mode = CacheMode::kWindow;
      break;
    case L::kModeSink:
      m->mode = CacheMode::kSink;
      break;
    default:
      return MetaError("cache mode code " + std::to_string(mode) +
                       " is not dense (0), window (1) or sink (2)");
  }
  m->sinks = Load<int32_t>(p, M::kSinks);
  m->window = Load<int32_t>(p, M::kWindow);
  m->id = SessionId{Load<uint64_t>(p, M::kIdHi), Load<uint64_t>(p, M::kIdLo)};
  m->tokens_seen = Load<int64_t>(p, M::kTokensSeen);
  m->kv_tokens = Load<int64_t>(p, M::kKvTokens);
  m->n_cached = Load<int64_t>(p, M::kNCached);
  m->n_pending = Load<int64_t>(p, M::kNPending);
  m->n_metadata = Load<int64_t>(p, M::kNMetadata);
  m->revision = Load<uint64_t>(p, M::kRevision);
  m->created = Load<int64_t>(p, M::kCreated);
  m->saved = Load<int64_t>(p, M::kSaved);
  SamplingParams& s = m->sampling;
  s.temperature = Load<float>(p, M::kTemperature);
  s.top_k = Load<int32_t>(p, M::kTopK);
  s.top_p = Load<float>(p, M::kTopP);
  s.min_p = Load<float>(p, M::kMinP);
  s.repetition_penalty = Load<float>(p, M::kRepetitionPenalty);
  s.presence_penalty = Load<float>(p, M::kPresencePenalty);
  s.frequency_penalty = Load<float>(p, M::kFrequencyPenalty);
  s.penalty_last_n = Load<int32_t>(p, M::kPenaltyLastN);
  s.seed = Load<uint64_t>(p, M::kSeed);

  PayloadCursor c(p, M::kFixedSize, "META");
  STREAMD_RETURN_IF_ERROR(
      c.String("streamd_version", kMaxSnapshotVersionBytes, &m->streamd_version));
  STREAMD_RETURN_IF_ERROR(
      c.String("model_fingerprint", kMaxSnapshotFingerprintBytes, &m->model_fingerprint));
  STREAMD_RETURN_IF_ERROR(c.String("model_name", kMaxSnapshotModelNameBytes, &m->model_name));
  STREAMD_RETURN_IF_ERROR(c.String("tenant", kMaxSnapshotTenantBytes, &m->tenant));
  STREAMD_RETURN_IF_ERROR(c.Finish());
  for (const auto& [field, value] :
       {std::pair<std::string_view, const std::string*>{"streamd_version", &m->streamd_version},
        {"model_fingerprint", &m->model_fingerprint},
        {"model_name", &m->model_name},
        {"tenant", &m->tenant}}) {
    const size_t bad = FindInvalidUtf8(*value);
    if (bad != std::string_view::npos) {
      return MetaError(std::string(field) + " " + Quote(*value) + " is not UTF-8 (byte " +
                       std::to_string(bad) + ")");
    }
  }

  // The invariants of session_state.h.
  if (!m->id.valid()) return MetaError("session_id is the all-zero id, which names no session");
  STREAMD_RETURN_IF_ERROR(CheckRange("sinks", m->sinks, 0, kMaxSnapshotCacheTokens));
  STREAMD_RETURN_IF_ERROR(CheckRange("window", m->window, 1, kMaxSnapshotCacheTokens));
  if (m->mode != CacheMode::kSink && m->sinks != 0) {
    return MetaError("sinks = " + std::to_string(m->sinks) + " in " +
                     (m->mode == CacheMode::kDense ? "dense" : "window") +
                     " mode, which holds no sinks (must be 0)");
  }
  STREAMD_RETURN_IF_ERROR(CheckRange("tokens_seen", m->tokens_seen, 0, INT64_MAX));
  if (m->mode == CacheMode::kDense && m->tokens_seen > m->window) {
    return MetaError("tokens_seen = " + std::to_string(m->tokens_seen) +
                     " in dense mode exceeds its window (the context) of " +
                     std::to_string(m->window) + " (a dense cache evicts nothing)");
  }
  // The keys the session's next query reads (SessionCache::cached_span).
  const int64_t held = CachedSpanOf({m->mode, m->sinks, m->window, 1}, m->tokens_seen).size();
  if (m->n_cached != held) {
    return MetaError("n_cached = " + std::to_string(m->n_cached) + " does not match tokens_seen " +
                     std::to_string(m->tokens_seen) + " with sinks " + std::to_string(m->sinks) +
                     " and window " + std::to_string(m->window) + " (which hold " +
                     std::to_string(held) + ")");
  }
  if (m->kv_tokens != m->n_cached) {
    return MetaError("kv n_tokens = " + std::to_string(m->kv_tokens) +
                     " does not match n_cached = " + std::to_string(m->n_cached));
  }
  STREAMD_RETURN_IF_ERROR(CheckRange("n_pending", m->n_pending, 0, kMaxSnapshotPendingTokens));
  STREAMD_RETURN_IF_ERROR(CheckRange("n_metadata", m->n_metadata, 0, kMaxSnapshotMetadataEntries));
  STREAMD_RETURN_IF_ERROR(CheckRange("created_unix_ms", m->created, 0, INT64_MAX));
  STREAMD_RETURN_IF_ERROR(CheckRange("saved_unix_ms", m->saved, 0, INT64_MAX));
  const Status sampling = ValidateSamplingParams(s);
  if (!sampling.ok()) return MetaError("sampling " + sampling.message());
  return OkStatus();
}

static_assert(L::kHeaderSize + L::kSectionHeaderSize +
                  L::PaddedLength(M::kFixedSize + 4 * sizeof(uint32_t) + kMaxSnapshotVersionBytes +
                                  kMaxSnapshotFingerprintBytes + kMaxSnapshotModelNameBytes +
                                  kMaxSnapshotTenantBytes) <=
              kSnapshotSummaryPrefixBytes);

// Header and META: what both the decoder and the summary read first.
Status ReadHead(std::span<const uint8_t> bytes, SectionReader* sections, Meta* meta) {
  STREAMD_ASSIGN_OR_RETURN(const uint32_t version, CheckHeader(bytes));
  Section s;
  STREAMD_RETURN_IF_ERROR(sections->Next(L::kTagMeta, false, &s));
  return ParseMeta(s.payload, version, meta);
}

Status CheckContext(const Meta& m, const SnapshotContext& expected) {
  if (m.model_fingerprint != expected.model_fingerprint) {
    return FailedPreconditionError(
        "snapshot is of another model: fingerprint " + Quote(m.model_fingerprint) + " (model " +
        Quote(m.model_name) + "), this daemon's model has fingerprint " +
        Quote(expected.model_fingerprint) + " (model " + Quote(expected.model_name) + ")");
  }
  std::string diff;
  for (const auto& [field, have, want] :
       {std::tuple<std::string_view, int32_t, int32_t>{"n_layers", m.n_layers, expected.n_layers},
        {"n_kv_heads", m.n_kv_heads, expected.n_kv_heads},
        {"head_dim", m.head_dim, expected.head_dim}}) {
    if (have == want) continue;
    diff += std::string(diff.empty() ? "" : ", ") + std::string(field) + " " +
            std::to_string(have) + " (model: " + std::to_string(want) + ")";
  }
  if (!diff.empty()) {
    return FailedPreconditionError("snapshot K/V layout does not match the model: " + diff);
  }
  return OkStatus();
}

// ---- the other sections ------------------------------------------------------------------------

Status ReadTokens(std::span<const uint8_t> p, const Meta& m, SessionState* state) {
  const uint64_t want = static_cast<uint64_t>(m.n_cached + m.n_pending) * sizeof(int32_t);
  if (p.size() != want) {
    return DataLossError("snapshot section TOKENS holds " + std::to_string(p.size()) +
                         " bytes; META declares n_cached " + std::to_string(m.n_cached) +
                         " + n_pending " + std::to_string(m.n_pending) +
                         " ids = " + std::to_string(want) + " bytes");
  }
  state->cached_tokens.resize(static_cast<size_t>(m.n_cached));
  state->pending.resize(static_cast<size_t>(m.n_pending));
  const size_t cached_bytes = state->cached_tokens.size() * sizeof(int32_t);
  if (cached_bytes > 0) std::memcpy(state->cached_tokens.data(), p.data(), cached_bytes);
  if (!state->pending.empty()) {
    std::memcpy(state->pending.data(), p.data() + cached_bytes, p.size() - cached_bytes);
  }
  for (const auto& [what, ids] : {std::pair<std::string_view, const std::vector<int32_t>*>{
                                      "cached token", &state->cached_tokens},
                                  {"pending token", &state->pending}}) {
    for (size_t i = 0; i < ids->size(); ++i) {
      if ((*ids)[i] < 0) {
        return DataLossError("snapshot TOKENS: " + std::string(what) + " " + std::to_string(i) +
                             " has id " + std::to_string((*ids)[i]) + "; ids are >= 0");
      }
    }
  }
  return OkStatus();
}

Status ReadMetadata(std::span<const uint8_t> p, const Meta& m, SessionState* state) {
  if (p.size() > kMaxSnapshotMetadataBytes) {
    return DataLossError("snapshot section METADATA is " + std::to_string(p.size()) +
                         " bytes, limit " + std::to_string(kMaxSnapshotMetadataBytes));
  }
  PayloadCursor c(p, 0, "METADATA");
  std::string key, value;
  for (int64_t i = 0; i < m.n_metadata; ++i) {
    const std::string at = "entry " + std::to_string(i) + " ";
    STREAMD_RETURN_IF_ERROR(c.String(at + "key", kMaxSnapshotMetadataKeyBytes, &key));
    if (key.empty()) return DataLossError("snapshot METADATA: " + at + "has an empty key");
    if (!state->metadata.empty() && key <= state->metadata.rbegin()->first) {
      return DataLossError("snapshot METADATA: " + at + "key " + Quote(key) +
                           " does not come after " + Quote(state->metadata.rbegin()->first) +
                           " (keys are unique, in ascending order)");
    }
    STREAMD_RETURN_IF_ERROR(c.String(at + "value", kMaxSnapshotMetadataValueBytes, &value));
    state->metadata.emplace_hint(state->metadata.end(), std::move(key), std::move(value));
  }
  return c.Finish();
}

}  // namespace

StatusOr<SessionState> DecodeSnapshot(std::span<const uint8_t> bytes,
                                      const SnapshotContext& expected, KvView* kv_in_place) {
  SectionReader sections(bytes);
  Meta m;
  STREAMD_RETURN_IF_ERROR(ReadHead(bytes, &sections, &m));
  STREAMD_RETURN_IF_ERROR(CheckContext(m, expected));

  SessionState state;
  state.id = m.id;
  state.tenant = m.tenant;
  state.mode = m.mode;
  state.sinks = m.sinks;
  state.window = m.window;
  state.sampling = m.sampling;
  state.tokens_seen = m.tokens_seen;
  state.revision = m.revision;
  state.created_unix_ms = m.created;
  state.saved_unix_ms = m.saved;
  Section s;
  STREAMD_RETURN_IF_ERROR(sections.Next(L::kTagTokens, false, &s));
  STREAMD_RETURN_IF_ERROR(ReadTokens(s.payload, m, &state));
  // The K/V: f16 values, or an int8 cache's scales then its values.
  std::shared_ptr<const KvInt8Scales> scales;
  if (m.dtype == kernels::KvDtype::kInt8) {
    STREAMD_RETURN_IF_ERROR(sections.Next(L::kTagKvScales, false, &s));
    STREAMD_ASSIGN_OR_RETURN(scales, snapshot_internal::ReadKvScales(s.payload, m.kv()));
    STREAMD_RETURN_IF_ERROR(sections.Next(L::kTagKvInt8, false, &s));
  } else {
    STREAMD_RETURN_IF_ERROR(sections.Next(L::kTagKv, false, &s));
  }
  STREAMD_RETURN_IF_ERROR(snapshot_internal::ReadKvValues(s.payload, m.kv(), std::move(scales),
                                                          &state.kv, kv_in_place));
  STREAMD_RETURN_IF_ERROR(sections.Next(L::kTagMetadata, false, &s));
  STREAMD_RETURN_IF_ERROR(ReadMetadata(s.payload, m, &state));
  // Optional sections of later writers (checked, then skipped), until END.
  do {
    STREAMD_RETURN_IF_ERROR(sections.Next(L::kTagEnd, true, &s));
  } while (s.tag != L::kTagEnd);
  if (!s.payload.empty()) {
    return DataLossError("snapshot section END at offset " + std::to_string(s.offset) + " has " +
                         std::to_string(s.payload.size()) + " payload bytes, must have none");
  }
  if (!sections.done()) {
    return DataLossError("snapshot: " + std::to_string(bytes.size() - sections.pos()) +
                         " bytes after the END section (which ends at offset " +
                         std::to_string(sections.pos()) + ")");
  }
  return state;
}

StatusOr<SnapshotSummary> ReadSnapshotSummary(std::span<const uint8_t> bytes) {
  SectionReader sections(bytes);
  Meta m;
  STREAMD_RETURN_IF_ERROR(ReadHead(bytes, &sections, &m));
  SnapshotSummary out;
  out.format_version = m.version;
  out.kv_dtype = m.dtype;
  out.id = m.id;
  out.tenant = m.tenant;
  out.mode = m.mode;
  out.sinks = m.sinks;
  out.window = m.window;
  out.sampling = m.sampling;
  out.tokens_seen = m.tokens_seen;
  out.cached_tokens = m.n_cached;
  out.pending_tokens = m.n_pending;
  out.metadata_entries = m.n_metadata;
  out.kv_bytes = m.kv_bytes();
  out.revision = m.revision;
  out.created_unix_ms = m.created;
  out.saved_unix_ms = m.saved;
  out.model_fingerprint = m.model_fingerprint;
  out.model_name = m.model_name;
  out.streamd_version = m.streamd_version;
  out.n_layers = m.n_layers;
  out.n_kv_heads = m.n_kv_heads;
  out.head_dim = m.head_dim;
  out.block_size = m.block_size;
  return out;
}

}  // namespace streamd
