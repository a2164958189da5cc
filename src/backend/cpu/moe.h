// The CPU backend's sparse MoE block (Ops::moe): each row's experts picked
// from its router logits (backend::MoeRouting), the rows of each expert
// gathered and run through that expert's SwiGLU MLP with the ordinary CPU
// linear layer (any scheme it plans), and the weighted outputs added into
// each row in increasing expert order — transformers' loop over the experts,
// so the float32 rounding is the same.
//
// FP8 experts (any scheme the CPU linear plans) follow vLLM's fused MoE where
// an activation scale spans more than a row, so that the GPU's grouped GEMMs
// can match this reference: a dynamic per-tensor scale is one scale for the
// whole call — gate/up's over every row of x, down's over every routed row's
// SwiGLU output — not one per expert; a static (checkpoint) input scale is the
// largest of the block's experts (gate and up together, down apart), as vLLM
// loads one. Every other step is row-independent, so with row-wise schemes
// (per token, per group, weight-only, static) a row's result does not depend
// on its batch.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/cpu/linear_plan.h"
#include "backend/ops.h"
#include "common/thread_pool.h"
#include "numerics/kernel_choice.h"
#include "weights/linear_weight.h"

namespace fp8lm::cpu {

struct ExpertLinear {
  weights::LinearWeight w;
  LinearPlan plan;
};

// One MoE block's experts, expert e at index e of each vector.
struct MoeExperts {
  std::vector<ExpertLinear> gate, up, down;
  int64_t hidden = 0, width = 0;  // H (gate/up input, down output) and I (expert width)
};

// Validates and plans the experts: every expert the same [I, H] / [H, I]
// shapes and one scheme for the whole block (element type, weight scale
// layout, activation quantization: what a grouped GEMM over the experts
// needs), each refused by name; static input scales replaced by the block's
// largest (see the file comment).
MoeExperts plan_moe_experts(std::span<const weights::LinearWeight> gate, std::span<const weights::LinearWeight> up,
                            std::span<const weights::LinearWeight> down);

// One row's routing: ids[0..top_k) by decreasing probability (the lower id
// first on ties) and their weights, from `experts` router logits. With
// sigmoid scoring (DeepSeek-V3), as backend::MoeRouting says: `correction_bias`
// (one value per expert, or empty) added for the choice only, groups, routed scaling.
void route_row(const float* logits, int64_t experts, const backend::MoeRouting& routing, int32_t* ids,
               float* weights, std::span<const float> correction_bias = {});

// Buffers a call reuses (grown, never shrunk).
struct MoeScratch {
  std::vector<int32_t> ids;
  std::vector<float> weights, x, gate, up, y;
  std::vector<float> act;                      // every expert's SwiGLU rows, expert after expert
  std::vector<int64_t> act_start;              // per expert: its first row in act
  std::vector<std::vector<int64_t>> rows;    // per expert: the rows routed to it, in order
  std::vector<std::vector<float>> row_weight;  // per expert: those rows' weights
};

// out[rows, H] = the MoE block of x[rows, H] (see the file comment).
void moe(std::span<const float> x, int64_t rows, std::span<const float> router_logits, const MoeExperts& experts,
         const backend::MoeRouting& routing, std::span<const float> correction_bias, std::span<float> out,
         ThreadPool* pool, KernelChoice kernels, MoeScratch& scratch);

}  // namespace fp8lm::cpu
