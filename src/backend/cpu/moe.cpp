#include "backend/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "backend/cpu/linear.h"
#include "common/error.h"
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
  return m;
}

void route_row(const float* logits, int64_t experts, const backend::MoeRouting& routing, int32_t* ids,
               float* weights) {
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
         const backend::MoeRouting& routing, std::span<float> out, ThreadPool* pool, KernelChoice kernels,
         MoeScratch& s) {
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
    route_row(router_logits.data() + r * num_experts, num_experts, routing, ids, w);
    for (size_t j = 0; j < k; ++j) {
      s.rows[size_t(ids[j])].push_back(r);
      s.row_weight[size_t(ids[j])].push_back(w[j]);
    }
  }

  std::fill(out.begin(), out.end(), 0.0f);
  for (int64_t e = 0; e < num_experts; ++e) {
    const std::vector<int64_t>& mine = s.rows[size_t(e)];
    if (mine.empty()) continue;
    const auto n = int64_t(mine.size());
    s.x.resize(size_t(n * h));
    for (int64_t i = 0; i < n; ++i) std::copy_n(x.data() + mine[size_t(i)] * h, h, s.x.data() + i * h);
    s.gate.resize(size_t(n * width));
    s.up.resize(size_t(n * width));
    s.act.resize(size_t(n * width));
    s.y.resize(size_t(n * h));
    const ExpertLinear &g = experts.gate[size_t(e)], &u = experts.up[size_t(e)], &d = experts.down[size_t(e)];
    linear(s.x, n, g.w, g.plan, s.gate, pool, kernels);
    linear(s.x, n, u.w, u.plan, s.up, pool, kernels);
    for (size_t i = 0; i < s.act.size(); ++i) s.act[i] = silu_mul_f32(s.gate[i], s.up[i]);
    linear(s.act, n, d.w, d.plan, s.y, pool, kernels);
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
