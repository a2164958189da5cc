// The grouped CUTLASS FP8 GEMM (src/backend/cuda/gemm/cutlass_fp8_grouped_gemm.h) against a float64
// product on the host, group by group: every row of group g multiplied by w_g with the scheme's
// scales — per row × per channel, one × one, per row × one (kOuter), 1 × 128 groups × 128 × 128
// blocks (kBlock) — including empty groups, groups of one row and groups over several 128-row
// tiles. The bound is the GEMM tests' (cuda_test_util.h fp8_gemm_error_coeff: the tensor cores'
// FP8 accumulation, then the BF16 rounding): a row multiplied by another group's weight, or
// scaled by another row's or block's scale, misses it by the size of the terms. The MoE block through it is
// test_cuda_moe.cpp's (GemmEqualsPerExpert).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/gemm/cutlass_fp8_grouped_gemm.h"
#include "common/error.h"
#include "cuda/cuda_test_util.h"
#include "numerics/fp8_format.h"

namespace fp8lm::test {
namespace {

#ifdef FP8LM_WITH_CUTLASS

// The codes of quantized normal data (amax near E4M3's 448, as a dynamic scale makes it).
std::vector<uint8_t> random_codes(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 100.0f);
  std::vector<uint8_t> c(n);
  for (uint8_t& v : c) v = float_to_fp8(normal(rng), Fp8Format::kE4M3);
  return c;
}

struct Scheme {
  const char* name;
  cuda::CutlassGroupedScales scales;
  bool x_per_row, w_per_channel;
};

void check_grouped(const Scheme& sc, const std::vector<int32_t>& sizes, int64_t n, int64_t k, std::mt19937& rng) {
  SCOPED_TRACE(std::string(sc.name) + " groups " + std::to_string(sizes.size()) + " n " + std::to_string(n) + " k " +
               std::to_string(k));
  const bool block = sc.scales == cuda::CutlassGroupedScales::kBlock;
  const int groups = int(sizes.size());
  std::vector<int32_t> start(size_t(groups) + 1, 0);
  for (int g = 0; g < groups; ++g) start[size_t(g) + 1] = start[size_t(g)] + sizes[size_t(g)];
  const int64_t rows = start.back(), kb = k / 128, nb = n / 128;
  const std::vector<uint8_t> x = random_codes(size_t(rows * k), rng);
  const size_t x_scales = block ? size_t(rows * kb) : sc.x_per_row ? size_t(rows) : 1;
  const size_t w_scales = block ? size_t(nb * kb) : sc.w_per_channel ? size_t(n) : 1;
  const std::vector<float> xs = random_scales(std::max<size_t>(x_scales, 1), rng);
  auto w = std::vector<std::vector<uint8_t>>(size_t(groups));
  auto ws = std::vector<std::vector<float>>(size_t(groups));
  std::vector<std::unique_ptr<DeviceVector<uint8_t>>> dw;
  std::vector<std::unique_ptr<DeviceVector<float>>> dws;
  std::vector<const uint8_t*> w_ptrs;
  std::vector<const float*> ws_ptrs;
  for (int g = 0; g < groups; ++g) {
    w[size_t(g)] = random_codes(size_t(n * k), rng);
    ws[size_t(g)] = random_scales(w_scales, rng);
    dw.push_back(std::make_unique<DeviceVector<uint8_t>>(w[size_t(g)]));
    dws.push_back(std::make_unique<DeviceVector<float>>(ws[size_t(g)]));
    w_ptrs.push_back(dw.back()->ptr);
    ws_ptrs.push_back(dws.back()->ptr);
  }
  DeviceVector<const uint8_t*> d_w(w_ptrs);
  DeviceVector<const float*> d_ws(ws_ptrs);
  DeviceVector<int32_t> d_start(start);
  DeviceVector<uint8_t> d_x(x);
  DeviceVector<float> d_xs(xs);
  DeviceVector<uint16_t> d_y(size_t(std::max<int64_t>(rows * n, 1)));
  d_y.fill_bytes(0xFF);  // NaN: a row the call does not write shows

  cuda::CutlassFp8GroupedGemmArgs a;
  a.scales = sc.scales;
  a.groups = groups;
  a.rows = rows, a.n = n, a.k = k;
  a.group_start = d_start.ptr;
  a.x = d_x.ptr;
  a.x_scale = d_xs.ptr;
  a.x_scale_per_row = sc.x_per_row;
  a.w = d_w.ptr;
  a.w_scale = d_ws.ptr;
  a.w_scale_per_channel = sc.w_per_channel;
  a.y = d_y.ptr;
  ASSERT_EQ(cuda::cutlass_fp8_grouped_gemm_unsupported(a), "");
  const size_t bytes = cuda::cutlass_fp8_grouped_gemm_workspace_bytes(a);
  ASSERT_GT(bytes, 0u);
  DeviceVector<uint8_t> ws_buf(bytes);
  cuda::cutlass_fp8_grouped_gemm(a, ws_buf.ptr, bytes, nullptr);
  FP8LM_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint16_t> y = d_y.download();

  std::vector<double> xd(x.size());
  for (size_t i = 0; i < x.size(); ++i) xd[i] = fp8_to_float(x[i], Fp8Format::kE4M3);
  int64_t bad = 0;
  double worst = 0;
  for (int g = 0; g < groups; ++g) {
    std::vector<double> wd(w[size_t(g)].size());
    for (size_t i = 0; i < wd.size(); ++i) wd[i] = fp8_to_float(w[size_t(g)][i], Fp8Format::kE4M3);
    const std::vector<float>& wsg = ws[size_t(g)];
    for (int64_t r = start[size_t(g)]; r < start[size_t(g) + 1]; ++r)
      for (int64_t j = 0; j < n; ++j) {
        double ref = 0, mag = 0;
        for (int64_t b = 0; b < (k + 127) / 128; ++b) {
          double part = 0, part_mag = 0;
          for (int64_t c = b * 128; c < std::min(k, (b + 1) * 128); ++c) {
            const double t = xd[size_t(r * k + c)] * wd[size_t(j * k + c)];
            part += t;
            part_mag += std::abs(t);
          }
          const double s = block ? double(xs[size_t(r * kb + b)]) * wsg[size_t((j / 128) * kb + b)]
                                 : double(xs[sc.x_per_row ? size_t(r) : 0]) * wsg[sc.w_per_channel ? size_t(j) : 0];
          ref += part * s;
          mag += part_mag * s;
        }
        const double got = bf16_to_float(y[size_t(r * n + j)]);
        const double e = fp8_gemm_error_coeff(k) * mag;
        const double err = std::abs(got - ref), bound = std::ldexp(std::abs(ref) + e, -8) + e;
        worst = std::max(worst, err / bound);
        if (!(err <= bound) && bad++ < 3)
          ADD_FAILURE() << "group " << g << " row " << r << " col " << j << ": " << got << ", float64 " << ref
                        << " (bound " << bound << ")";
      }
  }
  EXPECT_EQ(bad, 0);
  std::printf("[ %s, %d groups, %lld rows, n %lld, k %lld ] worst |Δ| / bound %.3f\n", sc.name, groups,
              static_cast<long long>(rows), static_cast<long long>(n), static_cast<long long>(k), worst);
}

const Scheme kSchemes[] = {
    {"per-row x per-channel", cuda::CutlassGroupedScales::kOuter, true, true},
    {"tensor x tensor", cuda::CutlassGroupedScales::kOuter, false, false},
    {"per-row x tensor", cuda::CutlassGroupedScales::kOuter, true, false},
    {"1x128 groups x 128x128 blocks", cuda::CutlassGroupedScales::kBlock, true, true},
};

TEST(CudaGroupedGemm, EveryGroupMatchesFloat64) {
  REQUIRE_HOPPER();
  std::mt19937 rng(21);
  for (const Scheme& sc : kSchemes) {
    // Empty groups first, last and between; one row; more than one 128-row tile.
    check_grouped(sc, {0, 5, 1, 0, 130, 17, 0}, 256, 384, rng);
    check_grouped(sc, {3, 300, 0, 64}, 128, 256, rng);
  }
  // Qwen3-30B-A3B's expert shapes (gate/up fused, down), 16 experts of a decode-sized block.
  std::vector<int32_t> sizes(16);
  for (int32_t& s : sizes) s = int32_t(rng() % 9);
  check_grouped(kSchemes[0], sizes, 1536, 2048, rng);
  check_grouped(kSchemes[3], sizes, 2048, 768, rng);
}

TEST(CudaGroupedGemm, BadArgumentsAreNamed) {
  REQUIRE_HOPPER();
  cuda::CutlassFp8GroupedGemmArgs a;
  a.groups = 2, a.rows = 4, a.n = 64, a.k = 64;
  DeviceVector<uint8_t> buf(4096);
  a.group_start = reinterpret_cast<const int32_t*>(buf.ptr);
  a.x = buf.ptr, a.x_scale = reinterpret_cast<const float*>(buf.ptr), a.y = buf.ptr;
  a.w = reinterpret_cast<const uint8_t* const*>(buf.ptr), a.w_scale = reinterpret_cast<const float* const*>(buf.ptr);
  EXPECT_EQ(cuda::cutlass_fp8_grouped_gemm_unsupported(a), "");
  auto why = [&](auto change) {
    cuda::CutlassFp8GroupedGemmArgs b = a;
    change(b);
    return cuda::cutlass_fp8_grouped_gemm_unsupported(b);
  };
  EXPECT_NE(why([](auto& b) { b.k = 40; }).find("k = 40"), std::string::npos);
  EXPECT_NE(why([](auto& b) { b.n = 36; }).find("n = 36"), std::string::npos);
  EXPECT_NE(why([](auto& b) { b.scales = cuda::CutlassGroupedScales::kBlock; }).find("multiples of 128"),
            std::string::npos);
  EXPECT_NE(why([](auto& b) { b.groups = 0; }).find("no groups"), std::string::npos);
  EXPECT_NE(why([](auto& b) { b.x = nullptr; }).find("null"), std::string::npos);
  EXPECT_NE(why([&](auto& b) { b.x = buf.ptr + 8; }).find("aligned"), std::string::npos);
  try {
    cuda::cutlass_fp8_grouped_gemm(a, nullptr, 0, nullptr);
    ADD_FAILURE() << "ran without a workspace";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("workspace"), std::string::npos) << e.what();
  }
}

#else

TEST(CudaGroupedGemm, NeedsCutlass) { GTEST_SKIP() << "built without the CUTLASS headers"; }

#endif

}  // namespace
}  // namespace fp8lm::test
