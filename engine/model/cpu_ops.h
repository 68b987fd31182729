// Element-wise layers of the forward pass on the CPU. They cost O(tokens * dim), noise next to
// the O(tokens * dim^2) matrix products, so they are plain loops the compiler vectorizes.
// (SwiGLU's gate needs an exp per element: that one is kernels::cpu::SiluMul, vec_ops.h.)
#pragma once

#include <cstdint>

namespace streamd {

// out[i] = x[i] / sqrt(mean(x^2) + eps) * weight[i]
void RmsNorm(const float* x, const float* weight, float eps, int64_t n, float* out);
// y[i] += x[i]
void AddInPlace(float* y, const float* x, int64_t n);
// x = softmax(x) in place; returns log(sum(exp(x - max))) + max (the log-partition).
double SoftmaxInPlace(float* x, int64_t n);

}  // namespace streamd
