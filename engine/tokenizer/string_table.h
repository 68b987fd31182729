// Many short strings in one buffer: the vocabulary's token texts and decoded pieces. A vector of
// std::string costs 32 bytes per entry plus a heap block for any text past 15 bytes; a 262144-
// token vocabulary (Gemma 3) held three such copies (texts, the id map's keys, the pieces), about
// 50 MiB of a 270M model's process. Here an entry costs its bytes and a 4-byte offset, and the
// views it hands out stay valid while the table lives, also across a move (the buffer moves
// with it), so the id map can key on them instead of on copies.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace streamd::tokenizer {

class StringTable {
 public:
  StringTable() = default;
  // Views into a table must not outlive it; copying would leave them pointing at the original.
  StringTable(const StringTable&) = delete;
  StringTable& operator=(const StringTable&) = delete;
  StringTable(StringTable&&) = default;
  StringTable& operator=(StringTable&&) = default;

  // Appends one entry; call Reserve first to keep the buffer from moving under earlier views.
  void Reserve(size_t entries, size_t bytes) {
    ends_.reserve(entries);
    bytes_.reserve(bytes);
  }
  void Add(std::string_view s) {
    bytes_.insert(bytes_.end(), s.begin(), s.end());
    ends_.push_back(static_cast<uint32_t>(bytes_.size()));
  }

  size_t size() const { return ends_.size(); }
  std::string_view operator[](size_t i) const {
    const uint32_t begin = i == 0 ? 0 : ends_[i - 1];
    return {bytes_.data() + begin, ends_[i] - begin};
  }
  size_t bytes() const { return bytes_.size(); }

 private:
  std::vector<char> bytes_;
  std::vector<uint32_t> ends_;  // end offset of each entry in bytes_
};

}  // namespace streamd::tokenizer
