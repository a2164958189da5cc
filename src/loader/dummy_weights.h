// `--load-format dummy`: every weight of a model generated from its config
// alone (no safetensors), at a realistic scale and in the storage its scheme
// asks for, so a real architecture (Llama-3.1-8B, Qwen3-8B, ...) can be
// benchmarked without downloading it. Like vLLM's `--load-format dummy`.
//
// What the weights are (docs/checkpoints.md, "Dummy weights"):
//   * linear weights and the embedding table ~ N(0, sigma), sigma = 0.02 by
//     default (transformers' initializer_range of every Llama/Qwen config);
//     each element is a 16-bit slice of a splitmix64 hash of (seed, tensor
//     name, element index / 4) mapped through a table of normal quantiles
//     (65536 levels, |z| ≤ 4.17): deterministic for a seed on any machine and
//     thread count, generated in parallel over std::thread;
//   * unquantized layers in BF16; FP8 layers (online --quantization fp8..., or
//     the FP8 scheme config.json's quantization_config names) directly as FP8
//     codes of the same draw with the analytic scale sigma·4.17 / fp8_max
//     (the distribution's amax over the format's max) in the scheme's layout
//     (tensor, channel, group, 128×128 block): the FP8 weights dequantize to
//     the BF16 weights of the same seed within FP8 rounding, and every FP8
//     scheme dequantizes to the same numbers;
//   * norms (incl. Qwen3's q/k norms) 1.0; biases N(0, sigma) (small);
//     a static activation scale, when the scheme has one, kDummyInputScale;
//   * tied embeddings shared, --fp8-embeddings honoured (FP8, one scale per
//     row), no KV-cache scales (the runtime calibrates an FP8 KV cache, or
//     uses 1.0 with --no-kv-calibration).
#pragma once

#include <cstdint>

#include "io/model_spec.h"
#include "loader/host_model.h"

namespace fp8lm::loader {

struct DummyWeightOptions {
  uint64_t seed = 0x6670386c6d64756dULL;  // "fp8lmdum": the default, fixed
  float sigma = 0.02f;                    // standard deviation of weights and embeddings
  int threads = 0;                        // 0 = std::thread::hardware_concurrency()
};

// The static input scale given to layers whose scheme quantizes activations
// with a checkpoint scale (kStaticTensor): |x| up to 32 before saturating.
inline constexpr float kDummyInputScale = 32.0f / 448.0f;

// The largest |z| a draw gives, in standard deviations: Φ⁻¹(1 − ½/65536) ≈ 4.17.
double dummy_weight_bound();

// A spec from io::read_model_spec_dummy (or any spec: nothing is read from
// files) → the weights. Throws fp8lm::Error for an unsupported model (an MoE
// layer whose experts do not share one scheme) or a non-positive sigma.
HostModelWeights dummy_host_weights(const io::ModelSpec& spec, const DummyWeightOptions& options = {});

}  // namespace fp8lm::loader
