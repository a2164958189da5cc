// The CPU linear layer (src/backend/cpu/linear.h) against PyTorch references
// (tools/make_linear_fixtures.py): weight and activation codes and scales bit
// for bit (fp8lm's quantizer), y within the float32 error bound, identical
// results for any thread count, and named errors for bad inputs.
//
// Tolerance (derived, not tuned): the fixture's y is the float64 sum of the
// exact terms t_k = x_k · w_k of the dequantized values. fp8lm sums the K terms
// in float32 in some order (lanes, FMA or not): any order's error is at most
// (K − 1)·u·Σ|t_k| to first order (u = 2^-24). On top of that, each of the
// following rounds once, relative error u of what it touches: the W8A16 weight
// (code × scale, rounded to float32) or the BF16 path's product; W8A8's two
// scale multiplies (the products of codes are exact); the sum over K blocks
// (at most K additions, already inside the K term budget); the bias add. So
// |y − y_ref| ≤ (K + 4)·u·(Σ|t_k| + |bias|).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/linear.h"
#include "common/error.h"
#include "cpp/fixtures.h"
#include "cpp/test_util.h"
#include "weights/linear_weight.h"

namespace fp8lm::cpu {
namespace {

using test::expect_error;
using test::fp8_scheme;
using test::read_array;
constexpr const char* kDir = "linear";

double tolerance(int64_t k, double abs_sum) { return double(k + 4) * 0x1p-24 * abs_sum; }

std::vector<KernelChoice> usable_linear_kernels() {
  std::vector<KernelChoice> out{KernelChoice::kScalar};
  if (linear_kernels_avx2()) out.push_back(KernelChoice::kAvx2);
  if (linear_kernels_avx512()) out.push_back(KernelChoice::kAvx512);
  return out;
}

LinearQuantScheme scheme_of(const nlohmann::json& c) {
  LinearQuantScheme s;
  const std::string layout = c["weight_layout"];
  if (layout == "bf16") return s;
  s.quantized = true;
  s.weight_scales = layout == "tensor"    ? ScaleLayout::tensor()
                    : layout == "channel" ? ScaleLayout::channel()
                                          : ScaleLayout::block(128, 128);
  const std::string act = c["activation"];
  s.activation = act == "none"             ? ActivationQuant::kNone
                 : act == "dynamic_tensor" ? ActivationQuant::kDynamicTensor
                 : act == "dynamic_token"  ? ActivationQuant::kDynamicToken
                 : act == "dynamic_group"  ? ActivationQuant::kDynamicGroup
                                           : ActivationQuant::kStaticTensor;
  s.activation_group = 128;
  if (c.contains("scale_upper_bound")) s.activation_scale_upper_bound = c["scale_upper_bound"].get<float>();
  return s;
}

// A BF16 weight quantized with the runtime scale rule (amax / max, as the
// PyTorch fixtures compute it): the numerics quantizer under test, then the
// weight that owns its codes.
weights::LinearWeight runtime_quantized(const uint16_t* w, int64_t n, int64_t k, const LinearQuantScheme& s) {
  const QuantSpec spec{s.weight_format, s.weight_scales, ScaleRule::runtime(s.weight_format)};
  return weights::from_quantized(quantize_dynamic(MatrixView::bf16(w, n, k), spec), s);
}

std::vector<float> run_linear(const std::vector<float>& x, int64_t m, const weights::LinearWeight& w, int threads,
                              KernelChoice kernels) {
  std::vector<float> y(size_t(m * w.n), -1.0f);
  ThreadPool pool(threads);
  linear(x, m, w, y, &pool, kernels);
  // The plan-taking overload (what CpuOps runs) gives the same bytes.
  std::vector<float> y_plan(y.size(), -2.0f);
  linear(x, m, w, plan_linear(w), y_plan, &pool, kernels);
  EXPECT_EQ(y_plan, y);
  return y;
}

TEST(CpuLinear, FixturesMatchPyTorch) {
  const nlohmann::json manifest = test::read_manifest(kDir);
  int checked = 0;
  for (const nlohmann::json& c : manifest["cases"]) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    const int64_t m = c["m"], n = c["n"], k = c["k"];
    const std::vector<float> x = read_array<float>(kDir, c["x"]);
    const std::vector<uint16_t> wbf = read_array<uint16_t>(kDir, c["w_bf16"]);
    const std::vector<double> y_ref = read_array<double>(kDir, c["y"]);
    const std::vector<double> abs_sum = read_array<double>(kDir, c["abs_sum"]);
    const LinearQuantScheme scheme = scheme_of(c);

    weights::LinearWeight w;
    if (!scheme.quantized) {
      w = weights::high_precision(ElementType::kBF16, wbf.data(), n, k);
    } else {
      // Our quantizer's weight codes and scales equal PyTorch's, bit for bit.
      LinearQuantScheme weight_only = scheme;
      weight_only.activation = ActivationQuant::kNone;
      const weights::LinearWeight online = runtime_quantized(wbf.data(), n, k, weight_only);
      const std::vector<uint8_t> codes = read_array<uint8_t>(kDir, c["w_codes"]);
      const std::vector<float> scales = read_array<float>(kDir, c["w_scales"]);
      ASSERT_EQ(online.scales.size(), scales.size());
      for (size_t i = 0; i < scales.size(); ++i) ASSERT_EQ(test::bits(online.scales[i]), test::bits(scales[i])) << i;
      ASSERT_EQ(0, std::memcmp(online.data, codes.data(), codes.size()));
      // The layer as a checkpoint's bytes give it (static schemes need the input scale).
      w = weights::fp8(static_cast<const uint8_t*>(online.data), n, k, scheme, scales,
                      c.value("input_scale", 0.0f));
      w.owner = online.owner;
      if (scheme.activation != ActivationQuant::kNone) {
        const QuantizedMatrix q = quantize_activations(x.data(), m, w);
        const std::vector<uint8_t> xc = read_array<uint8_t>(kDir, c["x_codes"]);
        const std::vector<float> xs = read_array<float>(kDir, c["x_scales"]);
        ASSERT_EQ(q.codes, xc);
        ASSERT_EQ(q.scales.size(), xs.size());
        for (size_t i = 0; i < xs.size(); ++i) ASSERT_EQ(test::bits(q.scales[i]), test::bits(xs[i])) << i;
      }
    }
    w.bias = read_array<float>(kDir, c["bias"]);

    for (KernelChoice kc : usable_linear_kernels()) {
      SCOPED_TRACE(std::string(select_linear_kernels(kc).name));
      const std::vector<float> y = run_linear(x, m, w, 1, kc);
      for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_NEAR(double(y[i]), y_ref[i], tolerance(k, abs_sum[i])) << "output " << i;
      }
      // Any thread count gives the same bytes: every output has one fixed owner.
      for (int threads : {2, 3}) ASSERT_EQ(run_linear(x, m, w, threads, kc), y) << threads << " threads";
      ++checked;
    }
  }
  EXPECT_GE(checked, 36);
}

// Random weights and inputs for the structural tests below.
struct Problem {
  int64_t m, n, k;
  std::vector<float> x;
  std::vector<uint16_t> w;
};

Problem random_problem(int64_t m, int64_t n, int64_t k, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  Problem p{m, n, k, std::vector<float>(size_t(m * k)), std::vector<uint16_t>(size_t(n * k))};
  for (float& v : p.x) v = d(gen);
  for (uint16_t& v : p.w) v = float_to_bf16(0.05f * d(gen));
  return p;
}

// A row's output does not depend on which other rows share the call (decode
// and prefill give the same bytes), for every scheme and kernel table.
TEST(CpuLinear, RowsIndependentOfBatch) {
  const Problem p = random_problem(70, 37, 300, 1);  // crosses the 64-row tile, odd N and K
  std::vector<weights::LinearWeight> layers{weights::high_precision(ElementType::kBF16, p.w.data(), p.n, p.k)};
  for (ActivationQuant a : {ActivationQuant::kNone, ActivationQuant::kDynamicToken, ActivationQuant::kDynamicGroup}) {
    layers.push_back(runtime_quantized(p.w.data(), p.n, p.k, fp8_scheme(ScaleLayout::block(), a)));
  }
  for (const weights::LinearWeight& w : layers) {
    for (KernelChoice kc : usable_linear_kernels()) {
      const std::vector<float> all = run_linear(p.x, p.m, w, 2, kc);
      for (int64_t r : {0, 5, 63, 64, 69}) {
        const std::vector<float> row(p.x.begin() + r * p.k, p.x.begin() + (r + 1) * p.k);
        const std::vector<float> one = run_linear(row, 1, w, 1, kc);
        for (int64_t j = 0; j < p.n; ++j) ASSERT_EQ(one[size_t(j)], all[size_t(r * p.n + j)]) << r << "," << j;
      }
    }
  }
}

// W8A16 with every layout and both FP8 formats equals x · dequantize_f32(W)ᵀ
// (fp8lm's reference dequantizer) within the float32 bound.
TEST(CpuLinear, WeightOnlyMatchesNumericsDequantize) {
  const Problem p = random_problem(9, 200, 130, 2);
  for (Fp8Format fmt : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    for (ScaleLayout layout : {ScaleLayout::tensor(), ScaleLayout::channel(), ScaleLayout::block(),
                               ScaleLayout::block(64, 32), ScaleLayout::group(64)}) {
      LinearQuantScheme s = fp8_scheme(layout, ActivationQuant::kNone);
      s.weight_format = fmt;
      const weights::LinearWeight w = runtime_quantized(p.w.data(), p.n, p.k, s);
      const QuantizedMatrix ref = quantize_dynamic(MatrixView::bf16(p.w.data(), p.n, p.k),
                                                   {fmt, layout, ScaleRule::runtime(fmt)});
      const std::vector<float> wd = dequantize_f32(ref);
      for (KernelChoice kc : usable_linear_kernels()) {
        const std::vector<float> y = run_linear(p.x, p.m, w, 2, kc);
        for (int64_t i = 0; i < p.m; ++i) {
          for (int64_t j = 0; j < p.n; ++j) {
            double sum = 0, abs_sum = 0;
            for (int64_t q = 0; q < p.k; ++q) {
              const double t = double(p.x[size_t(i * p.k + q)]) * wd[size_t(j * p.k + q)];
              sum += t;
              abs_sum += std::abs(t);
            }
            ASSERT_NEAR(y[size_t(i * p.n + j)], sum, tolerance(p.k, abs_sum))
                << name(fmt) << " " << name(layout.granularity) << " " << i << "," << j;
          }
        }
      }
    }
  }
}

// F16 and F32 storage: converted exactly (f16_to_float itself: test_weights'
// ElementType.ExactConversions), then the same float32 bound.
TEST(CpuLinear, HalfAndFloatWeights) {
  const Problem p = random_problem(3, 21, 45, 3);
  std::mt19937 gen(4);
  std::vector<uint16_t> h(p.w.size());
  for (uint16_t& v : h) v = uint16_t(gen() & 0xBBFFu);  // any sign, exponent < 31: finite, |v| < 2^12
  std::vector<float> wf(p.w.size());
  for (size_t i = 0; i < wf.size(); ++i) wf[i] = bf16_to_float(p.w[i]);
  for (auto [storage, data] : {std::pair{ElementType::kF16, static_cast<const void*>(h.data())},
                               std::pair{ElementType::kF32, static_cast<const void*>(wf.data())}}) {
    const weights::LinearWeight w = weights::high_precision(storage, data, p.n, p.k);
    for (KernelChoice kc : usable_linear_kernels()) {
      const std::vector<float> y = run_linear(p.x, p.m, w, 1, kc);
      for (int64_t i = 0; i < p.m; ++i) {
        for (int64_t j = 0; j < p.n; ++j) {
          double sum = 0, abs_sum = 0;
          for (int64_t q = 0; q < p.k; ++q) {
            const size_t wi = size_t(j * p.k + q);
            const double wv = storage == ElementType::kF16 ? f16_to_float(h[wi]) : wf[wi];
            sum += double(p.x[size_t(i * p.k + q)]) * wv;
            abs_sum += std::abs(double(p.x[size_t(i * p.k + q)]) * wv);
          }
          ASSERT_NEAR(y[size_t(i * p.n + j)], sum, tolerance(p.k, abs_sum)) << i << "," << j;
        }
      }
    }
  }
}

TEST(CpuLinear, BadInputsAreNamedErrors) {
  const Problem p = random_problem(2, 8, 16, 5);
  const weights::LinearWeight w = weights::high_precision(ElementType::kBF16, p.w.data(), p.n, p.k);
  std::vector<float> y(size_t(p.m * p.n));
  expect_error([&] { linear(std::span(p.x).first(5), p.m, w, y); }, "input has 5 values, expected M x K = 2 x 16");
  expect_error([&] { linear(p.x, p.m, w, std::span(y).first(3)); }, "output has 3 values");
  weights::LinearWeight with_bias = w;
  with_bias.bias.assign(3, 0.0f);
  expect_error([&] { linear(p.x, p.m, with_bias, y); }, "bias has 3 values, expected N = 8");
  expect_error([&] { weights::high_precision(ElementType::kBF16, p.w.data(), 0, 16); }, "shape must be positive");

  std::vector<uint8_t> codes(size_t(p.n * p.k), 0x38);
  const LinearQuantScheme channel = fp8_scheme(ScaleLayout::channel(), ActivationQuant::kDynamicToken);
  expect_error([&] { weights::fp8(codes.data(), p.n, p.k, channel, {1.0f, 2.0f}); },
               "needs 8 weight scales, got 2");
  expect_error([&] { weights::fp8(codes.data(), p.n, p.k, fp8_scheme(ScaleLayout::block(), ActivationQuant::kNone), {}); },
               "needs 1 weight scales, got 0");
  expect_error([&] { weights::fp8(codes.data(), p.n, p.k, channel, std::vector<float>(8, NAN)); },
               "weight scale 0 is nan");
  const LinearQuantScheme stat = fp8_scheme(ScaleLayout::tensor(), ActivationQuant::kStaticTensor);
  expect_error([&] { weights::fp8(codes.data(), p.n, p.k, stat, {1.0f}); }, "missing input_scale");
  expect_error([&] { runtime_quantized(p.w.data(), p.n, p.k, stat); }, "missing input_scale");
  LinearQuantScheme odd_group = fp8_scheme(ScaleLayout::block(128, 128), ActivationQuant::kDynamicGroup);
  odd_group.activation_group = 96;
  expect_error([&] { runtime_quantized(p.w.data(), p.n, p.k, odd_group); }, "do not nest");
  weights::LinearWeight hp_w8a8 = w;
  hp_w8a8.activation = ActivationQuant::kDynamicTensor;
  expect_error([&] { linear(p.x, p.m, hp_w8a8, y); }, "needs FP8 weights");
  expect_error([&] { ThreadPool bad(0); }, "threads must be >= 1");
}

// The plan of every scheme the PyTorch fixtures cover (one shape each; the
// static scale and the cap are the fixture's own), plus the element types and
// scale layouts they do not: each line is what linear() will compute, decided
// once at upload. A change here is a change of the CPU backend's computation.
TEST(CpuLinearPlan, Table) {
  std::vector<std::string> lines;
  const nlohmann::json manifest = test::read_manifest(kDir);
  for (const nlohmann::json& c : manifest["cases"]) {
    const std::string name = c["name"];
    if (!name.ends_with("_m1_n160_k320")) continue;
    const int64_t n = c["n"], k = c["k"];
    const LinearQuantScheme scheme = scheme_of(c);
    const std::vector<uint16_t> wbf = read_array<uint16_t>(kDir, c["w_bf16"]);
    weights::LinearWeight w = weights::high_precision(ElementType::kBF16, wbf.data(), n, k);
    if (scheme.quantized) {
      w = weights::fp8(std::vector<uint8_t>(size_t(n * k)).data(), n, k, scheme,
                       read_array<float>(kDir, c["w_scales"]), c.value("input_scale", 0.0f));
    }
    lines.push_back(name + ": " + plan_linear(w).describe());
  }
  const Problem p = random_problem(1, 256, 384, 9);
  const std::vector<uint8_t> codes(size_t(p.n * p.k), 0x38);
  lines.push_back("f16: " + plan_linear(weights::high_precision(ElementType::kF16, p.w.data(), p.n, p.k)).describe());
  lines.push_back("f32: " + plan_linear(weights::high_precision(ElementType::kF32, p.x.data(), 1, p.k)).describe());
  LinearQuantScheme e5m2 = fp8_scheme(ScaleLayout::channel(), ActivationQuant::kNone);
  e5m2.weight_format = Fp8Format::kE5M2;
  lines.push_back("e5m2 channel: " +
                  plan_linear(weights::fp8(codes.data(), p.n, p.k, e5m2, std::vector<float>(256, 1.0f))).describe());
  lines.push_back("group128 weights, token activations: " +
                  plan_linear(weights::fp8(codes.data(), p.n, p.k,
                                           fp8_scheme(ScaleLayout::group(128), ActivationQuant::kDynamicToken),
                                           std::vector<float>(256 * 3, 1.0f)))
                      .describe());
  lines.push_back("tensor weights, group64 activations: " +
                  [&] {
                    LinearQuantScheme s = fp8_scheme(ScaleLayout::tensor(), ActivationQuant::kDynamicGroup);
                    s.activation_group = 64;
                    return plan_linear(weights::fp8(codes.data(), p.n, p.k, s, {1.0f})).describe();
                  }());
  const std::vector<std::string> expected{
      "bf16_m1_n160_k320: bf16 (not quantized)",
      "w8a16_tensor_m1_n160_k320: w8a16 e4m3 w:tensor",
      "w8a16_channel_m1_n160_k320: w8a16 e4m3 w:channel",
      "w8a16_block_m1_n160_k320: w8a16 e4m3 w:block128x128",
      "w8a8_tensor_tensor_m1_n160_k320: w8a8 e4m3 w:tensor a:dynamic-tensor segment=k",
      "w8a8_channel_token_m1_n160_k320: w8a8 e4m3 w:channel a:dynamic-token segment=k",
      "w8a8_channel_token_ub_m1_n160_k320: w8a8 e4m3 w:channel a:dynamic-token cap=0.0978506655 segment=k",
      "w8a8_block_group_m1_n160_k320: w8a8 e4m3 w:block128x128 a:dynamic-group128 segment=128",
      "w8a8_tensor_static_m1_n160_k320: w8a8 e4m3 w:tensor a:static-tensor scale=0.0489253327 segment=k",
      "f16: f16 (not quantized)",
      "f32: f32 (not quantized)",
      "e5m2 channel: w8a16 e5m2 w:channel",
      "group128 weights, token activations: w8a8 e4m3 w:group128 a:dynamic-token segment=128",
      "tensor weights, group64 activations: w8a8 e4m3 w:tensor a:dynamic-group64 segment=64",
  };
  EXPECT_EQ(lines, expected);
}

// CpuOps plans at upload and prints that plan; a norm vector has none.
TEST(CpuLinearPlan, CpuOpsDescribesUploadedWeights) {
  const Problem p = random_problem(1, 128, 256, 10);
  const std::vector<uint8_t> codes(size_t(p.n * p.k), 0x38);
  const weights::LinearWeight w = weights::fp8(
      codes.data(), p.n, p.k, fp8_scheme(ScaleLayout::block(128, 128), ActivationQuant::kDynamicGroup), {1.0f, 1.0f});
  CpuOps ops(1);
  EXPECT_EQ(ops.describe(*ops.upload_linear(w)), "w8a8 e4m3 w:block128x128 a:dynamic-group128 segment=128");
  EXPECT_EQ(ops.describe(*ops.upload_vector(std::vector<float>(4, 1.0f))), "");
  // Validation happens once, at upload, with weights::validate's texts.
  weights::LinearWeight bad = w;
  bad.scales.clear();
  expect_error([&] { ops.upload_linear(bad); }, "needs 2 weight scales, got 0");
}

TEST(CpuThreadPool, RunsEveryTaskOnceAndRethrows) {
  ThreadPool pool(3);
  std::vector<int> hits(1000, 0);
  pool.parallel_for(1000, [&](int64_t t, int thread) {
    ASSERT_LT(thread, 3);
    ++hits[size_t(t)];
  });
  for (int h : hits) ASSERT_EQ(h, 1);
  EXPECT_THROW(pool.parallel_for(100, [](int64_t t, int) { if (t == 42) throw Error("task 42"); }), Error);
  pool.parallel_for(10, [&](int64_t t, int) { hits[size_t(t)] = 7; });  // still usable after an error
  EXPECT_EQ(hits[9], 7);
}

}  // namespace
}  // namespace fp8lm::cpu
