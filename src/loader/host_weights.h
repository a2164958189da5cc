// The loader: a checked ModelSpec → every weight of a Llama-family model as a
// host description the backends upload from. High-precision and FP8 tensors
// point into the memory-mapped checkpoint (never copied, never expanded);
// scales become float32 multipliers; with --quantization fp8 each BF16 weight
// is quantized here, one tensor at a time, so two full copies of the model
// never exist at once.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "io/model_spec.h"
#include "weights/linear_weight.h"

namespace fp8lm::loader {

struct HostLayer {
  std::vector<float> input_norm, post_attention_norm;
  std::vector<float> q_norm, k_norm;  // Qwen3 only (head_dim values)
  weights::LinearWeight q, k, v, o, gate, up, down;
};

struct HostModelWeights {
  weights::LinearWeight embedding;  // [vocab, hidden], high precision
  std::vector<HostLayer> layers;
  std::vector<float> final_norm;
  weights::LinearWeight lm_head;    // the embedding table again when tied
  // Per-layer KV-cache scales from the checkpoint (empty: none stored).
  std::vector<float> k_scales, v_scales;
};

// Called after each decoder layer is loaded (layer index, layer count).
using LoadProgress = std::function<void(int layer, int layers)>;

// Throws fp8lm::Error naming the tensor for anything the model cannot run:
// an MoE architecture (not yet implemented), a non-finite or non-positive scale,
// per-head KV scales. A spec of read_model_spec_dummy (--load-format dummy)
// gets dummy_host_weights(spec) (loader/dummy_weights.h) instead.
HostModelWeights load_host_weights(const io::ModelSpec& spec, const LoadProgress& progress = {});

// The checkpoint's per-layer KV-cache scales (k, v), read without loading
// anything else; empty when it stores none.
std::pair<std::vector<float>, std::vector<float>> read_kv_scales(const io::ModelSpec& spec);

// The cheap part of those checks (the architecture), for callers that want to
// refuse a model before loading anything else.
void check_supported(const io::ModelSpec& spec);

// Bytes the weights occupy in memory as loaded (FP8 codes at 1 byte, scales,
// high-precision tensors at their stored width), for statistics.
uint64_t resident_weight_bytes(const HostModelWeights& w);

}  // namespace fp8lm::loader
