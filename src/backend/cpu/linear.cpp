#include "backend/cpu/linear.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/error.h"
#include "numerics/cpu/select.h"

namespace fp8lm::cpu {
namespace {

// Output tiles: a task converts kTileN weight rows once and multiplies them with
// up to kTileM input rows. Fixed sizes (not derived from the thread count) keep
// the work of every output, and so its rounding, the same for any pool.
constexpr int64_t kTileN = 16;
constexpr int64_t kTileM = 64;
// Below this many multiply-adds, waking the pool costs more than it saves
// (measured: a [128, 384] decode takes ~6 µs on one thread, ~20 µs on two).
constexpr int64_t kMinParallelWork = int64_t{1} << 18;

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The scale of weight element (row, col) in the layout's grid; width is the K
// width of one scale cell (LinearPlan::weight_scale_width, 0: the whole row).
float weight_scale(const weights::LinearWeight& w, int64_t scale_cols, int64_t width, int64_t row, int64_t col) {
  const ScaleLayout& l = w.scale_layout;
  int64_t r = 0;
  if (l.granularity == Granularity::kBlock) r = row / l.group_rows;
  else if (l.granularity != Granularity::kTensor) r = row;
  const int64_t c = width > 0 ? col / width : 0;
  return w.scales[size_t(r * scale_cols + c)];
}

}  // namespace

QuantizedMatrix quantize_activations(const float* x, int64_t m, const LinearPlan& p, int64_t k,
                                     KernelChoice kernels) {
  if (!p.x_quant) throw Error("linear: quantize_activations() called for a weight-only (W8A16) layer");
  const MatrixView xv = MatrixView::f32(x, m, k);
  const QuantSpec& spec = *p.x_quant;
  switch (p.x_scale) {
    case LinearPlan::XScale::kDynamic:
      return quantize_dynamic(xv, spec, kernels);
    case LinearPlan::XScale::kDynamicCapped: {
      // FBGEMM clamps each token's amax to the bound before dividing by max:
      // min(amax, ub) / max = min(amax / max, ub / max) since a correctly
      // rounded division is monotonic, and the floor applied after equals the
      // floor applied before (the floor is far below any sensible bound).
      std::vector<float> scales = compute_scales(xv, spec, kernels);
      for (float& s : scales) s = std::max(std::min(s, p.x_scale_cap), spec.rule.scale_floor);
      return quantize_static(xv, spec, scales, kernels);
    }
    case LinearPlan::XScale::kStatic:
      return quantize_static(xv, spec, std::span<const float>(&p.x_static_scale, 1), kernels);
  }
  throw Error("linear: unknown activation scale kind");
}

QuantizedMatrix quantize_activations(const float* x, int64_t m, const weights::LinearWeight& w,
                                     KernelChoice kernels) {
  if (w.activation == ActivationQuant::kNone)
    throw Error("linear: quantize_activations() called for a weight-only (W8A16) layer");
  return quantize_activations(x, m, plan_linear(w), w.k, kernels);
}

const LinearKernels& select_linear_kernels(KernelChoice choice) {
  return select_table(choice, linear_kernels_scalar(), linear_kernels_avx2(), linear_kernels_avx512(),
                      "linear kernels", "AVX2/FMA/F16C", "AVX-512F");
}

#if !defined(FP8LM_LINEAR_HAVE_AVX2)
const LinearKernels* linear_kernels_avx2() { return nullptr; }
#endif
#if !defined(FP8LM_LINEAR_HAVE_AVX512)
const LinearKernels* linear_kernels_avx512() { return nullptr; }
#endif

void linear(std::span<const float> x, int64_t m, const weights::LinearWeight& w, std::span<float> y,
            ThreadPool* pool, KernelChoice kernels) {
  linear(x, m, w, plan_linear(w), y, pool, kernels);
}

void linear(std::span<const float> x, int64_t m, const weights::LinearWeight& w, const LinearPlan& p,
            std::span<float> y, ThreadPool* pool, KernelChoice kernel_choice) {
  const int64_t n = w.n, k = w.k;
  if (m < 0) throw Error("linear: negative row count " + std::to_string(m));
  if (int64_t(x.size()) != m * k) {
    throw Error("linear: input has " + std::to_string(x.size()) + " values, expected M x K = " +
                std::to_string(m) + " x " + std::to_string(k));
  }
  if (int64_t(y.size()) != m * n) {
    throw Error("linear: output has " + std::to_string(y.size()) + " values, expected M x N = " +
                std::to_string(m) + " x " + std::to_string(n));
  }
  if (m == 0) return;
  const LinearKernels& kern = select_linear_kernels(kernel_choice);
  const bool w8a8 = p.path == LinearPlan::Path::kW8A8;
  const bool high_precision = p.path == LinearPlan::Path::kHighPrecision;

  // W8A8: the input's codes, decoded unscaled (exact), and their scale grid.
  QuantizedMatrix xq;
  std::vector<float> x_codes;
  const float* xin = x.data();
  int64_t segment = k;
  if (w8a8) {
    xq = quantize_activations(x.data(), m, p, k);
    x_codes.resize(size_t(m * k));
    kern.fp8_to_float(xq.codes.data(), m * k, xq.format, 1.0f, x_codes.data());
    xin = x_codes.data();
    if (p.segment > 0) segment = p.segment;
  }
  const bool x_per_row = w8a8 && xq.layout.granularity != Granularity::kTensor;
  const int64_t x_group = w8a8 && xq.layout.granularity == Granularity::kGroup ? xq.layout.group_cols : 0;
  const int64_t w_scale_cols = high_precision ? 0 : p.weight_scales.scale_cols(k);
  const int64_t w_width = p.weight_scale_width;
  const auto* bytes = static_cast<const uint8_t*>(w.data);
  const size_t esize = element_bytes(p.weight);
  const Fp8Format w_format = high_precision ? Fp8Format::kE4M3 : fp8_format(p.weight);

  // One weight row into float32 scratch: converted (high precision), dequantized
  // per scale cell (W8A16), or decoded without scales (W8A8, scaled later).
  auto load_row = [&](int64_t row, float* out) {
    const uint8_t* src = bytes + size_t(row * k) * esize;
    if (high_precision) {
      kern.to_float(src, p.weight, k, out);
    } else if (w8a8) {
      kern.fp8_to_float(src, k, w_format, 1.0f, out);
    } else {
      const int64_t step = w_width > 0 ? w_width : k;
      for (int64_t c = 0; c < k; c += step) {
        kern.fp8_to_float(src + c, std::min(step, k - c), w_format, weight_scale(w, w_scale_cols, w_width, row, c),
                          out + c);
      }
    }
  };

  const int threads = pool ? pool->size() : 1;
  std::vector<std::vector<float>> scratch(size_t(threads), std::vector<float>(size_t(kTileN * k)));
  const int64_t m_tiles = cdiv(m, kTileM);
  const int64_t n_tiles = cdiv(n, kTileN);
  const int64_t max_mr = kern.max_mr, max_nr = kern.max_nr;

  auto task = [&](int64_t t, int thread) {
    const int64_t n0 = (t / m_tiles) * kTileN, n1 = std::min(n, n0 + kTileN);
    const int64_t m0 = (t % m_tiles) * kTileM, m1 = std::min(m, m0 + kTileM);
    float* wt = scratch[size_t(thread)].data();
    for (int64_t r = n0; r < n1; ++r) load_row(r, wt + (r - n0) * k);
    float acc[kMaxTile * kMaxTile];
    float sum[kMaxTile * kMaxTile];
    for (int64_t i = m0; i < m1; i += max_mr) {
      const int64_t mr = std::min(max_mr, m1 - i);
      for (int64_t j = n0; j < n1; j += max_nr) {
        const int64_t nr = std::min(max_nr, n1 - j);
        const DotTileFn dot = kern.dot[mr - 1][nr - 1];
        const float* xt = xin + i * k;
        const float* wj = wt + (j - n0) * k;
        if (!w8a8) {
          dot(xt, k, wj, k, k, sum);
        } else {
          std::fill(sum, sum + mr * nr, 0.0f);
          for (int64_t c = 0; c < k; c += segment) {
            dot(xt + c, k, wj + c, k, std::min(segment, k - c), acc);
            for (int64_t a = 0; a < mr; ++a) {
              const int64_t xr = x_per_row ? i + a : 0;
              const float sx = xq.scales[size_t(xr * xq.scale_cols + (x_group > 0 ? c / x_group : 0))];
              for (int64_t b = 0; b < nr; ++b) {
                sum[a * nr + b] += acc[a * nr + b] * sx * weight_scale(w, w_scale_cols, w_width, j + b, c);
              }
            }
          }
        }
        for (int64_t a = 0; a < mr; ++a) {
          float* yr = y.data() + (i + a) * n + j;
          for (int64_t b = 0; b < nr; ++b) yr[b] = sum[a * nr + b] + (w.bias.empty() ? 0.0f : w.bias[size_t(j + b)]);
        }
      }
    }
  };
  const int64_t tasks = m_tiles * n_tiles;
  if (pool && m * n * k >= kMinParallelWork) pool->parallel_for(tasks, task);
  else for (int64_t t = 0; t < tasks; ++t) task(t, 0);
}

}  // namespace fp8lm::cpu
