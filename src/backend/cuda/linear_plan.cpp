#include "backend/cuda/linear_plan.h"

#include <cstdio>
#include <string>

#include "common/error.h"

namespace fp8lm::cuda {
namespace {

const char* layout_name(WeightScaleLayout l) {
  switch (l) {
    case WeightScaleLayout::kTensor: return "tensor";
    case WeightScaleLayout::kChannel: return "channel";
    case WeightScaleLayout::kBlock128: return "block128x128";
  }
  return "?";
}

const char* gemm_name(GemmScaleMode mode) {
  switch (mode) {
    case GemmScaleMode::kNone: return "bf16";
    case GemmScaleMode::kTensor: return "tensor";
    case GemmScaleMode::kOuterVector: return "outer-vector";
    case GemmScaleMode::kBlock: return "block";
  }
  return "?";
}

// Where a CUTLASS GEMM beat cuBLASLt's by ≥ 5 % on a Llama-3.1-8B shape (the fused qkv, o,
// fused gate_up, down), measured on the H200 by `bench_cuda_gemm --models 8b --m
// 16,32,64,128,192,256,384,512,768,1024,2048,4096,8192,16384` (docs/benchmarks.md, issue 19;
// docs/results/issue19/session6/gemm_perm.json). Ranges end halfway to the first measured size
// that lost. Shapes not listed (70B's, other models') keep cuBLASLt until measured. Per-token ×
// per-channel only: a cooperative 128×128 configuration (0.79–1.13× cuBLASLt, never the fastest
// CUTLASS one where CUTLASS won) and a block-scaled GEMM (faster alone in ranges of every shape,
// 0.99× in the engine: bench throughput 128/128) were measured and retired in issue 40; their
// figures: docs/results/issue19/README.md (session 6) and session6/gemm_perm.{md,json}.
struct MeasuredCutlass {
  int64_t n, k;
  GemmScaleMode mode;
  CutlassRows rows;
};
constexpr MeasuredCutlass kCutlassMeasured[] = {
    // Per-token × per-channel: ping-pong 64×128 and stream-K at decode sizes, where cuBLASLt's
    // tiles leave SMs idle. qkv 1.21× / 1.12× at m = 16 / 32 (0.98× at 64).
    {6144, 4096, GemmScaleMode::kOuterVector, {9, 48, CutlassFp8Config::kPingpong64x128}},
    // gate_up 1.18× / 1.22× / 1.24× at m = 16 / 32 / 64 (0.93× at 128).
    {28672, 4096, GemmScaleMode::kOuterVector, {9, 96, CutlassFp8Config::kPingpong64x128}},
    // down 1.24× / 1.14× / 1.13× / 1.24× / 1.12× at m = 16 / 32 / 64 / 128 / 256 (0.97× at 192,
    // 0.88× at 384): stream-K splits its K = 14336 over the SMs that 32 output tiles leave idle.
    {4096, 14336, GemmScaleMode::kOuterVector, {9, 288, CutlassFp8Config::kStreamK128x128}},
};

}  // namespace

std::string LinearPlan::describe() const {
  if (!fp8) return "bf16 | cublaslt bf16";
  std::string s = activation == ActivationQuant::kNone ? "w8a16" : "w8a8";
  s += " e4m3 w:";
  s += layout_name(w_layout);
  if (activation != ActivationQuant::kNone) {
    s += " a:";
    s += name(activation);
    if (activation == ActivationQuant::kDynamicGroup) s += std::to_string(act_quant.group_size);
    if (act_quant.token_scale_upper_bound > 0.0f) {
      char ub[32];
      std::snprintf(ub, sizeof ub, " ub=%g", double(act_quant.token_scale_upper_bound));
      s += ub;
    }
  }
  const std::string rows = std::to_string(gemv_max_rows);
  s += " | m<=" + rows + " gemv | m>" + rows + " ";
  switch (large_rows) {
    case LargeRows::kCublasBf16: s += "cublaslt bf16"; break;
    case LargeRows::kDequantizeBf16: s += "dequantize + cublaslt bf16"; break;
    case LargeRows::kCublasFp8:
      s += "cublaslt ";
      s += gemm_name(gemm_mode);
      if (block_rows_mod4_by_gemv) s += " (m%4 rows gemv)";
      for (const CutlassRows& r : cutlass_rows) {
        if (r.m_max < r.m_min) continue;
        s += " | m in [" + std::to_string(r.m_min) + ", " + std::to_string(r.m_max) + "] cutlass ";
        s += cutlass_fp8_config_short_name(r.config);
      }
      break;
    case LargeRows::kGemvChunks:
      s += "gemv x" + std::to_string(kMaxGemvRows);
      if (gemm_mode != GemmScaleMode::kNone) s += std::string(" (cublaslt ") + gemm_name(gemm_mode) + ": shape unaligned)";
      break;
  }
  return s;
}

// The decisions, in the order and with the errors CudaOps::upload_linear had
// them before the plan existed (issue 17).
LinearPlan plan_linear(const weights::LinearWeight& w) {
  weights::validate_layout(w);  // the elements are upload_linear's (a fused weight's are its parts')
  LinearPlan p;
  if (!w.is_fp8()) {
    p.gemm_mode = GemmScaleMode::kNone;
    p.large_rows = LargeRows::kCublasBf16;
    return p;
  }
  if (w.element != ElementType::kE4M3) throw Error("cuda ops: FP8 weights must be E4M3 (the tensor cores' format)");
  p.fp8 = true;
  const Granularity wg = w.scale_layout.granularity;
  switch (wg) {
    case Granularity::kTensor: p.w_layout = WeightScaleLayout::kTensor; break;
    case Granularity::kChannel: p.w_layout = WeightScaleLayout::kChannel; break;
    case Granularity::kBlock:
      if (w.scale_layout.group_rows != 128 || w.scale_layout.group_cols != 128)
        throw Error("cuda ops: FP8 weight blocks of " + std::to_string(w.scale_layout.group_rows) + "x" +
                    std::to_string(w.scale_layout.group_cols) + " are not supported (the CUDA backend runs 128x128)");
      p.w_layout = WeightScaleLayout::kBlock128;
      break;
    default:
      throw Error("cuda ops: FP8 weights with " + std::string(fp8lm::name(wg)) + " scales are not supported on CUDA");
  }
  p.activation = w.activation;
  switch (w.activation) {
    case ActivationQuant::kNone:
      // W8A16: the GEMV for decode; larger batches dequantize to BF16 (no FP8×BF16 tensor-core GEMM).
      p.gemv_max_rows = kMaxGemvRows;
      p.large_rows = LargeRows::kDequantizeBf16;
      return p;
    case ActivationQuant::kDynamicTensor:
      p.act_quant = Fp8ActQuant::tensor();
      p.x_layout = ActivationScaleLayout::kTensor;
      break;
    case ActivationQuant::kStaticTensor:
      // The device scale is uploaded by CudaOps::upload_linear, which sets act_quant.static_scale.
      p.act_quant = Fp8ActQuant::static_tensor(nullptr);
      p.x_layout = ActivationScaleLayout::kTensor;
      break;
    case ActivationQuant::kDynamicToken:
      p.act_quant = Fp8ActQuant::token(w.activation_scale_upper_bound);
      p.x_layout = ActivationScaleLayout::kToken;
      break;
    case ActivationQuant::kDynamicGroup:
      if (w.activation_group != 128)
        throw Error("cuda ops: activation groups of " + std::to_string(w.activation_group) +
                    " are not supported (the CUDA backend runs 1x128)");
      p.act_quant = Fp8ActQuant::group(128);
      p.x_layout = ActivationScaleLayout::kGroup128;
      break;
  }
  p.act_rule = dynamic_scale_rule(p.act_quant);
  p.gemv_max_rows = kGemvRowsW8A8;
  // cuBLASLt's mode for this pairing of weight and activation scales.
  const bool x_tensor = p.x_layout == ActivationScaleLayout::kTensor;
  const bool x_token = p.x_layout == ActivationScaleLayout::kToken;
  const bool aligned = w.k % 16 == 0 && w.n % 8 == 0;
  bool gemm_possible = false;  // cuBLASLt has this mode for the scheme and the shape fits its constraints
  if (wg == Granularity::kTensor && x_tensor) {
    p.gemm_mode = GemmScaleMode::kTensor;
    gemm_possible = aligned;
  } else if ((wg == Granularity::kTensor || wg == Granularity::kChannel) && (x_tensor || x_token)) {
    p.gemm_mode = GemmScaleMode::kOuterVector;
    gemm_possible = aligned;
    p.gemm_channel_scales = true;
  } else if (wg == Granularity::kBlock && p.x_layout == ActivationScaleLayout::kGroup128) {
    p.gemm_mode = GemmScaleMode::kBlock;
    gemm_possible = aligned && w.n % 4 == 0;
    p.gemm_cublas_block_scales = true;
    p.block_rows_mod4_by_gemv = true;
  }
  p.large_rows = gemm_possible ? LargeRows::kCublasFp8 : LargeRows::kGemvChunks;
#ifdef FP8LM_WITH_CUTLASS
  // CUTLASS's epilogue here has no bias; its kernels take what cuBLASLt's would (aligned shapes).
  if (p.large_rows == LargeRows::kCublasFp8 && w.bias.empty()) {
    size_t next = 0;
    for (const MeasuredCutlass& c : kCutlassMeasured) {
      if (c.n != w.n || c.k != w.k || c.mode != p.gemm_mode || next == p.cutlass_rows.size()) continue;
      p.cutlass_rows[next++] = c.rows;
    }
  }
#endif
  return p;
}

// The fuse policy CudaOps::upload_fused_linear applied before the plan existed (issue 17).
bool can_fuse(std::span<const weights::LinearWeight> parts) {
  if (parts.size() < 2) return false;
  const weights::LinearWeight& first = parts[0];
  for (const weights::LinearWeight& p : parts) {
    weights::validate(p);
    const bool same = p.k == first.k && p.element == first.element &&
                      (!p.is_fp8() || (p.activation == first.activation &&
                                       p.activation_group == first.activation_group &&
                                       p.activation_scale_upper_bound == first.activation_scale_upper_bound &&
                                       p.input_scale == first.input_scale &&
                                       (p.scale_layout.granularity == Granularity::kBlock) ==
                                           (first.scale_layout.granularity == Granularity::kBlock)));
    if (!same) return false;
    if (p.is_fp8() && p.scale_layout.granularity == Granularity::kBlock &&
        (p.n % 128 != 0 || !(p.scale_layout == ScaleLayout::block(128, 128))))
      return false;
    if (p.is_fp8() && p.scale_layout.granularity != Granularity::kBlock &&
        p.scale_layout.granularity != Granularity::kTensor && p.scale_layout.granularity != Granularity::kChannel)
      return false;
  }
  return true;
}

}  // namespace fp8lm::cuda
