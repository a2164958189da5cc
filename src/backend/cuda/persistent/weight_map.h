// W of a linear layer as the persistent decode kernel's loader copies it (DeviceLinear::map,
// weight_ring.cuh): a 2-D CUtensorMap over [n, k] in rows of 8-byte elements, boxes of 8 rows ×
// l.page_steps 64-byte steps, zeros past K. Shared by the engine (cuda_ops_persistent.cpp) and
// bench_cuda_weight_stream.
#pragma once

#include <cuda.h>

#include "backend/cuda/persistent/decode_program.h"

namespace fp8lm::cuda::persistent {

// Throws naming the weight's shape when the driver refuses it.
CUtensorMap weight_tensor_map(const DeviceLinear& l);

}  // namespace fp8lm::cuda::persistent
