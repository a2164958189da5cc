// The inner loops of FP8 conversion on the CPU, in one table per instruction
// set. Every table must produce the same bytes as the scalar one (tested
// exhaustively in tests/cpp/test_kernel_equivalence.cpp); the wider ones only
// make it faster. Selection happens at run time from the CPU's features, so
// one binary runs everywhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "numerics/fp8_format.h"
#include "numerics/kernel_choice.h"

namespace fp8lm::cpu {

struct QuantizeArgs {
  Fp8Format format = Fp8Format::kE4M3;
  Saturation saturation = Saturation::kSatFinite;
  // kBF16: the quotient x / scale is rounded to bfloat16 before the FP8 cast,
  // as PyTorch does when it divides a BF16 tensor by a BF16 scale.
  HighPrecision quotient = HighPrecision::kF32;
  bool add_zero = false;  // quotient + 0.0f: -0 becomes +0 (ScaleRule::add_zero_point)
};

struct KernelTable {
  std::string_view name;
  // max |x| over n elements; NaNs are ignored (fmaxf semantics), 0 for n == 0.
  float (*amax)(const void* x, HighPrecision dtype, size_t n);
  // out[i] = fp8(x[i] / scale)
  void (*quantize)(const void* x, HighPrecision dtype, size_t n, float scale,
                   const QuantizeArgs& args, uint8_t* out);
  // out[i] = fp8_to_float(code[i]) * scale
  void (*dequantize_f32)(const uint8_t* codes, size_t n, float scale, Fp8Format format,
                         float* out);
  // out[i] = bf16(fp8_to_float(code[i]) * scale)
  void (*dequantize_bf16)(const uint8_t* codes, size_t n, float scale, Fp8Format format,
                          uint16_t* out);
};

// x + i elements of a high-precision array.
inline const void* advance(const void* x, HighPrecision dtype, size_t i) {
  return dtype == HighPrecision::kF32 ? static_cast<const void*>(static_cast<const float*>(x) + i)
                                      : static_cast<const void*>(static_cast<const uint16_t*>(x) + i);
}

const KernelTable& scalar_kernels();
// nullptr when not compiled in or when this CPU lacks the instructions.
const KernelTable* avx2_kernels();
const KernelTable* avx512_kernels();

// The table for a choice; kAuto = the widest available. Throws fp8lm::Error if
// an explicit choice is not available on this CPU.
const KernelTable& select_kernels(KernelChoice choice);

// Names of the tables usable on this CPU, narrowest first.
std::vector<std::string_view> available_kernels();

}  // namespace fp8lm::cpu
