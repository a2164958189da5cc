// The FP8 decode GEMV (src/backend/cuda/gemv/fp8_gemv.h) against fp8lm's CPU linear layer
// (src/backend/cpu/linear.h) with the same codes and scales: every weight scale layout ×
// BF16 activations (W8A16) and E4M3 activations per tensor / token / 1×128 group (W8A8),
// m ∈ {1, 2, 5, 16}, n ∈ {1, 100, 4096}, k ∈ {128, 200, 4096, 4100} (k not a multiple of
// 16 takes the kernel's byte-load path), with and without bias, under the automatic plan
// and forced plans that split K inside and across blocks; fresh random inputs every run
// (the seed is printed; FP8LM_TEST_SEED repeats one). Needs a Hopper GPU; SKIPPED elsewhere.
//
// Tolerance (derived, not tuned). Let T = Σ_k |x̂_k · ŵ_k| + |bias| over the dequantized
// terms (x̂ = x for BF16 activations, code · s_x for E4M3; ŵ = code · s_w), u = 2^-24.
//   * The CPU's float32 result is within (k + 4)·u·T of the exact sum (tests/cpp/
//     test_cpu_linear.cpp derives it: k − 1 additions in any order, plus one rounding each
//     for the dequantized weight or the two scale multiplies, the sum over K blocks and the
//     bias).
//   * The GPU's float32 result obeys the same bound: its products of FP16/BF16 values are
//     exact, the tensor cores add them into float32 accumulators (truncating instead of
//     rounding: at most 2u per step, over k/16 steps of 16 products: ≤ k/8·u·T), then at
//     most 3 roundings for the scales and k/128 + 8 + 64 additions of chunk, warp and split
//     partials, each ≤ u·T: within (k + 4)·u·T for every k tested (k ≥ 128).
//   So the two float32 results differ by at most E = 2·(k + 4)·u·T. The GPU then rounds to
//   BF16 (8 significant bits): half a BF16 spacing at its value, at most
//   half_ulp_bf16(|ref| + E) ≤ 2^-8·(|ref| + E). (Not 2^-9: just above a power of two the
//   rounding error reaches 2^-8 of the value.) Bound: |gpu − ref| ≤ half_ulp_bf16(|ref| + E) + E.
#include <gtest/gtest.h>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/linear.h"
#include "backend/cuda/common/check.h"
#include "backend/cuda/device_info.h"
#include "common/thread_pool.h"
#include "cuda/cuda_test_util.h"
#include "backend/cuda/gemv/fp8_gemv.h"
#include "backend/cuda/quant/quant_kernels.h"
#include "common/error.h"
#include "numerics/fp8_format.h"

namespace fp8lm {
namespace {


// A device allocation; `bytes` may be 0.
struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) : bytes(n) {
    if (n) FP8LM_CUDA_CHECK(cudaMalloc(&ptr, n));
  }
  template <class T>
  explicit DeviceBuffer(const std::vector<T>& v) : DeviceBuffer(v.size() * sizeof(T)) {
    if (bytes) FP8LM_CUDA_CHECK(cudaMemcpy(ptr, v.data(), bytes, cudaMemcpyHostToDevice));
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr(o.ptr), bytes(o.bytes) { o.ptr = nullptr, o.bytes = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr, o.ptr);
    std::swap(bytes, o.bytes);
    return *this;
  }
  template <class T>
  T* as() const { return static_cast<T*>(ptr); }
};

uint64_t test_seed() {
  static const uint64_t seed = [] {
    if (const char* s = std::getenv("FP8LM_TEST_SEED")) return uint64_t(std::strtoull(s, nullptr, 10));
    return (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
  }();
  return seed;
}

enum class Act { kBf16, kTensor, kToken, kGroup };

const char* act_name(Act a) {
  switch (a) {
    case Act::kBf16: return "W8A16";
    case Act::kTensor: return "W8A8 tensor";
    case Act::kToken: return "W8A8 token";
    case Act::kGroup: return "W8A8 group128";
  }
  return "?";
}

const char* layout_name(cuda::WeightScaleLayout l) {
  switch (l) {
    case cuda::WeightScaleLayout::kTensor: return "tensor";
    case cuda::WeightScaleLayout::kChannel: return "channel";
    case cuda::WeightScaleLayout::kBlock128: return "block128";
  }
  return "?";
}

// Weight codes: every E4M3 code but the NaNs, or only the edge ones.
enum class Codes { kAll, kSubnormal, kMax };

struct Problem {
  int64_t m = 1, n = 1, k = 128;
  cuda::WeightScaleLayout layout = cuda::WeightScaleLayout::kTensor;
  Act act = Act::kBf16;
  bool bias = false;
  Codes codes = Codes::kAll;
};

std::string describe(const Problem& p) {
  return "m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k) + " w:" +
         layout_name(p.layout) + " " + act_name(p.act) + (p.bias ? " +bias" : "") +
         (p.codes == Codes::kSubnormal ? " subnormal codes" : p.codes == Codes::kMax ? " max codes" : "") +
         " seed=" + std::to_string(test_seed());
}

// Everything a case needs, on both sides.
struct Case {
  Problem p;
  std::vector<uint8_t> w_codes;
  weights::LinearWeight w;
  std::vector<float> x;       // BF16-representable
  std::vector<uint16_t> x_bf16;
  QuantizedMatrix xq;    // W8A8: the CPU quantizer's codes and scales
  std::vector<uint16_t> bias_bf16;
  std::vector<float> ref;     // CPU linear
  std::vector<double> abs_terms;  // T per output
};

float random_bf16(std::mt19937_64& rng) {
  // Mostly N(0, 1); one in ten spread over 2^-20 … 2^10 (BF16's range matters for W8A16).
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> expo(-20.0f, 10.0f);
  float v = normal(rng);
  if (rng() % 10 == 0) v = std::copysign(std::exp2(expo(rng)), v);
  return round_to_bf16(v);
}

Case make_case(const Problem& p, std::mt19937_64& rng, ThreadPool& pool) {
  Case c;
  c.p = p;
  const int64_t m = p.m, n = p.n, k = p.k;
  c.w_codes.resize(size_t(n * k));
  for (auto& b : c.w_codes) {
    uint8_t v = uint8_t(rng());
    if (p.codes == Codes::kSubnormal) v &= 0x87;           // exponent 0: ±0 and the subnormals
    if (p.codes == Codes::kMax) v = (v & 0x80) | 0x7E;     // ±448
    if ((v & 0x7F) == 0x7F) v ^= 0x01;                     // no NaN
    b = v;
  }
  LinearQuantScheme s;
  s.quantized = true;
  s.weight_format = Fp8Format::kE4M3;
  s.weight_scales = p.layout == cuda::WeightScaleLayout::kTensor    ? ScaleLayout::tensor()
                    : p.layout == cuda::WeightScaleLayout::kChannel ? ScaleLayout::channel()
                                                                    : ScaleLayout::block(128, 128);
  s.activation = p.act == Act::kBf16     ? ActivationQuant::kNone
                 : p.act == Act::kTensor ? ActivationQuant::kDynamicTensor
                 : p.act == Act::kToken  ? ActivationQuant::kDynamicToken
                                         : ActivationQuant::kDynamicGroup;
  s.activation_group = 128;
  const int64_t scale_count = s.weight_scales.scale_rows(n) * s.weight_scales.scale_cols(k);
  std::vector<float> scales(static_cast<size_t>(scale_count));
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> ex(-12, -4);
  for (auto& v : scales) v = std::ldexp(mant(rng), ex(rng));
  c.w = weights::fp8(c.w_codes.data(), n, k, s, std::move(scales));
  if (p.bias) {
    c.w.bias.resize(size_t(n));
    c.bias_bf16.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) {
      c.w.bias[size_t(i)] = random_bf16(rng);
      c.bias_bf16[size_t(i)] = float_to_bf16(c.w.bias[size_t(i)]);
    }
  }
  c.x.resize(size_t(m * k));
  c.x_bf16.resize(c.x.size());
  for (size_t i = 0; i < c.x.size(); ++i) {
    c.x[i] = random_bf16(rng);
    c.x_bf16[i] = float_to_bf16(c.x[i]);
  }
  c.ref.assign(size_t(m * n), 0.0f);
  cpu::linear(c.x, m, c.w, c.ref, &pool);

  // The terms' magnitudes, from the same dequantized values.
  std::vector<float> xd(c.x);
  if (p.act != Act::kBf16) {
    c.xq = cpu::quantize_activations(c.x.data(), m, c.w);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < k; ++j)
        xd[size_t(i * k + j)] = fp8_to_float(c.xq.codes[size_t(i * k + j)], Fp8Format::kE4M3) * c.xq.scale_at(i, j);
  }
  c.abs_terms.assign(size_t(m * n), 0.0);
  const int64_t scols = s.weight_scales.scale_cols(k);
  pool.parallel_for(n, [&](int64_t r, int) {
    std::vector<double> wd(static_cast<size_t>(k));
    for (int64_t j = 0; j < k; ++j) {
      const int64_t si = p.layout == cuda::WeightScaleLayout::kTensor    ? 0
                         : p.layout == cuda::WeightScaleLayout::kChannel ? r
                                                                         : (r / 128) * scols + j / 128;
      wd[size_t(j)] = std::fabs(double(fp8_to_float(c.w_codes[size_t(r * k + j)], Fp8Format::kE4M3)) *
                                double(c.w.scales[size_t(si)]));
    }
    for (int64_t i = 0; i < m; ++i) {
      double t = p.bias ? std::fabs(double(c.w.bias[size_t(r)])) : 0.0;
      for (int64_t j = 0; j < k; ++j) t += std::fabs(double(xd[size_t(i * k + j)])) * wd[size_t(j)];
      c.abs_terms[size_t(i * n + r)] = t;
    }
  });
  return c;
}

double half_ulp_bf16(double v) {
  if (v < 0x1p-126) return 0x1p-134;  // BF16 subnormal spacing / 2 (outputs this small: none here)
  int e = 0;
  std::frexp(v, &e);  // v = f · 2^e, f ∈ [0.5, 1)
  return std::ldexp(1.0, e - 1 - 8);
}

// The device side of a case, uploaded once and run under several plans.
struct DeviceCase {
  DeviceBuffer w, w_scale, x, x_scale, bias, y, x_bf16;
  cuda::Fp8GemvArgs args;
  explicit DeviceCase(const Case& c)
      : w(c.w_codes), w_scale(c.w.scales), bias(c.bias_bf16), y(size_t(c.p.m * c.p.n) * 2), x_bf16(c.x_bf16) {
    args.m = c.p.m;
    args.n = c.p.n;
    args.k = c.p.k;
    args.w = w.as<uint8_t>();
    args.w_scale = w_scale.as<float>();
    args.w_layout = c.p.layout;
    if (c.p.act == Act::kBf16) {
      x = DeviceBuffer(c.x_bf16);
      args.x = x.as<__nv_bfloat16>();
    } else {
      x = DeviceBuffer(c.xq.codes);
      x_scale = DeviceBuffer(c.xq.scales);
      args.x_codes = x.as<uint8_t>();
      args.x_scale = x_scale.as<float>();
      args.x_layout = c.p.act == Act::kTensor  ? cuda::ActivationScaleLayout::kTensor
                      : c.p.act == Act::kToken ? cuda::ActivationScaleLayout::kToken
                                               : cuda::ActivationScaleLayout::kGroup128;
    }
    args.bias = c.p.bias ? bias.as<__nv_bfloat16>() : nullptr;
    args.y = y.as<__nv_bfloat16>();
  }
};

// A zero-filled workspace that grows as needed (the kernel leaves it zeroed).
struct Workspace {
  DeviceBuffer buf;
  void fit(cuda::Fp8GemvArgs& a, const cuda::Fp8GemvPlan* plan) {
    const size_t need = cuda::fp8_gemv_workspace_bytes(a, plan);
    if (need > buf.bytes) {
      buf = DeviceBuffer(need);
      FP8LM_CUDA_CHECK(cudaMemset(buf.ptr, 0, need));
    }
    a.workspace = buf.ptr;
    a.workspace_bytes = buf.bytes;
  }
};

// pdl: two calls back to back, the second a programmatic dependent of the first.
std::vector<uint16_t> run_gpu(DeviceCase& d, Workspace& ws, const cuda::Fp8GemvPlan* plan, bool pdl = false) {
  const size_t count = size_t(d.args.m * d.args.n);
  FP8LM_CUDA_CHECK(cudaMemset(d.y.ptr, 0xFF, count * 2));  // NaN: an unwritten output fails
  ws.fit(d.args, plan);
  cuda::fp8_gemv(d.args, nullptr, plan);
  if (pdl) {
    cuda::Fp8GemvArgs a = d.args;
    a.programmatic_launch = true;
    cuda::fp8_gemv(a, nullptr, plan);
  }
  FP8LM_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> out(count);
  FP8LM_CUDA_CHECK(cudaMemcpy(out.data(), d.y.ptr, count * 2, cudaMemcpyDeviceToHost));
  return out;
}

// The same case with BF16 x that the GEMV quantizes as it stages it (quantize_x), under
// the scheme's dynamic rule — or, with `static_scale`, that device scale.
std::vector<uint16_t> run_gpu_quantizing(DeviceCase& d, Workspace& ws, const cuda::Fp8GemvPlan* plan, Act act,
                                         const float* static_scale = nullptr) {
  const cuda::Fp8GemvArgs saved = d.args;
  d.args.x = d.x_bf16.as<__nv_bfloat16>();
  d.args.x_codes = nullptr;
  d.args.x_scale = static_scale;
  d.args.quantize_x = true;
  const cuda::Fp8ActQuant q = act == Act::kTensor ? cuda::Fp8ActQuant::tensor()
                              : act == Act::kToken ? cuda::Fp8ActQuant::token()
                                                   : cuda::Fp8ActQuant::group(128);
  d.args.x_rule = cuda::dynamic_scale_rule(q);
  std::vector<uint16_t> out = run_gpu(d, ws, plan);
  d.args = saved;
  return out;
}

bool same_plan(const cuda::Fp8GemvPlan& a, const cuda::Fp8GemvPlan& b) {
  return a.row_tiles == b.row_tiles && a.k_splits == b.k_splits;
}

// The plan a call runs: `requested`, or the automatic one, as fp8_gemv resolves it.
cuda::Fp8GemvPlan resolved(const cuda::Fp8GemvArgs& a, const cuda::Fp8GemvPlan* requested) {
  return cuda::fp8_gemv_plan(a, requested);
}

double g_worst = 0.0;  // largest |gpu − ref| / bound seen, reported at the end of a sweep

int64_t check(const Case& c, const std::vector<uint16_t>& got, const std::string& what);

// Quantizing while staging, run under the plan the E4M3-code call ran (`codes_plan`): where it
// resolves to the same plan, the bytes of `expected` (the same codes and scales, the same
// arithmetic); where staging BF16 instead of codes changes the plan (shared memory bounds the
// K splits differently), a different summation order: the CPU bound only.
int64_t expect_quantizing_matches(const Case& c, DeviceCase& d, Workspace& ws, const cuda::Fp8GemvPlan& codes_plan,
                                  const std::vector<uint16_t>& expected, const std::string& what,
                                  const float* static_scale = nullptr) {
  cuda::Fp8GemvArgs q = d.args;
  q.x = d.x_bf16.as<__nv_bfloat16>();
  q.x_codes = nullptr;
  q.x_scale = static_scale;
  q.quantize_x = true;
  q.x_rule.fmax = 448.0f;
  const std::vector<uint16_t> got = run_gpu_quantizing(d, ws, &codes_plan, c.p.act, static_scale);
  if (same_plan(resolved(q, &codes_plan), codes_plan)) {
    EXPECT_EQ(got, expected) << "quantize_x differs at the same plan: " << what << " " << describe(c.p);
    return 0;
  }
  return check(c, got, what + " (quantize_x, its own plan)");
}

// Number of outputs out of bounds (reports the first few).
int64_t check(const Case& c, const std::vector<uint16_t>& got, const std::string& what) {
  int64_t bad = 0;
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = bf16_to_float(got[i]), r = c.ref[i];
    const double e = 2.0 * double(c.p.k + 4) * 0x1p-24 * c.abs_terms[i];
    const double tol = half_ulp_bf16(std::fabs(r) + e) + e;
    const double err = std::fabs(g - r);
    if (std::isfinite(err)) worst = std::max(worst, err / tol);
    if (!(err <= tol)) {
      if (++bad <= 3)
        ADD_FAILURE() << what << " " << describe(c.p) << ": y[" << i / size_t(c.p.n) << ", " << i % size_t(c.p.n)
                      << "] = " << g << ", CPU " << r << ", |diff| " << err << " > bound " << tol;
    }
  }
  g_worst = std::max(g_worst, worst);
  return bad;
}

const std::vector<cuda::Fp8GemvPlan>& forced_plans() {
  // K split across 8 warps of a block and 3 blocks; 8 row tiles, no split; 2 row tiles and
  // as many K splits as there are chunks (clamped).
  static const std::vector<cuda::Fp8GemvPlan> plans = {{1, 3}, {8, 1}, {2, 64}};
  return plans;
}

void run_sweep(Act act) {
  g_worst = 0.0;
  std::cout << "seed " << test_seed() << " (FP8LM_TEST_SEED=" << test_seed() << " repeats it)\n";
  std::mt19937_64 rng(test_seed() ^ (uint64_t(act) * 0x9E3779B97F4A7C15ull));
  ThreadPool pool(int(std::max(1u, std::thread::hardware_concurrency())));
  Workspace ws;
  int64_t failures = 0;
  int index = 0;
  for (auto layout : {cuda::WeightScaleLayout::kTensor, cuda::WeightScaleLayout::kChannel,
                      cuda::WeightScaleLayout::kBlock128})
    for (int64_t n : {1, 100, 4096})
      for (int64_t k : {128, 200, 4096, 4100})
        for (int64_t m : {1, 2, 5, 16}) {
          Problem p{m, n, k, layout, act, (index++ % 2) == 1, Codes::kAll};
          const Case c = make_case(p, rng, pool);
          DeviceCase d(c);
          const std::vector<uint16_t> first = run_gpu(d, ws, nullptr);
          failures += check(c, first, "auto plan");
          // Deterministic: the same bytes again, also when launched to overlap the call before.
          EXPECT_EQ(run_gpu(d, ws, nullptr), first) << "second run differs: " << describe(p);
          EXPECT_EQ(run_gpu(d, ws, nullptr, true), first) << "programmatic launch differs: " << describe(p);
          // W8A8: quantizing while staging gives the bytes of quantizing first (the CPU
          // quantizer's codes and scales here), under every plan.
          const cuda::Fp8GemvPlan auto_plan = resolved(d.args, nullptr);
          if (act != Act::kBf16) failures += expect_quantizing_matches(c, d, ws, auto_plan, first, "auto plan");
          for (const auto& plan : forced_plans()) {
            const std::string what = "plan {" + std::to_string(plan.row_tiles) + ", " + std::to_string(plan.k_splits) + "}";
            const std::vector<uint16_t> planned = run_gpu(d, ws, &plan);
            failures += check(c, planned, what);
            if (act != Act::kBf16)
              failures += expect_quantizing_matches(c, d, ws, resolved(d.args, &plan), planned, what);
          }
          // A static per-tensor scale (the dynamic one, given): the same codes, so the same bytes.
          if (act == Act::kTensor)
            failures += expect_quantizing_matches(c, d, ws, auto_plan, first, "static scale", d.x_scale.as<float>());
          if (failures > 20) FAIL() << "stopping after " << failures << " bad outputs";
        }
  std::cout << act_name(act) << ": worst |gpu - cpu| / bound " << g_worst << "\n";
  ::testing::Test::RecordProperty("worst_err_over_bound", std::to_string(g_worst));
  EXPECT_EQ(failures, 0);
}

TEST(CudaGemv, WeightOnlyBf16ActivationsMatchCpu) {
  REQUIRE_HOPPER();
  run_sweep(Act::kBf16);
}

TEST(CudaGemv, PerTensorActivationsMatchCpu) {
  REQUIRE_HOPPER();
  run_sweep(Act::kTensor);
}

TEST(CudaGemv, PerTokenActivationsMatchCpu) {
  REQUIRE_HOPPER();
  run_sweep(Act::kToken);
}

TEST(CudaGemv, Group128ActivationsMatchCpu) {
  REQUIRE_HOPPER();
  run_sweep(Act::kGroup);
}

// Subnormal weight codes (the FP16 path expands them to FP16 subnormals, which the tensor
// cores must not flush) and the largest codes, for every activation mode.
TEST(CudaGemv, EdgeCodes) {
  REQUIRE_HOPPER();
  std::mt19937_64 rng(test_seed() + 17);
  ThreadPool pool(int(std::max(1u, std::thread::hardware_concurrency())));
  Workspace ws;
  for (Codes codes : {Codes::kSubnormal, Codes::kMax})
    for (Act act : {Act::kBf16, Act::kTensor, Act::kToken, Act::kGroup})
      for (auto layout : {cuda::WeightScaleLayout::kChannel, cuda::WeightScaleLayout::kBlock128}) {
        Problem p{5, 300, 1024, layout, act, true, codes};
        const Case c = make_case(p, rng, pool);
        DeviceCase d(c);
        const std::vector<uint16_t> got = run_gpu(d, ws, nullptr);
        EXPECT_EQ(check(c, got, "edge codes"), 0);
        if (act != Act::kBf16) {
          EXPECT_EQ(expect_quantizing_matches(c, d, ws, resolved(d.args, nullptr), got, "edge codes"), 0);
        }
      }
}

void expect_error(const std::function<void()>& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(CudaGemv, BadArgumentsAreNamedErrors) {
  REQUIRE_HOPPER();
  std::mt19937_64 rng(test_seed());
  ThreadPool pool(1);
  const Case c = make_case({4, 256, 4096, cuda::WeightScaleLayout::kChannel, Act::kToken, false, Codes::kAll}, rng, pool);
  DeviceCase d(c);
  auto with = [&](const std::function<void(cuda::Fp8GemvArgs&)>& edit) {
    cuda::Fp8GemvArgs a = d.args;
    edit(a);
    return a;
  };
  auto run = [](const cuda::Fp8GemvArgs& a, const cuda::Fp8GemvPlan* plan = nullptr) {
    return [a, plan] { cuda::fp8_gemv(a, nullptr, plan); };
  };
  expect_error(run(with([](auto& a) { a.m = 17; })), "m = 17 is outside 1..16");
  expect_error(run(with([](auto& a) { a.m = 0; })), "m = 0 is outside");
  expect_error(run(with([](auto& a) { a.k = 0; })), "weight shape [256, 0] must be positive");
  expect_error(run(with([](auto& a) { a.w_scale = nullptr; })), "weights or weight scales missing");
  expect_error(run(with([](auto& a) { a.y = nullptr; })), "output y missing");
  expect_error(run(with([&](auto& a) { a.x = reinterpret_cast<const __nv_bfloat16*>(d.x.ptr); })),
               "exactly one of x (BF16, W8A16 or quantize_x) and x_codes");
  expect_error(run(with([](auto& a) { a.x_scale = nullptr; })), "E4M3 activations need x_scale");
  expect_error(run(with([](auto& a) { a.x_layout = cuda::ActivationScaleLayout::kNone; })),
               "E4M3 activations need x_layout");
  expect_error(run(with([&](auto& a) {
                 a.x_codes = nullptr;
                 a.x = reinterpret_cast<const __nv_bfloat16*>(d.x.ptr);
               })),
               "BF16 activations take no scales");
  auto quantizing = [&](auto& a) {
    a.x_codes = nullptr;
    a.x = d.x_bf16.as<__nv_bfloat16>();
    a.x_scale = nullptr;
    a.quantize_x = true;
  };
  expect_error(run(with([&](auto& a) { a.quantize_x = true; })), "quantize_x quantizes BF16 x: give x, not x_codes");
  expect_error(run(with([&](auto& a) {
                 quantizing(a);
                 a.x_layout = cuda::ActivationScaleLayout::kNone;
               })),
               "quantize_x needs x_layout kTensor, kToken or kGroup128");
  expect_error(run(with([&](auto& a) {
                 quantizing(a);
                 a.x_scale = d.x_scale.as<float>();
               })),
               "a static scale (x_scale) is per-tensor only");
  expect_error(run(with([&](auto& a) {
                 quantizing(a);
                 a.x_rule.fmax = 0.0f;
               })),
               "the scale rule needs fmax > 0");
  static const cuda::Fp8GemvPlan split{8, 4};
  expect_error(run(with([](auto& a) { a.workspace = nullptr; }), &split), "needs a zero-filled workspace of");
  expect_error(run(with([](auto& a) { a.workspace_bytes = 16; }), &split), "needs a zero-filled workspace of");
}

}  // namespace
}  // namespace fp8lm
