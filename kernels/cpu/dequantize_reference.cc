// One loop per format; the layouts are written out in dequantize_reference.h. Products of two
// scales are formed first (as an f32 `dl`, then dl * q), the order ggml and the gguf package use,
// so every value is the same f32 they produce.
#include "kernels/cpu/dequantize_reference.h"

#include <cstring>

#include "kernels/cpu/quant_blocks.h"

namespace streamd::kernels {
namespace {

float F16At(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return HalfToFloat(h);
}

// Nibble i of a 16-byte run holding 32 values: the low nibbles are values 0..15, the high ones
// 16..31 (Q4_0's order, shared by Q5_x and IQ4_x).
int NibbleOf32(const uint8_t* qs, int i) { return i < 16 ? qs[i] & 15 : qs[i - 16] >> 4; }

void Q5Block(const uint8_t* b, bool with_min, float* out) {
  const float d = F16At(b);
  const float m = with_min ? F16At(b + 2) : 0.0f;
  const uint8_t* p = b + (with_min ? 4 : 2);
  uint32_t qh;
  std::memcpy(&qh, p, sizeof qh);
  const uint8_t* qs = p + 4;
  for (int i = 0; i < 32; ++i) {
    const int q = NibbleOf32(qs, i) | static_cast<int>(((qh >> i) & 1u) << 4);
    out[i] = with_min ? d * static_cast<float>(q) + m : d * static_cast<float>(q - 16);
  }
}

void Q2KBlock(const uint8_t* b, float* out) {
  const uint8_t* sc = b;
  const uint8_t* qs = b + 16;
  const float d = F16At(b + 80), dmin = F16At(b + 82);
  for (int i = 0; i < 256; ++i) {
    const int h = i / 128, s = (i / 32) % 4, l = i % 32;
    const int q = (qs[32 * h + l] >> (2 * s)) & 3;
    const float dl = d * static_cast<float>(sc[i / 16] & 15);
    const float ml = dmin * static_cast<float>(sc[i / 16] >> 4);
    out[i] = dl * static_cast<float>(q) - ml;
  }
}

void Q3KBlock(const uint8_t* b, float* out) {
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
  const uint8_t* sc = b + 96;
  const float d = F16At(b + 108);
  int scales[16];
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? sc[j] & 15 : sc[j - 8] >> 4;
    const int high = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
    scales[j] = (low | (high << 4)) - 32;
  }
  for (int i = 0; i < 256; ++i) {
    const int h = i / 128, s = (i / 32) % 4, l = i % 32;
    const int low = (qs[32 * h + l] >> (2 * s)) & 3;
    const int bit = (hmask[l] >> (i / 32)) & 1;
    const float dl = d * static_cast<float>(scales[i / 16]);
    out[i] = dl * static_cast<float>(low - 4 * (1 - bit));
  }
}

// Q4_K (qh == nullptr) and Q5_K.
void Q45KBlock(const uint8_t* b, const uint8_t* qh, const uint8_t* qs, float* out) {
  const float d = F16At(b), dmin = F16At(b + 2);
  const uint8_t* sc = b + 4;
  for (int j = 0; j < 8; ++j) {
    int scale, min;
    KQuantScaleMin(sc, j, &scale, &min);
    const float dl = d * static_cast<float>(scale), ml = dmin * static_cast<float>(min);
    const int c = j / 2, u = j % 2;
    for (int l = 0; l < 32; ++l) {
      int q = (qs[32 * c + l] >> (4 * u)) & 15;
      if (qh != nullptr) q |= ((qh[l] >> j) & 1) << 4;
      out[32 * j + l] = dl * static_cast<float>(q) - ml;
    }
  }
}

void Q6KBlock(const uint8_t* b, float* out) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = F16At(b + 208);
  for (int i = 0; i < 256; ++i) {
    const int h = i / 128, r = i % 128;
    const int low = (ql[64 * h + r % 64] >> (4 * (r / 64))) & 15;
    const int high = (qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
    const float dl = d * static_cast<float>(sc[i / 16]);
    out[i] = dl * static_cast<float>((low | (high << 4)) - 32);
  }
}

void Iq4NlBlock(const uint8_t* b, float* out) {
  const float d = F16At(b);
  for (int i = 0; i < 32; ++i) out[i] = d * static_cast<float>(kIq4Values[NibbleOf32(b + 2, i)]);
}

void Iq4XsBlock(const uint8_t* b, float* out) {
  const float d = F16At(b);
  uint16_t sc_h;
  std::memcpy(&sc_h, b + 2, sizeof sc_h);
  const uint8_t* sc_l = b + 4;
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 8; ++j) {
    const int low = (sc_l[j / 2] >> (4 * (j % 2))) & 15;
    const int high = (sc_h >> (2 * j)) & 3;
    const float dl = d * static_cast<float>((low | (high << 4)) - 32);
    for (int l = 0; l < 32; ++l) {
      out[32 * j + l] = dl * static_cast<float>(kIq4Values[NibbleOf32(qs + 16 * j, l)]);
    }
  }
}

}  // namespace

QuantLayout LayoutOf(ConvertedQuant type) {
  switch (type) {
    case ConvertedQuant::kQ5_0:
      return {"Q5_0", 32, 22};
    case ConvertedQuant::kQ5_1:
      return {"Q5_1", 32, 24};
    case ConvertedQuant::kQ2_K:
      return {"Q2_K", 256, 84};
    case ConvertedQuant::kQ3_K:
      return {"Q3_K", 256, 110};
    case ConvertedQuant::kQ4_K:
      return {"Q4_K", 256, 144};
    case ConvertedQuant::kQ5_K:
      return {"Q5_K", 256, 176};
    case ConvertedQuant::kQ6_K:
      return {"Q6_K", 256, 210};
    case ConvertedQuant::kIQ4_NL:
      return {"IQ4_NL", 32, 18};
    case ConvertedQuant::kIQ4_XS:
      return {"IQ4_XS", 256, 136};
  }
  return {"?", 0, 0};
}

void DequantizeReference(ConvertedQuant type, const uint8_t* src, int64_t n_blocks, float* out) {
  const QuantLayout layout = LayoutOf(type);
  for (int64_t n = 0; n < n_blocks; ++n, src += layout.block_bytes, out += layout.block_values) {
    switch (type) {
      case ConvertedQuant::kQ5_0:
        Q5Block(src, /*with_min=*/false, out);
        break;
      case ConvertedQuant::kQ5_1:
        Q5Block(src, /*with_min=*/true, out);
        break;
      case ConvertedQuant::kQ2_K:
        Q2KBlock(src, out);
        break;
      case ConvertedQuant::kQ3_K:
        Q3KBlock(src, out);
        break;
      case ConvertedQuant::kQ4_K:
        Q45KBlock(src, nullptr, src + 16, out);
        break;
      case ConvertedQuant::kQ5_K:
        Q45KBlock(src, src + 16, src + 48, out);
        break;
      case ConvertedQuant::kQ6_K:
        Q6KBlock(src, out);
        break;
      case ConvertedQuant::kIQ4_NL:
        Iq4NlBlock(src, out);
        break;
      case ConvertedQuant::kIQ4_XS:
        Iq4XsBlock(src, out);
        break;
    }
  }
}

}  // namespace streamd::kernels
