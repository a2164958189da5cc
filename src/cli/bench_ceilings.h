// The measured ceilings of the H200 fp8lm's benchmarks report against
// (../shared/docs/gpu.md): copy bandwidth, dense BF16 and FP8 GEMM rates.
// bench latency prints its shares of them; bench sweep and bench report draw
// the decode roofline at kCeilingBytesPerS when the results are from a GPU.
#pragma once

namespace fp8lm::cli {

inline constexpr double kCeilingBytesPerS = 4.29e12;
inline constexpr double kCeilingBf16FlopS = 794e12;
inline constexpr double kCeilingFp8FlopS = 1426e12;

}  // namespace fp8lm::cli
