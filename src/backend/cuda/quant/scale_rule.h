// The dynamic activation scale rule as plain numbers, for host code that
// chooses it (quant_kernels.h: dynamic_scale_rule) and device code that applies
// it (quantize_device.cuh: scale_from_amax). numerics ScaleRule in float32
// arithmetic, with the format's largest finite value.
#pragma once

namespace fp8lm::cuda {

struct Fp8ScaleRule {
  float fmax = 448.0f;
  float amax_floor = 0.0f;   // amax = max(amax, floor)
  float scale_floor = 0.0f;  // scale = max(amax / fmax, floor)
  float scale_cap = 0.0f;    // > 0: scale = max(min(scale, cap), floor) (FBGEMM's token bound)
};

}  // namespace fp8lm::cuda
