// Producers that quantize their own output (quantization fused into the kernel that makes the
// activation): rms_norm / add_rms_norm with a RowQuantOutput (model_kernels.h) against the
// two-kernel sequence they replace — the norm, then quantize_fp8_dynamic / quantize_fp8_static
// of its BF16 output — every BF16 output, FP8 code and scale bit. Both halves of that reference
// are checked against the CPU elsewhere (test_cuda_model_kernels, test_cuda_quant). Random
// inputs with outliers, a zero row and NaN/inf rows; static, per-token (with and without
// FBGEMM's bound), group-128 and group-64 scales, E4M3 and E5M2; rows of 1–33; widths held in
// registers, a width that takes the norm's streaming kernel (where the norm falls back to
// quantizing afterwards), and an odd width (the scalar path). A dynamic per-tensor scale is
// refused by name. Needs a Hopper GPU.
#include <gtest/gtest.h>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/common/check.h"
#include "backend/cuda/elementwise/model_kernels.h"
#include "backend/cuda/quant/quant_kernels.h"
#include "common/error.h"
#include "cuda/cuda_test_util.h"
#include "numerics/fp8_format.h"

namespace fp8lm {
namespace {

using test::DeviceVector;
template <typename T>
using Dev = DeviceVector<T>;

__nv_bfloat16* bf(const Dev<uint16_t>& d) { return reinterpret_cast<__nv_bfloat16*>(d.ptr); }

std::mt19937_64 make_rng() {
  uint64_t seed = 20261202;
  if (const char* env = std::getenv("FP8LM_TEST_SEED")) seed = std::strtoull(env, nullptr, 10);
  const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  return std::mt19937_64(seed ^ std::hash<std::string>{}(name));
}

// BF16 bits of N(0, 1) × a per-row magnitude, with outliers, −0, a zero row (row 1 of 3+),
// and where `specials`: ±inf in the second-to-last row and NaN of both signs in the last.
std::vector<uint16_t> random_rows(std::mt19937_64& rng, int64_t rows, int64_t cols, bool specials) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::vector<uint16_t> x(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const float mag = std::ldexp(1.0f, int(std::floor(unit(rng) * 12.0f)) - 6);
    for (int64_t c = 0; c < cols; ++c) {
      float v = normal(rng) * mag;
      const float u = unit(rng);
      if (u < 1.0f / 300) v *= 50.0f;
      else if (u < 1.0f / 60) v = -0.0f;
      if (rows > 2 && r == 1) v = 0.0f;
      x[size_t(r * cols + c)] = float_to_bf16(v);
    }
  }
  if (specials && rows >= 3 && cols > 0) {
    std::uniform_int_distribution<int64_t> col(0, cols - 1);
    x[size_t((rows - 2) * cols + col(rng))] = 0x7F80;
    x[size_t((rows - 2) * cols + col(rng))] = 0xFF80;
    x[size_t((rows - 1) * cols + col(rng))] = 0x7FC0;
    x[size_t((rows - 1) * cols + col(rng))] = 0xFFC1;
  }
  return x;
}

struct Quant {
  std::string name;
  cuda::Fp8ActQuant q;
};

// The one-pass schemes a producer quantizes for; `static_scale` is a device float.
std::vector<Quant> producer_quants(const float* static_scale) {
  cuda::Fp8ActQuant e5m2 = cuda::Fp8ActQuant::token();
  e5m2.format = Fp8Format::kE5M2;
  return {{"static", cuda::Fp8ActQuant::static_tensor(static_scale)},
          {"token", cuda::Fp8ActQuant::token()},
          {"token ub=3", cuda::Fp8ActQuant::token(3.0f)},
          {"group128", cuda::Fp8ActQuant::group(128)},
          {"group64", cuda::Fp8ActQuant::group(64)},
          {"token e5m2", e5m2}};
}

// The reference's second half: quantize `out` [rows, cols] as q says.
void quantize_after(const __nv_bfloat16* out, int64_t rows, int64_t cols, const cuda::Fp8ActQuant& q,
                    uint8_t* codes, float* scales) {
  if (q.static_scale != nullptr) cuda::quantize_fp8_static(out, rows, cols, q.static_scale, codes, nullptr, q.format);
  else cuda::quantize_fp8_dynamic(out, rows, cols, q, codes, scales, nullptr);
}

struct Outputs {
  std::vector<uint16_t> out, h;
  std::vector<uint8_t> codes;
  std::vector<float> scales;
};

void expect_equal(const std::string& what, const Outputs& fused, const Outputs& ref) {
  EXPECT_TRUE(fused.out == ref.out) << what << ": BF16 output differs";
  EXPECT_TRUE(fused.h == ref.h) << what << ": residual differs";
  EXPECT_TRUE(fused.codes == ref.codes) << what << ": FP8 codes differ";
  const bool same_scales = fused.scales.size() == ref.scales.size() &&
                           std::equal(fused.scales.begin(), fused.scales.end(), ref.scales.begin(),
                                      [](float a, float b) { return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b); });
  EXPECT_TRUE(same_scales) << what << ": scales differ";
}

TEST(CudaFusedQuant, NormsQuantizeAsTheQuantizationKernel) {
  REQUIRE_HOPPER();
  auto rng = make_rng();
  const Dev<float> static_scale(std::vector<float>{0.0625f});
  // 4096 and 8192: the register kernel; 40000: the streaming kernel (quantized afterwards); 100: scalar.
  for (const int64_t cols : {4096, 8192, 40000, 100}) {
    std::vector<float> w(static_cast<size_t>(cols));
    std::normal_distribution<float> normal(1.0f, 0.2f);
    for (float& v : w) v = normal(rng);
    const Dev<float> d_w(w);
    for (const int64_t rows : {1, 3, 33}) {
      const std::vector<uint16_t> x = random_rows(rng, rows, cols, true);
      const std::vector<uint16_t> delta = random_rows(rng, rows, cols, false);
      for (const Quant& qc : producer_quants(static_scale.ptr)) {
        const size_t nscales = size_t(std::max<int64_t>(qc.q.scale_count(rows, cols), 1));
        for (const bool add : {false, true}) {
          auto run = [&](bool fused) {
            Dev<uint16_t> h(x), d(delta), out(size_t(rows * cols));
            Dev<uint8_t> codes(size_t(rows * cols));
            Dev<float> scales(nscales);
            codes.fill_bytes(0xA5);
            scales.fill_bytes(0);
            const cuda::RowQuantOutput rq{qc.q, codes.ptr, scales.ptr};
            const cuda::RowQuantOutput* arg = fused ? &rq : nullptr;
            if (add) cuda::add_rms_norm(bf(h), bf(d), d_w.ptr, 1e-5f, rows, cols, bf(out), nullptr, arg);
            else cuda::rms_norm(bf(h), d_w.ptr, 1e-5f, rows, cols, bf(out), nullptr, arg);
            if (!fused) quantize_after(bf(out), rows, cols, qc.q, codes.ptr, scales.ptr);
            FP8LM_CUDA_CHECK(cudaDeviceSynchronize());
            return Outputs{out.download(), h.download(), codes.download(), scales.download()};
          };
          const std::string what = std::string(add ? "add_rms_norm" : "rms_norm") + " " + qc.name + " [" +
                                   std::to_string(rows) + ", " + std::to_string(cols) + "]";
          expect_equal(what, run(true), run(false));
        }
      }
    }
  }
}

TEST(CudaFusedQuant, DynamicTensorScaleIsRefusedByName) {
  REQUIRE_HOPPER();
  Dev<uint16_t> x(size_t(4 * 64)), out(size_t(4 * 64));
  Dev<float> w(64), scales(1);
  Dev<uint8_t> codes(size_t(4 * 64));
  const cuda::RowQuantOutput rq{cuda::Fp8ActQuant::tensor(), codes.ptr, scales.ptr};
  try {
    cuda::rms_norm(bf(x), w.ptr, 1e-5f, 4, 64, bf(out), nullptr, &rq);
    FAIL() << "a dynamic per-tensor scale was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("per-tensor"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fp8lm
