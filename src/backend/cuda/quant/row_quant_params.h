// The parameters of quantizing rows (what row_quant_device.cuh's device functions read), as
// plain data: host code fills them (quant_kernels.h: row_quant_params), kernels take them by value.
#pragma once

#include <cstdint>

#include "numerics/fp8_format.h"

namespace fp8lm::cuda {

enum class RowQuantMode : int {
  kAmax,     // per-tensor pass 1: the row's amax into *amax_out (atomicMax)
  kStatic,   // one scale read from *static_scale
  kDynamic,  // per-token / per-group scales computed and written
};

struct RowParams {
  int k = 0;            // row length
  int nv = 0;           // vectors of 8 per row, cdiv(k, 8)
  RowQuantMode mode = RowQuantMode::kDynamic;
  int group = 1;        // elements per scale cell along the row
  int ngroups = 1;      // scale cells per row
  int seg_lanes = 32;   // lanes whose vectors share a cell (power of two); 0: track cells per element
  Fp8Format format = Fp8Format::kE4M3;
  float fmax = 448.0f;
  float amax_floor = 0.0f;
  float scale_floor = 0.0f;
  float scale_cap = 0.0f;  // > 0: scale = max(min(scale, cap), floor)
  const float* static_scale = nullptr;
  unsigned* amax_out = nullptr;
  uint8_t* codes = nullptr;
  float* scales = nullptr;
};

}  // namespace fp8lm::cuda
