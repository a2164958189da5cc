// Sampling on the GPU: one CTA per logits row draws that row's token as the
// host row math does (backend/sampling.h, the reference): penalties ->
// temperature -> top-k -> top-p -> min-p -> inverse CDF in token-id order at
// the row's uniform; a greedy row is the argmax after its penalties (the
// lowest id on ties). The vocabulary does not fit in shared memory, so the
// kernel reads the row again in each pass (from L2 for the batch sizes that
// matter) and nothing vocab-sized is written anywhere:
//
//   penalties     bitmaps of the penalized ids in shared memory (prompt ∪
//                 output for the repetition penalty, output for frequency /
//                 presence), the counts found by binary search in the row's
//                 sorted output ids; the float operations are the host's, in
//                 its order (bit-identical processed logits)
//   top-k         the k-th largest processed logit by a radix select over
//                 its order-preserving bits (4 passes of 8-bit histograms)
//   top-p         the cut by a radix descent weighted by probability (the
//                 masses in 2^-60 fixed point, so that the shared-memory
//                 atomics are exact and the result does not depend on their
//                 order), then the tied ids at the cut by rank
//   min-p, draw   block reductions, then one pass in id order with
//                 block-wide prefix sums (double) to find where u × total falls
//
// What differs from the host: CUDA's expf (≤ 2 ulp) against glibc's, and
// the order of the double sums. Tokens agree except where a filter threshold
// or u × total lies within that rounding of a boundary; the kernel is
// deterministic (a row's token does not depend on the batch or the run).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace fp8lm::cuda {

// One row's parameters as the kernel reads them (backend::RowSampling with
// its penalty lists as ranges of the shared id / count arrays).
struct DeviceRowSampling {
  double uniform = 0.0;
  float temperature = 1.0f;  // < backend::kGreedyTemperature: greedy
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t top_k = 0;
  int32_t prompt_begin = 0, prompt_count = 0;  // ids[prompt_begin ..): distinct prompt ids
  int32_t output_begin = 0, output_count = 0;  // ids / counts [output_begin ..): distinct output ids, ascending
  int64_t mask_begin = -1;  // structured outputs: masks[mask_begin ..) is the row's bitmask of allowed ids; -1: none
};

// tokens[r] = row r's token; -1 where the host would refuse the row (a NaN or
// +inf after penalties and temperature, or every logit -inf). Ids in the
// penalty ranges must lie in [0, vocab) and the output ids be ascending (the
// caller checks). vocab ≥ 1, rows ≥ 0. `probs`: nullptr, or [rows, vocab]
// floats that receive each row's distribution drawn from (zeros where
// removed; one-hot for a greedy row) — for tests: it costs the rest of the
// row that the draw would skip. `masks`: nullptr (no row is masked: the kernel without the mask
// test runs), or the words of the rows' allowed-id bitmasks (DeviceRowSampling::mask_begin, bit
// id % 32 of word id / 32): an id a row's mask clears is -inf before the penalties, as on the host.
void sample_rows(const __nv_bfloat16* logits, int64_t rows, int64_t vocab, const DeviceRowSampling* params,
                 const int32_t* ids, const int32_t* counts, int32_t* tokens, cudaStream_t stream,
                 float* probs = nullptr, const uint32_t* masks = nullptr);

}  // namespace fp8lm::cuda
