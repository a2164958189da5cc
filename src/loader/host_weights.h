// The loader: a checked ModelSpec → every weight of a Llama-family model as a
// host description the backends upload from. High-precision and FP8 tensors
// point into the memory-mapped checkpoint (never copied, never expanded);
// scales become float32 multipliers; with --quantization fp8 each BF16 weight
// is quantized here, one tensor at a time, so two full copies of the model
// never exist at once.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "io/model_spec.h"
#include "loader/host_model.h"

namespace fp8lm::loader {

// Throws fp8lm::Error naming the tensor for anything the model cannot run:
// an MoE layer whose experts do not share one scheme, a non-finite or
// non-positive scale, per-head KV scales. Under --quantization fp8 each BF16
// weight (each expert's too) is quantized as it is read and its pages dropped
// right after, so the BF16 model is never resident at once. A spec of read_model_spec_dummy (--load-format dummy)
// gets dummy_host_weights(spec) (loader/dummy_weights.h) instead. The cheap
// part of these checks is check_supported (loader/host_model.h).
HostModelWeights load_host_weights(const io::ModelSpec& spec, const LoadProgress& progress = {});

// A float tensor (BF16 / F16 / F32) of `files` as float32 values; fp8lm::Error naming the
// directory and the tensor for any other dtype.
std::vector<float> read_float_tensor(const io::CheckpointFiles& files, const std::string& name);

// The checkpoint's per-layer KV-cache scales (k, v), read without loading
// anything else; empty when it stores none.
std::pair<std::vector<float>, std::vector<float>> read_kv_scales(const io::ModelSpec& spec);

}  // namespace fp8lm::loader
