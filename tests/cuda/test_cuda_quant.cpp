// The CUDA quantization kernels (backend/cuda/quant/quant_kernels.h) against the CPU
// reference, every FP8 byte and every scale bit: plain dynamic (tensor, token,
// token with an upper bound, groups of several sizes) and static quantization
// of BF16 and float32 inputs; and silu.h's exp and silu_mul_f32 on the device
// against the host. Inputs are fresh random data on every run — the seed is
// printed; FP8LM_TEST_SEED=<n> replays one — with outliers, zero rows, −0, tiny
// values, NaN of both signs and ±inf. Shapes include rows that are not
// multiples of 8, 16 or 128, both row kernels (registers and streaming) and
// misaligned pointers. Needs a Hopper GPU; reports SKIPPED elsewhere.
//
// CudaQuantBandwidth.* prints the effective bandwidth at m = 4096.
#include <gtest/gtest.h>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "backend/cuda/common/check.h"
#include "backend/cuda/device_info.h"
#include "cuda/cuda_test_util.h"
#include "backend/cuda/quant/quant_kernels.h"
#include "numerics/silu.h"
#include "common/error.h"
#include "numerics/fp8_format.h"
#include "numerics/quantize.h"

namespace fp8lm {
namespace {


template <typename T>
using DeviceBuffer = test::DeviceVector<T>;

template <typename T>
void upload(T* dst, const std::vector<T>& src) {
  if (!src.empty()) FP8LM_CUDA_CHECK(cudaMemcpy(dst, src.data(), src.size() * sizeof(T), cudaMemcpyHostToDevice));
}

template <typename T>
std::vector<T> download(const T* src, size_t n) {
  std::vector<T> out(n);
  if (n > 0) FP8LM_CUDA_CHECK(cudaMemcpy(out.data(), src, n * sizeof(T), cudaMemcpyDeviceToHost));
  return out;
}

__nv_bfloat16* as_bf16(uint16_t* p) { return reinterpret_cast<__nv_bfloat16*>(p); }

uint64_t test_seed() {
  static const uint64_t seed = [] {
    uint64_t s = 0;
    if (const char* env = std::getenv("FP8LM_TEST_SEED")) {
      s = std::strtoull(env, nullptr, 10);
    } else {
      std::random_device rd;
      s = (uint64_t(rd()) << 32) ^ rd();
    }
    std::printf("[   seed   ] FP8LM_TEST_SEED=%llu\n", static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

std::mt19937_64 make_rng() {
  const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  return std::mt19937_64(test_seed() ^ std::hash<std::string>{}(name));
}

// ---- random inputs ------------------------------------------------------------------

constexpr uint16_t kBf16PosNan = 0x7FC0, kBf16NegNan = 0xFFC1, kBf16PosInf = 0x7F80, kBf16NegInf = 0xFF80;

// Activations: N(0, 1) times a per-row magnitude 2^U(-10, 6), with outliers
// (×20…2000), −0, values in FP8's subnormal range, a zero row, and where
// `specials`: NaN of both signs in the last row and ±inf in the one before it.
std::vector<float> random_activations(std::mt19937_64& rng, int64_t m, int64_t k, bool specials) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::vector<float> x(size_t(m * k));
  for (int64_t r = 0; r < m; ++r) {
    const float mag = std::ldexp(1.0f, int(std::floor(unit(rng) * 16.0f)) - 10);
    const bool zero_row = m > 2 && r == 1;
    for (int64_t c = 0; c < k; ++c) {
      float v = normal(rng) * mag;
      const float u = unit(rng);
      if (u < 1.0f / 300) v *= 20.0f + unit(rng) * 1980.0f;
      else if (u < 1.0f / 60) v = -0.0f;
      else if (u < 1.0f / 30) v *= 1e-3f;
      x[size_t(r * k + c)] = zero_row ? (u < 0.5f ? 0.0f : -0.0f) : v;
    }
  }
  if (specials && k > 0 && m > 0) {
    std::uniform_int_distribution<int64_t> col(0, k - 1);
    const float nan = std::bit_cast<float>(0x7FC00000u), neg_nan = std::bit_cast<float>(0xFFC00001u);
    const int64_t nan_row = m - 1, inf_row = m >= 2 ? m - 2 : m - 1;
    x[size_t(nan_row * k + col(rng))] = nan;
    x[size_t(nan_row * k + col(rng))] = neg_nan;
    x[size_t(inf_row * k + col(rng))] = INFINITY;
    x[size_t(inf_row * k + col(rng))] = -INFINITY;
  }
  return x;
}

// BF16 bits of the values, NaN signs kept (float_to_bf16 would drop them).
std::vector<uint16_t> to_bf16_bits(const std::vector<float>& x) {
  std::vector<uint16_t> b(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    b[i] = std::isnan(x[i]) ? (std::signbit(x[i]) ? kBf16NegNan : kBf16PosNan) : float_to_bf16(x[i]);
  return b;
}

// ---- the CPU reference ----------------------------------------------------------------

// numerics/quantize with the rules cpu::quantize_activations uses.
QuantizedMatrix reference(const MatrixView& x, const cuda::Fp8ActQuant& q, float static_scale) {
  const Fp8Format f = q.format;
  if (q.static_scale != nullptr)
    return quantize_static(x, {f, ScaleLayout::tensor(), ScaleRule::runtime(f)},
                           std::span<const float>(&static_scale, 1));
  switch (q.granularity) {
    case Granularity::kTensor:
      return quantize_dynamic(x, {f, ScaleLayout::tensor(), ScaleRule::runtime(f)});
    case Granularity::kGroup:
      return quantize_dynamic(x, {f, ScaleLayout::group(q.group_size), ScaleRule::vllm_group()});
    default: {
      const QuantSpec spec{f, ScaleLayout::token(), ScaleRule::runtime(f)};
      if (q.token_scale_upper_bound <= 0.0f) return quantize_dynamic(x, spec);
      std::vector<float> scales = compute_scales(x, spec);
      const float cap = q.token_scale_upper_bound / traits(f).max_finite;
      for (float& s : scales) s = std::max(std::min(s, cap), spec.rule.scale_floor);
      return quantize_static(x, spec, scales);
    }
  }
}

// ---- comparison -------------------------------------------------------------------------

struct Checker {
  std::string what;
  int64_t mismatches = 0;
  std::string first;

  void codes(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, Fp8Format f,
             bool nan_any_sign, int64_t k) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      const bool same = got[i] == want[i] ||
                        (nan_any_sign && fp8_is_nan(got[i], f) && fp8_is_nan(want[i], f));
      if (!same) note("code", i, k, got[i], want[i]);
    }
  }
  void scales(const std::vector<float>& got, const std::vector<float>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      if (std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(want[i]))
        note("scale", i, 0, std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]));
  }
  void note(const char* name, size_t i, int64_t k, uint64_t got, uint64_t want) {
    if (++mismatches > 1) return;
    char buf[200];
    if (k > 0)
      std::snprintf(buf, sizeof buf, "first: %s [%lld, %lld] gpu 0x%llx cpu 0x%llx", name, (long long)(int64_t(i) / k),
                    (long long)(int64_t(i) % k), (unsigned long long)got, (unsigned long long)want);
    else
      std::snprintf(buf, sizeof buf, "first: %s #%zu gpu 0x%llx cpu 0x%llx", name, i, (unsigned long long)got,
                    (unsigned long long)want);
    first = buf;
  }
};

struct CaseCounter {
  int cases = 0;
  int64_t bytes_checked = 0;
  ~CaseCounter() {
    std::printf("[  cases   ] %d cases, %lld output bytes compared\n", cases, static_cast<long long>(bytes_checked));
  }
};

// ---- the cases ---------------------------------------------------------------------------

const int64_t kRows[] = {1, 3, 17, 64};
const int64_t kCols[] = {64, 100, 128, 200, 4096, 4100};

struct NamedQuant {
  const char* name;
  cuda::Fp8ActQuant q;
};

std::vector<NamedQuant> dynamic_quants() {
  cuda::Fp8ActQuant e5m2 = cuda::Fp8ActQuant::token();
  e5m2.format = Fp8Format::kE5M2;
  cuda::Fp8ActQuant e5m2_group = cuda::Fp8ActQuant::group(128);
  e5m2_group.format = Fp8Format::kE5M2;
  return {{"tensor", cuda::Fp8ActQuant::tensor()},
          {"token", cuda::Fp8ActQuant::token()},
          {"token ub=3", cuda::Fp8ActQuant::token(3.0f)},
          {"group128", cuda::Fp8ActQuant::group(128)},
          {"group64", cuda::Fp8ActQuant::group(64)},
          {"group24", cuda::Fp8ActQuant::group(24)},
          {"group100", cuda::Fp8ActQuant::group(100)},
          {"group256", cuda::Fp8ActQuant::group(256)},
          {"token e5m2", e5m2},
          {"group128 e5m2", e5m2_group}};
}

// Runs body for both row kernels (registers, streaming), restoring the tuning.
void for_each_kernel(const std::function<void(const char*)>& body) {
  cuda::detail::RowKernelTuning& t = cuda::detail::row_kernel_tuning();
  const cuda::detail::RowKernelTuning saved = t;
  for (bool streaming : {false, true}) {
    t.force_streaming = streaming;
    body(streaming ? "streaming" : "registers");
  }
  t = saved;
}

std::string case_name(const char* op, const char* kernel, const char* quant, int64_t m, int64_t k) {
  return std::string(op) + " " + quant + " [" + std::to_string(m) + ", " + std::to_string(k) + "] " + kernel +
         " kernel";
}

// One plain quantization case; `f32` picks the float32 input overload. x_offset
// / codes_offset shift the device pointers off their alignment.
void check_plain(std::mt19937_64& rng, int64_t m, int64_t k, const NamedQuant& nq, bool f32, bool is_static,
                 const char* kernel, CaseCounter& count, int64_t x_offset = 0, int64_t codes_offset = 0) {
  const std::vector<float> values = random_activations(rng, m, k, /*specials=*/true);
  const std::vector<uint16_t> bits = to_bf16_bits(values);
  cuda::Fp8ActQuant q = nq.q;
  float static_scale = 0.0f;
  if (is_static) static_scale = std::ldexp(1.0f, int(rng() % 16) - 12) * (1.0f + float(rng() % 1000) / 1000.0f);

  DeviceBuffer<uint16_t> d_bf16(size_t(m * k + x_offset));
  DeviceBuffer<float> d_f32(size_t(m * k + x_offset));
  DeviceBuffer<uint8_t> d_codes(size_t(m * k + codes_offset));
  const int64_t nscales = q.scale_count(m, k);
  DeviceBuffer<float> d_scales(size_t(std::max<int64_t>(nscales, 1)));
  DeviceBuffer<float> d_static(1);
  upload(d_static.ptr, std::vector<float>{static_scale});
  if (f32) {
    if (m * k > 0) FP8LM_CUDA_CHECK(cudaMemcpy(d_f32.ptr + x_offset, values.data(), values.size() * 4, cudaMemcpyHostToDevice));
  } else if (m * k > 0) {
    FP8LM_CUDA_CHECK(cudaMemcpy(d_bf16.ptr + x_offset, bits.data(), bits.size() * 2, cudaMemcpyHostToDevice));
  }
  FP8LM_CUDA_CHECK(cudaMemset(d_codes.ptr, 0xA5, d_codes.n));
  FP8LM_CUDA_CHECK(cudaMemset(d_scales.ptr, 0xFF, d_scales.n * 4));
  uint8_t* codes = d_codes.ptr + codes_offset;
  if (is_static) {
    q = cuda::Fp8ActQuant::static_tensor(d_static.ptr);
    q.format = nq.q.format;
    if (f32) cuda::quantize_fp8_static(d_f32.ptr + x_offset, m, k, d_static.ptr, codes, nullptr, q.format);
    else cuda::quantize_fp8_static(as_bf16(d_bf16.ptr + x_offset), m, k, d_static.ptr, codes, nullptr, q.format);
  } else if (f32) {
    cuda::quantize_fp8_dynamic(d_f32.ptr + x_offset, m, k, q, codes, d_scales.ptr, nullptr);
  } else {
    cuda::quantize_fp8_dynamic(as_bf16(d_bf16.ptr + x_offset), m, k, q, codes, d_scales.ptr, nullptr);
  }
  FP8LM_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint8_t> got_codes = download(codes, size_t(m * k));
  const std::vector<float> got_scales = download(d_scales.ptr, size_t(q.scale_count(m, k)));

  // The float32 case quantizes the same (BF16-exact) values plus full-precision ones.
  const QuantizedMatrix ref = f32 ? reference(MatrixView::f32(values.data(), m, k), q, static_scale)
                                  : reference(MatrixView::bf16(bits.data(), m, k), q, static_scale);
  Checker c;
  c.codes(got_codes, ref.codes, q.format, false, k);
  if (!is_static) c.scales(got_scales, ref.scales);
  EXPECT_EQ(c.mismatches, 0) << case_name(is_static ? "static" : "dynamic", kernel, nq.name, m, k)
                             << (f32 ? " f32" : " bf16") << ": " << c.first;
  count.cases++;
  count.bytes_checked += int64_t(got_codes.size() + got_scales.size() * 4);
}

// ---- tests -------------------------------------------------------------------------------

TEST(CudaQuant, InvalidArgumentsThrowBeforeLaunching) {
  // No GPU needed: every check happens before the first CUDA call.
  float* fake = reinterpret_cast<float*>(uintptr_t(256));
  auto* codes = reinterpret_cast<uint8_t*>(uintptr_t(256));
  EXPECT_THROW(cuda::quantize_fp8_dynamic(fake, -1, 8, cuda::Fp8ActQuant::token(), codes, fake, nullptr), Error);
  EXPECT_THROW(cuda::quantize_fp8_dynamic(fake, 2, 8, cuda::Fp8ActQuant::group(0), codes, fake, nullptr), Error);
  cuda::Fp8ActQuant block = cuda::Fp8ActQuant::group(128);
  block.granularity = Granularity::kBlock;
  EXPECT_THROW(cuda::quantize_fp8_dynamic(fake, 2, 8, block, codes, fake, nullptr), Error);
  EXPECT_THROW(cuda::quantize_fp8_dynamic(static_cast<const float*>(nullptr), 2, 8, cuda::Fp8ActQuant::token(),
                                          codes, fake, nullptr),
               Error);
  EXPECT_THROW(cuda::quantize_fp8_dynamic(fake, 2, 8, cuda::Fp8ActQuant::token(), codes, nullptr, nullptr), Error);
  EXPECT_THROW(cuda::quantize_fp8_static(fake, 2, 8, nullptr, codes, nullptr), Error);
  EXPECT_THROW(cuda::quantize_fp8_dynamic(fake, 2, 8, cuda::Fp8ActQuant::static_tensor(fake), codes, fake, nullptr),
               Error);
  EXPECT_THROW(cuda::quantize_fp8_dynamic(fake, 2, 1 << 20, cuda::Fp8ActQuant::group(8), codes, fake, nullptr),
               Error);  // 131072 groups per row: more than shared memory holds
  EXPECT_EQ(cuda::Fp8ActQuant::group(128).scale_count(3, 200), 6);
  EXPECT_EQ(cuda::Fp8ActQuant::token().scale_count(3, 200), 3);
  EXPECT_EQ(cuda::Fp8ActQuant::tensor().scale_count(3, 200), 1);
  EXPECT_EQ(cuda::Fp8ActQuant::static_tensor(fake).scale_count(3, 200), 0);
}

TEST(CudaQuant, DynamicBf16MatchesCpu) {
  REQUIRE_HOPPER();
  std::mt19937_64 rng = make_rng();
  CaseCounter count;
  for_each_kernel([&](const char* kernel) {
    for (int64_t m : kRows)
      for (int64_t k : kCols)
        for (const NamedQuant& nq : dynamic_quants()) check_plain(rng, m, k, nq, false, false, kernel, count);
  });
}

TEST(CudaQuant, DynamicF32MatchesCpu) {
  REQUIRE_HOPPER();
  std::mt19937_64 rng = make_rng();
  CaseCounter count;
  for_each_kernel([&](const char* kernel) {
    for (int64_t m : kRows)
      for (int64_t k : kCols)
        for (const NamedQuant& nq : dynamic_quants()) check_plain(rng, m, k, nq, true, false, kernel, count);
  });
}

TEST(CudaQuant, StaticMatchesCpu) {
  REQUIRE_HOPPER();
  std::mt19937_64 rng = make_rng();
  CaseCounter count;
  cuda::Fp8ActQuant e5m2 = cuda::Fp8ActQuant::tensor();
  e5m2.format = Fp8Format::kE5M2;
  for_each_kernel([&](const char* kernel) {
    for (int64_t m : kRows)
      for (int64_t k : kCols)
        for (bool f32 : {false, true}) {
          check_plain(rng, m, k, {"e4m3", cuda::Fp8ActQuant::tensor()}, f32, true, kernel, count);
          check_plain(rng, m, k, {"e5m2", e5m2}, f32, true, kernel, count);
        }
  });
}

TEST(CudaQuant, EmptyAndLongRowsMatchCpu) {
  REQUIRE_HOPPER();
  std::mt19937_64 rng = make_rng();
  CaseCounter count;
  // 8 vectors of 8 per thread (k > 16384), the streaming kernel unforced (k > 32768); 0 rows / columns.
  for (int64_t k : {int64_t(16392), int64_t(20000), int64_t(33000), int64_t(57344)})
    for (const NamedQuant& nq : dynamic_quants()) {
      check_plain(rng, 3, k, nq, false, false, "auto", count);
      check_plain(rng, 2, k, nq, true, false, "auto", count);
    }
  for (const NamedQuant& nq : {NamedQuant{"tensor", cuda::Fp8ActQuant::tensor()},
                               NamedQuant{"token", cuda::Fp8ActQuant::token()},
                               NamedQuant{"group128", cuda::Fp8ActQuant::group()}}) {
    check_plain(rng, 0, 128, nq, false, false, "auto", count);
    check_plain(rng, 4, 0, nq, false, false, "auto", count);
  }
}

TEST(CudaQuant, MisalignedPointersMatchCpu) {
  REQUIRE_HOPPER();
  std::mt19937_64 rng = make_rng();
  CaseCounter count;
  for (const NamedQuant& nq : dynamic_quants())
    for (bool f32 : {false, true}) {
      check_plain(rng, 5, 4096, nq, f32, false, "auto", count, /*x_offset=*/1, /*codes_offset=*/0);
      check_plain(rng, 5, 4096, nq, f32, false, "auto", count, /*x_offset=*/0, /*codes_offset=*/3);
    }
}

// silu.h's exp on the device against the host, every float32 pattern.
TEST(CudaQuant, ExpAllFloat32PatternsMatchHost) {
  REQUIRE_HOPPER();
  constexpr size_t kChunk = size_t(1) << 28;
  DeviceBuffer<float> d_out(kChunk);
  std::vector<float> got(kChunk);
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  uint64_t mismatches = 0;
  for (uint64_t first = 0; first < (uint64_t(1) << 32); first += kChunk) {
    cuda::detail::exp_f32_bit_range(uint32_t(first), kChunk, d_out.ptr, nullptr);
    FP8LM_CUDA_CHECK(cudaMemcpy(got.data(), d_out.ptr, kChunk * 4, cudaMemcpyDeviceToHost));
    std::vector<uint64_t> bad(threads, 0);
    std::vector<std::thread> pool;
    const size_t per = (kChunk + threads - 1) / threads;
    for (unsigned t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        for (size_t i = t * per; i < std::min(kChunk, (t + 1) * per); ++i) {
          const float x = std::bit_cast<float>(uint32_t(first + i));
          const float want = std::isnan(x) ? std::bit_cast<float>(0x7FC00000u) : exp_f32(x);
          if (std::bit_cast<uint32_t>(want) != std::bit_cast<uint32_t>(got[i])) ++bad[t];
        }
      });
    for (auto& t : pool) t.join();
    for (uint64_t b : bad) mismatches += b;
  }
  EXPECT_EQ(mismatches, 0u);
}

TEST(CudaQuant, SiluMulValuesMatchHost) {
  REQUIRE_HOPPER();
  std::mt19937_64 rng = make_rng();
  constexpr size_t kN = size_t(1) << 24;
  std::vector<float> g(kN), u(kN);
  std::uniform_real_distribution<float> wide(-110.0f, 110.0f);
  for (size_t i = 0; i < kN; ++i) {
    // random bit patterns (NaN, inf, subnormals included) and ordinary values
    g[i] = i % 2 ? std::bit_cast<float>(uint32_t(rng())) : wide(rng);
    u[i] = i % 3 ? std::bit_cast<float>(uint32_t(rng())) : wide(rng);
  }
  DeviceBuffer<float> d_g(kN), d_u(kN), d_s(kN);
  upload(d_g.ptr, g);
  upload(d_u.ptr, u);
  cuda::detail::silu_mul_f32_array(d_g.ptr, d_u.ptr, kN, d_s.ptr, nullptr);
  const std::vector<float> got = download(d_s.ptr, kN);
  Checker c;
  for (size_t i = 0; i < kN; ++i) {
    const float want = silu_mul_f32(g[i], u[i]);
    if (std::bit_cast<uint32_t>(want) != std::bit_cast<uint32_t>(got[i]))
      c.note("silu", i, 0, std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want));
  }
  EXPECT_EQ(c.mismatches, 0) << c.first;
}

// ---- bandwidth ------------------------------------------------------------------------------

TEST(CudaQuantBandwidth, EffectiveBandwidthAtM4096) {
  REQUIRE_HOPPER();
  constexpr int64_t m = 4096;
  constexpr int kSets = 3;  // rotate inputs so that they do not sit in L2 between calls
  constexpr int kIters = 12;
  cudaStream_t stream = nullptr;
  cudaEvent_t start, stop;
  FP8LM_CUDA_CHECK(cudaEventCreate(&start));
  FP8LM_CUDA_CHECK(cudaEventCreate(&stop));
  auto time_ms = [&](const std::function<void(int)>& fn) {
    for (int i = 0; i < 3; ++i) fn(i % kSets);
    FP8LM_CUDA_CHECK(cudaEventRecord(start, stream));
    for (int i = 0; i < kIters; ++i) fn(i % kSets);
    FP8LM_CUDA_CHECK(cudaEventRecord(stop, stream));
    FP8LM_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    FP8LM_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    return double(ms) / kIters;
  };
  {
    const size_t bytes = size_t(1) << 30;
    DeviceBuffer<uint8_t> a(bytes), b(bytes);
    FP8LM_CUDA_CHECK(cudaMemset(a.ptr, 1, bytes));
    const double ms = time_ms([&](int) { FP8LM_CUDA_CHECK(cudaMemcpyAsync(b.ptr, a.ptr, bytes, cudaMemcpyDeviceToDevice, stream)); });
    std::printf("[bandwidth] cudaMemcpy D2D 1 GiB: %.3f ms, %.0f GB/s (read + write)\n", ms, 2.0 * bytes / ms / 1e6);
  }
  std::mt19937_64 rng(test_seed());
  std::normal_distribution<float> normal(0.0f, 1.0f);
  cuda::detail::RowKernelTuning& tuning = cuda::detail::row_kernel_tuning();
  const cuda::detail::RowKernelTuning saved = tuning;
  for (int64_t k : {int64_t(4096), int64_t(14336)}) {
    const size_t n = size_t(m * k);
    std::vector<uint16_t> host(n);
    for (auto& h : host) h = float_to_bf16(normal(rng));
    std::vector<std::unique_ptr<DeviceBuffer<uint16_t>>> x;
    for (int s = 0; s < kSets; ++s) {
      x.push_back(std::make_unique<DeviceBuffer<uint16_t>>(n));
      upload(x.back()->ptr, host);
    }
    DeviceBuffer<uint8_t> codes(n);
    DeviceBuffer<float> scales(size_t(m * ((k + 127) / 128)));
    DeviceBuffer<float> sscale(1);
    upload(sscale.ptr, std::vector<float>{0.01f});
    struct Op {
      const char* name;
      double bytes;  // fewest bytes moved: inputs read once, outputs written once
      std::function<void(int)> fn;
    };
    const double in = 2.0 * double(n), out = double(n);
    auto X = [&](int s) { return as_bf16(x[size_t(s)]->ptr); };
    const double tok = 4.0 * m, grp = 4.0 * m * double((k + 127) / 128);
    const std::vector<Op> ops = {
        {"quant token", in + out + tok, [&](int s) { cuda::quantize_fp8_dynamic(X(s), m, k, cuda::Fp8ActQuant::token(), codes.ptr, scales.ptr, stream); }},
        {"quant group128", in + out + grp, [&](int s) { cuda::quantize_fp8_dynamic(X(s), m, k, cuda::Fp8ActQuant::group(), codes.ptr, scales.ptr, stream); }},
        {"quant tensor (2 passes)", in + out, [&](int s) { cuda::quantize_fp8_dynamic(X(s), m, k, cuda::Fp8ActQuant::tensor(), codes.ptr, scales.ptr, stream); }},
        {"quant static", in + out, [&](int s) { cuda::quantize_fp8_static(X(s), m, k, sscale.ptr, codes.ptr, stream); }},
    };
    for (const Op& op : ops) {
      std::string line;
      for (int threads : {256, 512}) {
        tuning.max_threads = threads;
        tuning.force_streaming = false;
        const double ms = time_ms(op.fn);
        char buf[96];
        std::snprintf(buf, sizeof buf, "  max_threads %d: %7.1f us %5.0f GB/s", threads, ms * 1e3, op.bytes / ms / 1e6);
        line += buf;
      }
      tuning.force_streaming = true;
      const double ms = time_ms(op.fn);
      std::printf("[bandwidth] m %lld k %5lld %-24s%s  streaming: %7.1f us %5.0f GB/s\n", (long long)m,
                  (long long)k, op.name, line.c_str(), ms * 1e3, op.bytes / ms / 1e6);
    }
  }
  tuning = saved;
  FP8LM_CUDA_CHECK(cudaEventDestroy(start));
  FP8LM_CUDA_CHECK(cudaEventDestroy(stop));
}

}  // namespace
}  // namespace fp8lm
