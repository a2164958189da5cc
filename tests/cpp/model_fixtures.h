// The model fixtures (tools/make_model_fixtures.py): tiny random checkpoints of
// each architecture (dense in models/, mixture-of-experts in models/moe/) with
// transformers' float32 logits, per quantization case, and a harness that runs
// fp8lm's forward pass on them.
#pragma once

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_ops.h"
#include "cpp/fixtures.h"
#include "io/load_overrides.h"
#include "io/model_spec.h"
#include "loader/host_weights.h"
#include "model/llama_model.h"

namespace fp8lm::test {

inline const nlohmann::json& model_manifest() {
  static const nlohmann::json m = read_manifest("models");
  return m;
}

// The mixture-of-experts models (Qwen3-MoE, Mixtral) have a manifest of their
// own in models/moe (same schema; their "dir"s are relative to models/ too).
inline constexpr const char* kMoeFixtures = "models/moe";
inline const nlohmann::json& moe_manifest() {
  static const nlohmann::json m = read_manifest(kMoeFixtures);
  return m;
}

// DeepSeek-V3 (multi-head latent attention + DeepSeekMoE, tools/make_deepseek_fixtures.py):
// models/deepseek, same schema.
inline constexpr const char* kDeepseekFixtures = "models/deepseek";
inline const nlohmann::json& deepseek_manifest() {
  static const nlohmann::json m = read_manifest(kDeepseekFixtures);
  return m;
}

// The manifest of a fixture folder: "models", kMoeFixtures or kDeepseekFixtures.
inline const nlohmann::json& manifest_of(const std::string& fixtures) {
  if (fixtures == kDeepseekFixtures) return deepseek_manifest();
  return fixtures == kMoeFixtures ? moe_manifest() : model_manifest();
}

inline std::filesystem::path model_fixture_dir(const std::string& dir) {
  return std::filesystem::path(FP8LM_FIXTURE_DIR) / "models" / dir;
}

inline io::LoadOverrides overrides_of(const nlohmann::json& c) {
  io::LoadOverrides o;
  if (c.contains("quantization") && !c["quantization"].is_null())
    o.quantization = io::parse_online_quant(c["quantization"].get<std::string>());
  if (c.contains("kv_cache_dtype") && !c["kv_cache_dtype"].is_null())
    o.kv_cache_dtype = io::parse_kv_cache_dtype(c["kv_cache_dtype"].get<std::string>());
  return o;
}

// A model loaded on the CPU backend with a KV cache for a few short sequences.
struct LoadedModel {
  io::ModelSpec spec;
  std::unique_ptr<cpu::CpuOps> ops;
  std::unique_ptr<model::LlamaModel> model;
  std::unique_ptr<backend::KvCache> cache;
  static constexpr int kBlockSize = 16;
  int64_t next_block = 0;

  LoadedModel(const std::filesystem::path& dir, const io::LoadOverrides& o, int threads,
              const std::vector<float>& k_scales = {}, const std::vector<float>& v_scales = {},
              int64_t num_blocks = 64) {
    spec = io::read_model_spec(dir, o);
    const loader::HostModelWeights w = loader::load_host_weights(spec);
    ops = std::make_unique<cpu::CpuOps>(threads);
    model = std::make_unique<model::LlamaModel>(spec.config, w, *ops);
    const std::vector<float>& ks = k_scales.empty() ? w.k_scales : k_scales;
    const std::vector<float>& vs = v_scales.empty() ? w.v_scales : v_scales;
    cache = ops->make_kv_cache(model->kv_cache_shape(kBlockSize, num_blocks),
                               model::kv_layer_formats(spec.config, spec.kv_cache(), ks, vs));
  }

  // Fresh blocks for a sequence of `positions` positions (never reused here, so
  // runs cannot see each other's cache).
  std::vector<int64_t> new_blocks(int64_t positions) {
    std::vector<int64_t> t;
    for (int64_t i = 0; i < (positions + kBlockSize - 1) / kBlockSize; ++i) t.push_back(next_block++);
    if (next_block > cache->shape().num_blocks) throw std::runtime_error("test KV cache too small");
    return t;
  }

  // Logits of every position of `tokens`, run as one prefill.
  std::vector<float> prompt_logits(const std::vector<int32_t>& tokens) {
    const std::vector<int64_t> blocks = new_blocks(int64_t(tokens.size()));
    const model::SequenceInput in{tokens, 0, blocks, true};
    std::vector<float> logits;
    model->forward({&in, 1}, *cache, logits);
    return logits;
  }
};

inline std::vector<int32_t> ids_of(const nlohmann::json& a) { return a.get<std::vector<int32_t>>(); }

inline float max_abs(const std::vector<float>& v) {
  float m = 0.0f;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

inline float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

}  // namespace fp8lm::test
