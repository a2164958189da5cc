// The CUDA per-row model kernels (backend/cuda/elementwise/model_kernels.h) against the CPU
// backend (cpu::CpuOps) and RopeTable, fed the same BF16 values widened
// to float, the CPU's float result rounded to BF16 (float_to_bf16). Inputs are
// fresh random data on every run — the seed is printed; FP8LM_TEST_SEED=<n>
// replays one — with outliers, −0, tiny values and, where the op defines them,
// NaN of both signs and ±inf. Shapes include rows = 1, widths that are not
// multiples of 8, rows long enough for the streaming norm kernel, and pointers
// off 16-byte alignment (the scalar paths).
//
// What "matches" means, op by op:
//   embedding (BF16, FP8), gather_rows, add, silu_mul(_fused), bf16_to_float, argmax:
//     bit-identical. add is one IEEE float addition rounded to BF16 on both sides;
//     silu_mul is numerics/silu.h's silu_mul_f32 on both; FP8 embedding is
//     fp8_to_float(code) · scale, one float product, on both. (A BF16 copy keeps
//     a NaN's sign and payload where the CPU's float round trip makes 0x7FC0:
//     any NaN matches any NaN there.)
//   rms_norm, add_rms_norm, head_rms_norm:
//     both sum the squares in double and then run the same float operations
//     (division, sqrt, products: IEEE-rounded on both sides). When every square
//     and the sum fit in 53 bits the double sum is exact in any order and the
//     outputs are bit-identical: the "exact" data (every |x| in [2^-4, 2^5) or 0:
//     squares are multiples of 2^-22 below 2^10, so a row of ≤ 2^14 of them sums
//     below 2^24: 46 bits) must match bit for bit. On general data (outliers,
//     tiny values, specials) the two summation orders may round the double sum
//     differently (by ~2^-53 relative), which moves float(mean) by at most one
//     float ulp when it sits on a rounding boundary; inv then moves by ≤ 1 float
//     ulp, w·(x·inv) by ≤ 2 float ulps, which can flip the BF16 rounding by one
//     step: ≤ 1 BF16 ulp (of the larger of the two results).
//   rope / rope_qk:
//     the angle float(position) · inv_freq[i] is the same float on both sides;
//     cos/sin are CUDA's sincosf (≤ 2 ulp from the true value, CUDA Math API)
//     and glibc's cosf/sinf (≤ 1 ulp, glibc's libm-test-ulps), so raw cos/sin
//     differ by ≤ 3·2^-23·|t|, and after the rounded product with the attention
//     factor C, S differ by ≤ 4·2^-23·|C|. Each rounded product a·C then differs by
//     ≤ (4 + 1)·2^-23·|a·C|, the rounded difference/sum by ≤ 6·2^-23·(|a·C| + |b·S|)
//     in total; rounding both to BF16 adds at most one BF16 ulp of the larger
//     result. Bound per element: 1 BF16 ulp + 6·2^-23·(|a||C| + |b||S|) (× (1 +
//     2^-20) for second-order terms), with C, S the CPU's values (RopeTable::cos_sin).
//     The share of bit-identical elements is printed.
//   split_norm_rope_qkv (qkv_rope_kernels.h, one kernel):
//     bit-identical to the CUDA sequence it replaces (split_columns, head_rms_norm
//     on q and k, rope_qk) on general data with specials; against the CPU, v is
//     the bits of qkv and q/k are within the rope bound above, the CPU's inputs
//     to rope being its normed q/k rounded to BF16 (the BF16 activation the GPU
//     stores between the ops it fuses) — on the "exact" data, where the norm is
//     bit-identical, so the rope bound is the whole difference. Through CudaOps:
//     the override equals Ops' default (the op sequence) bit for bit.
//
// Also: out-of-range ids/rows give NaN rows, argmax ties / NaN / ±inf / −0 and
// every argmax cluster size, q/k in a fused QKV buffer (row strides), CUDA-graph
// capture replayed with new device ids and positions, and argument errors
// thrown before any launch (that test needs no GPU). Needs a Hopper GPU;
// reports SKIPPED elsewhere.
//
// CudaModelKernelsTiming.* prints the time per call at decode and prefill shapes.
#include <gtest/gtest.h>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/linear.h"
#include "backend/cuda/common/check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/cuda_ops_kernels.h"
#include "backend/cuda/elementwise/model_kernels.h"
#include "backend/cuda/attention/paged_attention.h"
#include "backend/cuda/attention/qkv_rope_kernels.h"
#include "backend/cuda/quant/quant_kernels.h"
#include "common/error.h"
#include "cuda/cuda_test_util.h"
#include "numerics/fp8_format.h"
#include "spec/model_config.h"
#include "spec/rope.h"

namespace fp8lm {
namespace {

// ---- device memory -------------------------------------------------------------------

template <typename T>
struct DeviceBuffer {
  T* ptr = nullptr;
  explicit DeviceBuffer(size_t count) {
    FP8LM_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr), std::max<size_t>(count, 1) * sizeof(T)));
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// n elements `offset` elements into an allocation (cudaMalloc is 256-byte
// aligned: offset 0 is aligned, offset 1 is not 16-byte aligned).
template <typename T>
struct DeviceArray {
  DeviceBuffer<T> buf;
  size_t offset;
  size_t n;
  DeviceArray(size_t count, size_t off = 0) : buf(count + off + 8), offset(off), n(count) {}
  T* ptr() const { return buf.ptr + offset; }
  void upload(const std::vector<T>& v) {
    ASSERT_EQ(v.size(), n);
    test::upload_bytes(ptr(), v.data(), n * sizeof(T));
  }
  std::vector<T> download() const {
    std::vector<T> out(n);
    if (n > 0) FP8LM_CUDA_CHECK(cudaMemcpy(out.data(), ptr(), n * sizeof(T), cudaMemcpyDeviceToHost));
    return out;
  }
};

using Bf16Array = DeviceArray<uint16_t>;
__nv_bfloat16* bf(const Bf16Array& a) { return reinterpret_cast<__nv_bfloat16*>(a.ptr()); }

void sync() { FP8LM_CUDA_CHECK(cudaDeviceSynchronize()); }

// ---- random data -------------------------------------------------------------------------

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

std::string seed_note() { return " (FP8LM_TEST_SEED=" + std::to_string(test_seed()) + ")"; }

constexpr uint16_t kPosNan = 0x7FC0, kNegNan = 0xFFC1, kPosInf = 0x7F80, kNegInf = 0xFF80;

// Activations as BF16 bits: N(0, 1) · 2^U{-6..6} per row, outliers (×20…2000),
// −0, tiny values (×1e-3); with `specials`, NaN of both signs in the last row
// and ±inf in the one before it (the only row when rows = 1).
std::vector<uint16_t> random_bf16(std::mt19937_64& rng, int64_t rows, int64_t cols, bool specials) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::vector<uint16_t> x(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const float mag = std::ldexp(1.0f, int(std::floor(unit(rng) * 13.0f)) - 6);
    for (int64_t c = 0; c < cols; ++c) {
      float v = normal(rng) * mag;
      const float u = unit(rng);
      if (u < 1.0f / 300) v *= 20.0f + unit(rng) * 1980.0f;
      else if (u < 1.0f / 60) v = -0.0f;
      else if (u < 1.0f / 30) v *= 1e-3f;
      x[size_t(r * cols + c)] = float_to_bf16(v);
    }
  }
  if (specials && rows > 0 && cols > 0) {
    std::uniform_int_distribution<int64_t> col(0, cols - 1);
    const int64_t nan_row = rows - 1, inf_row = rows >= 2 ? rows - 2 : rows - 1;
    x[size_t(nan_row * cols + col(rng))] = kPosNan;
    x[size_t(nan_row * cols + col(rng))] = kNegNan;
    x[size_t(inf_row * cols + col(rng))] = kPosInf;
    x[size_t(inf_row * cols + col(rng))] = kNegInf;
  }
  return x;
}

// BF16 values whose squares sum exactly in double in any order: 0 or |x| in
// [2^-4, 2^5) (see the header). `signs`, when given, fixes each element's sign.
std::vector<uint16_t> exact_bf16(std::mt19937_64& rng, int64_t rows, int64_t cols,
                                 const std::vector<uint16_t>* signs = nullptr) {
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::vector<uint16_t> x(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < x.size(); ++i) {
    const float u = unit(rng);
    float v = std::ldexp(1.0f + unit(rng), int(std::floor(unit(rng) * 8.0f)) - 4);  // [2^-4, 2^4)·[1, 2)
    uint16_t b = float_to_bf16(v);
    if ((b & 0x7FFF) >= 0x4200) b = 0x41FF;  // keep |x| < 2^5 after rounding
    const bool negative = signs != nullptr ? ((*signs)[i] & 0x8000) != 0 : u < 0.5f;
    if (negative) b |= 0x8000;
    if (signs == nullptr && u > 0.98f) b = u > 0.99f ? 0x0000 : 0x8000;  // ±0
    x[i] = b;
  }
  return x;
}

std::vector<float> widen(const std::vector<uint16_t>& b) {
  std::vector<float> f(b.size());
  for (size_t i = 0; i < b.size(); ++i) f[i] = bf16_to_float(b[i]);
  return f;
}

std::vector<uint16_t> round_all(const std::vector<float>& f) {
  std::vector<uint16_t> b(f.size());
  for (size_t i = 0; i < f.size(); ++i) b[i] = float_to_bf16(f[i]);
  return b;
}

std::vector<float> random_weights(std::mt19937_64& rng, int64_t n) {
  std::normal_distribution<float> normal(1.0f, 0.25f);
  std::vector<float> w(static_cast<size_t>(n));
  for (float& v : w) v = normal(rng);
  if (n > 1) w[1] = -w[1];
  return w;
}

// ---- comparison ---------------------------------------------------------------------------

bool is_nan_bits(uint16_t b) { return (b & 0x7FFF) > 0x7F80; }

// One BF16 ulp at the magnitude of b (2^-133 for zeros and subnormals).
double bf16_ulp(uint16_t b) {
  const int e = (b >> 7) & 0xFF;
  return std::ldexp(1.0, std::max(e, 1) - 127 - 7);
}

struct Report {
  std::string what;
  int64_t checked = 0, inexact = 0, bad = 0;
  std::string first;

  void mismatch(int64_t i, int64_t cols, uint32_t got, uint32_t want, const char* extra = "") {
    ++bad;
    if (!first.empty()) return;
    char buf[256];
    std::snprintf(buf, sizeof buf, "first at [%lld, %lld]: gpu 0x%x cpu 0x%x %s", (long long)(cols > 0 ? i / cols : i),
                  (long long)(cols > 0 ? i % cols : 0), got, want, extra);
    first = buf;
  }
  void finish() {
    if (bad > 0)
      ADD_FAILURE() << what << ": " << bad << " of " << checked << " elements differ; " << first << seed_note();
  }
};

// Bit-identical BF16 (nan_any: any NaN matches any NaN).
void expect_same_bits(const std::string& what, const std::vector<uint16_t>& got, const std::vector<uint16_t>& want,
                      int64_t cols, bool nan_any = false) {
  ASSERT_EQ(got.size(), want.size()) << what;
  Report rep;
  rep.what = what;
  for (size_t i = 0; i < got.size(); ++i) {
    ++rep.checked;
    if (got[i] == want[i] || (nan_any && is_nan_bits(got[i]) && is_nan_bits(want[i]))) continue;
    rep.mismatch(int64_t(i), cols, got[i], want[i]);
  }
  rep.finish();
}

// Within one BF16 ulp of the larger magnitude; NaN only against NaN. Returns the inexact count.
int64_t expect_within_one_ulp(const std::string& what, const std::vector<uint16_t>& got,
                              const std::vector<uint16_t>& want, int64_t cols) {
  EXPECT_EQ(got.size(), want.size()) << what;
  if (got.size() != want.size()) return 0;
  Report rep;
  rep.what = what;
  for (size_t i = 0; i < got.size(); ++i) {
    ++rep.checked;
    if (got[i] == want[i] || (is_nan_bits(got[i]) && is_nan_bits(want[i]))) continue;
    const double g = bf16_to_float(got[i]), w = bf16_to_float(want[i]);
    if (std::isnan(g) || std::isnan(w) || std::isinf(g) || std::isinf(w)) {
      rep.mismatch(int64_t(i), cols, got[i], want[i]);
      continue;
    }
    if (g == w) continue;  // ±0
    ++rep.inexact;
    const uint16_t larger = std::fabs(g) > std::fabs(w) ? got[i] : want[i];
    if (std::fabs(g - w) > bf16_ulp(larger)) rep.mismatch(int64_t(i), cols, got[i], want[i], "(> 1 BF16 ulp)");
  }
  rep.finish();
  return rep.inexact;
}

// Restores the launch tuning when a test leaves.
struct TuningGuard {
  cuda::detail::ModelKernelTuning saved = cuda::detail::model_kernel_tuning();
  ~TuningGuard() { cuda::detail::model_kernel_tuning() = saved; }
};

backend::Tensor tensor(std::vector<float>& v, int64_t rows, int64_t cols) { return {v.data(), rows, cols}; }

std::string shape_name(const char* op, int64_t rows, int64_t cols, const std::string& extra = "") {
  return std::string(op) + " [" + std::to_string(rows) + ", " + std::to_string(cols) + "]" +
         (extra.empty() ? "" : " " + extra);
}

// ---- tests ----------------------------------------------------------------------------------

TEST(CudaModelKernels, InvalidArgumentsThrowBeforeLaunching) {
  // No GPU needed: every check happens before the first CUDA call.
  auto* x = reinterpret_cast<__nv_bfloat16*>(uintptr_t(256));
  auto* w = reinterpret_cast<float*>(uintptr_t(256));
  auto* ids = reinterpret_cast<int32_t*>(uintptr_t(256));
  auto* codes = reinterpret_cast<uint8_t*>(uintptr_t(256));
  cudaStream_t s = nullptr;
  EXPECT_THROW(cuda::rms_norm(x, w, 1e-6f, -1, 8, x, s), Error);
  EXPECT_THROW(cuda::rms_norm(x, w, 1e-6f, 2, -8, x, s), Error);
  EXPECT_THROW(cuda::rms_norm(nullptr, w, 1e-6f, 2, 8, x, s), Error);
  EXPECT_THROW(cuda::rms_norm(x, nullptr, 1e-6f, 2, 8, x, s), Error);
  EXPECT_THROW(cuda::rms_norm(x, w, 1e-6f, 2, (int64_t(1) << 30) + 1, x, s), Error);
  EXPECT_THROW(cuda::add_rms_norm(x, nullptr, w, 1e-6f, 2, 8, x, s), Error);
  EXPECT_THROW(cuda::head_rms_norm(x, 2, 100, 64, w, 1e-6f, s), Error);          // 100 % 64
  EXPECT_THROW(cuda::head_rms_norm(x, 2, 4096, 2048, w, 1e-6f, s), Error);       // head_dim > 1024
  EXPECT_THROW(cuda::head_rms_norm(x, 2, 256, 128, w, 1e-6f, s, 128), Error);    // ld < cols
  EXPECT_THROW(cuda::head_rms_norm(x, 2, 256, 0, w, 1e-6f, s), Error);
  EXPECT_THROW(cuda::head_rms_norm_qk(x, 256, w, x, 96, w, 2, 64, 1e-6f, s), Error);  // 96 % 64
  EXPECT_THROW(cuda::head_rms_norm_qk(x, 256, w, x, 128, nullptr, 2, 64, 1e-6f, s), Error);
  EXPECT_THROW(cuda::rope(x, 2, 254, 127, ids, w, 1.0f, s), Error);               // odd head_dim
  EXPECT_THROW(cuda::rope(x, 2, 256, 96, ids, w, 1.0f, s), Error);                // 256 % 96
  EXPECT_THROW(cuda::rope(x, 2, 256, 128, nullptr, w, 1.0f, s), Error);
  EXPECT_THROW(cuda::rope(x, 2, 256, 128, ids, nullptr, 1.0f, s), Error);
  EXPECT_THROW(cuda::rope(x, 2, 256, 128, ids, w, 1.0f, s, 255), Error);          // ld < cols
  EXPECT_THROW(cuda::rope_qk(x, 256, x, 200, 2, 128, ids, w, 1.0f, s), Error);
  EXPECT_THROW(cuda::rope_qk(x, 256, nullptr, 128, 2, 128, ids, w, 1.0f, s), Error);
  EXPECT_THROW(cuda::split_norm_rope_qkv(x, 2, 254, 127, 127, 127, x, x, x, nullptr, nullptr, 1e-6f, ids, w, 1.0f, s),
               Error);  // odd head_dim
  EXPECT_THROW(cuda::split_norm_rope_qkv(x, 2, 256, 96, 96, 64, x, x, x, nullptr, nullptr, 1e-6f, ids, w, 1.0f, s),
               Error);  // 96 % 64
  EXPECT_THROW(cuda::split_norm_rope_qkv(x, 2, 4096, 2048, 2048, 2048, x, x, x, nullptr, nullptr, 1e-6f, ids, w, 1.0f,
                                         s),
               Error);  // head_dim > 1024
  EXPECT_THROW(cuda::split_norm_rope_qkv(x, 2, 256, 128, 128, 128, x, x, x, w, nullptr, 1e-6f, ids, w, 1.0f, s),
               Error);  // one norm only
  EXPECT_THROW(cuda::split_norm_rope_qkv(x, 2, 256, 128, 128, 128, x, x, x, nullptr, nullptr, 1e-6f, nullptr, w, 1.0f,
                                         s),
               Error);
  EXPECT_THROW(cuda::split_norm_rope_qkv(x, 2, 256, 128, 128, 128, x, nullptr, x, nullptr, nullptr, 1e-6f, ids, w,
                                         1.0f, s),
               Error);
  EXPECT_THROW(cuda::split_norm_rope_qkv(x, -1, 256, 128, 128, 128, x, x, x, nullptr, nullptr, 1e-6f, ids, w, 1.0f, s),
               Error);
  EXPECT_THROW(cuda::add(x, nullptr, 8, s), Error);
  EXPECT_THROW(cuda::add(x, x, -1, s), Error);
  EXPECT_THROW(cuda::silu_mul(x, x, -1, x, s), Error);
  EXPECT_THROW(cuda::silu_mul(x, nullptr, 8, x, s), Error);
  EXPECT_THROW(cuda::silu_mul_fused(x, -1, 8, x, s), Error);
  EXPECT_THROW(cuda::silu_mul_fused(nullptr, 1, 8, x, s), Error);
  EXPECT_THROW(cuda::bf16_to_float(x, 8, nullptr, s), Error);
  EXPECT_THROW(cuda::embedding_bf16(x, ids, -1, 8, x, s), Error);
  EXPECT_THROW(cuda::embedding_bf16(x, nullptr, 2, 8, x, s), Error);
  EXPECT_THROW(cuda::embedding_bf16(x, ids, 2, 8, x, s, -5), Error);
  EXPECT_THROW(cuda::embedding_fp8(codes, nullptr, Fp8Format::kE4M3, ids, 2, 8, x, s), Error);
  EXPECT_THROW(cuda::embedding_fp8(codes, w, Fp8Format::kE4M3, ids, 2, 8, x, s, -1), Error);
  EXPECT_THROW(cuda::gather_rows(x, 8, nullptr, 2, x, s), Error);
  EXPECT_THROW(cuda::gather_rows(x, -8, ids, 2, x, s), Error);
  EXPECT_THROW(cuda::argmax_rows(x, -1, 8, ids, s), Error);
  EXPECT_THROW(cuda::argmax_rows(x, 2, 8, nullptr, s), Error);
  EXPECT_THROW(cuda::argmax_rows(static_cast<const float*>(nullptr), 2, 8, ids, s), Error);
  // Nothing to do: no launch, no error.
  EXPECT_NO_THROW(cuda::rms_norm(nullptr, nullptr, 1e-6f, 0, 4096, nullptr, s));
  EXPECT_NO_THROW(cuda::rope(nullptr, 0, 256, 128, nullptr, nullptr, 1.0f, s));
  EXPECT_NO_THROW(cuda::split_norm_rope_qkv(nullptr, 0, 256, 128, 128, 128, nullptr, nullptr, nullptr, nullptr, nullptr,
                                            1e-6f, nullptr, nullptr, 1.0f, s));
  EXPECT_NO_THROW(cuda::add(nullptr, nullptr, 0, s));
  EXPECT_NO_THROW(cuda::argmax_rows(x, 0, 8, nullptr, s));
}

TEST(CudaModelKernels, EmbeddingBf16MatchesCpu) {
  REQUIRE_HOPPER();
  auto rng = make_rng();
  cpu::CpuOps ops(4);
  constexpr int64_t vocab = 1000;
  for (int64_t dim : {8, 100, 384, 4096, 4100}) {
    const std::vector<uint16_t> table = random_bf16(rng, vocab, dim, true);
    const auto weight = ops.upload_embedding(weights::high_precision(ElementType::kBF16, table.data(), vocab, dim));
    for (int64_t rows : {1, 7, 64}) {
      std::uniform_int_distribution<int32_t> id(0, vocab - 1);
      std::vector<int32_t> ids(static_cast<size_t>(rows));
      for (auto& i : ids) i = id(rng);
      ids.front() = int32_t(vocab - 1);
      if (rows > 1) ids.back() = 0;
      std::vector<float> ref(static_cast<size_t>(rows * dim));
      ops.embedding(*weight, ids, tensor(ref, rows, dim));
      for (size_t off : {size_t(0), size_t(1)}) {
        Bf16Array t(table.size(), off), out(static_cast<size_t>(rows * dim), off);
        DeviceArray<int32_t> d_ids(ids.size());
        t.upload(table);
        d_ids.upload(ids);
        cuda::embedding_bf16(bf(t), d_ids.ptr(), rows, dim, bf(out), nullptr, off == 0 ? vocab : 0);
        sync();
        expect_same_bits(shape_name("embedding_bf16", rows, dim, "offset " + std::to_string(off)), out.download(),
                         round_all(ref), dim, /*nan_any=*/true);
      }
    }
  }
}

TEST(CudaModelKernels, EmbeddingFp8MatchesCpu) {
  REQUIRE_HOPPER();
  auto rng = make_rng();
  cpu::CpuOps ops(4);
  constexpr int64_t vocab = 600;
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    for (int64_t dim : {16, 100, 4096, 4103}) {
      // Every finite code (a checkpoint's weights hold no NaN or inf codes, and the
      // CPU's vector loops do not define them); scales spread over 2^-12…2^3, one of them 0.
      const auto finite = [f](int c) {
        return f == Fp8Format::kE4M3 ? (c & 0x7F) != 0x7F : (c & 0x7C) != 0x7C;
      };
      std::vector<uint8_t> codes(static_cast<size_t>(vocab * dim));
      for (auto& c : codes) {
        int v = byte(rng);
        while (!finite(v)) v = byte(rng);
        c = uint8_t(v);
      }
      std::vector<float> scales(static_cast<size_t>(vocab));
      for (auto& s : scales) s = std::ldexp(1.0f + unit(rng), int(unit(rng) * 15.0f) - 12);
      scales[3] = 0.0f;
      weights::LinearWeight t;
      t.element = element_type(f);
      t.data = codes.data();
      t.n = vocab;
      t.k = dim;
      t.scale_layout = ScaleLayout::channel();
      t.scales = scales;
      const auto weight = ops.upload_embedding(t);
      for (int64_t rows : {1, 9}) {
        std::uniform_int_distribution<int32_t> id(0, vocab - 1);
        std::vector<int32_t> ids(static_cast<size_t>(rows));
        for (auto& i : ids) i = id(rng);
        if (rows > 1) ids[1] = 3;  // the row with the zero scale
        std::vector<float> ref(static_cast<size_t>(rows * dim));
        ops.embedding(*weight, ids, tensor(ref, rows, dim));
        for (size_t off : {size_t(0), size_t(1)}) {
          DeviceArray<uint8_t> d_codes(codes.size(), off);
          DeviceArray<float> d_scales(scales.size());
          DeviceArray<int32_t> d_ids(ids.size());
          Bf16Array out(static_cast<size_t>(rows * dim), off);
          d_codes.upload(codes);
          d_scales.upload(scales);
          d_ids.upload(ids);
          cuda::embedding_fp8(d_codes.ptr(), d_scales.ptr(), f, d_ids.ptr(), rows, dim, bf(out), nullptr, vocab);
          sync();
          expect_same_bits(shape_name("embedding_fp8", rows, dim,
                                      std::string(name(f)) + " offset " + std::to_string(off)),
                           out.download(), round_all(ref), dim);
        }
      }
    }
  }
}

TEST(CudaModelKernels, OutOfRangeIdsGiveNanRows) {
  REQUIRE_HOPPER();
  auto rng = make_rng();
  constexpr int64_t vocab = 50, dim = 24;
  const std::vector<uint16_t> table = random_bf16(rng, vocab, dim, false);
  const std::vector<int32_t> ids = {-1, int32_t(vocab), 5, INT_MAX, 0};
  const int64_t rows = int64_t(ids.size());
  Bf16Array t(table.size()), out(static_cast<size_t>(rows * dim));
  DeviceArray<int32_t> d_ids(ids.size());
  t.upload(table);
  d_ids.upload(ids);
  auto expect_rows = [&](const std::vector<uint16_t>& got, const std::vector<bool>& nan_row, const char* what) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < dim; ++c) {
        const uint16_t g = got[size_t(r * dim + c)];
        if (nan_row[size_t(r)]) EXPECT_EQ(g, kPosNan) << what << " row " << r;
        else EXPECT_EQ(g, table[size_t(int64_t(ids[size_t(r)]) * dim + c)]) << what << " row " << r;
      }
  };
  cuda::embedding_bf16(bf(t), d_ids.ptr(), rows, dim, bf(out), nullptr, vocab);
  sync();
  expect_rows(out.download(), {true, true, false, true, false}, "embedding_bf16");
  cuda::gather_rows(bf(t), dim, d_ids.ptr(), rows, bf(out), nullptr, vocab);
  sync();
  expect_rows(out.download(), {true, true, false, true, false}, "gather_rows");
  // Without a bound only negative ids are caught.
  const std::vector<int32_t> ids2 = {-7, 5, 0, 49, -1};
  d_ids.upload(ids2);
  cuda::embedding_bf16(bf(t), d_ids.ptr(), rows, dim, bf(out), nullptr);
  sync();
  const std::vector<uint16_t> got = out.download();
  for (int64_t r = 0; r < rows; ++r) {
    const bool bad = ids2[size_t(r)] < 0;
    for (int64_t c = 0; c < dim; ++c)
      EXPECT_EQ(got[size_t(r * dim + c)], bad ? kPosNan : table[size_t(int64_t(ids2[size_t(r)]) * dim + c)]);
  }
  // FP8: the same rule.
  std::vector<uint8_t> codes(static_cast<size_t>(vocab * dim), 0x38);  // E4M3 1.0
  DeviceArray<uint8_t> d_codes(codes.size());
  DeviceArray<float> d_scales(static_cast<size_t>(vocab));
  d_codes.upload(codes);
  d_scales.upload(std::vector<float>(static_cast<size_t>(vocab), 2.0f));
  d_ids.upload(ids);
  cuda::embedding_fp8(d_codes.ptr(), d_scales.ptr(), Fp8Format::kE4M3, d_ids.ptr(), rows, dim, bf(out), nullptr, vocab);
  sync();
  const std::vector<uint16_t> got8 = out.download();
  const std::vector<bool> nan_row = {true, true, false, true, false};
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < dim; ++c)
      EXPECT_EQ(got8[size_t(r * dim + c)], nan_row[size_t(r)] ? kPosNan : float_to_bf16(2.0f)) << "fp8 row " << r;
}

TEST(CudaModelKernels, GatherRowsMatchesCpu) {
  REQUIRE_HOPPER();
  auto rng = make_rng();
  cpu::CpuOps ops(4);
  for (int64_t cols : {8, 100, 4096, 5000}) {
    constexpr int64_t x_rows = 37;
    const std::vector<uint16_t> x = random_bf16(rng, x_rows, cols, true);
    std::vector<float> xf = widen(x);
    for (int64_t n : {1, 5, 64}) {
      std::uniform_int_distribution<int64_t> pick(0, x_rows - 1);
      std::vector<int64_t> idx(static_cast<size_t>(n));
      for (auto& i : idx) i = pick(rng);
      idx.front() = x_rows - 1;
      std::vector<int32_t> idx32(idx.begin(), idx.end());
      std::vector<float> ref(static_cast<size_t>(n * cols));
      ops.gather_rows(tensor(xf, x_rows, cols), idx, tensor(ref, n, cols));
      for (size_t off : {size_t(0), size_t(1)}) {
        Bf16Array d_x(x.size(), off), out(static_cast<size_t>(n * cols), off);
        DeviceArray<int32_t> d_idx(idx32.size());
        d_x.upload(x);
        d_idx.upload(idx32);
        cuda::gather_rows(bf(d_x), cols, d_idx.ptr(), n, bf(out), nullptr, x_rows);
        sync();
        expect_same_bits(shape_name("gather_rows", n, cols, "offset " + std::to_string(off)), out.download(),
                         round_all(ref), cols, /*nan_any=*/true);
      }
    }
  }
}

// ---- norms ---------------------------------------------------------------------------------------

struct NormCase {
  int64_t rows, cols;
};

std::vector<NormCase> norm_cases() {
  std::vector<NormCase> cases;
  for (int64_t rows : {1, 3, 17, 64})
    for (int64_t cols : {64, 100, 384, 1000, 4096, 4100, 8192, 16384}) cases.push_back({rows, cols});
  cases.push_back({1, 40000});  // beyond 32,768: the streaming kernel
  cases.push_back({3, 40004});
  return cases;
}

TEST(CudaModelKernels, RmsNormMatchesCpu) {
  REQUIRE_HOPPER();
  TuningGuard guard;
  auto rng = make_rng();
  cpu::CpuOps ops(4);
  int64_t inexact = 0, total = 0;
  for (const NormCase& nc : norm_cases()) {
    const int64_t rows = nc.rows, cols = nc.cols;
    const std::vector<float> w = random_weights(rng, cols);
    const auto weight = ops.upload_vector(w);
    DeviceArray<float> d_w(w.size());
    d_w.upload(w);
    for (bool exact : {true, false}) {
      const std::vector<uint16_t> x = exact ? exact_bf16(rng, rows, cols) : random_bf16(rng, rows, cols, true);
      std::vector<float> xf = widen(x), ref(xf.size());
      const float eps = exact ? 1e-6f : 1e-5f;
      ops.rms_norm(tensor(xf, rows, cols), *weight, eps, tensor(ref, rows, cols));
      const std::vector<uint16_t> want = round_all(ref);
      for (bool streaming : {false, true}) {
        for (size_t off : {size_t(0), size_t(1)}) {
          if (off == 1 && cols != 4096 && cols != 100) continue;
          cuda::detail::model_kernel_tuning().force_streaming_norm = streaming;
          Bf16Array d_x(x.size(), off), out(x.size(), off);
          d_x.upload(x);
          cuda::rms_norm(bf(d_x), d_w.ptr(), eps, rows, cols, bf(out), nullptr);
          sync();
          const std::string what = shape_name("rms_norm", rows, cols,
                                              std::string(exact ? "exact" : "general") +
                                                  (streaming ? " streaming" : "") + " offset " + std::to_string(off));
          if (exact) {
            expect_same_bits(what, out.download(), want, cols);
          } else {
            inexact += expect_within_one_ulp(what, out.download(), want, cols);
            total += rows * cols;
          }
        }
      }
    }
  }
  // In place (out = x).
  {
    const int64_t rows = 5, cols = 2048;
    const std::vector<float> w = random_weights(rng, cols);
    DeviceArray<float> d_w(w.size());
    d_w.upload(w);
    const std::vector<uint16_t> x = exact_bf16(rng, rows, cols);
    std::vector<float> xf = widen(x), ref(xf.size());
    ops.rms_norm(tensor(xf, rows, cols), *ops.upload_vector(w), 1e-6f, tensor(ref, rows, cols));
    Bf16Array d_x(x.size());
    d_x.upload(x);
    cuda::rms_norm(bf(d_x), d_w.ptr(), 1e-6f, rows, cols, bf(d_x), nullptr);
    sync();
    expect_same_bits("rms_norm in place", d_x.download(), round_all(ref), cols);
  }
  std::printf("[  norms   ] general data: %lld of %lld elements not bit-identical (each within 1 BF16 ulp)\n",
              (long long)inexact, (long long)total);
}

TEST(CudaModelKernels, AddRmsNormMatchesCpu) {
  REQUIRE_HOPPER();
  TuningGuard guard;
  auto rng = make_rng();
  cpu::CpuOps ops(4);
  for (const NormCase& nc : norm_cases()) {
    const int64_t rows = nc.rows, cols = nc.cols;
    const std::vector<float> w = random_weights(rng, cols);
    const auto weight = ops.upload_vector(w);
    DeviceArray<float> d_w(w.size());
    d_w.upload(w);
    for (bool exact : {true, false}) {
      // exact: h and delta of the same sign, so |h + delta| stays in [2^-4, 2^5)·… and Σ h² is exact.
      std::vector<uint16_t> h, d;
      if (exact) {
        h = exact_bf16(rng, rows, cols);
        for (auto& b : h) b = (b & 0x7FFF) == 0 ? uint16_t(0x3F80 | (b & 0x8000)) : b;  // no zeros: signs must be set
        for (auto& b : h) if ((b & 0x7FFF) >= 0x4180) b = uint16_t((b & 0x8000) | 0x417F);  // |h| < 2^4
        d = exact_bf16(rng, rows, cols, &h);
        for (auto& b : d) if ((b & 0x7FFF) >= 0x4180) b = uint16_t((b & 0x8000) | 0x417F);  // |d| < 2^4
      } else {
        h = random_bf16(rng, rows, cols, true);
        d = random_bf16(rng, rows, cols, false);
      }
      std::vector<float> hf = widen(h), df = widen(d);
      ops.add(tensor(hf, rows, cols), tensor(df, rows, cols));
      const std::vector<uint16_t> h_want = round_all(hf);
      std::vector<float> hr = widen(h_want), ref(hr.size());
      ops.rms_norm(tensor(hr, rows, cols), *weight, 1e-6f, tensor(ref, rows, cols));
      const std::vector<uint16_t> want = round_all(ref);
      for (bool streaming : {false, true}) {
        for (size_t off : {size_t(0), size_t(1)}) {
          if (off == 1 && cols != 4096 && cols != 100) continue;
          cuda::detail::model_kernel_tuning().force_streaming_norm = streaming;
          Bf16Array d_h(h.size(), off), d_d(d.size(), off), out(h.size(), off);
          d_h.upload(h);
          d_d.upload(d);
          cuda::add_rms_norm(bf(d_h), bf(d_d), d_w.ptr(), 1e-6f, rows, cols, bf(out), nullptr);
          sync();
          const std::string what = shape_name("add_rms_norm", rows, cols,
                                              std::string(exact ? "exact" : "general") +
                                                  (streaming ? " streaming" : "") + " offset " + std::to_string(off));
          expect_same_bits(what + " h", d_h.download(), h_want, cols);
          if (exact) expect_same_bits(what + " out", out.download(), want, cols);
          else expect_within_one_ulp(what + " out", out.download(), want, cols);
        }
      }
    }
  }
}

TEST(CudaModelKernels, HeadRmsNormMatchesCpu) {
  REQUIRE_HOPPER();
  auto rng = make_rng();
  cpu::CpuOps ops(4);
  for (int64_t hd : {64, 128, 256, 512, 1024, 40, 100, 36}) {
    const std::vector<float> wq = random_weights(rng, hd), wk = random_weights(rng, hd);
    const auto weight_q = ops.upload_vector(wq), weight_k = ops.upload_vector(wk);
    DeviceArray<float> d_wq(wq.size()), d_wk(wk.size());
    d_wq.upload(wq);
    d_wk.upload(wk);
    for (int64_t rows : {1, 5, 33}) {
      for (bool exact : {true, false}) {
        // One tensor of 8 heads (aligned and not).
        {
          const int64_t cols = 8 * hd;
          const std::vector<uint16_t> x = exact ? exact_bf16(rng, rows, cols) : random_bf16(rng, rows, cols, true);
          std::vector<float> ref = widen(x);
          ops.head_rms_norm(tensor(ref, rows, cols), hd, *weight_q, 1e-6f);
          for (size_t off : {size_t(0), size_t(1)}) {
            Bf16Array d_x(x.size(), off);
            d_x.upload(x);
            cuda::head_rms_norm(bf(d_x), rows, cols, hd, d_wq.ptr(), 1e-6f, nullptr);
            sync();
            const std::string what = shape_name("head_rms_norm", rows, cols,
                                                "head_dim " + std::to_string(hd) + (exact ? " exact" : " general") +
                                                    " offset " + std::to_string(off));
            if (exact) expect_same_bits(what, d_x.download(), round_all(ref), cols);
            else expect_within_one_ulp(what, d_x.download(), round_all(ref), cols);
          }
        }
        // q (4 heads) and k (2 heads) inside a fused QKV row [q | k | v], one launch.
        {
          const int64_t nq = 4, nk = 2, ld = (nq + 2 * nk) * hd;
          const std::vector<uint16_t> qkv = exact ? exact_bf16(rng, rows, ld) : random_bf16(rng, rows, ld, true);
          std::vector<float> q(static_cast<size_t>(rows * nq * hd)), k(static_cast<size_t>(rows * nk * hd));
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < nq * hd; ++c) q[size_t(r * nq * hd + c)] = bf16_to_float(qkv[size_t(r * ld + c)]);
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < nk * hd; ++c)
              k[size_t(r * nk * hd + c)] = bf16_to_float(qkv[size_t(r * ld + nq * hd + c)]);
          ops.head_rms_norm(tensor(q, rows, nq * hd), hd, *weight_q, 1e-6f);
          ops.head_rms_norm(tensor(k, rows, nk * hd), hd, *weight_k, 1e-6f);
          std::vector<uint16_t> want = qkv;
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t c = 0; c < nq * hd; ++c) want[size_t(r * ld + c)] = float_to_bf16(q[size_t(r * nq * hd + c)]);
            for (int64_t c = 0; c < nk * hd; ++c)
              want[size_t(r * ld + nq * hd + c)] = float_to_bf16(k[size_t(r * nk * hd + c)]);
          }
          Bf16Array d_qkv(qkv.size());
          d_qkv.upload(qkv);
          __nv_bfloat16* base = bf(d_qkv);
          cuda::head_rms_norm_qk(base, nq * hd, d_wq.ptr(), base + nq * hd, nk * hd, d_wk.ptr(), rows, hd, 1e-6f,
                                 nullptr, ld, ld);
          sync();
          const std::string what = shape_name("head_rms_norm_qk (fused qkv)", rows, ld,
                                              "head_dim " + std::to_string(hd) + (exact ? " exact" : " general"));
          // v must be untouched; NaN inputs in v keep their bits, so compare v exactly.
          const std::vector<uint16_t> got = d_qkv.download();
          if (exact) {
            expect_same_bits(what, got, want, ld);
          } else {
            expect_within_one_ulp(what, got, want, ld);
            for (int64_t r = 0; r < rows; ++r)
              for (int64_t c = (nq + nk) * hd; c < ld; ++c)
                if (got[size_t(r * ld + c)] != qkv[size_t(r * ld + c)]) {
                  ADD_FAILURE() << what << ": v changed at [" << r << ", " << c << "]" << seed_note();
                  r = rows;
                  break;
                }
          }
        }
      }
    }
  }
}

// ---- element-wise ------------------------------------------------------------------------------------

const int64_t kFlatSizes[] = {1, 7, 8, 9, 100, 4096, 14336, 100003};

TEST(CudaModelKernels, AddMatchesCpu) {
  REQUIRE_HOPPER();
  auto rng = make_rng();
  cpu::CpuOps ops(4);
  for (int64_t n : kFlatSizes) {
    const std::vector<uint16_t> a = random_bf16(rng, 1, n, true), b = random_bf16(rng, 1, n, n > 4);
    std::vector<float> af = widen(a), bfl = widen(b);
    ops.add(tensor(af, 1, n), tensor(bfl, 1, n));
    for (size_t off : {size_t(0), size_t(1)}) {
      Bf16Array d_a(a.size(), off), d_b(b.size(), off);
      d_a.upload(a);
      d_b.upload(b);
      cuda::add(bf(d_a), bf(d_b), n, nullptr);
      sync();
      expect_same_bits("add n=" + std::to_string(n) + " offset " + std::to_string(off), d_a.download(), round_all(af),
                       0);
    }
  }
}

TEST(CudaModelKernels, SiluMulMatchesCpu) {
  REQUIRE_HOPPER();
  auto rng = make_rng();
  cpu::CpuOps ops(4);
  for (int64_t n : kFlatSizes) {
    const std::vector<uint16_t> g = random_bf16(rng, 1, n, true), u = random_bf16(rng, 1, n, n > 4);
    std::vector<float> gf = widen(g), uf = widen(u), ref(static_cast<size_t>(n));
    ops.silu_mul(tensor(gf, 1, n), tensor(uf, 1, n), tensor(ref, 1, n));
    for (size_t off : {size_t(0), size_t(1)}) {
      Bf16Array d_g(g.size(), off), d_u(u.size(), off), out(static_cast<size_t>(n), off);
      d_g.upload(g);
      d_u.upload(u);
      cuda::silu_mul(bf(d_g), bf(d_u), n, bf(out), nullptr);
      sync();
      expect_same_bits("silu_mul n=" + std::to_string(n) + " offset " + std::to_string(off), out.download(),
                       round_all(ref), 0);
    }
  }
}

TEST(CudaModelKernels, SiluMulFusedMatchesCpu) {
  REQUIRE_HOPPER();
  auto rng = make_rng();
  cpu::CpuOps ops(4);
  for (int64_t rows : {1, 5, 33}) {
    for (int64_t cols : {8, 100, 3072, 14336}) {
      const std::vector<uint16_t> gu = random_bf16(rng, rows, 2 * cols, true);
      std::vector<float> g(static_cast<size_t>(rows * cols)), u(static_cast<size_t>(rows * cols)), ref(static_cast<size_t>(rows * cols));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          g[size_t(r * cols + c)] = bf16_to_float(gu[size_t(r * 2 * cols + c)]);
          u[size_t(r * cols + c)] = bf16_to_float(gu[size_t(r * 2 * cols + cols + c)]);
        }
      ops.silu_mul(tensor(g, rows, cols), tensor(u, rows, cols), tensor(ref, rows, cols));
      for (size_t off : {size_t(0), size_t(1)}) {
        Bf16Array d_gu(gu.size(), off), out(static_cast<size_t>(rows * cols), off);
        d_gu.upload(gu);
        cuda::silu_mul_fused(bf(d_gu), rows, cols, bf(out), nullptr);
        sync();
        expect_same_bits(shape_name("silu_mul_fused", rows, cols, "offset " + std::to_string(off)), out.download(),
                         round_all(ref), cols);
      }
    }
  }
}

TEST(CudaModelKernels, Bf16ToFloatIsExact) {
  REQUIRE_HOPPER();
  auto rng = make_rng();
  for (int64_t n : kFlatSizes) {
    const std::vector<uint16_t> x = random_bf16(rng, 1, n, true);
    for (size_t off : {size_t(0), size_t(1)}) {
      Bf16Array d_x(x.size(), off);
      DeviceArray<float> out(static_cast<size_t>(n), off);
      d_x.upload(x);
      cuda::bf16_to_float(bf(d_x), n, out.ptr(), nullptr);
      sync();
      const std::vector<float> got = out.download();
      int64_t bad = 0;
      for (size_t i = 0; i < x.size(); ++i)
        if (std::bit_cast<uint32_t>(got[i]) != uint32_t(x[i]) << 16) ++bad;
      EXPECT_EQ(bad, 0) << "bf16_to_float n=" << n << " offset " << off << seed_note();
    }
  }
}

// ---- RoPE -----------------------------------------------------------------------------------------------

struct RopeCase {
  std::string name;
  ModelConfig config;
};

ModelConfig rope_config(int64_t head_dim, double theta) {
  ModelConfig c;
  c.head_dim = head_dim;
  c.rope_theta = theta;
  c.max_position_embeddings = 131072;
  return c;
}

std::vector<RopeCase> rope_cases() {
  std::vector<RopeCase> cases;
  cases.push_back({"default hd128", rope_config(128, 10000.0)});
  ModelConfig llama3 = rope_config(128, 500000.0);
  llama3.rope_scaling.type = RopeScalingType::kLlama3;
  llama3.rope_scaling.factor = 8.0;
  llama3.rope_scaling.low_freq_factor = 1.0;
  llama3.rope_scaling.high_freq_factor = 4.0;
  llama3.rope_scaling.original_max_position_embeddings = 8192;
  cases.push_back({"llama3 hd128", llama3});
  ModelConfig yarn = rope_config(128, 1000000.0);
  yarn.rope_scaling.type = RopeScalingType::kYarn;
  yarn.rope_scaling.factor = 4.0;
  yarn.rope_scaling.original_max_position_embeddings = 32768;
  cases.push_back({"yarn hd128", yarn});
  ModelConfig yarn64 = rope_config(64, 10000.0);
  yarn64.rope_scaling.type = RopeScalingType::kYarn;
  yarn64.rope_scaling.factor = 16.0;
  yarn64.rope_scaling.original_max_position_embeddings = 4096;
  cases.push_back({"yarn hd64", yarn64});
  cases.push_back({"default hd64", rope_config(64, 10000.0)});
  cases.push_back({"default hd80", rope_config(80, 10000.0)});    // half 40: vectors
  cases.push_back({"default hd72", rope_config(72, 10000.0)});    // half 36: scalar
  cases.push_back({"default hd256", rope_config(256, 1000000.0)});
  cases.push_back({"default hd2", rope_config(2, 10000.0)});
  return cases;
}

std::vector<int64_t> random_positions(std::mt19937_64& rng, int64_t rows) {
  std::uniform_int_distribution<int64_t> pos(0, 131071);
  std::vector<int64_t> p(static_cast<size_t>(rows));
  for (auto& v : p) v = pos(rng);
  const int64_t fixed[] = {0, 131071, 1, 4096, 1 << 20};
  for (int64_t r = 0; r < rows && r < 5; ++r) p[size_t(r)] = fixed[r];
  return p;
}

struct RopeStats {
  int64_t elements = 0, identical = 0, bad = 0;
  std::string first;
};

// Reports how many elements matched the CPU bit for bit and fails on any outside the bound.
void expect_rope_within_bound(const RopeStats& st) {
  std::printf("[   rope   ] %lld of %lld elements bit-identical to the CPU\n", (long long)st.identical,
              (long long)st.elements);
  EXPECT_EQ(st.bad, 0) << st.bad << " elements outside the bound; first " << st.first << seed_note();
}

// Compares rows × (heads · hd) outputs (got, BF16 in a row of stride ld from column c0)
// with the CPU result `want` (floats [rows, heads · hd]) for inputs `in` (same layout as want).
void check_rope(const std::string& what, const std::vector<uint16_t>& got, int64_t ld, int64_t c0,
                const std::vector<float>& in, const std::vector<float>& want, int64_t rows, int64_t heads,
                const RopeTable& table, const std::vector<int64_t>& pos, RopeStats& st) {
  const int64_t hd = table.rotary_dim(), half = hd / 2, cols = heads * hd;
  std::vector<float> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
  for (int64_t r = 0; r < rows; ++r) {
    table.cos_sin(pos[size_t(r)], cs.data(), sn.data());
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < hd; ++i) {
        const int64_t j = i < half ? i : i - half;
        const double a = in[size_t(r * cols + h * hd + j)], b = in[size_t(r * cols + h * hd + j + half)];
        const double mag = i < half ? std::fabs(a) * std::fabs(cs[size_t(j)]) + std::fabs(b) * std::fabs(sn[size_t(j)])
                                    : std::fabs(b) * std::fabs(cs[size_t(j)]) + std::fabs(a) * std::fabs(sn[size_t(j)]);
        const uint16_t g = got[size_t(r * ld + c0 + h * hd + i)];
        const uint16_t w = float_to_bf16(want[size_t(r * cols + h * hd + i)]);
        ++st.elements;
        if (g == w) {
          ++st.identical;
          continue;
        }
        const double gv = bf16_to_float(g), wv = bf16_to_float(w);
        const uint16_t larger = std::fabs(gv) > std::fabs(wv) ? g : w;
        const double tol = bf16_ulp(larger) + 6.0 * 0x1p-23 * mag * (1.0 + 0x1p-20);
        if (!(std::fabs(gv - wv) <= tol)) {
          if (st.bad++ == 0) {
            char buf[300];
            std::snprintf(buf, sizeof buf, "%s: [%lld, head %lld, %lld] gpu %.9g cpu %.9g tol %.3g (position %lld)",
                          what.c_str(), (long long)r, (long long)h, (long long)i, gv, wv, tol,
                          (long long)pos[size_t(r)]);
            st.first = buf;
          }
        }
      }
  }
}

TEST(CudaModelKernels, RopeMatchesRopeTable) {
  REQUIRE_HOPPER();
  auto rng = make_rng();
  cpu::CpuOps ops(4);
  RopeStats st;
  for (const RopeCase& rc : rope_cases()) {
    const RopeTable table(rc.config);
    const int64_t hd = table.rotary_dim();
    DeviceArray<float> inv(table.inv_freq().size());
    inv.upload(table.inv_freq());
    for (int64_t rows : {1, 5, 33}) {
      const std::vector<int64_t> pos = random_positions(rng, rows);
      const std::vector<int32_t> pos32(pos.begin(), pos.end());
      DeviceArray<int32_t> d_pos(pos32.size());
      d_pos.upload(pos32);
      // rope over one tensor of 4 heads, aligned and not.
      const int64_t heads = 4, cols = heads * hd;
      const std::vector<uint16_t> x = random_bf16(rng, rows, cols, false);
      const std::vector<float> in = widen(x);
      std::vector<float> want = in;
      ops.rope(tensor(want, rows, cols), hd, pos, table);
      for (size_t off : {size_t(0), size_t(1)}) {
        Bf16Array d_x(x.size(), off);
        d_x.upload(x);
        cuda::rope(bf(d_x), rows, cols, hd, d_pos.ptr(), inv.ptr(), table.attention_factor(), nullptr);
        sync();
        check_rope(rc.name + " rope rows " + std::to_string(rows) + " offset " + std::to_string(off), d_x.download(),
                   cols, 0, in, want, rows, heads, table, pos, st);
      }
      // rope_qk on separate q (8 heads) and k (2 heads) buffers.
      const int64_t nq = 8, nk = 2;
      const std::vector<uint16_t> q = random_bf16(rng, rows, nq * hd, false), k = random_bf16(rng, rows, nk * hd, false);
      const std::vector<float> qin = widen(q), kin = widen(k);
      std::vector<float> qw = qin, kw = kin;
      ops.rope(tensor(qw, rows, nq * hd), hd, pos, table);
      ops.rope(tensor(kw, rows, nk * hd), hd, pos, table);
      for (size_t off : {size_t(0), size_t(1)}) {
        Bf16Array d_q(q.size(), off), d_k(k.size());
        d_q.upload(q);
        d_k.upload(k);
        cuda::rope_qk(bf(d_q), nq * hd, bf(d_k), nk * hd, rows, hd, d_pos.ptr(), inv.ptr(), table.attention_factor(),
                      nullptr);
        sync();
        const std::string what = rc.name + " rope_qk rows " + std::to_string(rows) + " offset " + std::to_string(off);
        check_rope(what + " q", d_q.download(), nq * hd, 0, qin, qw, rows, nq, table, pos, st);
        check_rope(what + " k", d_k.download(), nk * hd, 0, kin, kw, rows, nk, table, pos, st);
      }
    }
  }
  expect_rope_within_bound(st);
}

TEST(CudaModelKernels, RopeQkInFusedQkvMatchesCpu) {
  REQUIRE_HOPPER();
  auto rng = make_rng();
  cpu::CpuOps ops(4);
  RopeStats st;
  for (const RopeCase& rc : rope_cases()) {
    const RopeTable table(rc.config);
    const int64_t hd = table.rotary_dim();
    DeviceArray<float> inv(table.inv_freq().size());
    inv.upload(table.inv_freq());
    for (int64_t rows : {1, 17}) {
      const std::vector<int64_t> pos = random_positions(rng, rows);
      const std::vector<int32_t> pos32(pos.begin(), pos.end());
      DeviceArray<int32_t> d_pos(pos32.size());
      d_pos.upload(pos32);
      const int64_t nq = 8, nk = 2, ld = (nq + 2 * nk) * hd;
      const std::vector<uint16_t> qkv = random_bf16(rng, rows, ld, false);
      std::vector<float> qin(static_cast<size_t>(rows * nq * hd)), kin(static_cast<size_t>(rows * nk * hd));
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < nq * hd; ++c) qin[size_t(r * nq * hd + c)] = bf16_to_float(qkv[size_t(r * ld + c)]);
        for (int64_t c = 0; c < nk * hd; ++c)
          kin[size_t(r * nk * hd + c)] = bf16_to_float(qkv[size_t(r * ld + nq * hd + c)]);
      }
      std::vector<float> qw = qin, kw = kin;
      ops.rope(tensor(qw, rows, nq * hd), hd, pos, table);
      ops.rope(tensor(kw, rows, nk * hd), hd, pos, table);
      Bf16Array d_qkv(qkv.size());
      d_qkv.upload(qkv);
      __nv_bfloat16* base = bf(d_qkv);
      cuda::rope_qk(base, nq * hd, base + nq * hd, nk * hd, rows, hd, d_pos.ptr(), inv.ptr(), table.attention_factor(),
                    nullptr, ld, ld);
      sync();
      const std::vector<uint16_t> got = d_qkv.download();
      const std::string what = rc.name + " fused qkv rows " + std::to_string(rows);
      check_rope(what + " q", got, ld, 0, qin, qw, rows, nq, table, pos, st);
      check_rope(what + " k", got, ld, nq * hd, kin, kw, rows, nk, table, pos, st);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = (nq + nk) * hd; c < ld; ++c)
          if (got[size_t(r * ld + c)] != qkv[size_t(r * ld + c)]) {
            ADD_FAILURE() << what << ": v changed at [" << r << ", " << c << "]";
            r = rows;
            break;
          }
    }
  }
  expect_rope_within_bound(st);
}

// ---- split_norm_rope_qkv ---------------------------------------------------------------------------------------

struct QkvCase {
  std::string name;
  int64_t nq = 0, nk = 0;
  bool norm = false;
  ModelConfig config;  // its head_dim and RoPE
  size_t offset = 0;   // elements: 1 puts qkv and the outputs off 16-byte alignment (the scalar path)
};

std::vector<QkvCase> qkv_cases() {
  ModelConfig llama3 = rope_config(128, 500000.0);
  llama3.rope_scaling.type = RopeScalingType::kLlama3;
  llama3.rope_scaling.factor = 8.0;
  llama3.rope_scaling.low_freq_factor = 1.0;
  llama3.rope_scaling.high_freq_factor = 4.0;
  llama3.rope_scaling.original_max_position_embeddings = 8192;
  ModelConfig yarn64 = rope_config(64, 10000.0);
  yarn64.rope_scaling.type = RopeScalingType::kYarn;
  yarn64.rope_scaling.factor = 16.0;
  yarn64.rope_scaling.original_max_position_embeddings = 4096;
  const ModelConfig qwen3 = rope_config(128, 1000000.0);
  return {
      {"llama 32/8 x128", 32, 8, false, llama3, 0},
      {"qwen3 32/8 x128 norms", 32, 8, true, qwen3, 0},
      {"qwen3 16/8 x128 norms", 16, 8, true, qwen3, 0},
      {"llama 32/8 x128 offset 1", 32, 8, false, llama3, 1},
      {"qwen3 32/8 x128 norms offset 1", 32, 8, true, qwen3, 1},
      {"yarn 8/2 x64 norms", 8, 2, true, yarn64, 0},
      {"8/2 x80 norms", 8, 2, true, rope_config(80, 10000.0), 0},    // 10 vectors: groups of 16, some idle
      {"8/2 x72 norms", 8, 2, true, rope_config(72, 10000.0), 0},    // half 36: vectors straddle the halves
      {"4/2 x36 norms", 4, 2, true, rope_config(36, 10000.0), 0},    // head_dim % 8 ≠ 0: scalar
      {"4/2 x256 norms", 4, 2, true, rope_config(256, 1000000.0), 0},
      {"4/2 x512 norms", 4, 2, true, rope_config(512, 1000000.0), 0},   // 2 vectors per lane
      {"2/1 x1024 norms", 2, 1, true, rope_config(1024, 1000000.0), 0},  // 4 vectors per lane
      {"6/3 x2", 6, 3, false, rope_config(2, 10000.0), 0},
  };
}

// Positions up to 100000; with 3 or more rows, 0 and 100000 themselves.
std::vector<int64_t> qkv_positions(std::mt19937_64& rng, int64_t rows) {
  std::uniform_int_distribution<int64_t> pos(0, 100000);
  std::vector<int64_t> p(static_cast<size_t>(rows));
  for (auto& v : p) v = pos(rng);
  if (rows >= 3) p[1] = 0, p[2] = 100000;
  return p;
}

// The columns [c0, c0 + width) of every row of x [rows, ld].
std::vector<uint16_t> columns(const std::vector<uint16_t>& x, int64_t rows, int64_t ld, int64_t c0, int64_t width) {
  std::vector<uint16_t> out(static_cast<size_t>(rows * width));
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(x.begin() + r * ld + c0, width, out.begin() + r * width);
  return out;
}

TEST(CudaModelKernels, SplitNormRopeQkvMatchesThreeKernels) {
  REQUIRE_HOPPER();
  auto rng = make_rng();
  for (const QkvCase& qc : qkv_cases()) {
    const RopeTable table(qc.config);
    const int64_t hd = table.rotary_dim(), qw = qc.nq * hd, kw = qc.nk * hd, ld = qw + 2 * kw;
    DeviceArray<float> inv(table.inv_freq().size()), d_wq(static_cast<size_t>(hd)), d_wk(static_cast<size_t>(hd));
    inv.upload(table.inv_freq());
    d_wq.upload(random_weights(rng, hd));
    d_wk.upload(random_weights(rng, hd));
    const float* wq = qc.norm ? d_wq.ptr() : nullptr;
    const float* wk = qc.norm ? d_wk.ptr() : nullptr;
    for (int64_t rows : {1, 3, 64}) {
      const std::vector<int64_t> pos = qkv_positions(rng, rows);
      const std::vector<int32_t> pos32(pos.begin(), pos.end());
      DeviceArray<int32_t> d_pos(pos32.size());
      d_pos.upload(pos32);
      const std::vector<uint16_t> qkv = random_bf16(rng, rows, ld, true);
      const size_t off = qc.offset;
      Bf16Array d_qkv(qkv.size(), off);
      d_qkv.upload(qkv);
      // Today's sequence: split_columns, head_rms_norm on q and on k, rope_qk.
      Bf16Array q3(size_t(rows * qw), off), k3(size_t(rows * kw), off), v3(size_t(rows * kw), off);
      cuda::ColumnSplit split;
      split.count = 3;
      split.out[0] = bf(q3), split.out[1] = bf(k3), split.out[2] = bf(v3);
      split.width[0] = qw, split.width[1] = kw, split.width[2] = kw;
      cuda::split_columns(bf(d_qkv), rows, split, nullptr);
      if (qc.norm) {
        cuda::head_rms_norm(bf(q3), rows, qw, hd, wq, 1e-6f, nullptr);
        cuda::head_rms_norm(bf(k3), rows, kw, hd, wk, 1e-6f, nullptr);
      }
      cuda::rope_qk(bf(q3), qw, bf(k3), kw, rows, hd, d_pos.ptr(), inv.ptr(), table.attention_factor(), nullptr);
      // The fused kernel.
      Bf16Array q(size_t(rows * qw), off), k(size_t(rows * kw), off), v(size_t(rows * kw), off);
      cuda::split_norm_rope_qkv(bf(d_qkv), rows, qw, kw, kw, hd, bf(q), bf(k), bf(v), wq, wk, 1e-6f, d_pos.ptr(),
                                inv.ptr(), table.attention_factor(), nullptr);
      sync();
      const std::string what = qc.name + " rows " + std::to_string(rows);
      expect_same_bits(what + " q", q.download(), q3.download(), qw);
      expect_same_bits(what + " k", k.download(), k3.download(), kw);
      expect_same_bits(what + " v", v.download(), v3.download(), kw);
      expect_same_bits(what + " qkv (input, unchanged)", d_qkv.download(), qkv, ld);
    }
  }
}

// With a KV store, the fused kernel leaves the cache exactly as split_norm_rope_qkv followed
// by store_kv does (the reference: the store kernel the attention tests check against the CPU
// cache), for every cache element type; a position past its block table row is skipped by both;
// unaligned k and v (offset 1), which store_kv's layout cannot take, are refused before any launch.
TEST(CudaModelKernels, SplitNormRopeQkvStoresKvAsStoreKv) {
  REQUIRE_HOPPER();
  using backend::KvElement;
  auto rng = make_rng();
  constexpr int kBlockSize = 16, kBlocksPerSeq = 4;
  for (const QkvCase& qc : qkv_cases()) {
    const RopeTable table(qc.config);
    const int64_t hd = table.rotary_dim(), qw = qc.nq * hd, kw = qc.nk * hd, ld = qw + 2 * kw;
    if (hd % 8 != 0 || hd > 256) continue;  // the cache's head_dim: a multiple of 8 up to 256
    DeviceArray<float> inv(table.inv_freq().size()), d_wq(static_cast<size_t>(hd)), d_wk(static_cast<size_t>(hd));
    inv.upload(table.inv_freq());
    d_wq.upload(random_weights(rng, hd));
    d_wk.upload(random_weights(rng, hd));
    const float* wq = qc.norm ? d_wq.ptr() : nullptr;
    const float* wk = qc.norm ? d_wk.ptr() : nullptr;
    for (int64_t rows : {1, 3, 33}) {
      // Row r is sequence r; its blocks a shuffled share of the cache; the last row of three
      // or more sits one position past its table (skipped).
      const int64_t blocks = rows * kBlocksPerSeq;
      std::vector<int32_t> tables(static_cast<size_t>(blocks));
      for (int64_t b = 0; b < blocks; ++b) tables[size_t(b)] = int32_t(b);
      std::shuffle(tables.begin(), tables.end(), rng);
      std::uniform_int_distribution<int32_t> pick(0, kBlocksPerSeq * kBlockSize - 1);
      std::vector<int32_t> pos(static_cast<size_t>(rows)), seq(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) pos[size_t(r)] = pick(rng), seq[size_t(r)] = int32_t(r);
      if (rows >= 3) pos.back() = kBlocksPerSeq * kBlockSize;
      DeviceArray<int32_t> d_pos(pos.size()), d_seq(seq.size()), d_tables(tables.size());
      d_pos.upload(pos);
      d_seq.upload(seq);
      d_tables.upload(tables);
      cuda::DeviceAttentionBatch batch;
      batch.num_seqs = int(rows);
      batch.num_rows = rows;
      batch.row_seq = d_seq.ptr();
      batch.row_position = d_pos.ptr();
      batch.block_tables = d_tables.ptr();
      batch.max_blocks_per_seq = kBlocksPerSeq;
      const std::vector<uint16_t> qkv = random_bf16(rng, rows, ld, true);
      const size_t off = qc.offset;
      Bf16Array d_qkv(qkv.size(), off);
      d_qkv.upload(qkv);
      for (const KvElement e : {KvElement::kBF16, KvElement::kF32, KvElement::kE4M3, KvElement::kE5M2}) {
        const size_t bytes = size_t(blocks * qc.nk * kBlockSize * hd) * element_bytes(e);
        // Both caches start from the same random bytes, so that skipped slots are seen unchanged.
        std::vector<uint8_t> init(bytes);
        for (auto& b : init) b = uint8_t(rng());
        DeviceArray<uint8_t> k_ref(bytes), v_ref(bytes), k_cache(bytes), v_cache(bytes);
        for (auto* a : {&k_ref, &v_ref, &k_cache, &v_cache}) {
          a->upload(init);
        }
        const float k_scale = e == KvElement::kE4M3 ? 0.0125f : 0.5f, v_scale = e == KvElement::kE4M3 ? 0.02f : 0.25f;
        const cuda::DeviceKvLayer ref_layer{k_ref.ptr(), v_ref.ptr(), e, k_scale, v_scale};
        const cuda::DeviceKvLayer layer{k_cache.ptr(), v_cache.ptr(), e, k_scale, v_scale};
        Bf16Array q(size_t(rows * qw), off), k(size_t(rows * kw), off), v(size_t(rows * kw), off);
        const cuda::KvStore store{&batch, int(qc.nk), kBlockSize, layer};
        if (off != 0) {  // store_kv's layout needs aligned k and v: refused before any launch
          EXPECT_THROW(cuda::split_norm_rope_qkv(bf(d_qkv), rows, qw, kw, kw, hd, bf(q), bf(k), bf(v), wq, wk, 1e-6f,
                                                 d_pos.ptr(), inv.ptr(), table.attention_factor(), nullptr, &store),
                       Error);
          continue;
        }
        Bf16Array q3(size_t(rows * qw), off), k3(size_t(rows * kw), off), v3(size_t(rows * kw), off);
        cuda::split_norm_rope_qkv(bf(d_qkv), rows, qw, kw, kw, hd, bf(q3), bf(k3), bf(v3), wq, wk, 1e-6f, d_pos.ptr(),
                                  inv.ptr(), table.attention_factor(), nullptr);
        cuda::store_kv(bf(k3), bf(v3), batch, int(qc.nk), hd, kBlockSize, ref_layer, nullptr);
        cuda::split_norm_rope_qkv(bf(d_qkv), rows, qw, kw, kw, hd, bf(q), bf(k), bf(v), wq, wk, 1e-6f, d_pos.ptr(),
                                  inv.ptr(), table.attention_factor(), nullptr, &store);
        sync();
        const std::string what = qc.name + " rows " + std::to_string(rows) + " cache " + std::to_string(int(e));
        expect_same_bits(what + " q", q.download(), q3.download(), qw);
        expect_same_bits(what + " k", k.download(), k3.download(), kw);
        expect_same_bits(what + " v", v.download(), v3.download(), kw);
        EXPECT_TRUE(k_cache.download() == k_ref.download()) << what << ": K cache differs from store_kv's";
        EXPECT_TRUE(v_cache.download() == v_ref.download()) << what << ": V cache differs from store_kv's";
        EXPECT_FALSE(k_ref.download() == init) << what << ": nothing was stored";
      }
    }
  }
}

TEST(CudaModelKernels, SplitNormRopeQkvMatchesCpu) {
  REQUIRE_HOPPER();
  auto rng = make_rng();
  cpu::CpuOps ops(4);
  RopeStats st;
  for (const QkvCase& qc : qkv_cases()) {
    const RopeTable table(qc.config);
    const int64_t hd = table.rotary_dim(), qw = qc.nq * hd, kw = qc.nk * hd, ld = qw + 2 * kw;
    DeviceArray<float> inv(table.inv_freq().size()), d_wq(static_cast<size_t>(hd)), d_wk(static_cast<size_t>(hd));
    inv.upload(table.inv_freq());
    const std::vector<float> wq = random_weights(rng, hd), wk = random_weights(rng, hd);
    d_wq.upload(wq);
    d_wk.upload(wk);
    const auto weight_q = ops.upload_vector(wq), weight_k = ops.upload_vector(wk);
    for (int64_t rows : {1, 3, 64}) {
      const std::vector<int64_t> pos = qkv_positions(rng, rows);
      const std::vector<int32_t> pos32(pos.begin(), pos.end());
      DeviceArray<int32_t> d_pos(pos32.size());
      d_pos.upload(pos32);
      // With norms, the "exact" data: the GPU's norm is then the CPU's bit for bit.
      const std::vector<uint16_t> qkv = qc.norm ? exact_bf16(rng, rows, ld) : random_bf16(rng, rows, ld, false);
      // The CPU: split, head norms, the normed values rounded to BF16 (what the GPU
      // holds between the ops), then rope.
      std::vector<float> qin = widen(columns(qkv, rows, ld, 0, qw)), kin = widen(columns(qkv, rows, ld, qw, kw));
      if (qc.norm) {
        ops.head_rms_norm(tensor(qin, rows, qw), hd, *weight_q, 1e-6f);
        ops.head_rms_norm(tensor(kin, rows, kw), hd, *weight_k, 1e-6f);
        qin = widen(round_all(qin));
        kin = widen(round_all(kin));
      }
      std::vector<float> qref = qin, kref = kin;
      ops.rope(tensor(qref, rows, qw), hd, pos, table);
      ops.rope(tensor(kref, rows, kw), hd, pos, table);
      const size_t off = qc.offset;
      Bf16Array d_qkv(qkv.size(), off), q(size_t(rows * qw), off), k(size_t(rows * kw), off), v(size_t(rows * kw), off);
      d_qkv.upload(qkv);
      cuda::split_norm_rope_qkv(bf(d_qkv), rows, qw, kw, kw, hd, bf(q), bf(k), bf(v), qc.norm ? d_wq.ptr() : nullptr,
                                qc.norm ? d_wk.ptr() : nullptr, 1e-6f, d_pos.ptr(), inv.ptr(), table.attention_factor(),
                                nullptr);
      sync();
      const std::string what = qc.name + " rows " + std::to_string(rows);
      check_rope(what + " q", q.download(), qw, 0, qin, qref, rows, qc.nq, table, pos, st);
      check_rope(what + " k", k.download(), kw, 0, kin, kref, rows, qc.nk, table, pos, st);
      expect_same_bits(what + " v", v.download(), columns(qkv, rows, ld, qw + kw, kw), kw);
    }
  }
  expect_rope_within_bound(st);
}

// CudaOps' override against Ops' default on the same backend (split_columns,
// head_rms_norm ×2, rope_qk: today's ops), positions from begin_step.
TEST(CudaModelKernels, CudaOpsSplitNormRopeQkvEqualsTheOpSequence) {
  REQUIRE_HOPPER();
  auto rng = make_rng();
  cuda::CudaOps ops;
  const RopeTable table(rope_config(128, 1000000.0));
  const auto weight_q = ops.upload_vector(random_weights(rng, 128));
  const auto weight_k = ops.upload_vector(random_weights(rng, 128));
  for (int64_t rows : {1, 3, 64}) {
    constexpr int64_t nq = 32, nk = 8, hd = 128, qw = nq * hd, kw = nk * hd, ld = qw + 2 * kw;
    const std::vector<int64_t> pos = qkv_positions(rng, rows);
    const std::vector<int32_t> ids(static_cast<size_t>(rows), 0);
    ops.reset_scratch();
    ops.begin_step({ids, pos, {}, {}});
    const backend::Tensor qkv = ops.alloc(rows, ld);
    const std::vector<uint16_t> host = random_bf16(rng, rows, ld, true);
    test::upload_bytes(qkv.data, host.data(), host.size() * 2);
    const backend::Tensor q1 = ops.alloc(rows, qw), k1 = ops.alloc(rows, kw), v1 = ops.alloc(rows, kw);
    const backend::Tensor q2 = ops.alloc(rows, qw), k2 = ops.alloc(rows, kw), v2 = ops.alloc(rows, kw);
    auto fetch = [&](backend::Tensor t) {
      std::vector<float> out(static_cast<size_t>(t.rows * t.cols));
      ops.to_host(t, out);
      std::vector<uint32_t> b(out.size());
      std::memcpy(b.data(), out.data(), out.size() * 4);
      return b;
    };
    for (bool norms : {false, true}) {
      const backend::Weight* nq_w = norms ? weight_q.get() : nullptr;
      const backend::Weight* nk_w = norms ? weight_k.get() : nullptr;
      ops.split_norm_rope_qkv(qkv, q1, k1, v1, hd, nq_w, nk_w, 1e-6f, table);
      ops.backend::Ops::split_norm_rope_qkv(qkv, q2, k2, v2, hd, nq_w, nk_w, 1e-6f, table);
      const std::string what = "CudaOps rows " + std::to_string(rows) + (norms ? " norms" : "");
      EXPECT_TRUE(fetch(q1) == fetch(q2)) << what << " q" << seed_note();
      EXPECT_TRUE(fetch(k1) == fetch(k2)) << what << " k" << seed_note();
      EXPECT_TRUE(fetch(v1) == fetch(v2)) << what << " v" << seed_note();
    }
  }
}

// ---- argmax ---------------------------------------------------------------------------------------------------

// torch.argmax without NaN: the lowest index of the largest non-NaN value; −1 if there is none.
int32_t reference_argmax(const float* row, int64_t cols) {
  int32_t best = -1;
  float bv = 0.0f;
  for (int64_t i = 0; i < cols; ++i) {
    const float v = row[i];
    if (std::isnan(v)) continue;
    if (best < 0 || v > bv) best = int32_t(i), bv = v;
  }
  return best;
}

// Logits of one row of the given kind, BF16 values.
void fill_logit_row(std::mt19937_64& rng, int kind, float* row, int64_t cols) {
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_int_distribution<int64_t> col(0, cols - 1);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  const float nan = std::bit_cast<float>(0x7FC00000u), neg_nan = std::bit_cast<float>(0xFFC00000u);
  for (int64_t i = 0; i < cols; ++i) row[i] = round_to_bf16(normal(rng));  // BF16 values: many natural ties
  switch (kind) {
    case 0:
      break;
    case 1: {  // NaN sprinkled (some at the front), the maximum planted at three spread positions
      for (int64_t i = 0; i < cols; ++i)
        if (unit(rng) < 0.01f) row[i] = unit(rng) < 0.5f ? nan : neg_nan;
      float m = -INFINITY;
      for (int64_t i = 0; i < cols; ++i)
        if (!std::isnan(row[i])) m = std::max(m, row[i]);
      const float top = std::isfinite(m) ? round_to_bf16(m + 1.0f) : 1.0f;
      for (int64_t p : {cols - 1, cols / 2, cols / 3 + 1}) row[std::min(p, cols - 1)] = top;
      row[0] = nan;
      break;
    }
    case 2:  // nothing but NaN: −1
      for (int64_t i = 0; i < cols; ++i) row[i] = (i % 2 != 0) ? nan : neg_nan;
      break;
    case 3:  // −inf everywhere after a leading NaN: index 1 (or −1 for one column)
      for (int64_t i = 0; i < cols; ++i) row[i] = -INFINITY;
      row[0] = nan;
      break;
    case 4: {  // +inf twice, NaN around it
      const int64_t a = col(rng), b = col(rng);
      row[std::min(a, b)] = INFINITY;
      row[std::max(a, b)] = INFINITY;
      row[col(rng)] = nan;
      break;
    }
    case 5: {  // every value negative but two zeros: −0 and +0 tie
      for (int64_t i = 0; i < cols; ++i) row[i] = -std::fabs(row[i]) - 1.0f;
      row[col(rng)] = -0.0f;
      row[col(rng)] = 0.0f;
      break;
    }
    default:  // a unique maximum in the last column (the tail)
      row[cols - 1] = 1e30f;
      break;
  }
  for (int64_t i = 0; i < cols; ++i)
    if (!std::isnan(row[i])) row[i] = round_to_bf16(row[i]);  // BF16 values (NaNs keep their sign)
}

template <typename T>
void run_argmax_case(const std::vector<T>& data, const std::vector<int32_t>& want, int64_t rows, int64_t cols,
                     size_t off, int cluster, const std::vector<int>& kinds) {
  DeviceArray<T> d(data.size(), off);
  d.upload(data);
  DeviceArray<int32_t> out(static_cast<size_t>(rows));
  cuda::detail::model_kernel_tuning().argmax_cluster = cluster;
  if constexpr (sizeof(T) == 2)
    cuda::argmax_rows(reinterpret_cast<const __nv_bfloat16*>(d.ptr()), rows, cols, out.ptr(), nullptr);
  else
    cuda::argmax_rows(d.ptr(), rows, cols, out.ptr(), nullptr);
  sync();
  const std::vector<int32_t> got = out.download();
  for (int64_t r = 0; r < rows; ++r)
    if (got[size_t(r)] != want[size_t(r)]) {
      ADD_FAILURE() << "argmax " << (sizeof(T) == 2 ? "bf16" : "f32") << " [" << rows << ", " << cols << "] offset "
                    << off << " cluster " << cluster << ": row " << r << " (kind " << kinds[size_t(r)] << ") gpu "
                    << got[size_t(r)] << " cpu " << want[size_t(r)] << seed_note();
      return;
    }
}

TEST(CudaModelKernels, ArgmaxMatchesReference) {
  REQUIRE_HOPPER();
  TuningGuard guard;
  auto rng = make_rng();
  int salt = 0;
  std::uniform_real_distribution<float> tiny(-0.004f, 0.004f);
  for (int64_t cols : {1, 7, 8, 100, 4096, 32000, 128256, 151936, 152064, 152067}) {
    for (int64_t rows : {1, 3, 16}) {
      // BF16-valued logits, one row kind per row (rotating over the cases).
      std::vector<float> logits(static_cast<size_t>(rows * cols));
      std::vector<int> kinds(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) {
        kinds[size_t(r)] = int((r + salt) % 7);
        fill_logit_row(rng, kinds[size_t(r)], logits.data() + r * cols, cols);
      }
      ++salt;
      std::vector<uint16_t> bits(logits.size());
      for (size_t i = 0; i < bits.size(); ++i) bits[i] = uint16_t(std::bit_cast<uint32_t>(logits[i]) >> 16);
      std::vector<int32_t> want(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) want[size_t(r)] = reference_argmax(logits.data() + r * cols, cols);
      // float logits: plain rows get detail below BF16 precision; planted ties stay.
      std::vector<float> fine = logits;
      for (int64_t r = 0; r < rows; ++r)
        if (kinds[size_t(r)] == 0)
          for (int64_t i = 0; i < cols; ++i) fine[size_t(r * cols + i)] *= 1.0f + tiny(rng);
      std::vector<int32_t> want_fine(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) want_fine[size_t(r)] = reference_argmax(fine.data() + r * cols, cols);
      for (size_t off : {size_t(0), size_t(1), size_t(3)}) {
        for (int cluster : {0, 1, 2, 3, 8}) {
          if (cols < 4096 && cluster > 2) continue;
          run_argmax_case(bits, want, rows, cols, off, cluster, kinds);
          run_argmax_case(fine, want_fine, rows, cols, off, cluster, kinds);
        }
      }
    }
  }
}

TEST(CudaModelKernels, ArgmaxTiesNansAndInfinities) {
  REQUIRE_HOPPER();
  TuningGuard guard;
  // Hand-made rows: [1, 5, 5, NaN] → 1; all equal → 0; NaN first → the max after; empty rows → −1.
  const int64_t cols = 9;
  const float nan = std::bit_cast<float>(0x7FC00000u);
  const std::vector<std::vector<float>> rows = {
      {1, 5, 5, nan, 0, 0, 0, 0, 5},
      {2, 2, 2, 2, 2, 2, 2, 2, 2},
      {nan, nan, -3, -1, -1, nan, -2, -1, nan},
      {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY},
      {nan, nan, nan, nan, nan, nan, nan, nan, nan},
      {-1, -0.0f, 0.0f, -2, nan, -0.0f, 0, -5, -1},
      {0, 0, 0, 0, 0, 0, 0, 0, INFINITY},
  };
  const std::vector<int32_t> want = {1, 0, 3, 0, -1, 1, 8};
  std::vector<float> flat;
  std::vector<uint16_t> flat_bf16;
  for (const auto& r : rows)
    for (float v : r) flat.push_back(v), flat_bf16.push_back(std::isnan(v) ? kPosNan : float_to_bf16(v));
  for (int cluster : {0, 1, 2, 8}) {
    cuda::detail::model_kernel_tuning().argmax_cluster = cluster;
    DeviceArray<float> d(flat.size());
    Bf16Array db(flat_bf16.size());
    DeviceArray<int32_t> out(rows.size());
    d.upload(flat);
    db.upload(flat_bf16);
    cuda::argmax_rows(d.ptr(), int64_t(rows.size()), cols, out.ptr(), nullptr);
    sync();
    EXPECT_EQ(out.download(), want) << "float, cluster " << cluster;
    cuda::argmax_rows(bf(db), int64_t(rows.size()), cols, out.ptr(), nullptr);
    sync();
    EXPECT_EQ(out.download(), want) << "bf16, cluster " << cluster;
  }
  // cols = 0: every row −1.
  DeviceArray<int32_t> out(3);
  out.upload({7, 7, 7});
  cuda::argmax_rows(static_cast<const float*>(nullptr), 3, 0, out.ptr(), nullptr);
  sync();
  EXPECT_EQ(out.download(), (std::vector<int32_t>{-1, -1, -1}));
}

// ---- CUDA graphs ---------------------------------------------------------------------------------------------

TEST(CudaModelKernels, GraphCaptureReplaysWithNewDeviceInputs) {
  REQUIRE_HOPPER();
  auto rng = make_rng();
  // One decode-like step: embedding → add_rms_norm → head norm and rope on q/k in a
  // fused buffer → silu_mul_fused → argmax, captured once and replayed with new
  // ids and positions written into the same device arrays.
  constexpr int64_t rows = 4, vocab = 300, dim = 512, hd = 64, nq = 4, nk = 2, ld = (nq + 2 * nk) * hd;
  const RopeTable table(rope_config(hd, 10000.0));
  const std::vector<uint16_t> emb = random_bf16(rng, vocab, dim, false);
  const std::vector<uint16_t> resid = random_bf16(rng, rows, dim, false);
  const std::vector<uint16_t> qkv = random_bf16(rng, rows, ld, false);
  const std::vector<float> w = random_weights(rng, dim), wh = random_weights(rng, hd);
  Bf16Array d_emb(emb.size()), d_h(resid.size()), d_x(resid.size()), d_y(resid.size()), d_qkv(qkv.size()),
      d_act(static_cast<size_t>(rows * dim / 2));
  DeviceArray<float> d_w(w.size()), d_wh(wh.size()), d_inv(table.inv_freq().size());
  DeviceArray<int32_t> d_ids(static_cast<size_t>(rows)), d_pos(static_cast<size_t>(rows)), d_out(static_cast<size_t>(rows));
  d_emb.upload(emb);
  d_w.upload(w);
  d_wh.upload(wh);
  d_inv.upload(table.inv_freq());
  cudaStream_t stream;
  FP8LM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  auto step = [&] {
    __nv_bfloat16* q = bf(d_qkv);
    cuda::embedding_bf16(bf(d_emb), d_ids.ptr(), rows, dim, bf(d_x), stream, vocab);
    cuda::add_rms_norm(bf(d_h), bf(d_x), d_w.ptr(), 1e-6f, rows, dim, bf(d_y), stream);
    cuda::head_rms_norm_qk(q, nq * hd, d_wh.ptr(), q + nq * hd, nk * hd, d_wh.ptr(), rows, hd, 1e-6f, stream, ld, ld);
    cuda::rope_qk(q, nq * hd, q + nq * hd, nk * hd, rows, hd, d_pos.ptr(), d_inv.ptr(), table.attention_factor(),
                  stream, ld, ld);
    cuda::silu_mul_fused(bf(d_y), rows, dim / 2, bf(d_act), stream);
    cuda::argmax_rows(bf(d_y), rows, dim, d_out.ptr(), stream);
  };
  auto set_inputs = [&](int round) {
    std::vector<int32_t> ids(static_cast<size_t>(rows)), pos(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      ids[size_t(r)] = int32_t((r * 37 + round * 101) % vocab);
      pos[size_t(r)] = int32_t(r * 1000 + round * 77777);
    }
    d_ids.upload(ids);
    d_pos.upload(pos);
    d_h.upload(resid);
    d_qkv.upload(qkv);
  };
  struct Outputs {
    std::vector<uint16_t> h, y, qkv, act;
    std::vector<int32_t> out;
    bool operator==(const Outputs&) const = default;
  };
  auto outputs = [&] {
    FP8LM_CUDA_CHECK(cudaStreamSynchronize(stream));
    return Outputs{d_h.download(), d_y.download(), d_qkv.download(), d_act.download(), d_out.download()};
  };
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  set_inputs(0);
  FP8LM_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  step();
  FP8LM_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  FP8LM_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int round : {0, 1, 2}) {
    set_inputs(round);
    step();
    const Outputs eager = outputs();
    set_inputs(round);
    FP8LM_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    const Outputs replayed = outputs();
    EXPECT_TRUE(eager == replayed) << "round " << round;
    for (int32_t id : replayed.out) EXPECT_GE(id, 0) << "round " << round;
  }
  FP8LM_CUDA_CHECK(cudaGraphExecDestroy(exec));
  FP8LM_CUDA_CHECK(cudaGraphDestroy(graph));
  FP8LM_CUDA_CHECK(cudaStreamDestroy(stream));
}

// ---- timing ----------------------------------------------------------------------------------------------------

TEST(CudaModelKernelsTiming, DecodeAndPrefillShapes) {
  REQUIRE_HOPPER();
  auto rng = make_rng();
  cudaStream_t stream;
  FP8LM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t start, stop;
  FP8LM_CUDA_CHECK(cudaEventCreate(&start));
  FP8LM_CUDA_CHECK(cudaEventCreate(&stop));
  // Per call: launches back to back on a stream and, for the decode shapes,
  // 100 launches captured in one graph (no launch overhead in between).
  auto time_us = [&](const std::function<void()>& fn, int iters) {
    for (int i = 0; i < 5; ++i) fn();
    FP8LM_CUDA_CHECK(cudaEventRecord(start, stream));
    for (int i = 0; i < iters; ++i) fn();
    FP8LM_CUDA_CHECK(cudaEventRecord(stop, stream));
    FP8LM_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    FP8LM_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    return 1e3 * double(ms) / iters;
  };
  auto graph_us = [&](const std::function<void()>& fn) {
    constexpr int kPerGraph = 100;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    FP8LM_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < kPerGraph; ++i) fn();
    FP8LM_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    FP8LM_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    const double us = time_us([&] { FP8LM_CUDA_CHECK(cudaGraphLaunch(exec, stream)); }, 10) / kPerGraph;
    FP8LM_CUDA_CHECK(cudaGraphExecDestroy(exec));
    FP8LM_CUDA_CHECK(cudaGraphDestroy(graph));
    return us;
  };
  constexpr int64_t kMaxRows = 4096, kHidden = 4096, kInter = 14336, kVocab = 152064, hd = 128, nq = 32, nk = 8;
  const std::vector<uint16_t> tile = random_bf16(rng, 1, 1 << 20, false);
  std::vector<uint16_t> big(static_cast<size_t>(kMaxRows * kInter * 2));
  for (size_t i = 0; i < big.size(); ++i) big[i] = tile[i & ((static_cast<size_t>(1) << 20) - 1)];
  Bf16Array a(big.size()), b(big.size()), c(big.size());
  a.upload(big);
  b.upload(big);
  DeviceArray<float> w(static_cast<size_t>(kInter)), inv(static_cast<size_t>(hd / 2)), f(static_cast<size_t>(kMaxRows * kHidden));
  w.upload(std::vector<float>(static_cast<size_t>(kInter), 1.0f));
  const RopeTable table(rope_config(hd, 500000.0));
  inv.upload(table.inv_freq());
  DeviceArray<int32_t> ids(static_cast<size_t>(kMaxRows)), out(static_cast<size_t>(kMaxRows));
  DeviceArray<uint8_t> codes(static_cast<size_t>(kMaxRows * kInter));
  DeviceArray<float> scales(static_cast<size_t>(kMaxRows));
  std::vector<int32_t> idv(static_cast<size_t>(kMaxRows));
  for (size_t i = 0; i < idv.size(); ++i) idv[i] = int32_t((i * 7919) % 4096);
  ids.upload(idv);
  struct Op {
    std::string name;
    int64_t rows;
    double bytes;  // read once + written once
    std::function<void()> fn;
  };
  std::vector<Op> list;
  for (int64_t m : {int64_t(1), int64_t(64), kMaxRows}) {
    const double tok = double(m);
    list.push_back({"rms_norm h4096", m, tok * kHidden * 4, [=, &a, &c, &w] {
                      cuda::rms_norm(bf(a), w.ptr(), 1e-6f, m, kHidden, bf(c), stream);
                    }});
    list.push_back({"add_rms_norm h4096", m, tok * kHidden * 8, [=, &a, &b, &c, &w] {
                      cuda::add_rms_norm(bf(c), bf(b), w.ptr(), 1e-6f, m, kHidden, bf(a), stream);
                    }});
    list.push_back({"head_rms_norm_qk 32+8 x 128", m, tok * (nq + nk) * hd * 4, [=, &a, &w] {
                      cuda::head_rms_norm_qk(bf(a), nq * hd, w.ptr(), bf(a) + nq * hd, nk * hd, w.ptr(), m, hd, 1e-6f,
                                             stream, (nq + 2 * nk) * hd, (nq + 2 * nk) * hd);
                    }});
    list.push_back({"rope_qk 32+8 x 128", m, tok * (nq + nk) * hd * 4, [=, &a, &ids, &inv] {
                      cuda::rope_qk(bf(a), nq * hd, bf(a) + nq * hd, nk * hd, m, hd, ids.ptr(), inv.ptr(), 1.0f,
                                    stream, (nq + 2 * nk) * hd, (nq + 2 * nk) * hd);
                    }});
    // A Qwen3 layer's attention inputs: today's four kernels, then the one fused kernel (a: qkv, c: q | k | v).
    list.push_back({"split+head norms+rope 32+8+8", m, tok * (nq + 2 * nk) * hd * 4, [=, &a, &c, &w, &ids, &inv] {
                      cuda::ColumnSplit split;
                      split.count = 3;
                      split.out[0] = bf(c);
                      split.out[1] = bf(c) + m * nq * hd;
                      split.out[2] = bf(c) + m * (nq + nk) * hd;
                      split.width[0] = nq * hd, split.width[1] = nk * hd, split.width[2] = nk * hd;
                      cuda::split_columns(bf(a), m, split, stream);
                      cuda::head_rms_norm(split.out[0], m, nq * hd, hd, w.ptr(), 1e-6f, stream);
                      cuda::head_rms_norm(split.out[1], m, nk * hd, hd, w.ptr(), 1e-6f, stream);
                      cuda::rope_qk(split.out[0], nq * hd, split.out[1], nk * hd, m, hd, ids.ptr(), inv.ptr(), 1.0f,
                                    stream);
                    }});
    list.push_back({"split_norm_rope_qkv 32+8+8", m, tok * (nq + 2 * nk) * hd * 4, [=, &a, &c, &w, &ids, &inv] {
                      cuda::split_norm_rope_qkv(bf(a), m, nq * hd, nk * hd, nk * hd, hd, bf(c), bf(c) + m * nq * hd,
                                                bf(c) + m * (nq + nk) * hd, w.ptr(), w.ptr(), 1e-6f, ids.ptr(),
                                                inv.ptr(), 1.0f, stream);
                    }});
    list.push_back({"silu_mul_fused i14336", m, tok * kInter * 6, [=, &a, &c] {
                      cuda::silu_mul_fused(bf(a), m, kInter, bf(c), stream);
                    }});
    // The quantization fused into the producer (per-token E4M3, the engine's W8A8 default)
    // against the producer followed by the quantization kernel.
    const cuda::RowQuantOutput rq{cuda::Fp8ActQuant::token(), codes.ptr(), scales.ptr()};
    list.push_back({"add_rms_norm+quant h4096 fused", m, tok * kHidden * 9, [=, &b, &c, &w] {
                      cuda::add_rms_norm(bf(b), bf(c), w.ptr(), 1e-6f, m, kHidden, bf(c), stream, &rq);
                    }});
    list.push_back({"add_rms_norm, quant h4096", m, tok * kHidden * 9, [=, &b, &c, &w, &codes, &scales] {
                      cuda::add_rms_norm(bf(b), bf(c), w.ptr(), 1e-6f, m, kHidden, bf(c), stream);
                      cuda::quantize_fp8_dynamic(bf(c), m, kHidden, cuda::Fp8ActQuant::token(), codes.ptr(),
                                                 scales.ptr(), stream);
                    }});
    // SiLU·mul then the quantization kernel: the engine's sequence before a W8A8 down_proj of more
    // than kGemvQuantizeRows rows.
    list.push_back({"silu_mul, quant i14336", m, tok * kInter * 7, [=, &a, &c, &codes, &scales] {
                      cuda::silu_mul_fused(bf(a), m, kInter, bf(c), stream);
                      cuda::quantize_fp8_dynamic(bf(c), m, kInter, cuda::Fp8ActQuant::token(), codes.ptr(),
                                                 scales.ptr(), stream);
                    }});
    list.push_back({"add h4096", m, tok * kHidden * 6, [=, &b, &c] { cuda::add(bf(c), bf(b), m * kHidden, stream); }});
    list.push_back({"embedding h4096", m, tok * kHidden * 4, [=, &a, &c, &ids] {
                      cuda::embedding_bf16(bf(a), ids.ptr(), m, kHidden, bf(c), stream);
                    }});
    list.push_back({"bf16_to_float h4096", m, tok * kHidden * 6, [=, &a, &f] {
                      cuda::bf16_to_float(bf(a), m * kHidden, f.ptr(), stream);
                    }});
    if (m <= 64)
      list.push_back({"argmax bf16 v152064", m, tok * kVocab * 2, [=, &a, &out] {
                        cuda::argmax_rows(bf(a), m, kVocab, out.ptr(), stream);
                      }});
  }
  for (const Op& op : list) {
    const double us = time_us(op.fn, op.rows >= kMaxRows ? 20 : 200);
    std::string line;
    char buf[200];
    std::snprintf(buf, sizeof buf, "[  timing  ] %-30s m=%-5lld %8.2f us/call (stream) %6.0f GB/s", op.name.c_str(),
                  (long long)op.rows, us, op.bytes / us / 1e3);
    line = buf;
    if (op.rows == 1) {
      std::snprintf(buf, sizeof buf, "   %6.2f us/call (in a graph)", graph_us(op.fn));
      line += buf;
    }
    std::printf("%s\n", line.c_str());
  }
  FP8LM_CUDA_CHECK(cudaEventDestroy(start));
  FP8LM_CUDA_CHECK(cudaEventDestroy(stop));
  FP8LM_CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace fp8lm
