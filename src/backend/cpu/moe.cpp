#include "backend/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string>
#include <tuple>
#include <utility>

#include "backend/cpu/linear.h"
#include "common/error.h"
#include "numerics/quantize.h"
#include "numerics/silu.h"

namespace fp8lm::cpu {
namespace {

std::vector<ExpertLinear> plan_all(std::span<const weights::LinearWeight> ws, int64_t n, int64_t k,
                                   const char* what) {
  std::vector<ExpertLinear> out;
  out.reserve(ws.size());
  for (size_t e = 0; e < ws.size(); ++e) {
    if (ws[e].n != n || ws[e].k != k)
      throw Error("cpu ops: MoE expert " + std::to_string(e) + " " + what + " is [" + std::to_string(ws[e].n) + ", " +
                  std::to_string(ws[e].k) + "], expert 0's gate/up/down give [" + std::to_string(n) + ", " +
                  std::to_string(k) + "]");
    out.push_back({ws[e], plan_linear(ws[e])});  // plan_linear validates
  }
  return out;
}

// Every expert of a block must run the same computation (what a grouped GEMM
// over the experts needs, and what vLLM's fused MoE loads): the plans may
// differ only in a static input scale, which plan_moe_experts then unifies.
bool same_scheme(const LinearPlan& a, const LinearPlan& b) {
  const auto layout = [](const ScaleLayout& l) { return std::tuple(l.granularity, l.group_rows, l.group_cols); };
  if (a.path != b.path || a.weight != b.weight || layout(a.weight_scales) != layout(b.weight_scales) ||
      a.x_scale != b.x_scale || a.x_scale_cap != b.x_scale_cap ||
      a.x_quant.has_value() != b.x_quant.has_value())
    return false;
  return !a.x_quant || layout(a.x_quant->layout) == layout(b.x_quant->layout);
}

void check_one_scheme(const MoeExperts& m) {
  const LinearPlan& first = m.gate[0].plan;
  const std::pair<const char*, const std::vector<ExpertLinear>*> kinds[] = {
      {"gate", &m.gate}, {"up", &m.up}, {"down", &m.down}};
  for (const auto& [what, experts] : kinds)
    for (size_t e = 0; e < experts->size(); ++e)
      if (!same_scheme((*experts)[e].plan, first))
        throw Error("cpu ops: MoE expert " + std::to_string(e) + " " + what + " runs as '" +
                    (*experts)[e].plan.describe() + "', expert 0 gate as '" + first.describe() +
                    "': every expert projection of a block must have one quantization scheme");
}

// A static input scale: the largest of the experts', as vLLM keeps one per
// layer for w13 (gate and up) and one for w2 (down).
void unify_static_scale(std::initializer_list<std::vector<ExpertLinear>*> groups) {
  float largest = 0.0f;
  for (const std::vector<ExpertLinear>* g : groups)
    for (const ExpertLinear& x : *g) largest = std::max(largest, x.plan.x_static_scale);
  for (std::vector<ExpertLinear>* g : groups)
    for (ExpertLinear& x : *g) x.plan.x_static_scale = largest;
}

// True when `p` quantizes its input with one dynamic scale per call: in an MoE
// block that call is the whole block (see moe.h), so the scale is computed once
// over all its rows and each expert's linear runs with it as a fixed scale.
bool call_wide_scale(const LinearPlan& p) {
  return p.path == LinearPlan::Path::kW8A8 && p.x_scale == LinearPlan::XScale::kDynamic &&
         p.x_quant->layout.granularity == Granularity::kTensor;
}

// `p` with its per-tensor scale fixed to the one of all `rows` rows of x (the
// dynamic quantizer is compute_scales then quantize_static, so the codes are
// those the dynamic path would give over the same rows).
LinearPlan fixed_scale_plan(LinearPlan p, std::span<const float> x, int64_t rows, int64_t cols, KernelChoice kernels) {
  p.x_static_scale = compute_scales(MatrixView::f32(x.data(), rows, cols), *p.x_quant, kernels).at(0);
  p.x_scale = LinearPlan::XScale::kStatic;
  return p;
}

}  // namespace

MoeExperts plan_moe_experts(std::span<const weights::LinearWeight> gate, std::span<const weights::LinearWeight> up,
                            std::span<const weights::LinearWeight> down) {
  if (gate.empty() || up.size() != gate.size() || down.size() != gate.size())
    throw Error("cpu ops: an MoE block needs the same number (≥ 1) of gate, up and down projections, got " +
                std::to_string(gate.size()) + ", " + std::to_string(up.size()) + ", " + std::to_string(down.size()));
  MoeExperts m;
  m.width = gate[0].n;
  m.hidden = gate[0].k;
  m.gate = plan_all(gate, m.width, m.hidden, "gate");
  m.up = plan_all(up, m.width, m.hidden, "up");
  m.down = plan_all(down, m.hidden, m.width, "down");
  check_one_scheme(m);
  if (m.gate[0].plan.x_scale == LinearPlan::XScale::kStatic) {
    unify_static_scale({&m.gate, &m.up});
    unify_static_scale({&m.down});
  }
  return m;
}

namespace {

// The index of the largest of values[0..n) not yet taken (the lower index on ties; -inf never
// wins over a finite value but may be taken last), or -1 when all are taken.
int32_t best_untaken(const float* values, int64_t n, const std::vector<bool>& taken) {
  int32_t best = -1;
  for (int64_t e = 0; e < n; ++e)
    if (!taken[size_t(e)] && (best < 0 || values[e] > values[best])) best = int32_t(e);
  return best;
}

// DeepSeek-V3's router (transformers' DeepseekV3TopkRouter, noaux_tc), in float32.
void route_row_grouped(const float* logits, int64_t experts, const backend::MoeRouting& routing, int32_t* ids,
                       float* weights, std::span<const float> bias) {
  const int64_t groups = routing.num_groups, per_group = experts / groups;
  if (groups < 1 || experts % groups != 0 || per_group < 2 || routing.topk_groups < 1 ||
      routing.topk_groups > groups || routing.topk_groups * per_group < routing.top_k)
    throw Error("cpu ops: MoE groups (" + std::to_string(groups) + " groups, top " +
                std::to_string(routing.topk_groups) + ") do not fit " + std::to_string(experts) + " experts, top-" +
                std::to_string(routing.top_k));
  std::vector<float> score(static_cast<size_t>(experts)), choice(static_cast<size_t>(experts));
  for (int64_t e = 0; e < experts; ++e) {
    score[size_t(e)] = 1.0f / (1.0f + std::exp(-logits[e]));
    choice[size_t(e)] = bias.empty() ? score[size_t(e)] : score[size_t(e)] + bias[size_t(e)];
  }
  // A group ranks by the sum of its two best choice scores; the best topk_groups stay eligible.
  std::vector<float> group_score(static_cast<size_t>(groups));
  for (int64_t g = 0; g < groups; ++g) {
    const float* c = choice.data() + g * per_group;
    std::vector<bool> taken(static_cast<size_t>(per_group), false);
    const int32_t first = best_untaken(c, per_group, taken);
    taken[size_t(first)] = true;
    const int32_t second = best_untaken(c, per_group, taken);
    group_score[size_t(g)] = c[first] + c[second];
  }
  std::vector<bool> group_out(static_cast<size_t>(groups), false);
  for (int k = 0; k < routing.topk_groups; ++k)
    group_out[size_t(best_untaken(group_score.data(), groups, group_out))] = true;
  // Experts of the groups not chosen are out of the running (transformers masks them to -inf).
  std::vector<bool> taken(static_cast<size_t>(experts), false);
  for (int64_t e = 0; e < experts; ++e) taken[size_t(e)] = !group_out[size_t(e / per_group)];
  for (int k = 0; k < routing.top_k; ++k) {
    const int32_t best = best_untaken(choice.data(), experts, taken);
    taken[size_t(best)] = true;
    ids[k] = best;
    weights[k] = score[size_t(best)];  // the unbiased score weighs the expert
  }
  if (routing.renormalize) {
    float total = 0.0f;
    for (int k = 0; k < routing.top_k; ++k) total += weights[k];
    total += 1e-20f;
    for (int k = 0; k < routing.top_k; ++k) weights[k] /= total;
  }
  for (int k = 0; k < routing.top_k; ++k) weights[k] *= routing.routed_scaling;
}

}  // namespace

void route_row(const float* logits, int64_t experts, const backend::MoeRouting& routing, int32_t* ids,
               float* weights, std::span<const float> correction_bias) {
  if (routing.scoring == MoeScoring::kSigmoid)
    return route_row_grouped(logits, experts, routing, ids, weights, correction_bias);
  if (!correction_bias.empty()) throw Error("cpu ops: a correction bias belongs to sigmoid routing");
  // Softmax in float32 as torch computes it (max subtracted first); the last
  // ulp may differ from torch's vectorised exp, which the logits tolerance
  // covers — and the fixtures check that no token's k-th and (k+1)-th
  // probabilities are close enough for such an ulp to change the choice.
  float max = logits[0];
  for (int64_t e = 1; e < experts; ++e) max = std::fmax(max, logits[e]);
  std::vector<float> p(static_cast<size_t>(experts));
  float sum = 0.0f;
  for (int64_t e = 0; e < experts; ++e) {
    p[size_t(e)] = std::exp(logits[e] - max);
    sum += p[size_t(e)];
  }
  for (float& v : p) v /= sum;
  // Top-k by selection: k is small (2 to 8) and this keeps torch.topk's order
  // (largest first) with a fixed rule for ties (the lower expert id).
  for (int k = 0; k < routing.top_k; ++k) {
    int32_t best = -1;
    for (int64_t e = 0; e < experts; ++e) {
      bool taken = false;
      for (int j = 0; j < k; ++j) taken = taken || ids[j] == e;
      if (!taken && (best < 0 || p[size_t(e)] > p[size_t(best)])) best = int32_t(e);
    }
    ids[k] = best;
    weights[k] = p[size_t(best)];
  }
  if (routing.renormalize) {
    float total = 0.0f;
    for (int k = 0; k < routing.top_k; ++k) total += weights[k];
    for (int k = 0; k < routing.top_k; ++k) weights[k] /= total;
  }
}

void moe(std::span<const float> x, int64_t rows, std::span<const float> router_logits, const MoeExperts& experts,
         const backend::MoeRouting& routing, std::span<const float> correction_bias, std::span<float> out,
         ThreadPool* pool, KernelChoice kernels, MoeScratch& s) {
  const auto num_experts = int64_t(experts.gate.size());
  const int64_t h = experts.hidden, width = experts.width;
  if (routing.top_k < 1 || routing.top_k > num_experts)
    throw Error("cpu ops: MoE top_k " + std::to_string(routing.top_k) + " is not in [1, " +
                std::to_string(num_experts) + "]");
  if (x.size() != size_t(rows * h) || out.size() != size_t(rows * h) ||
      router_logits.size() != size_t(rows * num_experts))
    throw Error("cpu ops: MoE block of " + std::to_string(num_experts) + " experts (hidden " + std::to_string(h) +
                ") given tensors of the wrong size for " + std::to_string(rows) + " rows");

  // Route every row, then list each expert's rows in row order.
  const auto k = size_t(routing.top_k);
  s.ids.resize(size_t(rows) * k);
  s.weights.resize(size_t(rows) * k);
  s.rows.resize(size_t(num_experts));
  s.row_weight.resize(size_t(num_experts));
  for (int64_t e = 0; e < num_experts; ++e) s.rows[size_t(e)].clear(), s.row_weight[size_t(e)].clear();
  for (int64_t r = 0; r < rows; ++r) {
    int32_t* ids = s.ids.data() + size_t(r) * k;
    float* w = s.weights.data() + size_t(r) * k;
    route_row(router_logits.data() + r * num_experts, num_experts, routing, ids, w, correction_bias);
    for (size_t j = 0; j < k; ++j) {
      s.rows[size_t(ids[j])].push_back(r);
      s.row_weight[size_t(ids[j])].push_back(w[j]);
    }
  }

  std::fill(out.begin(), out.end(), 0.0f);
  if (rows == 0) return;
  // Pass 1: each expert's gate/up over its rows, the SwiGLU rows stored expert
  // after expert, so that down's input is whole before a per-call scale is taken.
  const bool x_wide = call_wide_scale(experts.gate[0].plan);
  const LinearPlan gate_plan = x_wide ? fixed_scale_plan(experts.gate[0].plan, x, rows, h, kernels) : LinearPlan{};
  s.act_start.assign(size_t(num_experts) + 1, 0);
  for (int64_t e = 0; e < num_experts; ++e)
    s.act_start[size_t(e) + 1] = s.act_start[size_t(e)] + int64_t(s.rows[size_t(e)].size());
  s.act.resize(size_t(s.act_start.back() * width));
  for (int64_t e = 0; e < num_experts; ++e) {
    const std::vector<int64_t>& mine = s.rows[size_t(e)];
    if (mine.empty()) continue;
    const auto n = int64_t(mine.size());
    s.x.resize(size_t(n * h));
    for (int64_t i = 0; i < n; ++i) std::copy_n(x.data() + mine[size_t(i)] * h, h, s.x.data() + i * h);
    s.gate.resize(size_t(n * width));
    s.up.resize(size_t(n * width));
    const ExpertLinear &g = experts.gate[size_t(e)], &u = experts.up[size_t(e)];
    // One fixed scale for all experts: the plans differ only in it (check_one_scheme).
    linear(s.x, n, g.w, x_wide ? gate_plan : g.plan, s.gate, pool, kernels);
    linear(s.x, n, u.w, x_wide ? gate_plan : u.plan, s.up, pool, kernels);
    float* act = s.act.data() + s.act_start[size_t(e)] * width;
    for (size_t i = 0; i < s.gate.size(); ++i) act[i] = silu_mul_f32(s.gate[i], s.up[i]);
  }

  // Pass 2: down, and the weighted outputs added in increasing expert order.
  const bool act_wide = call_wide_scale(experts.down[0].plan);
  const LinearPlan down_plan =
      act_wide ? fixed_scale_plan(experts.down[0].plan, s.act, s.act_start.back(), width, kernels) : LinearPlan{};
  for (int64_t e = 0; e < num_experts; ++e) {
    const std::vector<int64_t>& mine = s.rows[size_t(e)];
    if (mine.empty()) continue;
    const auto n = int64_t(mine.size());
    s.y.resize(size_t(n * h));
    const ExpertLinear& d = experts.down[size_t(e)];
    const std::span<const float> act(s.act.data() + s.act_start[size_t(e)] * width, size_t(n * width));
    linear(act, n, d.w, act_wide ? down_plan : d.plan, s.y, pool, kernels);
    // transformers: out.index_add_(rows, y · p), the product rounded, then added.
    for (int64_t i = 0; i < n; ++i) {
      const float p = s.row_weight[size_t(e)][size_t(i)];
      float* o = out.data() + mine[size_t(i)] * h;
      const float* y = s.y.data() + i * h;
      for (int64_t c = 0; c < h; ++c) {
        const float term = y[c] * p;
        o[c] += term;
      }
    }
  }
}

}  // namespace fp8lm::cpu
