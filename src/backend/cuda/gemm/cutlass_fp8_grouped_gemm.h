// Grouped FP8 GEMM through CUTLASS (issue 20): one launch of Hopper's ptr-array ("grouped")
// warp-specialized kernel multiplies every group of rows of x by its own weight — the routed
// pairs of an MoE block in grouped order, group g being expert g's rows:
//
//   y[r, j] = bf16(Σ_k x[r, k] · w_g[j, k] · scales)   for start[g] ≤ r < start[g + 1]
//
// x: E4M3 [rows, k] row-major, each w_g E4M3 [n, k] row-major (a linear layer's weight as
// stored, through a device table of pointers), y BF16 [rows, n]. The groups' row ranges stay on
// the device (group_start): a kernel of this call turns them into CUTLASS's per-group problem
// sizes and pointers, so the call needs no host round trip and can be recorded in a graph.
// Two scale schemes, as the dense CUTLASS GEMM has them (cutlass_fp8_gemm.h):
//   kOuter: x per row (or one scale), w per channel (or one): the epilogue computes
//           ((acc · x_scale[r]) · w_scale[j]), each product rounded in float32, then BF16;
//   kBlock: x in 1 × 128 groups ([rows][cdiv(k, 128)], fp8lm's layout), w in 128 × 128 blocks
//           ([cdiv(n, 128)][cdiv(k, 128)], fp8lm's layout): each 128-wide K block's partial sum
//           is added times x_scale · w_scale in the mainloop (CUTLASS's FP8 blockwise schedule,
//           reading both grids K-major, so no transposition).
// 128 × 128 × 128 tiles, the cooperative schedule, a persistent grid over every group's tiles.
// Built when the CUTLASS headers are found (FP8LM_WITH_CUTLASS).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/cuda/gemm/cutlass_fp8_grouped_gemm_args.h"

namespace fp8lm::cuda {

// Empty where the scheme takes weights of n × k (the shape rules below); else why not.
std::string cutlass_fp8_grouped_gemm_shape_unsupported(CutlassGroupedScales scales, int64_t n, int64_t k);

// Empty where the call takes these arguments; else what is wrong (k a multiple of 16 and n of 8
// — TMA's 16-byte rows — and, for kBlock, both multiples of 128; 16-byte aligned x and y; sizes
// below 2^31; at least one group).
std::string cutlass_fp8_grouped_gemm_unsupported(const CutlassFp8GroupedGemmArgs& a);

// Device scratch the call needs: the per-group arrays and CUTLASS's own.
size_t cutlass_fp8_grouped_gemm_workspace_bytes(const CutlassFp8GroupedGemmArgs& a);

// Runs on `stream` (capturable); throws fp8lm::Error naming the problem for arguments it does not
// take, or for too small a workspace.
void cutlass_fp8_grouped_gemm(const CutlassFp8GroupedGemmArgs& a, void* workspace, size_t workspace_bytes,
                              cudaStream_t stream);

}  // namespace fp8lm::cuda
