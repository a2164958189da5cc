// The CUDA backend's kernels of a sparse MoE block (CudaOps::moe, cuda_ops_moe.cpp runs the
// block): the routing — each row's top-k experts from its router logits, cpu::route_row's rule —
// and the combine — each row's expert outputs weighted and summed in the order the caller lists
// them (increasing expert id: cpu::moe's order, transformers' loop over the experts).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace fp8lm::cuda {

inline constexpr int kMoeMaxExperts = 1024;

// ids [rows, top_k]: each row's top_k experts by decreasing probability (the lower id first on
// ties), weights [rows, top_k] their probabilities: softmax in float32 (the row's maximum
// subtracted, expf; a warp tree for the sum instead of cpu::route_row's loop: within float32
// rounding of it), renormalized to sum 1 over the top k when `renormalize` (summed in order).
// experts in [1, kMoeMaxExperts], top_k in [1, experts]; fp8lm::Error names a bad argument.
void moe_route(const __nv_bfloat16* logits, int64_t rows, int experts, int top_k, bool renormalize, int32_t* ids,
               float* weights, cudaStream_t stream);

// The grouped form of one call's routing, for the grouped GEMV (fp8_gemv.h Fp8GemvGroups),
// all on the device (nothing comes back to the host: the step can be recorded in a graph).
// The routed pairs (row r's j-th expert) are grouped by expert, experts in increasing id;
// each expert's pairs are cut into slots of at most slot_rows pairs.
struct MoeGroups {
  int32_t* slots = nullptr;  // [1 + 3·max_slots]: count, expert[], first[], rows[] (Fp8GemvGroups)
  int max_slots = 0;         // at least moe_group_max_slots(pairs, experts, slot_rows)
  int32_t* perm = nullptr;   // [pairs]: the x row of each grouped pair
  int32_t* pos = nullptr;    // [rows, top_k]: row r's pairs' grouped positions, in increasing expert id
  float* weights = nullptr;  // [rows, top_k]: their routing weights (moe_route's), in the same order
  // Optional [experts + 1]: expert e's pairs are grouped positions [start[e], start[e + 1]) (the
  // grouped GEMM's groups, cutlass_fp8_grouped_gemm.h).
  int32_t* expert_start = nullptr;
};

// The most pairs (rows · top_k) one moe_route_group call takes (one block does the grouping).
inline constexpr int64_t kMoeGroupMaxPairs = 4096;

// The most slots `pairs` pairs over `experts` experts can need: every expert touched has one
// partial slot, and full slots hold slot_rows pairs.
int moe_group_max_slots(int64_t pairs, int experts, int slot_rows);

// Routes every row as moe_route does (the same ids and weights, a row's pairs then sorted by
// expert id) and groups the pairs into `out`. One block: 1 ≤ rows · top_k ≤ kMoeGroupMaxPairs.
void moe_route_group(const __nv_bfloat16* logits, int64_t rows, int experts, int top_k, bool renormalize,
                     int slot_rows, const MoeGroups& out, cudaStream_t stream);

// The grouping of any number of pairs (rows · top_k < 2^31) for the grouped GEMM: moe_route's
// experts and weights, each row's pairs sorted by expert id, into out.perm, out.pos, out.weights
// and out.expert_start (out.slots unused) — several kernels over the whole GPU, for the blocks
// moe_route_group's one block does not take. `scratch`: moe_route_sort_scratch_bytes on the device.
size_t moe_route_sort_scratch_bytes(int64_t pairs, int experts);
void moe_route_sort(const __nv_bfloat16* logits, int64_t rows, int experts, int top_k, bool renormalize,
                    const MoeGroups& out, void* scratch, cudaStream_t stream);

// out[r, :] = bf16(Σ_j weights[r·top_k + j] · y[pos[r·top_k + j], :]) for j = 0 … top_k − 1 in
// that order, each product rounded to float32 then added (cpu::moe's index_add), from 0.
// y: [*, cols] BF16; out: [rows, cols].
void moe_combine(const __nv_bfloat16* y, int64_t cols, const int32_t* pos, const float* weights, int64_t rows,
                 int top_k, __nv_bfloat16* out, cudaStream_t stream);

}  // namespace fp8lm::cuda
