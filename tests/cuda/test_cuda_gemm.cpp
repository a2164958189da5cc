// The CUDA backend's cuBLASLt GEMMs against fp8lm's CPU reference, and its
// caching allocator. Needs a Hopper GPU; every test reports SKIPPED elsewhere
// (CI has none).
//
// Inputs are fresh random numbers on every run: the seed comes from the clock
// and is printed (set FP8LM_TEST_SEED to repeat a run). Shapes include sizes
// that are not multiples of 16 or 128 (m ∈ {1, 7, 64, 200}, n ∈ {96, 320,
// 1000}, k ∈ {128, 208, 384, 1024}); bias on every other shape.
//
// Reference: the same FP8 codes and scales (fp8lm's quantizer, as cpu::linear
// makes them) multiplied out in float64 — exact, since every product of two
// E4M3 codes has at most 8 significant bits and a block sum of ≤ 1024 of them
// fits a double's 53. cpu::linear itself is checked against that float64 value
// with its own float32 bound, so the GPU is compared with exactly what fp8lm's
// CPU backend computes, minus the CPU's own rounding.
//
// Tolerance, per output element, derived before running (never widened to
// pass). With S = Σ_k |x_k·w_k|·s_x·s_w + |bias| (the sum of the magnitudes of
// all terms) and u = 2^-8 the unit roundoff of the BF16 output:
//
//   |gpu − ref| ≤ u·(|ref| + E) + E
//
// where E bounds the accumulation error before the BF16 rounding:
//   * BF16 GEMM: products of BF16 values are exact in float32; k additions in
//     float32 whose rounding may be towards zero (tensor cores align and
//     truncate), i.e. ≤ 1 ulp = 2^-23 relative to a partial sum ≤ S each:
//     E = (k + 4)·2^-23·S (the 4: bias, split-K reduction, alpha).
//   * FP8 GEMMs: products of E4M3 codes are exact; the tensor cores add each
//     wgmma step of 32 products into an accumulator that keeps fewer bits than
//     float32 (DeepSeek-V3 §3.3.2 measured about 14 on Hopper; we allow 13
//     fraction bits, truncated: ≤ 2^-12 relative to a partial sum ≤ S per
//     step), and cuBLAS (fast accumulation off) promotes to float32 and
//     applies the scales there: cdiv(k, 32) truncations of 2^-12·S, plus
//     (cdiv(k,128) + 4) float32 roundings (block promotion, two scale
//     products, bias, split-K):  E = (cdiv(k,32)·2^-12 + (cdiv(k,128)+4)·2^-23)·S.
// Every output element is also poisoned (NaN) before the run, so an element
// the GEMM did not write fails. A last test proves that the tolerance is tight
// enough to catch a wrong scale layout.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/linear.h"
#include "backend/cuda/common/check.h"
#include "backend/cuda/gemm/cublaslt_gemm.h"
#include "backend/cuda/gemm/cutlass_fp8_gemm.h"
#include "backend/cuda/device_info.h"
#include "common/thread_pool.h"
#include "cuda/cuda_test_util.h"
#include "backend/cuda/common/device_memory.h"
#include "backend/cuda/common/stream.h"
#include "common/error.h"
#include "numerics/fp8_format.h"
#include "numerics/quantize.h"
#include "spec/quant_scheme.h"

namespace fp8lm {
namespace {

using cuda::GemmArgs;
using cuda::GemmScaleMode;


uint64_t run_seed() {
  static const uint64_t seed = [] {
    const char* env = std::getenv("FP8LM_TEST_SEED");
    const uint64_t s = env != nullptr ? std::strtoull(env, nullptr, 10)
                                      : uint64_t(std::chrono::system_clock::now().time_since_epoch().count());
    std::printf("[ seed     ] FP8LM_TEST_SEED=%llu\n", static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

ThreadPool& host_pool() {
  static ThreadPool pool(int(std::max(1u, std::thread::hardware_concurrency())));
  return pool;
}

struct Shape {
  int64_t m, n, k;
  bool bias;
};

std::vector<Shape> test_shapes() {
  std::vector<Shape> out;
  int i = 0;
  for (int64_t m : {1, 7, 64, 200})
    for (int64_t n : {96, 320, 1000})
      for (int64_t k : {128, 208, 384, 1024}) out.push_back({m, n, k, (i++ % 2) == 1});
  return out;
}

std::string shape_name(const Shape& s) {
  return "m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) +
         (s.bias ? " +bias" : "");
}

// Random values whose magnitude varies by row and by 128-wide block (so that
// per-token, per-channel and block scales all differ), never all zero.
std::vector<float> random_matrix(std::mt19937_64& rng, int64_t rows, int64_t cols) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> row_exp(-3, 3), block_exp(-2, 2);
  std::vector<float> out(size_t(rows * cols));
  const int64_t blocks = cdiv(cols, 128);
  std::vector<int> be(size_t(cdiv(rows, 128) * blocks));
  for (int& e : be) e = block_exp(rng);
  for (int64_t r = 0; r < rows; ++r) {
    const int re = row_exp(rng);
    for (int64_t c = 0; c < cols; ++c) {
      const int e = re + be[size_t((r / 128) * blocks + c / 128)];
      out[size_t(r * cols + c)] = std::ldexp(normal(rng), e);
    }
  }
  return out;
}

// Finished before any stream reads it (test::upload_bytes: the GEMMs run on non-blocking streams).
template <typename T>
cuda::DeviceBuffer upload(cuda::DeviceAllocator& alloc, const std::vector<T>& host) {
  cuda::DeviceBuffer buf(alloc, host.size() * sizeof(T));
  test::upload_bytes(buf.get(), host.data(), host.size() * sizeof(T));
  return buf;
}

// Runs `gemm(d)` into a NaN-poisoned [m, n] BF16 output d and returns it as floats.
std::vector<float> run_into_poisoned(cuda::DeviceAllocator& alloc, int64_t m, int64_t n, cudaStream_t stream,
                                     const std::function<void(void*)>& gemm) {
  cuda::DeviceBuffer d(alloc, size_t(m * n) * 2, stream);
  FP8LM_CUDA_CHECK(cudaMemsetAsync(d.get(), 0xFF, d.bytes(), stream));  // 0xFFFF: a BF16 NaN
  gemm(d.get());
  std::vector<uint16_t> bits(size_t(m * n));
  FP8LM_CUDA_CHECK(cudaMemcpyAsync(bits.data(), d.get(), bits.size() * 2, cudaMemcpyDeviceToHost, stream));
  FP8LM_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = bf16_to_float(bits[i]);
  return out;
}

std::vector<float> run_gemm(cuda::CublasLtGemm& gemm, cuda::DeviceAllocator& alloc, GemmArgs args,
                            cudaStream_t stream) {
  return run_into_poisoned(alloc, args.m, args.n, stream, [&](void* d) {
    args.d = d;
    gemm.run(args, stream);
  });
}

struct Comparison {
  int64_t violations = 0;
  double worst_ratio = 0.0;  // max |err| / tol
  double rel_norm = 0.0;     // ‖out − ref‖ / ‖ref‖
  std::string first;         // the first violation, described
};

// `e_coeff` is E / S (see the file comment).
Comparison compare(const std::vector<float>& got, const std::vector<double>& ref, const std::vector<double>& mag,
                   double e_coeff, double u, int64_t n) {
  Comparison c;
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double e = e_coeff * mag[i];
    const double tol = u * (std::fabs(ref[i]) + e) + e;
    const double err = std::fabs(double(got[i]) - ref[i]);
    num += err * err;
    den += ref[i] * ref[i];
    const bool bad = !(err <= tol);  // NaN (an unwritten element) fails too
    if (bad && c.violations++ == 0) {
      c.first = "element [" + std::to_string(int64_t(i) / n) + ", " + std::to_string(int64_t(i) % n) +
                "]: gpu " + std::to_string(got[i]) + " ref " + std::to_string(ref[i]) + " tol " +
                std::to_string(tol);
    }
    c.worst_ratio = std::max(c.worst_ratio, std::isnan(err) ? INFINITY : err / tol);
  }
  c.rel_norm = std::sqrt(num / den);
  return c;
}

constexpr double kBf16U = 1.0 / 256;  // 2^-8

// ---------------------------------------------------------------------------
// BF16 × BF16 against float64.

TEST(CudaGemm, Bf16MatchesFloat64) {
  REQUIRE_HOPPER();
  cuda::DeviceAllocator alloc;
  cuda::CublasLtGemm gemm(64ull << 20, &alloc);
  cuda::Stream stream;
  double worst = 0.0, worst_rel = 0.0;
  int idx = 0;
  for (const Shape& s : test_shapes()) {
    std::mt19937_64 rng(run_seed() + uint64_t(idx++));
    std::vector<float> x = random_matrix(rng, s.m, s.k), w = random_matrix(rng, s.n, s.k);
    std::vector<uint16_t> xb(x.size()), wb(w.size()), bb;
    for (size_t i = 0; i < x.size(); ++i) xb[i] = float_to_bf16(x[i]);
    for (size_t i = 0; i < w.size(); ++i) wb[i] = float_to_bf16(w[i]);
    if (s.bias) {
      std::vector<float> b = random_matrix(rng, 1, s.n);
      for (float v : b) bb.push_back(float_to_bf16(v * 4.0f));
    }
    std::vector<double> ref(size_t(s.m * s.n)), mag(ref.size());
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t j = 0; j < s.n; ++j) {
        double acc = 0.0, a = 0.0;
        for (int64_t kk = 0; kk < s.k; ++kk) {
          const double p = double(bf16_to_float(xb[size_t(i * s.k + kk)])) * bf16_to_float(wb[size_t(j * s.k + kk)]);
          acc += p;
          a += std::fabs(p);
        }
        if (s.bias) {
          acc += bf16_to_float(bb[size_t(j)]);
          a += std::fabs(bf16_to_float(bb[size_t(j)]));
        }
        ref[size_t(i * s.n + j)] = acc;
        mag[size_t(i * s.n + j)] = a;
      }
    cuda::DeviceBuffer dx = upload(alloc, xb), dw = upload(alloc, wb);
    cuda::DeviceBuffer dbias = s.bias ? upload(alloc, bb) : cuda::DeviceBuffer();
    GemmArgs args;
    args.m = s.m;
    args.n = s.n;
    args.k = s.k;
    args.a = dx.get();
    args.b = dw.get();
    args.bias = dbias.get();
    args.mode = GemmScaleMode::kNone;
    ASSERT_TRUE(gemm.supported(args)) << shape_name(s) << ": " << gemm.unsupported_reason(args);
    const std::vector<float> got = run_gemm(gemm, alloc, args, stream);
    const Comparison c = compare(got, ref, mag, double(s.k + 4) * std::ldexp(1.0, -23), kBf16U, s.n);
    EXPECT_EQ(c.violations, 0) << "BF16 " << shape_name(s) << ": " << c.violations << " elements out of tolerance, first "
                               << c.first;
    worst = std::max(worst, c.worst_ratio);
    worst_rel = std::max(worst_rel, c.rel_norm);
  }
  std::printf("[ summary  ] BF16: %zu shapes, worst |err|/tol %.3f, worst ||err||/||ref|| %.2e\n",
              test_shapes().size(), worst, worst_rel);
}

// ---------------------------------------------------------------------------
// FP8 schemes against fp8lm's CPU reference.

struct Fp8Scheme {
  GemmScaleMode mode;
  ScaleLayout weight;
  ActivationQuant activation;
};

Fp8Scheme scheme_of(GemmScaleMode mode) {
  switch (mode) {
    case GemmScaleMode::kTensor: return {mode, ScaleLayout::tensor(), ActivationQuant::kDynamicTensor};
    case GemmScaleMode::kOuterVector: return {mode, ScaleLayout::channel(), ActivationQuant::kDynamicToken};
    case GemmScaleMode::kBlock: return {mode, ScaleLayout::block(128, 128), ActivationQuant::kDynamicGroup};
    case GemmScaleMode::kNone: break;
  }
  throw Error("not an FP8 mode");
}

// One FP8 problem: fp8lm's codes and scales for x and W, their float64
// product, and cpu::linear's output.
struct Fp8Problem {
  Shape s;
  QuantizedMatrix xq, wq;
  std::vector<uint16_t> bias_bf16;
  std::vector<double> ref, mag;
};

Fp8Problem make_fp8_problem(const Shape& s, GemmScaleMode mode, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const Fp8Scheme sc = scheme_of(mode);
  Fp8Problem p;
  p.s = s;
  const std::vector<float> x = random_matrix(rng, s.m, s.k), w = random_matrix(rng, s.n, s.k);
  std::vector<float> bias;
  if (s.bias) {
    for (float v : random_matrix(rng, 1, s.n)) p.bias_bf16.push_back(float_to_bf16(v * 4.0f));
    for (uint16_t b : p.bias_bf16) bias.push_back(bf16_to_float(b));
  }

  LinearQuantScheme scheme;
  scheme.quantized = true;
  scheme.weight_format = Fp8Format::kE4M3;
  scheme.weight_scales = sc.weight;
  scheme.activation = sc.activation;
  scheme.activation_group = 128;
  p.wq = quantize_dynamic(MatrixView::f32(w.data(), s.n, s.k),
                          {Fp8Format::kE4M3, sc.weight, ScaleRule::runtime(Fp8Format::kE4M3)});
  weights::LinearWeight lw = weights::fp8(p.wq.codes.data(), s.n, s.k, scheme, p.wq.scales);
  lw.bias = bias;
  p.xq = cpu::quantize_activations(x.data(), s.m, lw);

  // float64 reference on the same codes and scales, per 128-wide K block.
  std::vector<double> xd(p.xq.codes.size()), wd(p.wq.codes.size());
  for (size_t i = 0; i < xd.size(); ++i) xd[i] = fp8_to_float(p.xq.codes[i], Fp8Format::kE4M3);
  for (size_t i = 0; i < wd.size(); ++i) wd[i] = fp8_to_float(p.wq.codes[i], Fp8Format::kE4M3);
  p.ref.assign(size_t(s.m * s.n), 0.0);
  p.mag.assign(p.ref.size(), 0.0);
  ThreadPool& pool = host_pool();
  pool.parallel_for(s.m, [&](int64_t i, int) {
    for (int64_t j = 0; j < s.n; ++j) {
      double acc = 0.0, a = 0.0;
      for (int64_t c0 = 0; c0 < s.k; c0 += 128) {
        double dot = 0.0, adot = 0.0;
        for (int64_t kk = c0; kk < std::min(s.k, c0 + 128); ++kk) {
          const double prod = xd[size_t(i * s.k + kk)] * wd[size_t(j * s.k + kk)];
          dot += prod;
          adot += std::fabs(prod);
        }
        const double sc2 = double(p.xq.scale_at(i, c0)) * double(p.wq.scale_at(j, c0));
        acc += dot * sc2;
        a += adot * sc2;
      }
      if (s.bias) {
        acc += bias[size_t(j)];
        a += std::fabs(bias[size_t(j)]);
      }
      p.ref[size_t(i * s.n + j)] = acc;
      p.mag[size_t(i * s.n + j)] = a;
    }
  });

  // fp8lm's CPU backend on the same input agrees with that reference to float32 rounding:
  // per block a float32 dot (≤ 128 or k additions), two scale products, L block sums, bias.
  std::vector<float> y(size_t(s.m * s.n));
  cpu::linear(x, s.m, lw, y, &pool);
  const double cpu_e = double(s.k + 4 * cdiv(s.k, 128) + 4) * std::ldexp(1.0, -24);
  for (size_t i = 0; i < y.size(); ++i) {
    if (!(std::fabs(double(y[i]) - p.ref[i]) <= cpu_e * p.mag[i])) {
      throw Error("cpu::linear disagrees with the float64 reference at " + std::to_string(i) + " (" +
                  shape_name(s) + "): " + std::to_string(y[i]) + " vs " + std::to_string(p.ref[i]));
    }
  }
  return p;
}

// Runs without a GPU (CI too): the float64 reference the GPU tests use agrees
// with cpu::linear for every scheme and shape (make_fp8_problem checks it).
TEST(CudaGemmReference, Float64ReferenceMatchesCpuLinear) {
  int idx = 0;
  for (GemmScaleMode mode : {GemmScaleMode::kTensor, GemmScaleMode::kOuterVector, GemmScaleMode::kBlock})
    for (const Shape& s : test_shapes()) {
      if (s.m > 64 || s.n > 320) continue;  // the largest shapes run on the GPU machine only
      EXPECT_NO_THROW((void)make_fp8_problem(s, mode, run_seed() + 7 * uint64_t(idx++))) << shape_name(s);
    }
}

double fp8_e_coeff(int64_t k) { return fp8lm::test::fp8_gemm_error_coeff(k); }

// Whether cuBLASLt documents this case as supported (cublaslt_gemm.h): those
// must run; the others may run (then they must be right) or must fail with a
// named cuBLASLt status.
bool documented_supported(GemmScaleMode mode, const Shape& s) {
  if (s.k % 16 != 0 || s.n % 8 != 0) return false;
  if (s.bias && mode != GemmScaleMode::kTensor) return false;  // not documented either way
  if (mode == GemmScaleMode::kBlock) return s.m % 4 == 0 && s.k % 128 == 0;
  return true;
}

struct Fp8Device {
  cuda::DeviceBuffer x, w, sx, sw, bias;
};

Fp8Device upload_problem(cuda::DeviceAllocator& alloc, const Fp8Problem& p) {
  Fp8Device d;
  d.x = upload(alloc, p.xq.codes);
  d.w = upload(alloc, p.wq.codes);
  d.sx = upload(alloc, p.xq.scales);
  d.sw = upload(alloc, p.wq.scales);
  if (!p.bias_bf16.empty()) d.bias = upload(alloc, p.bias_bf16);
  return d;
}

GemmArgs args_for(const Fp8Problem& p, const Fp8Device& d, GemmScaleMode mode) {
  GemmArgs a;
  a.m = p.s.m;
  a.n = p.s.n;
  a.k = p.s.k;
  a.a = d.x.get();
  a.b = d.w.get();
  a.a_scale = d.sx.as<float>();
  a.b_scale = d.sw.as<float>();
  a.bias = d.bias.get();
  a.mode = mode;
  return a;
}

void check_fp8_mode(GemmScaleMode mode) {
  cuda::DeviceAllocator alloc;
  cuda::CublasLtGemm gemm(64ull << 20, &alloc);
  cuda::Stream stream;
  double worst = 0.0, worst_rel = 0.0;
  int ran = 0, idx = 0;
  std::string unsupported;
  for (const Shape& s : test_shapes()) {
    const Fp8Problem p = make_fp8_problem(s, mode, run_seed() + 1000 * uint64_t(mode) + uint64_t(idx++));
    const Fp8Device d = upload_problem(alloc, p);
    const GemmArgs args = args_for(p, d, mode);
    if (!gemm.supported(args)) {
      EXPECT_FALSE(documented_supported(mode, s))
          << name(mode) << " " << shape_name(s) << " should be supported: " << gemm.unsupported_reason(args);
      try {
        (void)run_gemm(gemm, alloc, args, stream);
        ADD_FAILURE() << name(mode) << " " << shape_name(s) << ": unsupported, but run() did not throw";
      } catch (const Error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("CUBLAS_STATUS_"), std::string::npos) << what;
        EXPECT_NE(what.find("m=" + std::to_string(s.m) + " n=" + std::to_string(s.n)), std::string::npos) << what;
      }
      unsupported += " [" + shape_name(s) + "]";
      continue;
    }
    const std::vector<float> got = run_gemm(gemm, alloc, args, stream);
    const Comparison c = compare(got, p.ref, p.mag, fp8_e_coeff(s.k), kBf16U, s.n);
    EXPECT_EQ(c.violations, 0) << name(mode) << " " << shape_name(s) << ": " << c.violations
                               << " elements out of tolerance, first " << c.first;
    worst = std::max(worst, c.worst_ratio);
    worst_rel = std::max(worst_rel, c.rel_norm);
    ++ran;
  }
  std::printf("[ summary  ] %s: %d of %zu shapes ran, worst |err|/tol %.3f, worst ||err||/||ref|| %.2e\n",
              name(mode), ran, test_shapes().size(), worst, worst_rel);
  if (!unsupported.empty()) std::printf("[ summary  ] %s: no algorithm for%s\n", name(mode), unsupported.c_str());
}

TEST(CudaGemm, Fp8PerTensorMatchesCpuReference) {
  REQUIRE_HOPPER();
  check_fp8_mode(GemmScaleMode::kTensor);
}

TEST(CudaGemm, Fp8OuterVectorMatchesCpuReference) {
  REQUIRE_HOPPER();
  check_fp8_mode(GemmScaleMode::kOuterVector);
}

#ifdef FP8LM_WITH_CUTLASS
// One CUTLASS case: arguments the GEMM refuses must make the call throw, naming why (returns that
// reason); the others run into a NaN-poisoned output and must match the reference within the
// cuBLASLt tests' bound (returns "", and keeps the worst errors).
std::string check_cutlass_case(cuda::DeviceAllocator& alloc, cuda::Stream& stream, const Shape& s, const Fp8Problem& p,
                               cuda::CutlassFp8GemmArgs a, const std::string& what, double& worst, double& worst_rel) {
  const std::string why = cuda::cutlass_fp8_gemm_unsupported(a);
  if (!why.empty()) {
    try {
      cuda::cutlass_fp8_gemm(a, nullptr, 0, stream);
      ADD_FAILURE() << what << " " << shape_name(s) << ": refused, but the call did not throw";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
    return why;
  }
  const size_t ws_bytes = cuda::cutlass_fp8_gemm_workspace_bytes(a);
  cuda::DeviceBuffer ws(alloc, std::max<size_t>(ws_bytes, 16), stream);
  const std::vector<float> got = run_into_poisoned(alloc, s.m, s.n, stream, [&](void* out) {
    a.y = out;
    cuda::cutlass_fp8_gemm(a, ws.get(), ws_bytes, stream);
  });
  const Comparison c = compare(got, p.ref, p.mag, fp8_e_coeff(s.k), kBf16U, s.n);
  EXPECT_EQ(c.violations, 0) << what << " " << shape_name(s) << ": " << c.violations
                             << " elements out of tolerance, first " << c.first;
  worst = std::max(worst, c.worst_ratio);
  worst_rel = std::max(worst_rel, c.rel_norm);
  return {};
}

// The CUTLASS GEMM (cutlass_fp8_gemm.h), both configurations, on the per-token × per-channel
// problems, against the same reference and bound as cuBLASLt's: every shape it takes (k % 16 =
// 0, n % 8 = 0; it has no bias) must match, into a NaN-poisoned output; the others must be
// refused, naming why. Beside the common shapes: partial tiles on every side, a Llama-3.1-8B-sized
// K, and an m = 256 × N = 4096 problem of fewer tiles than SMs (where stream-K splits K).
TEST(CudaGemm, CutlassFp8PerTokenPerChannelMatchesCpuReference) {
  REQUIRE_HOPPER();
  cuda::DeviceAllocator alloc;
  cuda::Stream stream;
  std::vector<Shape> shapes = test_shapes();
  shapes.push_back({300, 384, 640, false});
  shapes.push_back({256, 1024, 4096, false});
  shapes.push_back({256, 4096, 4096, false});
  for (const cuda::CutlassFp8Config config : cuda::kCutlassFp8Configs) {
    const std::string what = std::string("CUTLASS ") + cuda::cutlass_fp8_config_name(config);
    double worst = 0.0, worst_rel = 0.0;
    int ran = 0, idx = 0;
    for (Shape s : shapes) {
      s.bias = false;
      const Fp8Problem p = make_fp8_problem(s, GemmScaleMode::kOuterVector, run_seed() + 5000 + uint64_t(idx++));
      const Fp8Device d = upload_problem(alloc, p);
      cuda::DeviceBuffer y(alloc, size_t(s.m * s.n) * 2, stream);
      cuda::CutlassFp8GemmArgs a;
      a.m = s.m, a.n = s.n, a.k = s.k;
      a.x = d.x.as<uint8_t>(), a.x_scale = d.sx.as<float>();
      a.w = d.w.as<uint8_t>(), a.w_scale = d.sw.as<float>();
      a.y = y.get();  // an aligned output to judge the shape by; the run writes its own
      a.config = config;
      const std::string why = check_cutlass_case(alloc, stream, s, p, a, what, worst, worst_rel);
      EXPECT_EQ(why.empty(), s.k % 16 == 0 && s.n % 8 == 0) << what << " " << shape_name(s) << ": " << why;
      ran += why.empty();
    }
    std::printf("[ summary  ] %s per-token x per-channel: %d of %zu shapes ran, worst |err|/tol %.3f, "
                "worst ||err||/||ref|| %.2e\n",
                what.c_str(), ran, shapes.size(), worst, worst_rel);
  }
}
#endif

TEST(CudaGemm, Fp8BlockMatchesCpuReference) {
  REQUIRE_HOPPER();
  check_fp8_mode(GemmScaleMode::kBlock);
}

// The scale grids converted ahead (as a fused quantization kernel or the loader
// would) give the same result as the conversion inside run().
TEST(CudaGemm, Fp8BlockWithCublasLayoutScales) {
  REQUIRE_HOPPER();
  cuda::DeviceAllocator alloc;
  cuda::CublasLtGemm gemm(64ull << 20, &alloc);
  for (const Shape& s : {Shape{64, 320, 384, false}, Shape{200, 1000, 1024, false}}) {
    const Fp8Problem p = make_fp8_problem(s, GemmScaleMode::kBlock, run_seed() + 77);
    const Fp8Device d = upload_problem(alloc, p);
    GemmArgs args = args_for(p, d, GemmScaleMode::kBlock);
    if (!gemm.supported(args)) GTEST_SKIP() << "no block-scaled algorithm for " << shape_name(s);
    const std::vector<float> inside = run_gemm(gemm, alloc, args, nullptr);
    cuda::DeviceBuffer sx(alloc, p.xq.scales.size() * 4), sw(alloc, size_t(cuda::cublas_block_scale_count(s.n, s.k)) * 4);
    cuda::group_scales_to_cublas(args.a_scale, s.m, s.k, sx.as<float>(), nullptr);
    cuda::block_scales_to_cublas(args.b_scale, s.n, s.k, sw.as<float>(), nullptr);
    args.a_scale = sx.as<float>();
    args.b_scale = sw.as<float>();
    args.cublas_scale_layout = true;
    const std::vector<float> ahead = run_gemm(gemm, alloc, args, nullptr);
    EXPECT_EQ(0, std::memcmp(inside.data(), ahead.data(), inside.size() * 4)) << shape_name(s);
  }
}

// The tolerance is tight enough to see a wrong scale layout: the activation
// grid passed untransposed (as if it were cuBLASLt's layout) must fail it.
TEST(CudaGemm, ToleranceCatchesWrongScaleLayout) {
  REQUIRE_HOPPER();
  cuda::DeviceAllocator alloc;
  cuda::CublasLtGemm gemm(64ull << 20, &alloc);
  const Shape s{64, 320, 1024, false};
  const Fp8Problem p = make_fp8_problem(s, GemmScaleMode::kBlock, run_seed() + 99);
  const Fp8Device d = upload_problem(alloc, p);
  GemmArgs args = args_for(p, d, GemmScaleMode::kBlock);
  ASSERT_TRUE(gemm.supported(args)) << gemm.unsupported_reason(args);
  args.cublas_scale_layout = true;  // wrong: a_scale is fp8lm's [m, L], not [L, m]
  const std::vector<float> got = run_gemm(gemm, alloc, args, nullptr);
  const Comparison c = compare(got, p.ref, p.mag, fp8_e_coeff(s.k), kBf16U, s.n);
  std::printf("[ summary  ] wrong activation-scale layout: %lld of %lld elements out of tolerance\n",
              static_cast<long long>(c.violations), static_cast<long long>(s.m * s.n));
  EXPECT_GT(c.violations, s.m * s.n / 4);
}

// ---------------------------------------------------------------------------
// Named errors, plan cache, streams, no allocation on the hot path.

TEST(CudaGemm, UnsupportedCasesGiveNamedErrors) {
  REQUIRE_HOPPER();
  cuda::DeviceAllocator alloc;
  cuda::CublasLtGemm gemm(64ull << 20, &alloc);
  cuda::DeviceBuffer buf(alloc, 1 << 20);  // never read: run() throws before launching
  GemmArgs args;
  args.a = args.b = buf.get();
  args.d = buf.get();
  args.a_scale = args.b_scale = buf.as<float>();

  // FP8 rows must be 16-byte aligned: k = 100 is documented as unsupported.
  args.m = 16;
  args.n = 256;
  args.k = 100;
  args.mode = GemmScaleMode::kTensor;
  EXPECT_FALSE(gemm.supported(args));
  try {
    gemm.run(args, nullptr);
    ADD_FAILURE() << "k = 100 FP8 ran";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("CUBLAS_STATUS_"), std::string::npos) << what;
    EXPECT_NE(what.find("k=100"), std::string::npos) << what;
    std::printf("[ summary  ] %s\n", what.c_str());
  }

  // Block scaling at M = 1 (measured with torch._scaled_mm: no algorithm).
  args.m = 1;
  args.n = 28672;
  args.k = 4096;
  args.mode = GemmScaleMode::kBlock;
  if (gemm.supported(args)) {
    std::printf("[ summary  ] block scaling at m=1 n=28672 k=4096 has an algorithm in this cuBLASLt\n");
  } else {
    try {
      gemm.run(args, nullptr);
      ADD_FAILURE() << "unsupported block GEMM ran";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("CUBLAS_STATUS_"), std::string::npos) << e.what();
      std::printf("[ summary  ] %s\n", e.what());
    }
  }

  // Argument errors name the argument.
  args.mode = GemmScaleMode::kTensor;
  args.a_scale = nullptr;
  EXPECT_THROW(gemm.run(args, nullptr), Error);
  args.mode = GemmScaleMode::kNone;
  args.b_scale = nullptr;
  args.m = 0;
  EXPECT_THROW(gemm.run(args, nullptr), Error);
}

TEST(CudaGemm, PlansCachedAndNoAllocationOnTheHotPath) {
  REQUIRE_HOPPER();
  cuda::DeviceAllocator alloc;
  cuda::CublasLtGemm gemm(64ull << 20, &alloc);
  cuda::Stream s1, s2;
  const Shape s{64, 1000, 384, true};
  const Fp8Problem p = make_fp8_problem(s, GemmScaleMode::kBlock, run_seed() + 5);
  const Fp8Device d = upload_problem(alloc, p);
  GemmArgs args = args_for(p, d, GemmScaleMode::kBlock);
  if (!gemm.supported(args)) {
    args.bias = nullptr;  // block scaling with bias may have no algorithm; the cache is what is tested
  }
  ASSERT_TRUE(gemm.supported(args)) << gemm.unsupported_reason(args);
  cuda::DeviceBuffer out(alloc, size_t(s.m * s.n) * 2, s1);
  args.d = out.get();
  gemm.run(args, s1);  // first call on s1: workspace and scale scratch
  s1.synchronize();
  const size_t plans = gemm.cached_plans();
  const cuda::DeviceMemoryStats before = alloc.stats();
  for (int i = 0; i < 10; ++i) gemm.run(args, s1);
  s1.synchronize();
  const cuda::DeviceMemoryStats after = alloc.stats();
  EXPECT_EQ(after.device_mallocs, before.device_mallocs) << "run() allocated on the hot path";
  EXPECT_EQ(after.allocations, before.allocations);
  EXPECT_EQ(gemm.cached_plans(), plans);

  // Another stream gets its own scratch; the result is the same bytes.
  std::vector<uint16_t> r1(size_t(s.m * s.n)), r2(r1.size());
  FP8LM_CUDA_CHECK(cudaMemcpy(r1.data(), out.get(), r1.size() * 2, cudaMemcpyDeviceToHost));
  cuda::DeviceBuffer out2(alloc, size_t(s.m * s.n) * 2, s2);
  args.d = out2.get();
  gemm.run(args, s2);
  s2.synchronize();
  FP8LM_CUDA_CHECK(cudaMemcpy(r2.data(), out2.get(), r2.size() * 2, cudaMemcpyDeviceToHost));
  EXPECT_EQ(r1, r2);
  EXPECT_EQ(gemm.cached_plans(), plans);
}

// ---------------------------------------------------------------------------
// The caching allocator.

TEST(DeviceAllocator, SizeClasses) {
  using A = cuda::DeviceAllocator;
  EXPECT_EQ(A::size_class(1), 512u);
  EXPECT_EQ(A::size_class(512), 512u);
  EXPECT_EQ(A::size_class(513), 1024u);
  EXPECT_EQ(A::size_class(4096), 4096u);
  EXPECT_EQ(A::size_class(4097), 5120u);
  EXPECT_EQ(A::size_class(size_t(1) << 20), size_t(1) << 20);
  EXPECT_EQ(A::size_class((size_t(1) << 20) + 1), (size_t(5) << 20) / 4);
  EXPECT_EQ(A::size_class(size_t(3) << 27), size_t(3) << 27);  // 384 MiB: 2 MiB pages above 256 MiB
  EXPECT_EQ(A::size_class((size_t(3) << 27) + 1), (size_t(3) << 27) + (size_t(2) << 20));
  for (size_t b : {size_t(1000), size_t(70000), size_t(123456789)}) {
    EXPECT_GE(A::size_class(b), b);
    EXPECT_LE(double(A::size_class(b)), 1.25 * double(b) + 512);
  }
}

TEST(DeviceAllocator, ReusesFreedBlocksWithoutCudaMalloc) {
  REQUIRE_HOPPER();
  cuda::DeviceAllocator alloc;
  cuda::Stream other;
  void* a = alloc.allocate(1000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 256, 0u);
  alloc.deallocate(a);
  void* b = alloc.allocate(900);  // same class (1024), same stream: the same block
  EXPECT_EQ(a, b);
  void* c = alloc.allocate(900, other);  // another stream: not that one
  EXPECT_NE(c, b);
  cuda::DeviceMemoryStats st = alloc.stats();
  EXPECT_EQ(st.allocations, 3u);
  EXPECT_EQ(st.cache_hits, 1u);
  EXPECT_EQ(st.device_mallocs, 2u);
  EXPECT_EQ(st.bytes_in_use, 2048u);
  EXPECT_EQ(st.bytes_reserved, 2048u);
  alloc.deallocate(b);
  alloc.deallocate(c);
  EXPECT_EQ(alloc.stats().bytes_in_use, 0u);
  EXPECT_EQ(alloc.stats().bytes_reserved, 2048u);
  EXPECT_THROW(alloc.deallocate(reinterpret_cast<void*>(0x1000)), Error);

  // A steady state of layer-like requests: after the first round, no cudaMalloc.
  const std::vector<size_t> sizes = {4096 * 2 * 64, 14336 * 2 * 64, 4096 * 4, 123457, 6 << 20};
  for (int round = 0; round < 50; ++round) {
    std::vector<cuda::DeviceBuffer> bufs;
    for (size_t sz : sizes) bufs.emplace_back(alloc, sz);
    if (round == 0) st = alloc.stats();
  }
  EXPECT_EQ(alloc.stats().device_mallocs, st.device_mallocs);
  EXPECT_EQ(alloc.stats().cache_hits - st.cache_hits, 49u * sizes.size());

  alloc.release_cached();
  EXPECT_EQ(alloc.stats().bytes_reserved, 0u);
}

TEST(DeviceAllocator, ReleasesEverythingOnDestruction) {
  REQUIRE_HOPPER();
  size_t free0 = 0, free1 = 0, free2 = 0, total = 0;
  FP8LM_CUDA_CHECK(cudaMemGetInfo(&free0, &total));
  {
    cuda::DeviceAllocator alloc;
    cuda::DeviceBuffer live(alloc, size_t(512) << 20);
    alloc.deallocate(alloc.allocate(size_t(512) << 20));  // cached, not freed
    FP8LM_CUDA_CHECK(cudaMemGetInfo(&free1, &total));
    EXPECT_GE(free0 - free1, size_t(1000) << 20);
    live.reset();
  }
  FP8LM_CUDA_CHECK(cudaMemGetInfo(&free2, &total));
  EXPECT_GE(free2 + (size_t(16) << 20), free0) << "the allocator kept memory after destruction";
}

}  // namespace
}  // namespace fp8lm
