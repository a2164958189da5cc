#include "spec/model_config.h"

#include <algorithm>
#include <array>

namespace fp8lm {
namespace {

constexpr std::array<std::string_view, 7> kArchitectureNames = {
    "LlamaForCausalLM",  "Qwen2ForCausalLM",    "Qwen3ForCausalLM",      "MistralForCausalLM",
    "Qwen3MoeForCausalLM", "MixtralForCausalLM", "DeepseekV3ForCausalLM"};

}  // namespace

std::span<const std::string_view> supported_architectures() { return kArchitectureNames; }

std::string_view name(Architecture a) { return kArchitectureNames[static_cast<size_t>(a)]; }

std::string_view name(RopeScalingType t) {
  switch (t) {
    case RopeScalingType::kNone: return "none";
    case RopeScalingType::kLinear: return "linear";
    case RopeScalingType::kDynamic: return "dynamic";
    case RopeScalingType::kLlama3: return "llama3";
    case RopeScalingType::kYarn: return "yarn";
  }
  return "?";
}

std::string_view name(ModelDType d) {
  switch (d) {
    case ModelDType::kBF16: return "bfloat16";
    case ModelDType::kF16: return "float16";
    case ModelDType::kF32: return "float32";
  }
  return "?";
}

bool ModelConfig::is_moe_layer(int layer) const {
  if (!is_moe()) return false;
  if (layer < moe.first_k_dense_replace) return false;
  if (std::find(moe.mlp_only_layers.begin(), moe.mlp_only_layers.end(), layer) != moe.mlp_only_layers.end())
    return false;
  return (layer + 1) % moe.decoder_sparse_step == 0;
}

}  // namespace fp8lm
