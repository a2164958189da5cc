// The vectorized kernel tables against the scalar one on data built to hit
// every lane position and every rounding class, including the tails that are
// shorter than a vector. (test_exhaustive_casts.cpp does all 2^32 floats.)
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "fixtures.h"
#include "numerics/cpu/kernels.h"

namespace fp8lm {
namespace {

std::vector<float> random_bit_patterns(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<float> v(n);
  for (float& f : v) {
    const auto b = static_cast<uint32_t>(gen());
    std::memcpy(&f, &b, 4);
  }
  return v;
}

std::vector<const cpu::KernelTable*> vector_tables() {
  std::vector<const cpu::KernelTable*> out;
  if (auto* t = cpu::avx2_kernels()) out.push_back(t);
  if (auto* t = cpu::avx512_kernels()) out.push_back(t);
  return out;
}

TEST(KernelEquivalence, QuantizeAllModesAndLengths) {
  if (vector_tables().empty()) GTEST_SKIP() << "no vector kernels on this CPU";
  const cpu::KernelTable& ref = cpu::scalar_kernels();
  const std::vector<float> x = random_bit_patterns(1 << 16, 3);
  std::vector<uint16_t> xb(x.size());
  for (size_t i = 0; i < x.size(); ++i) xb[i] = uint16_t(test::bits(x[i]) >> 16);
  for (const cpu::KernelTable* k : vector_tables()) {
    for (Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2})
      for (Saturation s : {Saturation::kSatFinite, Saturation::kTorchCast})
        for (HighPrecision quotient : {HighPrecision::kF32, HighPrecision::kBF16})
          for (bool add_zero : {false, true})
            for (float scale : {1.0f, 0.3f, 1.7e-3f, 3.0e4f})
              for (HighPrecision dt : {HighPrecision::kF32, HighPrecision::kBF16})
                for (size_t n : {size_t(1), size_t(7), size_t(15), size_t(33), x.size()}) {
                  const cpu::QuantizeArgs args{f, s, quotient, add_zero};
                  const void* in = dt == HighPrecision::kF32 ? static_cast<const void*>(x.data()) : xb.data();
                  std::vector<uint8_t> a(n), b(n);
                  ref.quantize(in, dt, n, scale, args, a.data());
                  k->quantize(in, dt, n, scale, args, b.data());
                  ASSERT_EQ(a, b) << k->name << " fmt " << name(f) << " sat " << int(s) << " scale " << scale
                                  << " n " << n << " dtype " << int(dt) << " quotient " << int(quotient);
                }
  }
}

TEST(KernelEquivalence, AmaxIgnoresNaNLikeScalar) {
  if (vector_tables().empty()) GTEST_SKIP() << "no vector kernels on this CPU";
  std::vector<float> x = random_bit_patterns(4099, 5);
  for (float& v : x)
    if (std::isinf(v)) v = 1.0f;  // keep the amax finite to make it discriminating
  for (const cpu::KernelTable* k : vector_tables())
    for (size_t n : {size_t(0), size_t(3), size_t(17), x.size()}) {
      EXPECT_EQ(test::bits(k->amax(x.data(), HighPrecision::kF32, n)),
                test::bits(cpu::scalar_kernels().amax(x.data(), HighPrecision::kF32, n)))
          << k->name << " n " << n;
    }
}

TEST(KernelEquivalence, DequantizeEveryCodeAndTail) {
  if (vector_tables().empty()) GTEST_SKIP() << "no vector kernels on this CPU";
  std::vector<uint8_t> codes(256 * 3 + 5);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = uint8_t(i * 7);
  for (const cpu::KernelTable* k : vector_tables())
    for (Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2})
      for (float scale : {1.0f, 0.013f, 1e-30f, 3e36f}) {
        std::vector<float> a(codes.size()), b(codes.size());
        std::vector<uint16_t> ah(codes.size()), bh(codes.size());
        cpu::scalar_kernels().dequantize_f32(codes.data(), codes.size(), scale, f, a.data());
        k->dequantize_f32(codes.data(), codes.size(), scale, f, b.data());
        cpu::scalar_kernels().dequantize_bf16(codes.data(), codes.size(), scale, f, ah.data());
        k->dequantize_bf16(codes.data(), codes.size(), scale, f, bh.data());
        ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << k->name << " " << name(f) << " " << scale;
        ASSERT_EQ(ah, bh) << k->name << " " << name(f) << " " << scale;
      }
}

TEST(KernelEquivalence, SelectionReportsWhatItRuns) {
  const std::vector<std::string_view> names = cpu::available_kernels();
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names.front(), "scalar");
  EXPECT_EQ(cpu::select_kernels(KernelChoice::kAuto).name, names.back());
}

}  // namespace
}  // namespace fp8lm
