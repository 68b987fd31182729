#include "engine/model/model_family.h"

namespace streamd {
namespace {

constexpr ModelFamily kFamilies[] = {
    {"llama", RopeStyle::kNormal, /*qkv_bias=*/false, /*qk_norm=*/false},
    {"qwen2", RopeStyle::kNeox, /*qkv_bias=*/true, /*qk_norm=*/false},
    {"qwen3", RopeStyle::kNeox, /*qkv_bias=*/false, /*qk_norm=*/true},
};

}  // namespace

const ModelFamily* FindModelFamily(std::string_view architecture) {
  for (const ModelFamily& f : kFamilies) {
    if (f.architecture == architecture) return &f;
  }
  return nullptr;
}

std::string SupportedArchitectures() {
  std::string out;
  for (const ModelFamily& f : kFamilies) {
    if (!out.empty()) out += ", ";
    out += f.architecture;
  }
  return out;
}

}  // namespace streamd
