#include "engine/tokenizer/incremental_detokenizer.h"

#include "engine/tokenizer/utf8.h"

namespace streamd::tokenizer {

std::string IncrementalDetokenizer::Push(int32_t id) {
  tokenizer_.AppendDecoded(id, &at_boundary_, &pending_);
  std::string out;
  const size_t consumed = AppendSanitizedUtf8(pending_, /*hold_incomplete_tail=*/true, &out);
  pending_.erase(0, consumed);
  return out;
}

std::string IncrementalDetokenizer::Flush() {
  std::string out;
  AppendSanitizedUtf8(pending_, /*hold_incomplete_tail=*/false, &out);
  pending_.clear();
  return out;
}

}  // namespace streamd::tokenizer
