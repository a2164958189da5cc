// The quantizer's contract beyond the reference fixtures: scale-grid shapes,
// edge sizes, error messages for bad input, the scale conventions and the
// power-of-two rule — each checked against values computed by hand here.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "common/error.h"
#include "numerics/quantize.h"

namespace fp8lm {
namespace {

std::vector<float> random_matrix(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(size_t(rows * cols));
  for (float& x : v) x = dist(gen);
  return v;
}

QuantSpec spec_for(ScaleLayout layout) {
  QuantSpec s;
  s.layout = layout;
  return s;
}

TEST(QuantizeApi, ScaleGridShapes) {
  EXPECT_EQ(ScaleLayout::tensor().scale_rows(300), 1);
  EXPECT_EQ(ScaleLayout::channel().scale_rows(300), 300);
  EXPECT_EQ(ScaleLayout::group(128).scale_cols(520), 5);
  EXPECT_EQ(ScaleLayout::block(128, 128).scale_rows(300), 3);
  EXPECT_EQ(ScaleLayout::block(128, 64).scale_cols(520), 9);
}

TEST(QuantizeApi, BlockScaleIsAmaxOfItsOwnElementsOnly) {
  // A 3×5 tensor with 2×2 blocks: partial blocks at the right and bottom edges.
  const std::vector<float> x{1, 2, 3, 4, 5,
                             -6, 7, 8, 9, 10,
                             11, 12, -13, 14, 448};
  const QuantizedMatrix q = quantize_dynamic(MatrixView::f32(x.data(), 3, 5), spec_for(ScaleLayout::block(2, 2)));
  ASSERT_EQ(q.scale_rows, 2);
  ASSERT_EQ(q.scale_cols, 3);
  const float want[6] = {7.0f / 448, 9.0f / 448, 10.0f / 448, 12.0f / 448, 14.0f / 448, 1.0f};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(q.scales[size_t(i)], want[i]) << i;
  // the element that defines its block's amax maps to ±448 exactly
  EXPECT_EQ(q.codes[14], 0x7E);
  EXPECT_EQ(q.codes[5], 0xFC);  // -6 / (7/448) = -384 = -1.5·2^8 -> 0xFC
  EXPECT_EQ(q.scale_at(2, 4), 1.0f);
}

TEST(QuantizeApi, ZeroRowsUseTheFloorNotNaN) {
  std::vector<float> x(2 * 8, 0.0f);
  x[8] = 1.0f;
  const QuantizedMatrix q = quantize_dynamic(MatrixView::f32(x.data(), 2, 8), spec_for(ScaleLayout::token()));
  EXPECT_EQ(q.scales[0], 1.0f / (448.0f * 512.0f));
  for (int i = 0; i < 8; ++i) EXPECT_EQ(q.codes[size_t(i)], 0x00);
  EXPECT_EQ(q.codes[8], 0x7E);
}

TEST(QuantizeApi, EmptyAndTinyTensors) {
  const QuantizedMatrix empty = quantize_dynamic(MatrixView::f32(nullptr, 0, 0), spec_for(ScaleLayout::token()));
  EXPECT_TRUE(empty.codes.empty());
  EXPECT_TRUE(empty.scales.empty());
  const float one = -3.0f;
  const QuantizedMatrix q = quantize_dynamic(MatrixView::f32(&one, 1, 1), spec_for(ScaleLayout::block()));
  EXPECT_EQ(q.codes[0], 0xFE);
  EXPECT_EQ(q.scales[0], 3.0f / 448.0f);
}

TEST(QuantizeApi, DequantizedErrorWithinHalfAnFp8Step) {
  // RNE to E4M3 (3 mantissa bits): |x - deq| <= 2^-4 · |x| for normal codes,
  // plus half a subnormal step (2^-10 · scale) near zero.
  const int64_t rows = 64, cols = 300;
  const std::vector<float> x = random_matrix(rows, cols, 1);
  for (ScaleLayout layout : {ScaleLayout::tensor(), ScaleLayout::channel(), ScaleLayout::group(128),
                             ScaleLayout::block(32, 128)}) {
    const QuantizedMatrix q = quantize_dynamic(MatrixView::f32(x.data(), rows, cols), spec_for(layout));
    const std::vector<float> d = dequantize_f32(q);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const size_t i = size_t(r * cols + c);
        // (1 + 1e-6): the float rounding of x / scale and of code · scale
        const float bound = (std::fabs(x[i]) / 16.0f + q.scale_at(r, c) * std::ldexp(1.0f, -10)) * (1.0f + 1e-6f);
        ASSERT_LE(std::fabs(x[i] - d[i]), bound) << name(layout.granularity) << " at " << r << "," << c;
      }
  }
}

TEST(QuantizeApi, StaticScalesAreValidated) {
  const std::vector<float> x = random_matrix(4, 8, 2);
  const MatrixView v = MatrixView::f32(x.data(), 4, 8);
  const std::vector<float> three{1.0f, 1.0f, 1.0f};
  try {
    (void)quantize_static(v, spec_for(ScaleLayout::channel()), three);
    FAIL() << "wrong scale count accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("must have 4 values, got 3"), std::string::npos) << e.what();
  }
  for (float bad : {0.0f, -1.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    const std::vector<float> s{bad};
    EXPECT_THROW((void)quantize_static(v, spec_for(ScaleLayout::tensor()), s), Error) << bad;
  }
  const std::vector<float> good{0.01f};
  const QuantizedMatrix q = quantize_static(v, spec_for(ScaleLayout::tensor()), good);
  EXPECT_EQ(q.codes[0], float_to_fp8(x[0] / 0.01f, Fp8Format::kE4M3));
}

TEST(QuantizeApi, BadShapesAndLayoutsAreErrors) {
  const float x[4] = {1, 2, 3, 4};
  EXPECT_THROW((void)quantize_dynamic(MatrixView::f32(x, -1, 4), spec_for(ScaleLayout::tensor())), Error);
  EXPECT_THROW((void)quantize_dynamic(MatrixView::f32(nullptr, 2, 2), spec_for(ScaleLayout::tensor())), Error);
  EXPECT_THROW((void)quantize_dynamic(MatrixView::f32(x, 1, 4), spec_for(ScaleLayout::group(0))), Error);
  EXPECT_THROW((void)quantize_dynamic(MatrixView::f32(x, 1, 4), spec_for(ScaleLayout::block(0, 128))), Error);
  QuantSpec s = spec_for(ScaleLayout::tensor());
  s.rule.scale_floor = -1.0f;
  EXPECT_THROW((void)quantize_dynamic(MatrixView::f32(x, 1, 4), s), Error);
}

TEST(QuantizeApi, PowerOfTwoScalesRoundUpExactly) {
  EXPECT_EQ(round_up_to_power_of_two(1.0f), 1.0f);
  EXPECT_EQ(round_up_to_power_of_two(std::nextafter(1.0f, 2.0f)), 2.0f);
  EXPECT_EQ(round_up_to_power_of_two(0.75f), 1.0f);
  EXPECT_EQ(round_up_to_power_of_two(3.0f / 448.0f), 1.0f / 128.0f);
  // just above a power of two, where ceil(log2(s)) in float would say 2^k
  EXPECT_EQ(round_up_to_power_of_two(std::nextafter(std::ldexp(1.0f, -10), 1.0f)), std::ldexp(1.0f, -9));
  EXPECT_EQ(round_up_to_power_of_two(std::ldexp(3.0f, -140)), std::ldexp(1.0f, -138));  // subnormal
  EXPECT_THROW((void)round_up_to_power_of_two(0.0f), Error);
}

TEST(QuantizeApi, ScaleConventions) {
  EXPECT_EQ(to_dequant_multiplier(0.5f, ScaleConvention::kDequantMultiplier), 0.5f);
  EXPECT_EQ(to_dequant_multiplier(448.0f / 7.0f, ScaleConvention::kQuantMultiplier), 1.0f / (448.0f / 7.0f));
}

TEST(QuantizeApi, CompressedTensorsRuleTurnsNegativeZeroPositive) {
  const uint16_t x[2] = {0x8000 /* -0 */, 0x3F80 /* 1 */};
  QuantSpec s = spec_for(ScaleLayout::tensor());
  s.rule = ScaleRule::compressed_tensors(HighPrecision::kBF16);
  EXPECT_EQ(quantize_dynamic(MatrixView::bf16(x, 1, 2), s).codes[0], 0x00);
  s.rule = ScaleRule::runtime(Fp8Format::kE4M3);
  EXPECT_EQ(quantize_dynamic(MatrixView::bf16(x, 1, 2), s).codes[0], 0x80);
}

}  // namespace
}  // namespace fp8lm
