// Throughput of FP8 quantize / dequantize on this CPU, per scale granularity,
// for every kernel table (scalar vs AVX2 vs AVX-512). Bytes/s counts the
// high-precision side (BF16 read when quantizing, BF16 written when
// dequantizing), so the figures compare with memory bandwidth directly.
//
//   bench_quantize --benchmark_out=quantize.json --benchmark_out_format=json
#include <benchmark/benchmark.h>

#include <random>

#include "numerics/cast.h"
#include "numerics/quantize.h"

namespace {

using namespace fp8lm;

constexpr int64_t kRows = 2048;
constexpr int64_t kCols = 4096;  // one [2048, 4096] BF16 tensor = 16 MiB

const std::vector<uint16_t>& input() {
  static const std::vector<uint16_t> x = [] {
    std::mt19937 gen(42);
    std::normal_distribution<float> d(0.0f, 0.02f);
    std::vector<uint16_t> v(size_t(kRows * kCols));
    for (uint16_t& b : v) b = float_to_bf16(d(gen));
    return v;
  }();
  return x;
}

ScaleLayout layout_of(int64_t index) {
  switch (index) {
    case 0: return ScaleLayout::tensor();
    case 1: return ScaleLayout::token();
    case 2: return ScaleLayout::group(128);
    default: return ScaleLayout::block(128, 128);
  }
}

KernelChoice kernels_of(int64_t index) {
  return index == 0 ? KernelChoice::kScalar : index == 1 ? KernelChoice::kAvx2 : KernelChoice::kAvx512;
}

bool usable(KernelChoice k) {
  const std::vector<std::string_view> names = usable_kernel_names();
  const std::string_view want = k == KernelChoice::kScalar ? "scalar" : k == KernelChoice::kAvx2 ? "avx2" : "avx512";
  return std::find(names.begin(), names.end(), want) != names.end();
}

void label(benchmark::State& state, const ScaleLayout& layout, KernelChoice k) {
  state.SetLabel(std::string(name(layout.granularity)) + "/" +
                 (k == KernelChoice::kScalar ? "scalar" : k == KernelChoice::kAvx2 ? "avx2" : "avx512"));
}

// Times body(spec, kernels) over the benchmark's arguments (granularity, kernels).
template <typename Body>
void run(benchmark::State& state, Body body) {
  const ScaleLayout layout = layout_of(state.range(0));
  const KernelChoice k = kernels_of(state.range(1));
  if (!usable(k)) return state.SkipWithError("kernels not available on this CPU");
  QuantSpec spec;
  spec.layout = layout;
  body(spec, k);
  state.SetBytesProcessed(int64_t(state.iterations()) * kRows * kCols * 2);
  label(state, layout, k);
}

void BM_QuantizeDynamicBf16(benchmark::State& state) {
  run(state, [&](const QuantSpec& spec, KernelChoice k) {
    const MatrixView x = MatrixView::bf16(input().data(), kRows, kCols);
    for (auto _ : state) benchmark::DoNotOptimize(quantize_dynamic(x, spec, k));
  });
}

void BM_DequantizeToBf16(benchmark::State& state) {
  run(state, [&](const QuantSpec& spec, KernelChoice k) {
    const QuantizedMatrix q = quantize_dynamic(MatrixView::bf16(input().data(), kRows, kCols), spec);
    for (auto _ : state) benchmark::DoNotOptimize(dequantize_bf16(q, k));
  });
}

void all_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"granularity", "kernels"});
  for (int g = 0; g < 4; ++g)
    for (int k = 0; k < 3; ++k) b->Args({g, k});
  b->Unit(benchmark::kMillisecond)->MinTime(0.3);
}

BENCHMARK(BM_QuantizeDynamicBf16)->Apply(all_args);
BENCHMARK(BM_DequantizeToBf16)->Apply(all_args);

}  // namespace

BENCHMARK_MAIN();
