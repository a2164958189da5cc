# Paged KV-cache stores and paged attention (decode split-K kernel, tensor-core prefill kernel,
# the warp-pipelined tensor-core decode kernel, the warp-per-pair FP8 decode kernel):
# src/backend/cuda/paged_attention.h.
target_sources(fp8lm_cuda PRIVATE ${CMAKE_CURRENT_LIST_DIR}/paged_attention.cu
                                  ${CMAKE_CURRENT_LIST_DIR}/paged_attention_decode.cu
                                  ${CMAKE_CURRENT_LIST_DIR}/paged_attention_decode_pairs.cu)
