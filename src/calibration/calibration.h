// Calibration: run a model over sample text and record the ranges that static
// FP8 scales are made from — the largest |x| entering each linear layer
// (static input_scale) and the largest |K| (after RoPE) and |V| of each layer
// (KV-cache k_scale / v_scale), per layer and per KV head. Used by
// `fp8lm quantize` and by the load-time KV-scale calibration.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/ops.h"
#include "model/llama_model.h"
#include "tokenizer/tokenizer.h"

namespace fp8lm::calibration {

struct CalibrationStats {
  // Module name ("model.layers.0.self_attn.q_proj") → max |input| over every calibration token.
  std::map<std::string, float> input_amax;
  std::vector<float> k_amax, v_amax;                         // per layer
  // Per layer, per KV head (of a tensor-parallel rank: its own heads, from 0; the others 0).
  std::vector<std::vector<float>> k_head_amax, v_head_amax;
  int64_t samples = 0;
  int64_t tokens = 0;
};

// Runs each sample as its own sequence through `model` (on `ops`, with a
// float32 KV cache of its own, so the model's cache format cannot colour the
// ranges) and returns the maxima. progress(done, total) after each sample.
// MoE experts get ranges only where the caller made the model observe every
// expert first (LlamaModel::observe_all_experts: each expert over all tokens,
// LLM Compressor's moe_calibrate_all_experts); otherwise their names are absent.
// Throws fp8lm::Error for no samples or a sample longer than the context.
CalibrationStats calibrate(model::LlamaModel& model, backend::Ops& ops,
                           std::span<const std::vector<int32_t>> samples,
                           const std::function<void(size_t done, size_t total)>& progress = {});

// The E4M3 KV-cache scale of a calibrated range: amax / 448 (float32), or 1.0
// for a range of 0 (a layer whose K or V never left zero).
float kv_scale(float amax);

// `count` consecutive windows of `length` tokens of the tokenized text (fewer
// when the text is shorter; a last shorter window is kept if it has at least
// 2 tokens). Throws fp8lm::Error when the text gives no tokens.
std::vector<std::vector<int32_t>> calibration_samples(const tokenizer::Tokenizer& tokenizer, std::string_view text,
                                                      int64_t count, int64_t length);

// The text that ships inside fp8lm for calibrating KV-cache scales at load
// (src/calibration/calibration_text.txt: original prose, dialogue, lists, code
// and numbers, so K/V see a spread of token kinds).
std::string_view builtin_calibration_text();

}  // namespace fp8lm::calibration
