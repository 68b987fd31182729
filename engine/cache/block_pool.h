// BlockPool: every session's K and V live in fixed-size blocks of one pool, allocated once at
// start-up from a memory budget. Allocate/Free are O(1) (a free stack); accounting is exact.
//
// Layout (kernels/common/paged_kv.h): per layer [num_blocks][2][n_kv_heads][block_size][head_dim],
// f16, or int8 with static per-channel scales (KvShape::dtype, kv_scales.h: half the bytes, CPU
// pools only). A block id names the same block in every layer, so a session's block table is shared
// by all layers. The memory is touched once at creation, so the process's resident size does
// not creep as sessions come and go.
//
// Sharing: a block may belong to several sessions at once (a fork shares its parent's blocks).
// Each block has a reference count: Allocate hands out a block with one reference, AddRef adds
// one, Free drops one and the block is free again only when none is left. A session about to
// write into a block that others also hold copies it first (copy-on-write, SessionCache);
// CopyBlock does that copy wherever the storage lives.
//
// Storage is pluggable: host memory by default, or memory a backend supplies (the CUDA backend
// hands in device memory). The bookkeeping (free stack, block tables, eviction) is always on
// the host; only the K/V bytes live wherever the storage says.
//
// Not thread-safe: the scheduler thread owns it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "engine/cache/kv_scales.h"
#include "engine/util/status.h"
#include "kernels/common/paged_kv.h"

namespace streamd {

struct KvShape {
  int32_t n_layers = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  kernels::KvDtype dtype = kernels::KvDtype::kF16;
  // The scales of an int8 cache (required for kInt8, absent for kF16).
  std::shared_ptr<const KvInt8Scales> int8_scales;
};

inline constexpr int32_t kMaxBlockSize = 256;

// The bytes behind a pool: zero-filled, at least the size asked for, 64-byte aligned, owned
// until destruction.
class PoolStorage {
 public:
  virtual ~PoolStorage() = default;
  virtual uint16_t* data() = 0;
  // False for device memory: then only the backend that made it may read or write it.
  virtual bool host_accessible() const = 0;
  // Copy `rows` runs of `run` elements between the storage and host memory: run r starts at
  // element first + r * pitch of the storage and at host + r * run. The defaults (host
  // storage) are memcpy; device storage does one 2D copy. Safe to call from any thread while
  // other blocks are in use.
  virtual Status CopyOut(int64_t first, int64_t pitch, int64_t run, int64_t rows, uint16_t* host);
  virtual Status CopyIn(int64_t first, int64_t pitch, int64_t run, int64_t rows,
                        const uint16_t* host);
  // Copy `rows` runs of `run` elements within the storage: run r from element
  // src + r * pitch to dst + r * pitch (the ranges do not overlap). The default memcpys host
  // storage and stages other storage through host memory with CopyOut/CopyIn; device storage
  // overrides it with a device-to-device copy.
  virtual Status CopyWithin(int64_t src, int64_t dst, int64_t pitch, int64_t run, int64_t rows);
};
// Makes storage of `bytes` bytes; errors name the amount and what is available.
using PoolStorageFactory = std::function<StatusOr<std::unique_ptr<PoolStorage>>(int64_t bytes)>;
// Host memory, touched once (the default storage).
StatusOr<std::unique_ptr<PoolStorage>> MakeHostPoolStorage(int64_t bytes);

class BlockPool {
 public:
  // Blocks of `block_size` tokens, as many as fit in `budget_bytes`. Errors name the value and
  // the limit: block_size outside [1, 256], or a budget smaller than one block; an int8 shape
  // without scales of its shape, or with storage the host cannot touch.
  // `storage` makes the memory (default: host memory).
  static StatusOr<std::unique_ptr<BlockPool>> Create(const KvShape& shape, int32_t block_size,
                                                     int64_t budget_bytes,
                                                     const PoolStorageFactory& storage = {});
  // Bytes of one block of `block_size` tokens, every layer's K and V.
  static int64_t BlockBytes(const KvShape& shape, int32_t block_size) {
    return 2LL * shape.n_layers * shape.n_kv_heads * shape.head_dim * block_size *
           kernels::KvDtypeBytes(shape.dtype);
  }
  // A budget of `fraction` (0, 1] of the memory available now (/proc/meminfo MemAvailable).
  static StatusOr<int64_t> BudgetFromFraction(double fraction);

  // A free block id with one reference, or -1 when none is left.
  int32_t Allocate();
  // Drops one reference; the block is free again when none is left. Freeing a block that is
  // not allocated is a bug (aborts).
  void Free(int32_t block);
  // One more reference to an allocated block (a fork shares it); a free block aborts.
  void AddRef(int32_t block);
  // References to the block: 0 when free, above 1 when shared.
  int32_t refs(int32_t block) const { return refs_[block]; }
  // Copies block `src`'s K and V (every layer) into block `dst` (copy-on-write).
  Status CopyBlock(int32_t src, int32_t dst);

  int32_t total_blocks() const { return layout_.num_blocks; }
  int32_t free_blocks() const { return static_cast<int32_t>(free_.size()); }
  int32_t used_blocks() const { return total_blocks() - free_blocks(); }
  int32_t block_size() const { return layout_.block_size; }
  int64_t bytes_per_token() const { return bytes_per_block() / layout_.block_size; }
  int64_t bytes_per_block() const {
    return layout_.block_elems() * layout_.n_layers * layout_.elem_bytes();
  }
  int64_t total_bytes() const { return bytes_per_block() * total_blocks(); }

  // Whole blocks, every layer's K and V, to or from host memory laid out
  // [ids.size()][n_layers][block_elems] f16 (what capture and restore move for device pools).
  // Works for pools in device memory too; an int8 pool is refused (FAILED_PRECONDITION: its
  // rows go through kv_image's conversions instead). Thread-safe with respect to steps that do
  // not touch these blocks. INVALID_ARGUMENT naming the first id outside the pool; then
  // nothing is copied.
  Status ReadBlocks(std::span<const int32_t> ids, uint16_t* host) const;
  Status WriteBlocks(std::span<const int32_t> ids, const uint16_t* host);

  const kernels::KvPoolLayout& layout() const { return layout_; }
  kernels::KvDtype dtype() const { return layout_.dtype; }
  // The scales of an int8 pool (null for f16).
  const KvInt8Scales* int8_scales() const { return int8_scales_.get(); }
  // The same, shared: what a K/V image read out of the pool carries beside its int8 values.
  const std::shared_ptr<const KvInt8Scales>& int8_scales_shared() const { return int8_scales_; }
  // Whether layer_data may be dereferenced on the host (false for a device pool).
  bool host_accessible() const { return storage_->host_accessible(); }
  // A layer's base: f16 elements (layer_data) or int8 ones (layer_data_i8), as dtype() says.
  uint16_t* layer_data(int32_t layer) { return reinterpret_cast<uint16_t*>(LayerBase(layer)); }
  const uint16_t* layer_data(int32_t layer) const {
    return reinterpret_cast<const uint16_t*>(LayerBase(layer));
  }
  int8_t* layer_data_i8(int32_t layer) { return reinterpret_cast<int8_t*>(LayerBase(layer)); }
  const int8_t* layer_data_i8(int32_t layer) const {
    return reinterpret_cast<const int8_t*>(LayerBase(layer));
  }

 private:
  BlockPool() = default;
  Status CheckIds(std::span<const int32_t> ids) const;
  Status CheckRawCopies() const;
  // Storage is addressed in 2-byte units; every block and layer is a whole number of them
  // (2 * n_kv_heads * block_size * head_dim elements).
  int64_t Units(int64_t elems) const { return elems * layout_.elem_bytes() / 2; }
  char* LayerBase(int32_t layer) const {
    return reinterpret_cast<char*>(data_) + layer * layout_.layer_elems() * layout_.elem_bytes();
  }

  kernels::KvPoolLayout layout_;
  std::shared_ptr<const KvInt8Scales> int8_scales_;
  std::unique_ptr<PoolStorage> storage_;
  uint16_t* data_ = nullptr;   // storage_->data()
  std::vector<int32_t> free_;  // stack of free ids
  std::vector<int32_t> refs_;  // per block: references; 0 = free (catches double frees)
};

}  // namespace streamd
