// ModelFingerprint: which model a snapshot's K/V were computed with, cheap enough to compute at
// every start (the daemon stamps it into every snapshot and refuses snapshots of another model).
//
// It is XXH3-128 over
//   1. every byte before the tensor data (header, metadata, tensor infos: names, shapes, types,
//      offsets), so a changed hyper-parameter, tokenizer or quantization differs;
//   2. a bounded sample of every tensor's data, its first and last kFingerprintSampleBytes
//      (all of it when shorter than two samples), so two fine-tunes that share every metadata
//      value and every shape still differ: a fine-tune changes (nearly) every weight, and every
//      tensor's first and last rows are in the sample;
//   3. the file size (bytes after the last tensor, if any).
// A change confined to the unsampled middle of one tensor is not seen; that is the price of a
// cost independent of the model size: ~8 KiB per tensor (~2 MB, a few milliseconds, for a
// 272-tensor model), not gigabytes.
#pragma once

#include <cstddef>
#include <string>

#include "engine/gguf/gguf_file.h"

namespace streamd {

inline constexpr size_t kFingerprintSampleBytes = 4096;

// 32 lowercase hex digits (XXH3-128 in its canonical, big-endian byte order).
std::string ModelFingerprint(const gguf::GgufFile& file);

}  // namespace streamd
