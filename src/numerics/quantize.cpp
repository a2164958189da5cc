#include "numerics/quantize.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/error.h"
#include "numerics/cpu/kernels.h"

namespace fp8lm {
namespace {

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

void check_matrix(const MatrixView& x) {
  if (x.rows < 0 || x.cols < 0)
    throw Error("quantize: tensor shape [" + std::to_string(x.rows) + ", " +
                std::to_string(x.cols) + "] has a negative dimension");
  if (x.data == nullptr && x.rows * x.cols > 0) throw Error("quantize: tensor data is null");
}

void check_rule(const ScaleRule& r) {
  for (float v : {r.amax_floor, r.scale_floor, r.zero_scale})
    if (!std::isfinite(v) || v < 0.0f)
      throw Error("quantize: scale rule floors must be finite and >= 0, got " + std::to_string(v));
}

// Rows and columns that share one scale, for a concrete [rows, cols] tensor.
struct CellShape {
  int64_t rows;
  int64_t cols;
};

CellShape cell_shape(const ScaleLayout& l, int64_t rows, int64_t cols) {
  switch (l.granularity) {
    case Granularity::kTensor:
      return {std::max<int64_t>(rows, 1), std::max<int64_t>(cols, 1)};
    case Granularity::kChannel:
    case Granularity::kToken:
      return {1, std::max<int64_t>(cols, 1)};
    case Granularity::kGroup:
      return {1, l.group_cols};
    case Granularity::kBlock:
      return {l.group_rows, l.group_cols};
  }
  return {1, 1};
}

// Calls fn(row, col0, length, scale_index) for every run of elements of one row
// that share a scale: the traversal shared by amax, quantize and dequantize.
template <typename Fn>
void for_each_segment(const ScaleLayout& layout, int64_t rows, int64_t cols, int64_t scale_cols,
                      Fn&& fn) {
  const CellShape cell = cell_shape(layout, rows, cols);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t scale_row = r / cell.rows;
    for (int64_t c = 0; c < cols; c += cell.cols) {
      fn(r, c, std::min(cell.cols, cols - c), scale_row * scale_cols + c / cell.cols);
    }
  }
}

float scale_from_amax(float amax, const ScaleRule& rule, Fp8Format format) {
  const float fmax = traits(format).max_finite;
  float a = std::max(amax, rule.amax_floor);
  float s;
  if (rule.arithmetic == HighPrecision::kBF16) {
    s = round_to_bf16(round_to_bf16(a) / fmax);
  } else {
    s = a / fmax;
  }
  if (rule.zero_scale > 0.0f && s == 0.0f) s = rule.zero_scale;
  s = std::max(s, rule.scale_floor);
  if (rule.power_of_two) s = round_up_to_power_of_two(s);
  return s;
}

QuantizedMatrix make_output(const MatrixView& x, const QuantSpec& spec) {
  check_matrix(x);
  check_rule(spec.rule);
  QuantizedMatrix q;
  q.format = spec.format;
  q.layout = spec.layout;
  q.rows = x.rows;
  q.cols = x.cols;
  q.scale_rows = spec.layout.scale_rows(x.rows);
  q.scale_cols = spec.layout.scale_cols(x.cols);
  q.codes.resize(size_t(x.rows * x.cols));
  return q;
}

void quantize_with_scales(const MatrixView& x, const QuantSpec& spec, QuantizedMatrix& q,
                          const cpu::KernelTable& k) {
  const cpu::QuantizeArgs args{spec.format, Saturation::kSatFinite, spec.rule.arithmetic,
                               spec.rule.add_zero_point};
  for_each_segment(spec.layout, x.rows, x.cols, q.scale_cols,
                   [&](int64_t r, int64_t c, int64_t n, int64_t s) {
                     const int64_t offset = r * x.cols + c;
                     k.quantize(cpu::advance(x.data, x.dtype, size_t(offset)), x.dtype, size_t(n),
                                q.scales[size_t(s)], args, q.codes.data() + offset);
                   });
}

}  // namespace

std::string_view name(Granularity g) {
  switch (g) {
    case Granularity::kTensor: return "tensor";
    case Granularity::kChannel: return "channel";
    case Granularity::kToken: return "token";
    case Granularity::kGroup: return "group";
    case Granularity::kBlock: return "block";
  }
  return "?";
}

int64_t ScaleLayout::scale_rows(int64_t rows) const {
  switch (granularity) {
    case Granularity::kTensor: return 1;
    case Granularity::kChannel:
    case Granularity::kToken:
    case Granularity::kGroup: return rows;
    case Granularity::kBlock:
      if (group_rows <= 0) throw Error("quantize: block rows must be > 0, got " + std::to_string(group_rows));
      return cdiv(rows, group_rows);
  }
  return 0;
}

int64_t ScaleLayout::scale_cols(int64_t cols) const {
  switch (granularity) {
    case Granularity::kTensor:
    case Granularity::kChannel:
    case Granularity::kToken: return 1;
    case Granularity::kGroup:
    case Granularity::kBlock:
      if (group_cols <= 0)
        throw Error(std::string("quantize: ") + std::string(name(granularity)) +
                    " columns must be > 0, got " + std::to_string(group_cols));
      return cdiv(cols, group_cols);
  }
  return 0;
}

ScaleRule ScaleRule::runtime(Fp8Format fmt) {
  ScaleRule r;
  r.scale_floor = 1.0f / (traits(fmt).max_finite * 512.0f);
  return r;
}

ScaleRule ScaleRule::vllm_group() {
  ScaleRule r;
  r.amax_floor = 1e-10f;
  return r;
}

ScaleRule ScaleRule::compressed_tensors(HighPrecision model_dtype) {
  ScaleRule r;
  r.arithmetic = model_dtype;
  r.add_zero_point = true;
  // torch.finfo(dtype).eps of the scale's dtype
  r.zero_scale = model_dtype == HighPrecision::kBF16 ? 0.0078125f : 1.1920928955078125e-07f;
  return r;
}

float QuantizedMatrix::scale_at(int64_t r, int64_t c) const {
  const CellShape cell = cell_shape(layout, rows, cols);
  return scales[size_t((r / cell.rows) * scale_cols + c / cell.cols)];
}

std::vector<float> compute_scales(const MatrixView& x, const QuantSpec& spec, KernelChoice kernels) {
  check_matrix(x);
  check_rule(spec.rule);
  const cpu::KernelTable& k = cpu::select_kernels(kernels);
  const int64_t sr = spec.layout.scale_rows(x.rows);
  const int64_t sc = spec.layout.scale_cols(x.cols);
  std::vector<float> amax(size_t(sr * sc), 0.0f);
  for_each_segment(spec.layout, x.rows, x.cols, sc, [&](int64_t r, int64_t c, int64_t n, int64_t s) {
    const float m = k.amax(cpu::advance(x.data, x.dtype, size_t(r * x.cols + c)), x.dtype, size_t(n));
    amax[size_t(s)] = std::max(amax[size_t(s)], m);
  });
  for (float& a : amax) a = scale_from_amax(a, spec.rule, spec.format);
  return amax;
}

QuantizedMatrix quantize_dynamic(const MatrixView& x, const QuantSpec& spec, KernelChoice kernels) {
  QuantizedMatrix q = make_output(x, spec);
  q.scales = compute_scales(x, spec, kernels);
  quantize_with_scales(x, spec, q, cpu::select_kernels(kernels));
  return q;
}

QuantizedMatrix quantize_static(const MatrixView& x, const QuantSpec& spec,
                                std::span<const float> scales, KernelChoice kernels) {
  QuantizedMatrix q = make_output(x, spec);
  if (int64_t(scales.size()) != q.scale_rows * q.scale_cols)
    throw Error("quantize: " + std::string(name(spec.layout.granularity)) + " scales for a [" +
                std::to_string(x.rows) + ", " + std::to_string(x.cols) + "] tensor must have " +
                std::to_string(q.scale_rows * q.scale_cols) + " values, got " +
                std::to_string(scales.size()));
  for (size_t i = 0; i < scales.size(); ++i)
    if (!std::isfinite(scales[i]) || scales[i] <= 0.0f)
      throw Error("quantize: static scale #" + std::to_string(i) + " is " +
                  std::to_string(scales[i]) + "; scales must be finite and > 0");
  q.scales.assign(scales.begin(), scales.end());
  quantize_with_scales(x, spec, q, cpu::select_kernels(kernels));
  return q;
}

namespace {

// Runs one of the kernel tables' dequantize loops over every same-scale segment.
template <typename Out>
std::vector<Out> dequantize_with(const QuantizedMatrix& q,
                                 void (*loop)(const uint8_t*, size_t, float, Fp8Format, Out*)) {
  std::vector<Out> out(q.codes.size());
  for_each_segment(q.layout, q.rows, q.cols, q.scale_cols, [&](int64_t r, int64_t c, int64_t n, int64_t s) {
    const int64_t o = r * q.cols + c;
    loop(q.codes.data() + o, size_t(n), q.scales[size_t(s)], q.format, out.data() + o);
  });
  return out;
}

}  // namespace

std::vector<float> dequantize_f32(const QuantizedMatrix& q, KernelChoice kernels) {
  return dequantize_with(q, cpu::select_kernels(kernels).dequantize_f32);
}

std::vector<uint16_t> dequantize_bf16(const QuantizedMatrix& q, KernelChoice kernels) {
  return dequantize_with(q, cpu::select_kernels(kernels).dequantize_bf16);
}

float to_dequant_multiplier(float s, ScaleConvention convention) {
  return convention == ScaleConvention::kDequantMultiplier ? s : 1.0f / s;
}

float round_up_to_power_of_two(float s) {
  if (!std::isfinite(s) || s <= 0.0f)
    throw Error("power-of-two scale: scale must be finite and > 0, got " + std::to_string(s));
  int e = 0;
  const float m = std::frexp(s, &e);  // s = m · 2^e, m in [0.5, 1)
  return m == 0.5f ? s : std::ldexp(1.0f, e);
}

}  // namespace fp8lm
