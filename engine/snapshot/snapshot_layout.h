// The byte layout of snapshot format versions 1 and 2, shared by the writer, the reader, their
// tests and the fuzzer (docs/SESSIONS.md, "Snapshot format", is the prose of the same thing).
// Not an API: only snapshot_format.h is. Everything is little-endian; the code assumes a
// little-endian host (static_assert below) so that the token ids and the K/V image are copied
// as one block, not element by element.
//
// Version 2 is version 1 plus one K/V dtype, int8 with static per-channel scales (an int8 KV
// cache's session, stored as its pool holds it): META's dtype 2, and the KV16 section replaced
// by KVSC (the scales) then KVI8 (the int8 values). The writer writes version 1 whenever the
// K/V are f16, so every version-1 reader (an older replica during a rolling upgrade) still
// reads those; version 2 only for int8. The reader reads both.
//
//   file    = header, section*, END section (nothing after it)
//   header  = magic "STRMDSNP" (8) | u32 version | u32 reserved (0) | u64 XXH3_64(bytes 0..15)
//   section = u32 tag | u32 reserved (0) | u64 length | u64 XXH3_64(payload) | payload |
//             zero padding to a multiple of 8 (not counted in length, checked to be zero)
// so every payload starts 8-aligned (a later reader may map the K/V image in place).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

namespace streamd::snapshot_layout {

static_assert(std::endian::native == std::endian::little,
              "the snapshot writer and reader copy little-endian blocks as they are in memory");

inline constexpr char kMagic[8] = {'S', 'T', 'R', 'M', 'D', 'S', 'N', 'P'};
inline constexpr uint32_t kFormatVersionF16 = 1;   // f16 K/V only
inline constexpr uint32_t kFormatVersionInt8 = 2;  // adds int8 K/V (kKvDtypeInt8)
inline constexpr uint32_t kNewestFormatVersion = kFormatVersionInt8;
inline constexpr size_t kHeaderSize = 24;
inline constexpr size_t kHeaderChecksummed = 16;  // magic, version, reserved
inline constexpr size_t kHeaderVersionOffset = 8;
inline constexpr size_t kHeaderChecksumOffset = 16;
inline constexpr size_t kSectionHeaderSize = 24;
inline constexpr size_t kSectionLengthOffset = 8;
inline constexpr size_t kSectionChecksumOffset = 16;
inline constexpr size_t kAlignment = 8;

inline constexpr uint64_t PaddedLength(uint64_t length) {
  return (length + kAlignment - 1) / kAlignment * kAlignment;
}

// Tags are four ASCII characters, the first one stored first. Bit 5 (0x20) of the first byte
// clear, as in an upper-case letter, marks a section every reader of this version must know;
// set, as in a lower-case letter, an optional one that a reader which does not know it skips
// (after checking its framing and checksum). Optional sections may only appear after
// METADATA, before END.
inline constexpr uint32_t Tag(char a, char b, char c, char d) {
  return static_cast<uint32_t>(static_cast<uint8_t>(a)) |
         static_cast<uint32_t>(static_cast<uint8_t>(b)) << 8 |
         static_cast<uint32_t>(static_cast<uint8_t>(c)) << 16 |
         static_cast<uint32_t>(static_cast<uint8_t>(d)) << 24;
}
inline constexpr bool IsOptionalTag(uint32_t tag) { return (tag & 0x20) != 0; }
inline constexpr uint32_t kTagMeta = Tag('M', 'E', 'T', 'A');
inline constexpr uint32_t kTagTokens = Tag('T', 'O', 'K', 'S');
inline constexpr uint32_t kTagKv = Tag('K', 'V', '1', '6');        // f16 K/V
inline constexpr uint32_t kTagKvScales = Tag('K', 'V', 'S', 'C');  // int8 K/V: their scales
inline constexpr uint32_t kTagKvInt8 = Tag('K', 'V', 'I', '8');    // int8 K/V: the values
inline constexpr uint32_t kTagMetadata = Tag('M', 'D', 'A', 'T');
inline constexpr uint32_t kTagEnd = Tag('E', 'N', 'D', 'S');
static_assert(!IsOptionalTag(kTagMeta) && !IsOptionalTag(kTagTokens) && !IsOptionalTag(kTagKv) &&
              !IsOptionalTag(kTagKvScales) && !IsOptionalTag(kTagKvInt8) &&
              !IsOptionalTag(kTagMetadata) && !IsOptionalTag(kTagEnd));

// META payload: the fixed fields at these offsets, then four strings, each a u32 length and
// its bytes: streamd_version, model_fingerprint, model_name, tenant.
namespace meta {
inline constexpr size_t kKvDtype = 0;              // u32, kKvDtype*
inline constexpr size_t kNLayers = 4;              // i32
inline constexpr size_t kNKvHeads = 8;             // i32
inline constexpr size_t kHeadDim = 12;             // i32
inline constexpr size_t kBlockSize = 16;           // i32, informational
inline constexpr size_t kCacheMode = 20;           // u32, kMode*
inline constexpr size_t kSinks = 24;               // i32
inline constexpr size_t kWindow = 28;              // i32
inline constexpr size_t kIdHi = 32;                // u64
inline constexpr size_t kIdLo = 40;                // u64
inline constexpr size_t kTokensSeen = 48;          // i64
inline constexpr size_t kKvTokens = 56;            // i64, KvImage::n_tokens
inline constexpr size_t kNCached = 64;             // i64, cached_tokens.size()
inline constexpr size_t kNPending = 72;            // i64
inline constexpr size_t kNMetadata = 80;           // i64, metadata entries
inline constexpr size_t kRevision = 88;            // u64
inline constexpr size_t kCreated = 96;             // i64, unix ms
inline constexpr size_t kSaved = 104;              // i64, unix ms
inline constexpr size_t kTemperature = 112;        // f32
inline constexpr size_t kTopK = 116;               // i32
inline constexpr size_t kTopP = 120;               // f32
inline constexpr size_t kMinP = 124;               // f32
inline constexpr size_t kRepetitionPenalty = 128;  // f32
inline constexpr size_t kPresencePenalty = 132;    // f32
inline constexpr size_t kFrequencyPenalty = 136;   // f32
inline constexpr size_t kPenaltyLastN = 140;       // i32
inline constexpr size_t kSeed = 144;               // u64
inline constexpr size_t kFixedSize = 152;          // the strings start here
}  // namespace meta

inline constexpr uint32_t kKvDtypeF16 = 1;
inline constexpr uint32_t kKvDtypeInt8 = 2;  // version 2 only
inline constexpr uint32_t kModeDense = 0;
inline constexpr uint32_t kModeWindow = 1;
inline constexpr uint32_t kModeSink = 2;

// TOKENS payload: n_cached then n_pending i32 ids. KV payload (f16, tag KV16): KvImage::data
// as it is in memory (f16 bits, [n_layers][2][n_kv_heads][n_tokens][head_dim]). Int8 K/V take
// two sections in its place: KVSC, the f32 scales the values were quantized with, K's
// [n_layers][n_kv_heads][head_dim] then V's (KvInt8Scales::k(), v(); each finite and
// >= 1e-30), then KVI8, KvImage::data_i8 in the same layout as KV16 (value = scale * q).
// METADATA payload: n_metadata entries in ascending key order, each u32 key length, key, u32
// value length, value.
// END payload: empty.

}  // namespace streamd::snapshot_layout
