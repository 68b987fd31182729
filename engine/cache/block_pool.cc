#include "engine/cache/block_pool.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "engine/util/huge_pages.h"
#include "kernels/common/check.h"

namespace streamd {

namespace {

class HostPoolStorage final : public PoolStorage {
 public:
  explicit HostPoolStorage(uint16_t* p) : p_(p) {}
  ~HostPoolStorage() override { std::free(p_); }
  HostPoolStorage(const HostPoolStorage&) = delete;
  HostPoolStorage& operator=(const HostPoolStorage&) = delete;
  uint16_t* data() override { return p_; }
  bool host_accessible() const override { return true; }

 private:
  uint16_t* p_;
};

}  // namespace

Status PoolStorage::CopyOut(int64_t first, int64_t pitch, int64_t run, int64_t rows,
                            uint16_t* host) {
  if (!host_accessible()) {
    return UnimplementedError("this KV pool's storage cannot copy to the host");
  }
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(host + r * run, data() + first + r * pitch, static_cast<size_t>(run) * 2);
  }
  return OkStatus();
}

Status PoolStorage::CopyIn(int64_t first, int64_t pitch, int64_t run, int64_t rows,
                           const uint16_t* host) {
  if (!host_accessible()) {
    return UnimplementedError("this KV pool's storage cannot copy from the host");
  }
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(data() + first + r * pitch, host + r * run, static_cast<size_t>(run) * 2);
  }
  return OkStatus();
}

Status PoolStorage::CopyWithin(int64_t src, int64_t dst, int64_t pitch, int64_t run, int64_t rows) {
  if (host_accessible()) {
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(data() + dst + r * pitch, data() + src + r * pitch, static_cast<size_t>(run) * 2);
    }
    return OkStatus();
  }
  // Storage the host cannot touch: through a host buffer, one run at a time.
  std::vector<uint16_t> staging(static_cast<size_t>(run));
  for (int64_t r = 0; r < rows; ++r) {
    STREAMD_RETURN_IF_ERROR(CopyOut(src + r * pitch, pitch, run, 1, staging.data()));
    STREAMD_RETURN_IF_ERROR(CopyIn(dst + r * pitch, pitch, run, 1, staging.data()));
  }
  return OkStatus();
}

StatusOr<std::unique_ptr<PoolStorage>> MakeHostPoolStorage(int64_t bytes) {
  // Huge pages: attention reads each session's blocks, scattered over the pool, every step.
  void* raw = AllocateHugePageBacked(static_cast<size_t>(bytes));
  if (raw == nullptr) {
    return ResourceExhaustedError("cannot allocate a KV pool of " + std::to_string(bytes) +
                                  " bytes");
  }
  std::memset(raw, 0, static_cast<size_t>(bytes));  // touch every page: resident size is flat
  return std::unique_ptr<PoolStorage>(new HostPoolStorage(static_cast<uint16_t*>(raw)));
}

StatusOr<std::unique_ptr<BlockPool>> BlockPool::Create(const KvShape& shape, int32_t block_size,
                                                       int64_t budget_bytes,
                                                       const PoolStorageFactory& storage) {
  if (block_size < 1 || block_size > kMaxBlockSize) {
    return InvalidArgumentError("block_size = " + std::to_string(block_size) + " is outside [1, " +
                                std::to_string(kMaxBlockSize) + "]");
  }
  if (shape.n_layers < 1 || shape.n_kv_heads < 1 || shape.head_dim < 1) {
    return InvalidArgumentError("KV shape must have at least one layer, head and dimension");
  }
  const bool int8 = shape.dtype == kernels::KvDtype::kInt8;
  if (!int8 && shape.dtype != kernels::KvDtype::kF16) {
    return InvalidArgumentError("KV dtype " + std::to_string(static_cast<int>(shape.dtype)) +
                                " is neither f16 nor int8");
  }
  if (int8 != (shape.int8_scales != nullptr)) {
    return InvalidArgumentError(int8 ? "an int8 KV pool needs its scales"
                                     : "an f16 KV pool takes no int8 scales");
  }
  if (int8 && (shape.int8_scales->n_layers() != shape.n_layers ||
               shape.int8_scales->n_kv_heads() != shape.n_kv_heads ||
               shape.int8_scales->head_dim() != shape.head_dim)) {
    return InvalidArgumentError(
        "int8 KV scales for " + std::to_string(shape.int8_scales->n_layers()) + " layers x " +
        std::to_string(shape.int8_scales->n_kv_heads()) + " KV heads x " +
        std::to_string(shape.int8_scales->head_dim()) + " do not fit a cache of " +
        std::to_string(shape.n_layers) + " x " + std::to_string(shape.n_kv_heads) + " x " +
        std::to_string(shape.head_dim));
  }
  std::unique_ptr<BlockPool> pool(new BlockPool());
  kernels::KvPoolLayout& l = pool->layout_;
  l.n_layers = shape.n_layers;
  l.n_kv_heads = shape.n_kv_heads;
  l.head_dim = shape.head_dim;
  l.block_size = block_size;
  l.dtype = shape.dtype;
  pool->int8_scales_ = shape.int8_scales;
  const int64_t per_block = pool->bytes_per_block();
  const int64_t blocks = budget_bytes / per_block;
  if (blocks < 1) {
    return ResourceExhaustedError("KV pool budget of " + std::to_string(budget_bytes) +
                                  " bytes holds no block of " + std::to_string(per_block) +
                                  " bytes (" + std::to_string(block_size) + " tokens)");
  }
  if (blocks > INT32_MAX / 2) {
    return InvalidArgumentError("KV pool budget of " + std::to_string(budget_bytes) +
                                " bytes is over the limit of " + std::to_string(INT32_MAX / 2) +
                                " blocks");
  }
  l.num_blocks = static_cast<int32_t>(blocks);
  const int64_t bytes = pool->total_bytes();
  STREAMD_ASSIGN_OR_RETURN(pool->storage_, storage ? storage(bytes) : MakeHostPoolStorage(bytes));
  if (int8 && !pool->storage_->host_accessible()) {
    return UnimplementedError("an int8 KV cache lives in host memory only (CPU backend)");
  }
  pool->data_ = pool->storage_->data();
  pool->free_.reserve(blocks);
  for (int32_t b = static_cast<int32_t>(blocks) - 1; b >= 0; --b) pool->free_.push_back(b);
  pool->refs_.assign(blocks, 0);
  return pool;
}

StatusOr<int64_t> BlockPool::BudgetFromFraction(double fraction) {
  if (!(fraction > 0.0 && fraction <= 1.0)) {
    return InvalidArgumentError("KV pool fraction = " + std::to_string(fraction) +
                                " is outside (0, 1]");
  }
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return static_cast<int64_t>(fraction * kib * 1024.0);
  }
  return UnavailableError("cannot read MemAvailable from /proc/meminfo");
}

int32_t BlockPool::Allocate() {
  if (free_.empty()) return -1;
  const int32_t b = free_.back();
  free_.pop_back();
  refs_[b] = 1;
  return b;
}

void BlockPool::AddRef(int32_t block) {
  STREAMD_CHECK_MSG(block >= 0 && block < total_blocks() && refs_[block] != 0,
                    "BlockPool::AddRef of a block that is not allocated");
  ++refs_[block];
}

Status BlockPool::CopyBlock(int32_t src, int32_t dst) {
  const int32_t ids[2] = {src, dst};
  STREAMD_RETURN_IF_ERROR(CheckIds(ids));
  const int64_t run = Units(layout_.block_elems());
  return storage_->CopyWithin(src * run, dst * run, Units(layout_.layer_elems()), run,
                              layout_.n_layers);
}

Status BlockPool::CheckIds(std::span<const int32_t> ids) const {
  for (const int32_t id : ids) {
    if (id < 0 || id >= total_blocks()) {
      return InvalidArgumentError("block " + std::to_string(id) + " is not in the pool of " +
                                  std::to_string(total_blocks()) + " blocks");
    }
  }
  return OkStatus();
}

Status BlockPool::CheckRawCopies() const {
  if (layout_.dtype != kernels::KvDtype::kF16) {
    return FailedPreconditionError("whole-block f16 copies of an int8 KV pool");
  }
  return OkStatus();
}

Status BlockPool::ReadBlocks(std::span<const int32_t> ids, uint16_t* host) const {
  STREAMD_RETURN_IF_ERROR(CheckRawCopies());
  STREAMD_RETURN_IF_ERROR(CheckIds(ids));
  const int64_t run = layout_.block_elems();
  for (size_t i = 0; i < ids.size(); ++i) {
    STREAMD_RETURN_IF_ERROR(storage_->CopyOut(ids[i] * run, layout_.layer_elems(), run,
                                              layout_.n_layers, host + i * run * layout_.n_layers));
  }
  return OkStatus();
}

Status BlockPool::WriteBlocks(std::span<const int32_t> ids, const uint16_t* host) {
  // Every id first: a refused list writes nothing (the blocks before a bad id stay as they were).
  STREAMD_RETURN_IF_ERROR(CheckRawCopies());
  STREAMD_RETURN_IF_ERROR(CheckIds(ids));
  const int64_t run = layout_.block_elems();
  for (size_t i = 0; i < ids.size(); ++i) {
    STREAMD_RETURN_IF_ERROR(storage_->CopyIn(ids[i] * run, layout_.layer_elems(), run,
                                             layout_.n_layers, host + i * run * layout_.n_layers));
  }
  return OkStatus();
}

void BlockPool::Free(int32_t block) {
  STREAMD_CHECK_MSG(block >= 0 && block < total_blocks() && refs_[block] != 0,
                    "BlockPool::Free of a block that is not allocated");
  if (--refs_[block] == 0) free_.push_back(block);
}

}  // namespace streamd
