// Tensor-parallel slices of a linear weight (src/weights/shard_weight.h) against the weight they
// come from: every value of a slice is read back through QuantizedMatrix::scale_at (the
// quantizer's own cell lookup) on both sides.
//
// * Cell-aligned slices (rows at multiples of 128, K at multiples of the group) are exact: the
//   same codes, the same values, nothing re-scaled — for BF16 weights and FP8 with tensor,
//   channel, 128 × 128 block and 1 × 128 group scales, split 2 and 4 ways, rows and K; and the
//   slices put back together are the weight.
// * A boundary inside a cell (160 rows of a 128 × 128-block weight; K split at 100 with 1 × 128
//   groups): each value whose original scale is its new cell's keeps its code; every other value
//   is within the E4M3 rounding of the new scale — half a unit in the last place, 2^-4 of the
//   value for normals, 2^-10 of the scale for subnormals — and the report counts and measures
//   exactly what changed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "common/error.h"
#include "numerics/fp8_format.h"
#include "numerics/quantize.h"
#include "weights/linear_weight.h"
#include "weights/shard_weight.h"

namespace fp8lm::weights {
namespace {

// Random values whose magnitude grows with the row and column, so neighbouring scale cells differ.
std::vector<float> random_values(int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(size_t(n * k));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c) x[size_t(r * k + c)] = normal(rng) * std::ldexp(1.0f, int((r / 37 + c / 53) % 6));
  return x;
}

LinearWeight random_fp8(int64_t n, int64_t k, ScaleLayout layout, uint32_t seed) {
  const std::vector<float> x = random_values(n, k, seed);
  QuantSpec spec;
  spec.layout = layout;
  LinearQuantScheme scheme;
  scheme.quantized = true;
  scheme.weights_serialized = false;
  scheme.weight_scales = layout;
  scheme.activation = ActivationQuant::kDynamicToken;
  LinearWeight w = from_quantized(quantize_dynamic(MatrixView::f32(x.data(), n, k), spec), scheme);
  w.bias.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) w.bias[size_t(i)] = float(i);
  return w;
}

uint8_t code(const LinearWeight& w, int64_t r, int64_t c) { return static_cast<const uint8_t*>(w.data)[r * w.k + c]; }

const ScaleLayout kLayouts[] = {ScaleLayout::tensor(), ScaleLayout::channel(), ScaleLayout::block(128, 128),
                                ScaleLayout::group(128)};

TEST(ShardWeight, AlignedSlicesAreExact) {
  for (const ScaleLayout& layout : kLayouts)
    for (const int ranks : {2, 4}) {
      SCOPED_TRACE(std::string(name(layout.granularity)) + " over " + std::to_string(ranks));
      const LinearWeight w = random_fp8(512, 1024, layout, 3);
      const QuantizedMatrix wq = weights::quantized_matrix(w);
      for (int rank = 0; rank < ranks; ++rank) {
        ShardReport rep;
        const int64_t nr = w.n / ranks, nc = w.k / ranks;
        const LinearWeight rows = shard_rows(w, rank * nr, nr, &rep);
        const LinearWeight cols = shard_cols(w, rank * nc, nc, rank == 0, &rep);
        EXPECT_EQ(rep.cells_rescaled, 0);
        EXPECT_EQ(rep.codes_requantized, 0);
        const QuantizedMatrix rq = weights::quantized_matrix(rows), cq = weights::quantized_matrix(cols);
        int64_t bad = 0;
        for (int64_t r = 0; r < nr; ++r)
          for (int64_t c = 0; c < w.k; ++c)
            bad += code(rows, r, c) != code(w, rank * nr + r, c) ||
                   rq.scale_at(r, c) != wq.scale_at(rank * nr + r, c);
        for (int64_t r = 0; r < w.n; ++r)
          for (int64_t c = 0; c < nc; ++c)
            bad += code(cols, r, c) != code(w, r, rank * nc + c) || cq.scale_at(r, c) != wq.scale_at(r, rank * nc + c);
        EXPECT_EQ(bad, 0);
        EXPECT_EQ(rows.bias, std::vector<float>(w.bias.begin() + rank * nr, w.bias.begin() + (rank + 1) * nr));
        EXPECT_EQ(cols.bias.empty(), rank != 0);
        EXPECT_EQ(rows.activation, w.activation);
      }
    }
}

// Every value of `s` (the slice at (r0, c0) of w): the same code where its scale is the
// original's, else within the E4M3 rounding of its new scale; the report matches a recount.
void check_rescaled(const LinearWeight& w, const LinearWeight& s, int64_t r0, int64_t c0, const ShardReport& rep) {
  const QuantizedMatrix wq = weights::quantized_matrix(w), sq = weights::quantized_matrix(s);
  int64_t moved = 0, changed = 0, bad = 0;
  double worst = 0;
  for (int64_t r = 0; r < s.n; ++r)
    for (int64_t c = 0; c < s.k; ++c) {
      const float s_old = wq.scale_at(r0 + r, c0 + c), s_new = sq.scale_at(r, c);
      const uint8_t before = code(w, r0 + r, c0 + c), after = code(s, r, c);
      if (s_old == s_new) {
        bad += before != after;
        continue;
      }
      ++moved;
      bad += s_new < s_old;
      const double v = double(fp8_to_float(before, Fp8Format::kE4M3)) * s_old;
      const double got = double(fp8_to_float(after, Fp8Format::kE4M3)) * s_new;
      const double d = std::abs(got - v);
      changed += d > 0;
      worst = std::max(worst, d);
      if (d > std::max(std::ldexp(std::abs(v), -4), std::ldexp(double(s_new), -10)) && bad++ < 3)
        ADD_FAILURE() << "(" << r << ", " << c << "): " << v << " became " << got;
    }
  EXPECT_EQ(bad, 0);
  EXPECT_GT(rep.cells_rescaled, 0);
  EXPECT_EQ(rep.codes_requantized, moved);
  EXPECT_EQ(rep.values_changed, changed);
  EXPECT_GT(changed, 0);
  EXPECT_DOUBLE_EQ(rep.max_abs_error, worst);
  EXPECT_GT(rep.max_rel_error, 0.0);
  EXPECT_LE(rep.max_rel_error, 1.0);
}

TEST(ShardWeight, BlocksCutInsideAreRescaled) {
  const LinearWeight w = random_fp8(320, 384, ScaleLayout::block(128, 128), 5);
  ShardReport first, second;
  const LinearWeight a = shard_rows(w, 0, 160, &first);
  EXPECT_EQ(first.cells_rescaled, 0);  // starts on a block: its last block is cut, as a weight's end
  const LinearWeight b = shard_rows(w, 160, 160, &second);
  EXPECT_EQ(b.scales.size(), size_t(2 * 3));  // its own grid: rows [160, 288), [288, 320)
  check_rescaled(w, b, 160, 0, second);
  ShardReport cols;
  const LinearWeight c = shard_cols(w, 192, 192, false, &cols);  // K cut inside the second block
  check_rescaled(w, c, 0, 192, cols);
}

TEST(ShardWeight, GroupsCutInsideAreRescaled) {
  const LinearWeight w = random_fp8(96, 512, ScaleLayout::group(128), 7);
  ShardReport rep;
  const LinearWeight s = shard_cols(w, 100, 300, true, &rep);
  EXPECT_EQ(s.scales.size(), size_t(96 * 3));
  check_rescaled(w, s, 0, 100, rep);
  EXPECT_EQ(s.bias, w.bias);
}

TEST(ShardWeight, HighPrecisionIsCopied) {
  std::vector<uint16_t> bf(size_t(6 * 10));
  for (size_t i = 0; i < bf.size(); ++i) bf[i] = float_to_bf16(float(i));
  const LinearWeight w = high_precision(ElementType::kBF16, bf.data(), 6, 10);
  const LinearWeight r = shard_rows(w, 2, 3), c = shard_cols(w, 4, 5, true);
  const auto* rp = static_cast<const uint16_t*>(r.data);
  const auto* cp = static_cast<const uint16_t*>(c.data);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 10; ++j) EXPECT_EQ(rp[i * 10 + j], bf[size_t((2 + i) * 10 + j)]);
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = 0; j < 5; ++j) EXPECT_EQ(cp[i * 5 + j], bf[size_t(i * 10 + 4 + j)]);
  bf.assign(bf.size(), 0);  // the slices own their copies
  EXPECT_EQ(rp[0], float_to_bf16(20.0f));
}

TEST(ShardWeight, SlicesOutsideTheWeightAreRefusedByName) {
  const LinearWeight w = random_fp8(64, 128, ScaleLayout::channel(), 1);
  auto message = [](auto f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { shard_rows(w, 32, 40); }).find("rows [32, 72) x [0, 128) is not inside the weight [64, 128]"),
            std::string::npos);
  EXPECT_NE(message([&] { shard_cols(w, -1, 10, true); }).find("columns"), std::string::npos);
  EXPECT_NE(message([&] { shard_rows(w, 0, 0); }).find("is not inside"), std::string::npos);
}

}  // namespace
}  // namespace fp8lm::weights
