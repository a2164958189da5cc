#include "weights/shard_weight.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "numerics/fp8_format.h"

namespace fp8lm::weights {
namespace {

struct Region {
  int64_t r0, nr, c0, nc;
};

void check_region(const LinearWeight& w, const Region& g, const char* what) {
  validate(w);
  if (g.nr <= 0 || g.nc <= 0 || g.r0 < 0 || g.c0 < 0 || g.r0 + g.nr > w.n || g.c0 + g.nc > w.k)
    throw Error(std::string("shard: ") + what + " [" + std::to_string(g.r0) + ", " + std::to_string(g.r0 + g.nr) +
                ") x [" + std::to_string(g.c0) + ", " + std::to_string(g.c0 + g.nc) + ") is not inside the weight [" +
                std::to_string(w.n) + ", " + std::to_string(w.k) + "]");
}

// The extent of one scale cell along a dimension of `size` (0 in the layout: the whole of it).
int64_t cell(int64_t g, int64_t size) { return g > 0 ? g : size; }

LinearWeight slice(const LinearWeight& w, const Region& g, ShardReport* report) {
  LinearWeight s = w;
  s.n = g.nr;
  s.k = g.nc;
  const size_t elem = element_bytes(w.element);
  auto bytes = std::make_shared<std::vector<std::byte>>(size_t(g.nr * g.nc) * elem);
  const auto* src = static_cast<const std::byte*>(w.data);
  for (int64_t r = 0; r < g.nr; ++r)
    std::memcpy(bytes->data() + size_t(r * g.nc) * elem, src + size_t((g.r0 + r) * w.k + g.c0) * elem,
                size_t(g.nc) * elem);
  s.data = bytes->data();
  s.owner = bytes;
  if (!w.is_fp8()) return s;

  // Cells of bn × bk (tensor: the whole weight; channel: a whole row), anchored at (r0, c0).
  const ScaleLayout& l = w.scale_layout;
  const int64_t bn = cell(l.granularity == Granularity::kTensor ? 0 : l.group_rows, w.n);
  const int64_t bk = cell(l.granularity == Granularity::kBlock || l.granularity == Granularity::kGroup ? l.group_cols : 0, w.k);
  const int64_t src_cols = l.scale_cols(w.k);
  const int64_t new_rows = l.scale_rows(g.nr), new_cols = l.scale_cols(g.nc);
  auto src_scale = [&](int64_t r, int64_t c) { return w.scales[size_t((r / bn) * src_cols + c / bk)]; };
  s.scales.assign(size_t(new_rows * new_cols), 0.0f);
  ShardReport rep;
  const Fp8Format fmt = w.format();
  auto* codes = reinterpret_cast<uint8_t*>(bytes->data());
  for (int64_t i = 0; i < new_rows; ++i)
    for (int64_t j = 0; j < new_cols; ++j) {
      const int64_t ra = g.r0 + i * bn, rb = g.r0 + std::min((i + 1) * bn, g.nr) - 1;
      const int64_t ca = g.c0 + j * bk, cb = g.c0 + std::min((j + 1) * bk, g.nc) - 1;
      // The original cells this one overlaps: at most two along each dimension (their corners).
      const float corners[4] = {src_scale(ra, ca), src_scale(ra, cb), src_scale(rb, ca), src_scale(rb, cb)};
      const float s_new = *std::max_element(std::begin(corners), std::end(corners));
      s.scales[size_t(i * new_cols + j)] = s_new;
      const bool mixed = std::any_of(std::begin(corners), std::end(corners), [&](float c) { return c != s_new; });
      if (!mixed) continue;
      ++rep.cells_rescaled;
      for (int64_t r = ra; r <= rb; ++r)
        for (int64_t c = ca; c <= cb; ++c) {
          const float s_old = src_scale(r, c);
          if (s_old == s_new) continue;
          uint8_t& code = codes[size_t((r - g.r0) * g.nc + (c - g.c0))];
          // The values exactly (a code has 4 significant bits: the products fit a double).
          const double v = double(fp8_to_float(code, fmt)) * double(s_old);
          code = float_to_fp8(float(v) / s_new, fmt);
          ++rep.codes_requantized;
          const double d = std::abs(double(fp8_to_float(code, fmt)) * double(s_new) - v);
          if (d > 0) ++rep.values_changed;
          rep.max_abs_error = std::max(rep.max_abs_error, d);
          if (v != 0.0) rep.max_rel_error = std::max(rep.max_rel_error, d / std::abs(v));
        }
    }
  if (report != nullptr) report->add(rep);
  return s;
}

}  // namespace

void ShardReport::add(const ShardReport& o) {
  cells_rescaled += o.cells_rescaled;
  codes_requantized += o.codes_requantized;
  values_changed += o.values_changed;
  max_abs_error = std::max(max_abs_error, o.max_abs_error);
  max_rel_error = std::max(max_rel_error, o.max_rel_error);
}

LinearWeight shard_rows(const LinearWeight& w, int64_t row0, int64_t rows, ShardReport* report) {
  const Region g{row0, rows, 0, w.k};
  check_region(w, g, "rows");
  LinearWeight s = slice(w, g, report);
  if (!w.bias.empty()) s.bias.assign(w.bias.begin() + row0, w.bias.begin() + row0 + rows);
  validate(s);
  return s;
}

LinearWeight shard_cols(const LinearWeight& w, int64_t col0, int64_t cols, bool keep_bias, ShardReport* report) {
  const Region g{0, w.n, col0, cols};
  check_region(w, g, "columns");
  LinearWeight s = slice(w, g, report);
  if (!keep_bias) s.bias.clear();
  validate(s);
  return s;
}

}  // namespace fp8lm::weights
