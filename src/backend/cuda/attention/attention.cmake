# Attention over the paged KV cache (paged_attention.h): the K/V stores, the tensor-core prefill
# kernel, the decode kernels (paged_attention_decode.cu: key-split; _pairs.cu: warp per
# (sequence, KV head)), and the fused q/k/v split + norm + RoPE + K/V store (qkv_rope_kernels.h).
target_sources(fp8lm_cuda PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/paged_attention.cu
  ${CMAKE_CURRENT_LIST_DIR}/paged_attention_decode.cu
  ${CMAKE_CURRENT_LIST_DIR}/paged_attention_decode_pairs.cu
  ${CMAKE_CURRENT_LIST_DIR}/qkv_rope_kernels.cu)
