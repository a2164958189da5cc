#include "numerics/cast.h"

#include <string>

#include "common/error.h"
#include "numerics/cpu/kernels.h"

namespace fp8lm {
namespace {

void check_sizes(size_t in, size_t out) {
  if (in != out)
    throw Error("fp8 cast: input has " + std::to_string(in) + " elements but output has " +
                std::to_string(out));
}

// A plain cast is a quantization with scale 1: x / 1 is exact in IEEE arithmetic.
void cast(const void* in, HighPrecision dtype, size_t n, uint8_t* out, Fp8Format format,
          Saturation saturation, KernelChoice kernels) {
  const cpu::QuantizeArgs args{format, saturation, HighPrecision::kF32};
  cpu::select_kernels(kernels).quantize(in, dtype, n, 1.0f, args, out);
}

}  // namespace

void cast_to_fp8(std::span<const float> in, std::span<uint8_t> out, Fp8Format format,
                 Saturation saturation, KernelChoice kernels) {
  check_sizes(in.size(), out.size());
  cast(in.data(), HighPrecision::kF32, in.size(), out.data(), format, saturation, kernels);
}

void cast_to_fp8(std::span<const uint16_t> bf16_in, std::span<uint8_t> out, Fp8Format format,
                 Saturation saturation, KernelChoice kernels) {
  check_sizes(bf16_in.size(), out.size());
  cast(bf16_in.data(), HighPrecision::kBF16, bf16_in.size(), out.data(), format, saturation, kernels);
}

void cast_from_fp8(std::span<const uint8_t> in, std::span<float> out, Fp8Format format,
                   KernelChoice kernels) {
  check_sizes(in.size(), out.size());
  cpu::select_kernels(kernels).dequantize_f32(in.data(), in.size(), 1.0f, format, out.data());
}

std::string_view auto_kernel_name() { return cpu::select_kernels(KernelChoice::kAuto).name; }

std::vector<std::string_view> usable_kernel_names() { return cpu::available_kernels(); }

}  // namespace fp8lm
