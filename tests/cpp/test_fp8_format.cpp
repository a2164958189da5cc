// The scalar reference conversions on the landmarks docs/numerics.md lists.
// (The same functions are checked against PyTorch on ~270k values in
// test_casts_vs_torch.cpp; these are the ones a reader can check by hand.)
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "numerics/fp8_format.h"

namespace fp8lm {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

TEST(Fp8Format, E4M3Landmarks) {
  EXPECT_EQ(float_to_fp8(1.0f, Fp8Format::kE4M3), 0x38);
  EXPECT_EQ(float_to_fp8(448.0f, Fp8Format::kE4M3), 0x7E);
  EXPECT_EQ(float_to_fp8(-448.0f, Fp8Format::kE4M3), 0xFE);
  EXPECT_EQ(float_to_fp8(416.0f, Fp8Format::kE4M3), 0x7D);
  EXPECT_EQ(float_to_fp8(0.015625f, Fp8Format::kE4M3), 0x08);     // smallest normal
  EXPECT_EQ(float_to_fp8(0.001953125f, Fp8Format::kE4M3), 0x01);  // smallest subnormal
  EXPECT_EQ(float_to_fp8(-0.0f, Fp8Format::kE4M3), 0x80);
  EXPECT_EQ(fp8_to_float(0x7E, Fp8Format::kE4M3), 448.0f);
  EXPECT_EQ(fp8_to_float(0x01, Fp8Format::kE4M3), 0.001953125f);
  EXPECT_TRUE(std::isnan(fp8_to_float(0x7F, Fp8Format::kE4M3)));
  EXPECT_TRUE(std::signbit(fp8_to_float(0xFF, Fp8Format::kE4M3)));
}

TEST(Fp8Format, E4M3TiesRoundToEven) {
  EXPECT_EQ(float_to_fp8(1.0625f, Fp8Format::kE4M3), 0x38);  // halfway 1 / 1.125 -> 1
  EXPECT_EQ(float_to_fp8(1.1875f, Fp8Format::kE4M3), 0x3A);  // halfway 1.125 / 1.25 -> 1.25
  EXPECT_EQ(float_to_fp8(247.99f, Fp8Format::kE4M3), 0x77);
  EXPECT_EQ(float_to_fp8(248.0f, Fp8Format::kE4M3), 0x78);
  EXPECT_EQ(float_to_fp8(std::ldexp(1.0f, -10), Fp8Format::kE4M3), 0x00);         // tie with 0
  EXPECT_EQ(float_to_fp8(1.5f * std::ldexp(1.0f, -10), Fp8Format::kE4M3), 0x01);
  EXPECT_EQ(float_to_fp8(3.0f * std::ldexp(1.0f, -10), Fp8Format::kE4M3), 0x02);  // tie 1|2 -> 2
}

TEST(Fp8Format, E4M3SaturationVersusTorchCast) {
  const float just_over_464 = std::nextafter(464.0f, kInf);
  EXPECT_EQ(float_to_fp8(464.0f, Fp8Format::kE4M3, Saturation::kTorchCast), 0x7E);
  EXPECT_EQ(float_to_fp8(just_over_464, Fp8Format::kE4M3, Saturation::kTorchCast), 0x7F);
  EXPECT_EQ(float_to_fp8(just_over_464, Fp8Format::kE4M3, Saturation::kSatFinite), 0x7E);
  EXPECT_EQ(float_to_fp8(1000.0f, Fp8Format::kE4M3, Saturation::kTorchCast), 0x7F);
  EXPECT_EQ(float_to_fp8(-kInf, Fp8Format::kE4M3, Saturation::kTorchCast), 0xFF);
  EXPECT_EQ(float_to_fp8(kInf, Fp8Format::kE4M3, Saturation::kSatFinite), 0x7E);
  EXPECT_EQ(float_to_fp8(-kInf, Fp8Format::kE4M3, Saturation::kSatFinite), 0xFE);
  EXPECT_EQ(float_to_fp8(kNaN, Fp8Format::kE4M3, Saturation::kSatFinite), 0x7F);
  EXPECT_EQ(float_to_fp8(-kNaN, Fp8Format::kE4M3, Saturation::kSatFinite), 0xFF);  // sign kept
}

TEST(Fp8Format, E5M2Landmarks) {
  EXPECT_EQ(float_to_fp8(57344.0f, Fp8Format::kE5M2), 0x7B);
  EXPECT_EQ(float_to_fp8(61440.0f, Fp8Format::kE5M2, Saturation::kTorchCast), 0x7C);  // tie -> inf
  EXPECT_EQ(float_to_fp8(61439.0f, Fp8Format::kE5M2, Saturation::kTorchCast), 0x7B);
  EXPECT_EQ(float_to_fp8(61440.0f, Fp8Format::kE5M2, Saturation::kSatFinite), 0x7B);
  EXPECT_EQ(float_to_fp8(-kInf, Fp8Format::kE5M2, Saturation::kTorchCast), 0xFC);
  EXPECT_EQ(float_to_fp8(std::ldexp(1.0f, -16), Fp8Format::kE5M2), 0x01);
  EXPECT_EQ(float_to_fp8(std::ldexp(1.0f, -14), Fp8Format::kE5M2), 0x04);
  EXPECT_EQ(fp8_to_float(0x7C, Fp8Format::kE5M2), kInf);
  EXPECT_TRUE(std::isnan(fp8_to_float(0x7D, Fp8Format::kE5M2)));
  EXPECT_TRUE(fp8_is_nan(0xFE, Fp8Format::kE5M2));
  EXPECT_FALSE(fp8_is_nan(0xFC, Fp8Format::kE5M2));
}

TEST(Fp8Format, EveryCodeRoundTrips) {
  for (Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    for (int c = 0; c < 256; ++c) {
      const auto code = uint8_t(c);
      if (fp8_is_nan(code, f)) continue;
      const Saturation sat = Saturation::kTorchCast;  // keeps E5M2 infinities
      EXPECT_EQ(float_to_fp8(fp8_to_float(code, f), f, sat), code) << name(f) << " code " << c;
    }
  }
}

TEST(Bf16, RoundsToNearestEvenAndCanonicalisesNaN) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3F808000u)), 0x3F80);  // tie -> even
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3F818000u)), 0x3F82);  // tie -> even (up)
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3F808001u)), 0x3F81);
  EXPECT_EQ(float_to_bf16(-kNaN), 0x7FC0);
  EXPECT_EQ(bf16_to_float(0xC040), -3.0f);
}

}  // namespace
}  // namespace fp8lm
