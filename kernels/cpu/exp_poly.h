// The constants of the vector exp shared by vec_ops_avx2.cc (Exp8) and vec_ops_avx512.cc (Exp16),
// which must give the same bits (vec_ops.h, ExpShiftedSum).
//
// exp(x) for x in [kLow, kHigh] (clamped to that range, below kLow 0; NaN stays NaN):
// x = n ln2 + r with n = round(x / ln2), |r| <= ln2 / 2, then 2^n (n in [-126, 127]) times the
// degree-7 Taylor polynomial of exp(r), whose truncation error (ln2/2)^8 / 8! = 5e-9 is far under
// float rounding. ln2 is split in two (the float nearest it and the rest) so n * ln2 loses
// nothing to rounding. Constants only: no code, so nothing here is compiled with one file's ISA
// flags and linked into another's callers.
#pragma once

namespace streamd::kernels::cpu::internal::exp_poly {

inline constexpr float kLow = -87.33654475f;  // ln(2^-126): smaller x would need n < -126
inline constexpr float kHigh = 88.37626f;     // x / ln2 stays under 127.5, so n <= 127
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693147182464599609375f;  // float(ln2)
inline constexpr float kLn2Lo = -1.904654299957768e-9f;    // ln2 - kLn2Hi
// Taylor coefficients of exp(r) in Horner order: p = c[0]; p = p * r + c[i] for i = 1..7.
inline constexpr float kTaylor[8] = {1.0f / 5040, 1.0f / 720, 1.0f / 120, 1.0f / 24,
                                     1.0f / 6,    0.5f,       1.0f,       1.0f};

}  // namespace streamd::kernels::cpu::internal::exp_poly
