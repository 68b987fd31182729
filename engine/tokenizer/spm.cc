#include "engine/tokenizer/spm.h"

#include <cstdio>
#include <queue>
#include <string>
#include <unordered_map>

namespace streamd::tokenizer {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581 "▁"

size_t Utf8Length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

}  // namespace

SpmModel SpmModel::Create(const Vocab& vocab) {
  SpmModel model;
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
    auto id = vocab.Find(hex);
    if (!id) id = vocab.Find(std::string(1, static_cast<char>(b)));
    model.byte_ids_[b] = id ? *id : vocab.unk_id;
  }
  // Word boundaries are the points just before a "▁" that follows another character. A pair
  // that straddles one has "x▁" inside its text; if no token has, no merge ever crosses a
  // boundary, so the words' merges are independent and the global merge order within each
  // word is unchanged: splitting is exact. SentencePiece vocabularies trained with
  // split_by_whitespace (LLaMA's) qualify; others are merged whole.
  model.splits_words_ = true;
  for (size_t i = 0; i < vocab.texts.size(); ++i) {
    const std::string_view text = vocab.texts[i];
    for (size_t hit = text.find(kSpace, 1); hit != std::string::npos;
         hit = text.find(kSpace, hit + 1)) {
      if (hit < kSpace.size() || text.compare(hit - kSpace.size(), kSpace.size(), kSpace) != 0) {
        model.splits_words_ = false;
        return model;
      }
    }
  }
  return model;
}

void SpmModel::Encode(const Vocab& vocab, std::string_view text, std::vector<int32_t>* out) const {
  if (!splits_words_) {
    EncodeSegment(vocab, text, out);
    return;
  }
  // Natural text repeats its words: merge each distinct word once per call.
  std::unordered_map<std::string_view, std::vector<int32_t>> cache;
  size_t start = 0;
  while (start < text.size()) {
    // The word runs through its leading "▁"s to the next "▁" that follows something else.
    size_t end = start;
    while (text.substr(end).starts_with(kSpace)) end += kSpace.size();
    end = text.find(kSpace, end);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view word = text.substr(start, end - start);
    auto [it, inserted] = cache.try_emplace(word);
    if (inserted) EncodeSegment(vocab, word, &it->second);
    out->insert(out->end(), it->second.begin(), it->second.end());
    start = end;
  }
}

void SpmModel::EncodeSegment(const Vocab& vocab, std::string_view text,
                             std::vector<int32_t>* out) const {
  if (text.empty()) return;
  // A symbol is text[start, start + size); merged-away symbols have size 0.
  struct Symbol {
    uint32_t start;
    uint32_t size;
    int32_t prev;
    int32_t next;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const size_t size = std::min(Utf8Length(static_cast<uint8_t>(text[pos])), text.size() - pos);
    const int32_t index = static_cast<int32_t>(symbols.size());
    symbols.push_back({static_cast<uint32_t>(pos), static_cast<uint32_t>(size), index - 1, -1});
    if (index > 0) symbols[index - 1].next = index;
    pos += size;
  }

  struct Candidate {
    float score;
    int32_t left;
    int32_t right;
    uint32_t size;
  };
  // Highest score first; on equal scores the leftmost pair.
  auto worse = [](const Candidate& a, const Candidate& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(worse)> queue(worse);
  auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    // Adjacent symbols are contiguous in `text`, so the pair is one view: no string built.
    const uint32_t size = symbols[left].size + symbols[right].size;
    auto id = vocab.Find(text.substr(symbols[left].start, size));
    if (!id) return;
    queue.push({vocab.scores[*id], left, right, size});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) consider(i - 1, i);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.left];
    Symbol& right = symbols[c.right];
    // Stale when either side has merged since: symbols only grow, so the sizes tell.
    if (left.size == 0 || right.size == 0 || left.size + right.size != c.size) continue;
    left.size += right.size;
    right.size = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    consider(left.prev, c.left);
    consider(c.left, left.next);
  }

  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    const std::string_view piece = text.substr(symbols[i].start, symbols[i].size);
    if (auto id = vocab.Find(piece)) {
      out->push_back(*id);
      continue;
    }
    for (char c : piece) {
      const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
      if (id >= 0) out->push_back(id);
    }
  }
}

}  // namespace streamd::tokenizer
