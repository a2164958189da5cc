// Portable inner loops of the linear layer: the reference the vector tables
// are tested against (with tolerances) and the fallback on any CPU.
#include "backend/cpu/linear_kernels.h"

namespace fp8lm::cpu {

namespace {

void fp8_to_float(const uint8_t* codes, int64_t n, Fp8Format format, float scale, float* out) {
  float lut[256];
  for (int c = 0; c < 256; ++c) lut[c] = fp8lm::fp8_to_float(uint8_t(c), format) * scale;
  for (int64_t i = 0; i < n; ++i) out[i] = lut[codes[i]];
}

template <int MR, int NR>
void dot(const float* x, int64_t ldx, const float* w, int64_t ldw, int64_t len, float* out) {
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) {
      float acc = 0.0f;
      for (int64_t k = 0; k < len; ++k) acc += x[i * ldx + k] * w[j * ldw + k];
      out[i * NR + j] = acc;
    }
  }
}

}  // namespace

const LinearKernels& linear_kernels_scalar() {
  // 1 × 1 tiles: the scalar loop gains nothing from register blocking.
  static const LinearKernels table{"scalar", fp8lm::to_float, fp8_to_float, 1, 1,
                                   FP8LM_LINEAR_DOT_TABLE(dot)};
  return table;
}

}  // namespace fp8lm::cpu
