// PageAlignedBuffer: bytes that start on a 4096-byte boundary in an allocation that ends on one,
// so that any prefix of them, rounded up to whole pages, can be written with O_DIRECT
// (WriteFileAtomically's direct path: the device reads the bytes where they are, with no copy
// into the page cache). Used for the buffer every snapshot is encoded into.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

namespace streamd {

class PageAlignedBuffer {
 public:
  static constexpr size_t kAlignment = 4096;

  static constexpr size_t RoundUp(size_t n) {
    return (n + kAlignment - 1) / kAlignment * kAlignment;
  }

  uint8_t* data() { return data_.get(); }
  const uint8_t* data() const { return data_.get(); }
  // Bytes that can be written and read: a whole number of pages.
  size_t capacity() const { return capacity_; }

  // Makes room for at least `n` bytes. Grows only, and what it held is lost when it grows: a
  // buffer that is filled anew each time (as a snapshot is) faults its pages in once.
  void Reserve(size_t n) {
    if (n <= capacity_) return;
    const size_t bytes = RoundUp(n);
    void* p = std::aligned_alloc(kAlignment, bytes);
    if (p == nullptr) throw std::bad_alloc();
    data_.reset(static_cast<uint8_t*>(p));
    capacity_ = bytes;
  }

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> data_;
  size_t capacity_ = 0;
};

}  // namespace streamd
