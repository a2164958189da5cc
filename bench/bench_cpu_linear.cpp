// Throughput of the CPU linear layer on the shapes of the shipped model
// (models/fp8lm-gutenberg-22m: hidden 384, intermediate 1024, q 384, kv 128,
// vocab 16384), decode (M = 1) and prefill (M = 128), BF16 vs FP8 W8A16 vs FP8
// W8A8 (per-channel weights, per-token activations) vs FP8 W8A8 block/group,
// on 1 and 2 threads. Counters: GFLOP/s (2·M·N·K per call) and weight GB/s
// (the weight bytes as stored, read once per call).
//
//   bench_cpu_linear --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <random>
#include <string>

#include "backend/cpu/linear.h"
#include "weights/linear_weight.h"

namespace {

using namespace fp8lm;
using namespace fp8lm::cpu;

struct Shape {
  const char* name;
  int64_t n, k;
};
constexpr Shape kShapes[] = {{"q_o", 384, 384},       {"k_v", 128, 384},     {"gate_up", 1024, 384},
                             {"down", 384, 1024},      {"lm_head", 16384, 384}};

const char* kSchemes[] = {"bf16", "fp8_w8a16", "fp8_w8a8_token", "fp8_w8a8_block"};

weights::LinearWeight make_weights(const std::vector<uint16_t>& bf16, const Shape& s, int64_t scheme) {
  if (scheme == 0) return weights::high_precision(ElementType::kBF16, bf16.data(), s.n, s.k);
  LinearQuantScheme q;
  q.quantized = true;
  q.weight_scales = scheme == 3 ? ScaleLayout::block(128, 128) : ScaleLayout::channel();
  q.activation = scheme == 1   ? ActivationQuant::kNone
                 : scheme == 2 ? ActivationQuant::kDynamicToken
                               : ActivationQuant::kDynamicGroup;
  // The runtime scale rule (amax / max), as the layer's tests quantize.
  const QuantSpec spec{q.weight_format, q.weight_scales, ScaleRule::runtime(q.weight_format)};
  return weights::from_quantized(quantize_dynamic(MatrixView::bf16(bf16.data(), s.n, s.k), spec), q);
}

// Args: shape index, M, scheme index, threads.
void BM_Linear(benchmark::State& state) {
  const Shape& s = kShapes[state.range(0)];
  const int64_t m = state.range(1);
  const int64_t scheme = state.range(2);
  const int threads = int(state.range(3));
  std::mt19937 gen(1);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<uint16_t> w(size_t(s.n * s.k));
  for (uint16_t& v : w) v = float_to_bf16(0.05f * d(gen));
  std::vector<float> x(size_t(m * s.k));
  for (float& v : x) v = d(gen);
  std::vector<float> y(size_t(m * s.n));
  const weights::LinearWeight lw = make_weights(w, s, scheme);
  ThreadPool pool(threads);
  for (auto _ : state) {
    linear(x, m, lw, y, &pool);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  const double calls = double(state.iterations());
  const double weight_bytes = double(s.n * s.k) * (scheme == 0 ? 2.0 : 1.0);
  state.counters["GFLOP/s"] =
      benchmark::Counter(calls * 2.0 * double(m * s.n * s.k) / 1e9, benchmark::Counter::kIsRate);
  state.counters["weight_GB/s"] = benchmark::Counter(calls * weight_bytes / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel(std::string(s.name) + " " + kSchemes[scheme] + " M=" + std::to_string(m) + " t=" +
                 std::to_string(threads) + " " + std::string(select_linear_kernels(KernelChoice::kAuto).name));
}

BENCHMARK(BM_Linear)
    ->ArgNames({"shape", "M", "scheme", "threads"})
    ->ArgsProduct({{0, 1, 2, 3, 4}, {1, 128}, {0, 1, 2, 3}, {1, 2}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
