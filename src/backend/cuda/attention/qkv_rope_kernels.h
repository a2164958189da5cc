// A layer's attention inputs from its fused q/k/v projection in one kernel:
// what split_columns (cuda_ops_kernels.h), head_rms_norm on q and on k (when
// the model norms them: Qwen3) and rope_qk (model_kernels.h) do in three or
// four launches, with the same bits. Each row of qkv is read once.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/attention/paged_attention.h"

namespace fp8lm::cuda {

// Where split_norm_rope_qkv also writes the new K/V: what store_kv (paged_attention.h) does
// with the same arguments, fused into the same pass where it can (the vector path), else by a
// store_kv launch right after it — either way the cache holds them when the call returns.
struct KvStore {
  const DeviceAttentionBatch* batch = nullptr;
  int num_kv_heads = 0;
  int block_size = 0;
  DeviceKvLayer layer;
};

// qkv [rows, q_cols + k_cols + v_cols] (dense BF16) into q [rows, q_cols],
// k [rows, k_cols] and v [rows, v_cols] (dense):
//   v = its columns of qkv, the bits copied (NaN payloads kept, as split_columns);
//   q, k = their columns, each head_dim-wide head normed with q_norm / k_norm
//          (float [head_dim] each; both or neither) as head_rms_norm does and
//          rounded to BF16, then rotated at positions[r] as rope_qk does.
// Bit-identical to split_columns → head_rms_norm(q) → head_rms_norm(k) →
// rope_qk: the per-element arithmetic is the same code (norm_rope_device.cuh)
// and each head's sum of squares is taken over the same lane layout in the
// same order. head_dim even, ≤ 1024; every width a multiple of it.
// With `store`, k and v (as written above) are also stored into the KV cache, bit-identical
// to store_kv after this call.
// Asynchronous on `stream`, no allocation, safe to capture in a CUDA graph;
// argument errors throw fp8lm::Error before any launch; rows = 0 launches nothing.
void split_norm_rope_qkv(const __nv_bfloat16* qkv, int64_t rows, int64_t q_cols, int64_t k_cols, int64_t v_cols,
                         int64_t head_dim, __nv_bfloat16* q, __nv_bfloat16* k, __nv_bfloat16* v, const float* q_norm,
                         const float* k_norm, float eps, const int32_t* positions, const float* inv_freq,
                         float attention_factor, cudaStream_t stream, const KvStore* store = nullptr);

}  // namespace fp8lm::cuda
