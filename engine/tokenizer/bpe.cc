#include "engine/tokenizer/bpe.h"

#include <queue>

#include "engine/tokenizer/byte_unicode.h"

namespace streamd::tokenizer {

StatusOr<BpeModel> BpeModel::Create(const Vocab& vocab, const std::vector<std::string>& merges) {
  BpeModel model;
  for (int b = 0; b < 256; ++b) {
    // Some vocabularies drop bytes that never occur in UTF-8 (C0, C1, F5..FF); a missing byte
    // is -1 and is dropped from the output, as llama.cpp drops it.
    auto id = vocab.Find(ByteToTokenText(static_cast<uint8_t>(b)));
    model.byte_ids_[b] = id ? *id : -1;
  }
  model.merges_.reserve(merges.size());
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& entry = merges[rank];
    // Split at the first space after the first byte: a side may itself start with a space
    // in exotic vocabularies, never be empty.
    const size_t space = entry.find(' ', 1);
    if (space == std::string::npos) continue;
    const std::string_view left = std::string_view(entry).substr(0, space);
    const std::string_view right = std::string_view(entry).substr(space + 1);
    auto left_id = vocab.Find(left);
    auto right_id = vocab.Find(right);
    if (!left_id || !right_id) continue;
    joined.assign(left).append(right);
    auto result = vocab.Find(joined);
    if (!result) continue;
    // The first entry for a pair wins, like llama.cpp's bpe_ranks.emplace().
    model.merges_.emplace(Key(*left_id, *right_id), Merge{static_cast<int32_t>(rank), *result});
  }
  return model;
}

void BpeModel::EncodeWord(const Vocab& vocab, std::string_view word, bool ignore_merges,
                          std::vector<int32_t>* out) const {
  if (word.empty()) return;
  if (ignore_merges) {
    std::string encoded;
    for (char c : word) encoded += ByteToTokenText(static_cast<uint8_t>(c));
    if (auto id = vocab.Find(encoded)) {
      out->push_back(*id);
      return;
    }
  }
  if (word.size() == 1) {
    const int32_t id = byte_ids_[static_cast<uint8_t>(word[0])];
    if (id >= 0) out->push_back(id);
    return;
  }

  // Doubly linked symbols over the word; a merged-away symbol is unlinked (and gets id -1).
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
  };
  const int32_t n = static_cast<int32_t>(word.size());
  std::vector<Symbol> symbols(word.size());
  for (int32_t i = 0; i < n; ++i) {
    symbols[i] = {byte_ids_[static_cast<uint8_t>(word[i])], i - 1, i + 1 < n ? i + 1 : -1};
  }

  struct Candidate {
    int32_t rank;
    int32_t left;
    int32_t left_id;
    int32_t right_id;
    int32_t result;
  };
  // Lowest rank first; on equal ranks the leftmost pair (symbol index grows left to right).
  auto worse = [](const Candidate& a, const Candidate& b) {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(worse)> queue(worse);
  auto consider = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = symbols[left].next;
    if (right < 0) return;
    auto it = merges_.find(Key(symbols[left].id, symbols[right].id));
    if (it == merges_.end()) return;
    queue.push({it->second.rank, left, symbols[left].id, symbols[right].id, it->second.result});
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.left];
    // Stale when either side has merged since: ids change on every merge (the result is a
    // longer text, so a different token), and a merged-away symbol has id -1.
    if (left.id != c.left_id || left.next < 0 || symbols[left.next].id != c.right_id) continue;
    const int32_t right_index = left.next;
    Symbol& right = symbols[right_index];
    left.id = c.result;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    right.id = -1;
    consider(left.prev);
    consider(c.left);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    if (symbols[i].id >= 0) out->push_back(symbols[i].id);
  }
}

}  // namespace streamd::tokenizer
