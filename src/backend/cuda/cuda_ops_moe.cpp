// CudaOps' sparse MoE block (upload_moe_experts, moe; cuda_ops.h). Every expert is an ordinary
// CUDA linear layer (any scheme linear_plan.h plans: BF16, W8A16, W8A8 per tensor / per channel
// × per token / 128 × 128 blocks × 1 × 128 groups); three ways run them over the routed rows.
//
// Grouped GEMV (few pairs an expert, up to kMoeGroupMaxPairs: decode steps and short prefills):
// all on the device, so the block can be recorded in a step graph. One kernel routes every row
// and groups the pairs by expert into slots of at most 16 (moe_route_group); one grouped GEMV
// launch per projection runs every slot (fp8_gemv_grouped; bf16_gemv_grouped for BF16
// experts), gate/up reading the routed rows of x through the grouping's permutation (no
// gather); SiLU·mul over all pairs; the combine kernel sums each row's weighted outputs. It
// reads each touched expert's weights once per 16 of its rows: the bytes a decode step must read.
//
// Grouped GEMM (W8A8 schemes CUTLASS's grouped kernel takes, from kMoeGemmMinRows pairs an
// expert, any size): also all on the device. The grouping as above (moe_route_sort's kernels
// beyond one block's pairs), the routed rows gathered in grouped order, then one grouped FP8
// GEMM per projection over every expert (moe_experts_gemm, cutlass_fp8_grouped_gemm.h).
//
// Per expert (the rest: BF16 and W8A16 experts with many pairs an expert): the routing kernel on
// the device; the chosen ids and weights come back to the host (one synchronization a block),
// which lists each expert's rows in row order (cpu::moe's grouping) and each row's pairs in
// increasing expert id; the rows are gathered expert after expert, gate/up and down run per
// expert (the GEMV for few rows, the GEMMs for many), SiLU·mul once over all pairs, and the
// combine kernel sums each row's weighted outputs. The host round trip makes it unrecordable
// (moe_recordable).
//
// Numerics as cpu::moe (moe.h): a dynamic per-tensor activation scale is one scale for the
// whole call — gate/up's over every row of x, down's over every routed row's SwiGLU output —
// computed on the device and given to each expert's linear as its static scale; a static
// (checkpoint) input scale is the largest of the block's experts (gate and up together, down
// apart), as vLLM loads one.
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/gemv/bf16_gemv_grouped.h"
#include "backend/cuda/common/check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/cuda_ops_impl.h"
#include "backend/cuda/gemm/cutlass_fp8_grouped_gemm.h"
#include "backend/cuda/common/env_switch.h"
#include "backend/cuda/gemv/fp8_gemv.h"
#include "backend/cuda/linear_plan.h"
#include "backend/cuda/elementwise/model_kernels.h"
#include "backend/cuda/moe/moe_kernels.h"
#include "backend/cuda/quant/quant_kernels.h"
#include "common/error.h"

namespace fp8lm::cuda {
namespace {

struct MoeWeight final : backend::Weight {
  // Per expert: gate and up fused (gate's rows first) where they fuse (can_fuse), else apart.
  std::vector<std::unique_ptr<backend::Weight>> gate_up, gate, up, down;
  int64_t hidden = 0, width = 0;
  // A dynamic per-tensor activation scale (one per call, not per expert): the experts' plans
  // read these device floats as their static scales, written by moe() before each use.
  bool x_wide = false, act_wide = false;
  Fp8Format x_format = Fp8Format::kE4M3, act_format = Fp8Format::kE4M3;
  DeviceBuffer x_scale, act_scale;
  // The grouped path's per-expert device pointer tables, one per projection (gate_up or gate
  // and up, down): [codes[E] | scales[E] | bias[E]] (empty where the path does not apply).
  bool grouped = false;
  DeviceBuffer gate_up_table, gate_table, up_table, down_table;
  // The grouped GEMM's scale scheme where the experts have one (gemm_scales_of; the tables
  // above then exist), and the fewest routed pairs an expert has on average for which it runs
  // instead of the grouped GEMV (the GEMV reads each weight once per 16 rows on CUDA cores).
  std::optional<CutlassGroupedScales> gemm_scales;
  int64_t gemm_min_rows = 0;
  bool gemm_for(int64_t pairs) const { return gemm_scales && pairs >= gemm_min_rows * experts(); }
  int64_t experts() const { return int64_t(down.size()); }
};

// The scheme of one projection, as much of it as every expert of a block must share.
auto scheme_of(const weights::LinearWeight& w) {
  const ScaleLayout& l = w.scale_layout;
  return std::tuple(w.element, w.is_fp8() ? int(l.granularity) : -1, w.is_fp8() ? l.group_rows : 0,
                    w.is_fp8() ? l.group_cols : 0, int(w.activation), w.activation_group, w.activation_scale_upper_bound,
                    w.bias.empty());
}

void check_block(std::span<const weights::LinearWeight> gate, std::span<const weights::LinearWeight> up,
                 std::span<const weights::LinearWeight> down) {
  if (gate.empty() || up.size() != gate.size() || down.size() != gate.size())
    throw Error("cuda ops: an MoE block needs the same number (>= 1) of gate, up and down projections, got " +
                std::to_string(gate.size()) + ", " + std::to_string(up.size()) + ", " + std::to_string(down.size()));
  if (int64_t(gate.size()) > kMoeMaxExperts)
    throw Error("cuda ops: an MoE block of " + std::to_string(gate.size()) + " experts; at most " +
                std::to_string(kMoeMaxExperts));
  const int64_t width = gate[0].n, hidden = gate[0].k;
  const auto first = scheme_of(gate[0]);
  const std::array<std::tuple<const char*, std::span<const weights::LinearWeight>, int64_t, int64_t>, 3> kinds = {
      {{"gate", gate, width, hidden}, {"up", up, width, hidden}, {"down", down, hidden, width}}};
  for (const auto& [what, list, n, k] : kinds)
    for (size_t e = 0; e < list.size(); ++e) {
      const weights::LinearWeight& w = list[e];
      weights::validate(w);
      if (w.n != n || w.k != k)
        throw Error("cuda ops: MoE expert " + std::to_string(e) + " " + what + " is [" + std::to_string(w.n) + ", " +
                    std::to_string(w.k) + "], expert 0's gate/up/down give [" + std::to_string(n) + ", " +
                    std::to_string(k) + "]");
      if (scheme_of(w) != first)
        throw Error("cuda ops: MoE expert " + std::to_string(e) + " " + what +
                    " has another weight format, scale layout, activation quantization or bias than expert 0's "
                    "gate: every expert projection of a block must have one scheme");
    }
}

// Copies of `list` with a static input scale replaced by the largest of `groups`' (vLLM's one
// scale per block), or a dynamic per-tensor scale made static (its value written per call).
std::vector<weights::LinearWeight> prepared(std::span<const weights::LinearWeight> list, float static_scale,
                                            bool wide) {
  std::vector<weights::LinearWeight> out(list.begin(), list.end());
  for (weights::LinearWeight& w : out) {
    if (w.activation == ActivationQuant::kStaticTensor) w.input_scale = static_scale;
    if (wide) {
      w.activation = ActivationQuant::kStaticTensor;
      w.input_scale = 1.0f;  // replaced by the call's scale (the plan's pointer is redirected)
    }
  }
  return out;
}

float largest_input_scale(std::initializer_list<std::span<const weights::LinearWeight>> lists) {
  float s = 0.0f;
  for (const auto& list : lists)
    for (const weights::LinearWeight& w : list) s = std::max(s, w.input_scale);
  return s;
}

void point_static_scale_at(backend::Weight& w, const float* scale) {
  auto* l = dynamic_cast<LinearWeight*>(&w);
  if (l == nullptr) throw Error("cuda ops: MoE expert weight was not uploaded as a linear layer");
  l->plan.act_quant.static_scale = scale;
}

// The host's grouping of one call's routed pairs (cpu::moe's): each expert's rows in row order,
// expert after expert (perm: the x row of each sorted pair), and for each row its pairs'
// positions in that order and weights, in increasing expert id.
struct Grouping {
  std::vector<int64_t> start;  // per expert: its first sorted pair; start[E] = pairs
  std::vector<int32_t> perm, pos;
  std::vector<float> weight;
};

Grouping group_pairs(const int32_t* ids, const float* weights, int64_t rows, int top_k, int64_t experts) {
  Grouping g;
  const int64_t pairs = rows * top_k;
  g.start.assign(size_t(experts) + 1, 0);
  for (int64_t i = 0; i < pairs; ++i) {
    if (ids[i] < 0 || ids[i] >= experts) throw Error("cuda ops: moe routing gave expert id " + std::to_string(ids[i]));
    ++g.start[size_t(ids[i]) + 1];
  }
  for (int64_t e = 0; e < experts; ++e) g.start[size_t(e) + 1] += g.start[size_t(e)];
  std::vector<int64_t> next(g.start.begin(), g.start.end() - 1);
  g.perm.resize(size_t(pairs));
  g.pos.resize(size_t(pairs));
  g.weight.resize(size_t(pairs));
  std::vector<std::pair<int32_t, float>> row_pairs(static_cast<size_t>(top_k));
  for (int64_t r = 0; r < rows; ++r) {
    for (int j = 0; j < top_k; ++j) row_pairs[size_t(j)] = {ids[r * top_k + j], weights[r * top_k + j]};
    std::sort(row_pairs.begin(), row_pairs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (int j = 0; j < top_k; ++j) {
      const int64_t at = next[size_t(row_pairs[size_t(j)].first)]++;
      g.perm[size_t(at)] = int32_t(r);
      g.pos[size_t(r * top_k + j)] = int32_t(at);
      g.weight[size_t(r * top_k + j)] = row_pairs[size_t(j)].second;
    }
  }
  return g;
}

// A float [1] on the device: the per-tensor scale of x [rows, cols] under the dynamic rule
// (quantize_fp8_dynamic's own, codes into scratch).
void call_scale(CudaOps::Impl& m, const bf16* x, int64_t rows, int64_t cols, Fp8Format format, float* scale) {
  const CudaOps::Impl::TempScope temps(m.scratch);
  Fp8ActQuant q = Fp8ActQuant::tensor();
  q.format = format;
  auto* codes = static_cast<uint8_t*>(m.take(size_t(rows * cols)));
  quantize_fp8_dynamic(x, rows, cols, q, codes, scale, m.stream);
}

// Each row's routed outputs summed into out.
void combine(CudaOps::Impl& m, const bf16* ys, int64_t h, const MoeGroups& g, int64_t rows, int top_k, Tensor out) {
  OpTimer part(m, "  of which: combine", rows);
  moe_combine(ys, h, g.pos, g.weights, rows, top_k, B(out), m.stream);
}

// The grouped path takes FP8 experts whose plans the GEMV runs (every W8A16 / W8A8 scheme) with
// K a multiple of 16, and BF16 experts with K a multiple of 8.
bool groupable(const std::vector<std::unique_ptr<backend::Weight>>& list) {
  for (const auto& w : list) {
    const auto& l = static_cast<const LinearWeight&>(*w);
    const bool ok = l.plan.fp8 ? l.plan.gemv_max_rows > 0 && l.k % 16 == 0 : l.k % 8 == 0;
    if (!ok || reinterpret_cast<uintptr_t>(l.w.get()) % 16 != 0) return false;
  }
  return true;
}

// The grouped GEMM's scale scheme for experts like `l` (every expert of a block has one scheme):
// W8A8 E4M3 without bias, per-tensor / per-channel weights with per-tensor / per-token
// activations (kOuter) or 128 × 128 blocks with 1 × 128 groups (kBlock), in shapes it takes.
std::optional<CutlassGroupedScales> gemm_scales_of(const LinearWeight& l) {
#ifdef FP8LM_WITH_CUTLASS
  const LinearPlan& p = l.plan;
  if (!p.fp8 || p.activation == ActivationQuant::kNone || l.bias || p.act_quant.format != Fp8Format::kE4M3)
    return std::nullopt;
  const bool w_outer = p.w_layout == WeightScaleLayout::kTensor || p.w_layout == WeightScaleLayout::kChannel;
  const bool x_outer = p.x_layout == ActivationScaleLayout::kTensor || p.x_layout == ActivationScaleLayout::kToken;
  std::optional<CutlassGroupedScales> s;
  if (w_outer && x_outer) s = CutlassGroupedScales::kOuter;
  if (p.w_layout == WeightScaleLayout::kBlock128 && p.x_layout == ActivationScaleLayout::kGroup128)
    s = CutlassGroupedScales::kBlock;
  if (s && cutlass_fp8_grouped_gemm_shape_unsupported(*s, l.n, l.k).empty()) return s;
#else
  (void)l;
#endif
  return std::nullopt;
}

// [codes[E] | scales[E] | bias[E]] of one projection's experts, on the device.
DeviceBuffer pointer_table(CudaOps::Impl& m, const std::vector<std::unique_ptr<backend::Weight>>& list) {
  const size_t e = list.size();
  std::vector<const void*> host(3 * e, nullptr);
  for (size_t i = 0; i < e; ++i) {
    const auto& l = static_cast<const LinearWeight&>(*list[i]);
    host[i] = l.w.get();
    host[e + i] = l.w_scale.get();
    host[2 * e + i] = l.bias ? l.bias.get() : nullptr;
  }
  DeviceBuffer table(m.allocator, host.size() * sizeof(void*), m.stream);
  FP8LM_CUDA_CHECK(cudaMemcpyAsync(table.get(), host.data(), host.size() * sizeof(void*), cudaMemcpyHostToDevice,
                                   m.stream));
  FP8LM_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  return table;
}

// One projection of every slot (fp8_gemv_grouped): x [*, k] BF16 read through x_rows (null:
// in grouped order), y [pairs, n]. The activations quantized as the experts' plan says: by the
// GEMV while it stages them where a slot holds at most kGemvQuantizeRows rows (linear()'s
// rule), else first, over x's rows (before the gather: each row once).
void grouped_linear(CudaOps::Impl& m, const LinearWeight& first, const DeviceBuffer& table, int64_t experts,
                    const bf16* x, int64_t x_rows_count, const int32_t* x_rows, const MoeGroups& groups,
                    int64_t pairs, int64_t slot_rows, bf16* y) {
  const LinearPlan& p = first.plan;
  const auto* const* ptrs = table.as<const void*>();
  if (!p.fp8) {
    Bf16GemvGroupedArgs b;
    b.m = slot_rows, b.n = first.n, b.k = first.k;
    b.slots = groups.slots;
    b.max_slots = groups.max_slots;
    b.w = reinterpret_cast<const bf16* const*>(ptrs);
    b.bias = first.bias ? reinterpret_cast<const bf16* const*>(ptrs + 2 * experts) : nullptr;
    b.x = x;
    b.x_rows = x_rows;
    b.y = y;
    b.programmatic_launch = true;
    return bf16_gemv_grouped(b, m.stream);
  }
  Fp8GemvGroups g;
  g.slots = groups.slots;
  g.max_slots = groups.max_slots;
  g.w = reinterpret_cast<const uint8_t* const*>(ptrs);
  g.w_scale = reinterpret_cast<const float* const*>(ptrs + experts);
  g.bias = first.bias ? reinterpret_cast<const bf16* const*>(ptrs + 2 * experts) : nullptr;
  g.x_rows = x_rows;
  g.rows = pairs;
  Fp8GemvArgs a;
  a.m = slot_rows, a.n = first.n, a.k = first.k;
  a.w_layout = p.w_layout;
  a.y = y;
  a.programmatic_launch = true;
  if (p.activation == ActivationQuant::kNone) {
    a.x = x;
  } else if (slot_rows <= kGemvQuantizeRows) {
    a.x = x;
    a.quantize_x = true;
    a.x_layout = p.x_layout;
    a.x_scale = p.act_quant.static_scale;  // null: dynamic
    a.x_rule = p.act_rule;
  } else {
    const CudaOps::Impl::QuantizedInput q = m.quantize_input(p, x, x_rows_count, first.k);
    a.x_codes = q.codes;
    a.x_scale = q.scales;
    a.x_layout = p.x_layout;
  }
  m.give_gemv_workspace(a, fp8_gemv_grouped_workspace_bytes(a, g));
  fp8_gemv_grouped(a, g, m.stream);
}

}  // namespace

bool CudaOps::supports_moe() const { return true; }

// BF16 experts run grouped up to this many routed pairs an expert on average: bf16_gemv_grouped
// multiplies on CUDA cores, and at 16 an expert (Qwen3-30B-A3B at 256 rows, Mixtral at 64) the
// per-expert path's cuBLASLt GEMMs measured faster (2,199 vs 1,597 and 7,914 vs 426 decode tok/s
// on the H200; grouped 1,344 vs 478 at 4 an expert).
constexpr int64_t kBf16GroupedMaxRowsPerExpert = 8;

// Routed pairs an expert has on average from which the grouped GEMM runs the experts instead
// of the grouped GEMV (CudaOpsOptions::moe_gemm_min_rows overrides it, for tests): on the H200
// the GEMV was faster at 4 an expert (Qwen3-30B-A3B batch 64: 4,279 vs 3,952 tok/s), the GEMM
// at 16 (batch 256: 12,065 vs 10,296).
constexpr int64_t kMoeGemmMinRows = 8;

bool CudaOps::moe_recordable(const backend::Weight& experts, int64_t rows, int top_k) const {
  const auto* w = dynamic_cast<const MoeWeight*>(&experts);
  if (w == nullptr || rows < 1 || top_k < 1) return false;
  const int64_t pairs = rows * top_k;
  if (w->gemm_for(pairs)) return true;  // any size: the grouping too stays on the device
  if (!w->grouped || pairs > kMoeGroupMaxPairs) return false;
  const auto& down0 = static_cast<const LinearWeight&>(*w->down[0]);
  return down0.plan.fp8 || pairs <= kBf16GroupedMaxRowsPerExpert * w->experts();
}

std::unique_ptr<backend::Weight> CudaOps::upload_moe_experts(std::span<const weights::LinearWeight> gate,
                                                             std::span<const weights::LinearWeight> up,
                                                             std::span<const weights::LinearWeight> down) {
  check_block(gate, up, down);
  auto m = std::make_unique<MoeWeight>();
  m->width = gate[0].n;
  m->hidden = gate[0].k;
  const bool fp8 = gate[0].is_fp8();
  m->x_wide = fp8 && gate[0].activation == ActivationQuant::kDynamicTensor;
  m->act_wide = fp8 && down[0].activation == ActivationQuant::kDynamicTensor;
  m->x_format = fp8 ? gate[0].format() : Fp8Format::kE4M3;
  m->act_format = fp8 ? down[0].format() : Fp8Format::kE4M3;
  if (m->x_wide) m->x_scale = DeviceBuffer(impl_->allocator, sizeof(float), impl_->stream);
  if (m->act_wide) m->act_scale = DeviceBuffer(impl_->allocator, sizeof(float), impl_->stream);
  const float gate_up_scale = largest_input_scale({gate, up}), down_scale = largest_input_scale({down});
  const std::vector<weights::LinearWeight> g = prepared(gate, gate_up_scale, m->x_wide);
  const std::vector<weights::LinearWeight> u = prepared(up, gate_up_scale, m->x_wide);
  const std::vector<weights::LinearWeight> d = prepared(down, down_scale, m->act_wide);
  for (size_t e = 0; e < d.size(); ++e) {
    const weights::LinearWeight parts[2] = {g[e], u[e]};
    std::unique_ptr<backend::Weight> fused = upload_fused_linear(parts);
    if (fused && m->x_wide) point_static_scale_at(*fused, m->x_scale.as<float>());
    if (fused) {
      m->gate_up.push_back(std::move(fused));
    } else {
      m->gate.push_back(upload_linear(g[e]));
      m->up.push_back(upload_linear(u[e]));
      if (m->x_wide) {
        point_static_scale_at(*m->gate.back(), m->x_scale.as<float>());
        point_static_scale_at(*m->up.back(), m->x_scale.as<float>());
      }
    }
    m->down.push_back(upload_linear(d[e]));
    if (m->act_wide) point_static_scale_at(*m->down.back(), m->act_scale.as<float>());
  }
  if (!m->gate_up.empty() && !m->gate.empty())
    throw Error("cuda ops: an MoE block whose experts' gate and up fuse for some experts only");
  // FP8LM_CUDA_MOE_GROUPED=0: the per-expert path for every size (A/B in one binary).
  m->grouped = env_switch_on("FP8LM_CUDA_MOE_GROUPED") && groupable(m->down) && groupable(m->gate_up) &&
               groupable(m->gate) && groupable(m->up);
  // The grouped GEMM where every projection takes the same scheme. FP8LM_CUDA_MOE_GEMM=0: never
  // (the grouped GEMV and the per-expert path, as before it; A/B in one binary).
  const auto& down0 = static_cast<const LinearWeight&>(*m->down[0]);
  const auto& in0 = static_cast<const LinearWeight&>(m->gate_up.empty() ? *m->gate[0] : *m->gate_up[0]);
  if (env_switch_on("FP8LM_CUDA_MOE_GEMM") && gemm_scales_of(down0) && gemm_scales_of(down0) == gemm_scales_of(in0)) {
    m->gemm_scales = gemm_scales_of(down0);
    m->gemm_min_rows = impl_->options.moe_gemm_min_rows.value_or(kMoeGemmMinRows);
  }
  if (m->grouped || m->gemm_scales) {
    if (!m->gate_up.empty()) m->gate_up_table = pointer_table(*impl_, m->gate_up);
    if (!m->gate.empty()) m->gate_table = pointer_table(*impl_, m->gate);
    if (!m->up.empty()) m->up_table = pointer_table(*impl_, m->up);
    m->down_table = pointer_table(*impl_, m->down);
  }
  return m;
}

void CudaOps::moe(Tensor x, Tensor router_logits, const backend::Weight& experts, const backend::MoeRouting& routing,
                  Tensor out) {
  const MoeWeight& w = as<MoeWeight>(experts, "MoE experts");
  const int64_t num_experts = w.experts(), h = w.hidden, width = w.width, rows = x.rows;
  require_shape(x, rows, h, "moe input");
  require_shape(router_logits, rows, num_experts, "moe router logits");
  require_shape(out, rows, h, "moe output");
  if (routing.top_k < 1 || routing.top_k > num_experts)
    throw Error("cuda ops: MoE top_k " + std::to_string(routing.top_k) + " is not in [1, " +
                std::to_string(num_experts) + "]");
  // DeepSeek-V3's router (sigmoid, groups, correction bias, routed scaling) has no kernel yet; its
  // model is refused at load for MLA anyway (issue 45), this keeps the op honest on its own.
  if (routing.scoring != MoeScoring::kSoftmax || routing.correction_bias != nullptr || routing.num_groups != 1 ||
      routing.routed_scaling != 1.0f)
    throw Error("cuda ops: MoE routing other than softmax top-k (DeepSeek-V3's sigmoid / grouped / biased / scaled "
                "routing) is not implemented on CUDA yet (issue 45)");
  Impl& m = *impl_;
  if (rows == 0) return;
  if (moe_recordable(experts, rows, routing.top_k)) return moe_grouped(x, router_logits, experts, routing, out);
  if (m.capturing)
    throw Error("cuda ops: moe inside a recorded step (its experts' row counts come back to the host)");
  OpTimer timer(m, "moe", rows);
  const Impl::TempScope temps(m.scratch);
  const int k = routing.top_k;
  const int64_t pairs = rows * k;

  // 1. Route on the device; the choices come back to the host.
  auto* routed = static_cast<int32_t*>(m.take(size_t(pairs) * 8));  // [ids | weights]
  auto* route_w = reinterpret_cast<float*>(routed + pairs);
  moe_route(B(router_logits), rows, int(num_experts), k, routing.renormalize, routed, route_w, m.stream);
  auto* host = static_cast<int32_t*>(m.moe_staging(size_t(pairs) * 12));
  FP8LM_CUDA_CHECK(cudaMemcpyAsync(host, routed, size_t(pairs) * 8, cudaMemcpyDeviceToHost, m.stream));
  FP8LM_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  const Grouping g = group_pairs(host, reinterpret_cast<const float*>(host + pairs), rows, k, num_experts);

  // 2. The grouping goes up: [perm | pos | weights], through the same pinned buffer (the next
  // block's download comes after this copy on the stream).
  auto* meta = static_cast<int32_t*>(m.take(size_t(pairs) * 12));
  std::memcpy(host, g.perm.data(), size_t(pairs) * 4);
  std::memcpy(host + pairs, g.pos.data(), size_t(pairs) * 4);
  std::memcpy(host + 2 * pairs, g.weight.data(), size_t(pairs) * 4);
  FP8LM_CUDA_CHECK(cudaMemcpyAsync(meta, host, size_t(pairs) * 12, cudaMemcpyHostToDevice, m.stream));

  // 3. Each expert's rows, gathered expert after expert; gate/up per expert, SiLU·mul over all.
  auto* xs = static_cast<bf16*>(m.take(size_t(pairs * h) * 2));
  cuda::gather_rows(B(x), h, meta, pairs, xs, m.stream, rows);
  if (w.x_wide) call_scale(m, B(x), rows, h, w.x_format, w.x_scale.as<float>());
  auto* act = static_cast<bf16*>(m.take(size_t(pairs * width) * 2));
  const bool fused = !w.gate_up.empty();
  auto* hbuf = static_cast<bf16*>(m.take(size_t(pairs * 2 * width) * 2));
  for (int64_t e = 0; e < num_experts; ++e) {
    const int64_t first = g.start[size_t(e)], n = g.start[size_t(e) + 1] - first;
    if (n == 0) continue;
    const Tensor xe{xs + first * h, n, h};
    if (fused) {
      linear(xe, *w.gate_up[size_t(e)], Tensor{hbuf + first * 2 * width, n, 2 * width});
    } else {
      linear(xe, *w.gate[size_t(e)], Tensor{hbuf + first * width, n, width});
      linear(xe, *w.up[size_t(e)], Tensor{hbuf + (pairs + first) * width, n, width});
    }
  }
  if (fused)
    silu_mul_fused(Tensor{hbuf, pairs, 2 * width}, Tensor{act, pairs, width});
  else
    silu_mul(Tensor{hbuf, pairs, width}, Tensor{hbuf + pairs * width, pairs, width}, Tensor{act, pairs, width});

  // 4. Down per expert, then each row's weighted outputs summed in increasing expert id.
  if (w.act_wide) call_scale(m, act, pairs, width, w.act_format, w.act_scale.as<float>());
  auto* ys = static_cast<bf16*>(m.take(size_t(pairs * h) * 2));
  for (int64_t e = 0; e < num_experts; ++e) {
    const int64_t first = g.start[size_t(e)], n = g.start[size_t(e) + 1] - first;
    if (n == 0) continue;
    linear(Tensor{act + first * width, n, width}, *w.down[size_t(e)], Tensor{ys + first * h, n, h});
  }
  moe_combine(ys, h, meta + pairs, reinterpret_cast<const float*>(meta + 2 * pairs), rows, k, B(out), m.stream);
}

void CudaOps::moe_grouped(Tensor x, Tensor router_logits, const backend::Weight& experts,
                          const backend::MoeRouting& routing, Tensor out) {
  const MoeWeight& w = as<MoeWeight>(experts, "MoE experts");
  Impl& m = *impl_;
  const int64_t num_experts = w.experts(), h = w.hidden, width = w.width, rows = x.rows;
  OpTimer timer(m, "moe grouped", rows);
  const Impl::TempScope temps(m.scratch);
  const int k = routing.top_k;
  const int64_t pairs = rows * k;
  // An expert takes at most one pair per row: a slot holds at most min(rows, 16) rows.
  const int64_t slot_rows = std::min<int64_t>(rows, kMaxGemvRows);
  const bool gemm = w.gemm_for(pairs);
  MoeGroups g;
  g.perm = static_cast<int32_t*>(m.take(size_t(pairs) * 4));
  g.pos = static_cast<int32_t*>(m.take(size_t(pairs) * 4));
  g.weights = static_cast<float*>(m.take(size_t(pairs) * 4));
  if (gemm) g.expert_start = static_cast<int32_t*>(m.take(size_t(num_experts + 1) * 4));
  if (gemm && pairs > kMoeGroupMaxPairs) {
    // More pairs than one block groups: the GEMM needs no slots.
    OpTimer part(m, "  of which: route + group", rows);
    moe_route_sort(B(router_logits), rows, int(num_experts), k, routing.renormalize, g,
                   m.take(moe_route_sort_scratch_bytes(pairs, int(num_experts))), m.stream);
  } else {
    g.max_slots = moe_group_max_slots(pairs, int(num_experts), int(kMaxGemvRows));
    g.slots = static_cast<int32_t*>(m.take(size_t(1 + 3 * g.max_slots) * 4));
    OpTimer part(m, "  of which: route + group", rows);
    moe_route_group(B(router_logits), rows, int(num_experts), k, routing.renormalize, int(kMaxGemvRows), g,
                    m.stream);
  }
  if (gemm) {
    // The grouped GEMM over the routed rows of x in grouped order.
    auto* xs = static_cast<bf16*>(m.take(size_t(pairs * h) * 2));
    cuda::gather_rows(B(x), h, g.perm, pairs, xs, m.stream, rows);
    if (w.x_wide) call_scale(m, B(x), rows, h, w.x_format, w.x_scale.as<float>());
    auto* ys = static_cast<bf16*>(m.take(size_t(pairs * h) * 2));
    moe_experts_gemm(experts, xs, pairs, g.expert_start, ys);
    return combine(m, ys, h, g, rows, k, out);
  }

  // Gate/up over the routed rows of x (through perm), SiLU·mul over all pairs.
  if (w.x_wide) call_scale(m, B(x), rows, h, w.x_format, w.x_scale.as<float>());
  auto* act = static_cast<bf16*>(m.take(size_t(pairs * width) * 2));
  auto* hbuf = static_cast<bf16*>(m.take(size_t(pairs * 2 * width) * 2));
  const auto& first = [](const auto& list) -> const LinearWeight& { return static_cast<const LinearWeight&>(*list[0]); };
  if (!w.gate_up.empty()) {
    {
      OpTimer part(m, "  of which: gate_up", rows);
      grouped_linear(m, first(w.gate_up), w.gate_up_table, num_experts, B(x), rows, g.perm, g, pairs, slot_rows,
                     hbuf);
    }
    silu_mul_fused(Tensor{hbuf, pairs, 2 * width}, Tensor{act, pairs, width});
  } else {
    {
      OpTimer part(m, "  of which: gate, up", rows);
      grouped_linear(m, first(w.gate), w.gate_table, num_experts, B(x), rows, g.perm, g, pairs, slot_rows, hbuf);
      grouped_linear(m, first(w.up), w.up_table, num_experts, B(x), rows, g.perm, g, pairs, slot_rows,
                     hbuf + pairs * width);
    }
    silu_mul(Tensor{hbuf, pairs, width}, Tensor{hbuf + pairs * width, pairs, width}, Tensor{act, pairs, width});
  }

  // Down over the pairs in grouped order, then each row's weighted outputs in increasing expert id.
  if (w.act_wide) call_scale(m, act, pairs, width, w.act_format, w.act_scale.as<float>());
  auto* ys = static_cast<bf16*>(m.take(size_t(pairs * h) * 2));
  {
    OpTimer part(m, "  of which: down", rows);
    grouped_linear(m, first(w.down), w.down_table, num_experts, act, pairs, nullptr, g, pairs, slot_rows, ys);
  }
  combine(m, ys, h, g, rows, k, out);
}

}  // namespace fp8lm::cuda

namespace fp8lm::cuda {

// The experts as grouped GEMMs (cutlass_fp8_grouped_gemm.h) over the routed pairs in grouped
// order — xs [pairs, hidden] BF16, expert e's pairs at rows [start[e], start[e + 1]) (device) —
// into ys [pairs, hidden]: each projection's input quantized once over every pair (as the
// experts' plan says; a dynamic per-tensor scale is the call's, written before), gate/up, SiLU·mul,
// down. Capturable: nothing comes back to the host.
void CudaOps::moe_experts_gemm(const backend::Weight& experts, const void* x_grouped, int64_t pairs,
                               const int32_t* start, void* y_grouped) {
#ifdef FP8LM_WITH_CUTLASS
  const auto* xs = static_cast<const bf16*>(x_grouped);
  auto* ys = static_cast<bf16*>(y_grouped);
  const MoeWeight& w = as<MoeWeight>(experts, "MoE experts");
  Impl& m = *impl_;
  const Impl::TempScope temps(m.scratch);
  const int64_t num_experts = w.experts(), width = w.width;
  const auto project = [&](const std::vector<std::unique_ptr<backend::Weight>>& list, const DeviceBuffer& table,
                           const bf16* in, bf16* out) {
    const auto& first = static_cast<const LinearWeight&>(*list[0]);
    const LinearPlan& p = first.plan;
    const Impl::QuantizedInput q = m.quantize_input(p, in, pairs, first.k);
    CutlassFp8GroupedGemmArgs a;
    a.scales = *w.gemm_scales;
    a.groups = int(num_experts);
    a.rows = pairs, a.n = first.n, a.k = first.k;
    a.group_start = start;
    a.x = q.codes;
    a.x_scale = q.scales;
    a.x_scale_per_row = p.x_layout != ActivationScaleLayout::kTensor;
    const auto* const* ptrs = table.as<const void*>();
    a.w = reinterpret_cast<const uint8_t* const*>(ptrs);
    a.w_scale = reinterpret_cast<const float* const*>(ptrs + num_experts);
    a.w_scale_per_channel = p.w_layout != WeightScaleLayout::kTensor;
    a.y = out;
    const size_t bytes = cutlass_fp8_grouped_gemm_workspace_bytes(a);
    cutlass_fp8_grouped_gemm(a, m.take(bytes), bytes, m.stream);
  };
  auto* act = static_cast<bf16*>(m.take(size_t(pairs * width) * 2));
  auto* hbuf = static_cast<bf16*>(m.take(size_t(pairs * 2 * width) * 2));
  if (!w.gate_up.empty()) {
    {
      OpTimer part(m, "  of which: gate_up gemm", pairs);
      project(w.gate_up, w.gate_up_table, xs, hbuf);
    }
    silu_mul_fused(Tensor{hbuf, pairs, 2 * width}, Tensor{act, pairs, width});
  } else {
    {
      OpTimer part(m, "  of which: gate, up gemm", pairs);
      project(w.gate, w.gate_table, xs, hbuf);
      project(w.up, w.up_table, xs, hbuf + pairs * width);
    }
    silu_mul(Tensor{hbuf, pairs, width}, Tensor{hbuf + pairs * width, pairs, width}, Tensor{act, pairs, width});
  }
  if (w.act_wide) call_scale(m, act, pairs, width, w.act_format, w.act_scale.as<float>());
  OpTimer part(m, "  of which: down gemm", pairs);
  project(w.down, w.down_table, act, ys);
#else
  (void)experts, (void)x_grouped, (void)pairs, (void)start, (void)y_grouped;
  throw Error("cuda ops: the grouped MoE GEMM needs a build with CUTLASS");
#endif
}

}  // namespace fp8lm::cuda
