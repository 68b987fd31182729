#include "engine/snapshot/model_fingerprint.h"

// The state on the stack, not XXH3_createState's heap (needs the static-linking-only API).
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <span>

namespace streamd {

std::string ModelFingerprint(const gguf::GgufFile& file) {
  const std::span<const uint8_t> bytes = file.bytes();
  XXH3_state_t state_storage;
  XXH3_state_t* state = &state_storage;
  XXH3_INITSTATE(state);
  (void)XXH3_128bits_reset(state);

  // With no tensors data_offset() may lie past the end of the file.
  const size_t prefix = static_cast<size_t>(std::min<uint64_t>(file.data_offset(), bytes.size()));
  (void)XXH3_128bits_update(state, bytes.data(), prefix);
  // GgufFile guarantees every tensor's range lies inside the file.
  for (const gguf::TensorInfo& t : file.tensors()) {
    const size_t size = static_cast<size_t>(t.size_bytes);
    if (size <= 2 * kFingerprintSampleBytes) {
      (void)XXH3_128bits_update(state, t.data, size);
    } else {
      (void)XXH3_128bits_update(state, t.data, kFingerprintSampleBytes);
      (void)XXH3_128bits_update(state, t.data + size - kFingerprintSampleBytes,
                                kFingerprintSampleBytes);
    }
  }
  const uint64_t file_size = bytes.size();
  (void)XXH3_128bits_update(state, &file_size, sizeof(file_size));
  const XXH128_hash_t hash = XXH3_128bits_digest(state);

  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, hash);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(32, '0');
  for (size_t i = 0; i < 16; ++i) {
    out[2 * i] = kHex[canonical.digest[i] >> 4];
    out[2 * i + 1] = kHex[canonical.digest[i] & 0xf];
  }
  return out;
}

}  // namespace streamd
