// The attention row kernels (vec_ops_avx2.cc, vec_ops_avx512.cc) take a GQA group's queries in
// sub-groups of at most 4: their tiles keep one accumulator per (query, key or column chunk) in
// registers. Include only from those files; the anonymous namespace gives each its own copy,
// compiled with its own instruction-set flags.
#pragma once

#include <cstdint>

namespace streamd::kernels::cpu::internal {
namespace {

// fn.template operator()<QG>(i) for the sub-groups of queries i .. i + QG - 1 of [0, n_q).
template <class Fn>
[[gnu::always_inline]] inline void ForEachQuerySubGroup(int64_t n_q, Fn&& fn) {
  for (int64_t i = 0; i < n_q; i += 4) {
    switch (n_q - i) {
      case 1:
        fn.template operator()<1>(i);
        break;
      case 2:
        fn.template operator()<2>(i);
        break;
      case 3:
        fn.template operator()<3>(i);
        break;
      default:
        fn.template operator()<4>(i);
        break;
    }
  }
}

}  // namespace
}  // namespace streamd::kernels::cpu::internal
