// The two names both the quantizer (numerics/quantize.h) and its inner loops
// (numerics/cpu/kernels.h) speak: the element type of the high-precision input
// and which instruction-set variant of the loops to run. Kept apart so that the
// loops need not include the quantizer that calls them.
#pragma once

#include <cstdint>

namespace fp8lm {

// Element type of a high-precision tensor handed to the quantizer.
enum class HighPrecision : uint8_t { kF32, kBF16 };

// Which implementation of the inner loops to use. kAuto picks the widest the
// CPU supports at run time; every choice gives identical bytes.
enum class KernelChoice : uint8_t { kAuto, kScalar, kAvx2, kAvx512 };

}  // namespace fp8lm
