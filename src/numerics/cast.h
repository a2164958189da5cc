// Element-wise conversion of whole arrays between float32 / bfloat16 and FP8,
// through the fastest CPU kernels available (identical bytes on every path).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "numerics/fp8_format.h"
#include "numerics/quantize.h"

namespace fp8lm {

void cast_to_fp8(std::span<const float> in, std::span<uint8_t> out, Fp8Format format,
                 Saturation saturation = Saturation::kSatFinite,
                 KernelChoice kernels = KernelChoice::kAuto);
void cast_to_fp8(std::span<const uint16_t> bf16_in, std::span<uint8_t> out, Fp8Format format,
                 Saturation saturation = Saturation::kSatFinite,
                 KernelChoice kernels = KernelChoice::kAuto);
void cast_from_fp8(std::span<const uint8_t> in, std::span<float> out, Fp8Format format,
                   KernelChoice kernels = KernelChoice::kAuto);

// The kernel table kAuto resolves to on this CPU ("avx512", "avx2" or "scalar"),
// and all that are usable here.
std::string_view auto_kernel_name();
std::vector<std::string_view> usable_kernel_names();

}  // namespace fp8lm
