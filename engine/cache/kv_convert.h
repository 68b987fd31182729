// Row conversions between the K/V encodings of kv_image.h: f16, and int8 with static
// per-channel scales (kv_scales.h). A row is head_dim values of one (layer, K/V, head, token);
// `scale` and `inverse` point at that head's head_dim scales (KvInt8Scales::scales(layer, kv)
// + head * head_dim) or their inverses.
//   dequantize  x[c] = scale[c] * q[c]                       (exact in f32, then rounded to f16)
//   quantize    q[c] = round(x[c] * inverse[c]) saturated to [-127, 127] (QuantizeRowI8)
//   requantize  quantize(dequantize(q) with one scale set) with another, through f32 so that a
//               value is rounded once (not first to f16, then to the new step)
// Dequantizing a row and quantizing it again with the same scales gives back the same int8
// values (the f16 rounding is < 0.06 scale < 0.5 scale), which is what keeps an int8 session's
// K/V stable when it passes through an f16 pool and back.
#pragma once

#include <cstdint>

#include "engine/cache/kv_image.h"
#include "engine/util/status.h"

namespace streamd {

void DequantizeRowsToF16(const int8_t* q, int64_t rows, int32_t head_dim, const float* scale,
                         uint16_t* out);
void QuantizeRowsFromF16(const uint16_t* in, int64_t rows, int32_t head_dim, const float* inverse,
                         int8_t* q);
void RequantizeRows(const int8_t* in, int64_t rows, int32_t head_dim, const float* scale,
                    const float* inverse, int8_t* out);

// The f16 image of `kv` (a copy when it is f16 already): what an f16 pool restored from it
// holds. INVALID_ARGUMENT when the view is incomplete (CheckKvView).
StatusOr<KvImage> DequantizedKv(const KvView& kv);
inline StatusOr<KvImage> DequantizedKv(const KvImage& image) {
  return DequantizedKv(KvView::Of(image));
}

}  // namespace streamd
