#include "io/load_overrides.h"

#include <algorithm>
#include <charconv>

#include "common/error.h"

namespace fp8lm::io {

std::string_view name(OnlineQuant q) {
  switch (q) {
    case OnlineQuant::kPerTensor: return "fp8:tensor";
    case OnlineQuant::kChannelToken: return "fp8:channel";
    case OnlineQuant::kBlock: return "fp8:block";
    case OnlineQuant::kWeightOnly: return "fp8:weight-only";
  }
  return "?";
}

std::string_view name(LoadFormat f) { return f == LoadFormat::kDummy ? "dummy" : "auto"; }

LoadFormat parse_load_format(std::string_view v) {
  if (v == "auto") return LoadFormat::kAuto;
  if (v == "dummy") return LoadFormat::kDummy;
  throw Error("--load-format: '" + std::string(v) + "' is not one of auto, dummy");
}

OnlineQuant parse_online_quant(std::string_view v) {
  // Per-channel weights with per-token activations is the default: see
  // docs/checkpoints.md "Why fp8 means fp8:channel".
  if (v == "fp8" || v == "fp8:channel") return OnlineQuant::kChannelToken;
  if (v == "fp8:tensor") return OnlineQuant::kPerTensor;
  if (v == "fp8:block") return OnlineQuant::kBlock;
  if (v == "fp8:weight-only") return OnlineQuant::kWeightOnly;
  throw Error("--quantization: '" + std::string(v) +
              "' is not one of fp8, fp8:channel, fp8:tensor, fp8:block, fp8:weight-only");
}

KvCacheDType parse_kv_cache_dtype(std::string_view v) {
  if (v == "auto") return KvCacheDType::kAuto;
  if (v == "bf16" || v == "bfloat16") return KvCacheDType::kBF16;
  if (v == "fp32" || v == "float32") return KvCacheDType::kF32;
  if (v == "fp8" || v == "fp8_e4m3") return KvCacheDType::kFP8E4M3;  // as in vLLM
  if (v == "fp8_e5m2") return KvCacheDType::kFP8E5M2;
  throw Error("--kv-cache-dtype: '" + std::string(v) + "' is not one of auto, bf16, fp32, fp8, fp8_e4m3, fp8_e5m2");
}

std::vector<int> parse_layer_list(std::string_view v) {
  std::vector<int> layers;
  size_t start = 0;
  while (start <= v.size()) {
    const size_t comma = std::min(v.find(',', start), v.size());
    const std::string_view item = v.substr(start, comma - start);
    int layer = -1;
    const auto r = std::from_chars(item.data(), item.data() + item.size(), layer);
    if (item.empty() || r.ec != std::errc() || r.ptr != item.data() + item.size() || layer < 0)
      throw Error("--kv-cache-dtype-skip-layers: '" + std::string(item) + "' in '" + std::string(v) +
                  "' is not a layer index (expected e.g. 0,1,31)");
    if (std::find(layers.begin(), layers.end(), layer) != layers.end())
      throw Error("--kv-cache-dtype-skip-layers: layer " + std::to_string(layer) + " is listed twice");
    layers.push_back(layer);
    start = comma + 1;
  }
  return layers;
}

LinearQuantScheme online_scheme(OnlineQuant q) {
  LinearQuantScheme s;
  s.quantized = true;
  s.weight_format = Fp8Format::kE4M3;
  s.weights_serialized = false;
  switch (q) {
    case OnlineQuant::kPerTensor:
      s.weight_scales = ScaleLayout::tensor();
      s.activation = ActivationQuant::kDynamicTensor;
      break;
    case OnlineQuant::kChannelToken:
      s.weight_scales = ScaleLayout::channel();
      s.activation = ActivationQuant::kDynamicToken;
      break;
    case OnlineQuant::kBlock:
      s.weight_scales = ScaleLayout::block(128, 128);
      s.activation = ActivationQuant::kDynamicGroup;
      s.activation_group = 128;
      break;
    case OnlineQuant::kWeightOnly:
      s.weight_scales = ScaleLayout::channel();
      s.activation = ActivationQuant::kNone;
      break;
  }
  return s;
}

void apply_overrides(CheckpointQuantization& quant, const LoadOverrides& o, std::optional<int> num_layers) {
  // Work on a copy so that a refused override leaves the caller's description untouched.
  CheckpointQuantization q = quant;
  if (o.quantization) {
    if (q.serialized() || q.online)
      throw Error("--quantization " + std::string(name(*o.quantization)) + ": the checkpoint is already " +
                  "quantized (" + q.format + (q.variant.empty() ? "" : ", " + q.variant) +
                  "); online quantization applies to BF16/F16/F32 checkpoints only");
    q.online = true;
    q.variant = "online " + std::string(name(*o.quantization));
    q.rules = {{"all linear layers (online)",
                {ModulePattern("Linear", PatternStyle::kCompressedTensors, "")},
                online_scheme(*o.quantization)}};
  }
  if (!o.keep_bf16.empty()) {
    // Serialized FP8 layers cannot be "kept": their BF16 weights are not in the checkpoint.
    if (!q.online)
      throw Error("--keep-bf16 " + o.keep_bf16.front() + ": applies with --quantization fp8 only; " +
                  (q.serialized() ? "this checkpoint's layers are stored as " + q.format
                                  : std::string("without it nothing is quantized")));
    for (const std::string& p : o.keep_bf16) q.keep_high_precision.emplace_back(p, PatternStyle::kKeepList, "--keep-bf16");
  }

  q.fp8_embeddings = q.fp8_embeddings || o.fp8_embeddings;
  if (o.kv_cache_dtype) {
    switch (*o.kv_cache_dtype) {
      case KvCacheDType::kAuto:
        break;  // whatever the checkpoint says (FP8 when it ships calibrated KV scales)
      case KvCacheDType::kBF16:
      case KvCacheDType::kF32:
        q.kv_cache.dtype = *o.kv_cache_dtype;
        break;
      case KvCacheDType::kFP8E4M3:
        q.kv_cache.dtype = KvCacheDType::kFP8E4M3;  // checkpoint scales if any, else 1.0 (as vLLM)
        break;
      case KvCacheDType::kFP8E5M2:
        // E4M3 scales (amax / 448) are not E5M2 scales; E5M2's range needs none.
        q.kv_cache.dtype = KvCacheDType::kFP8E5M2;
        q.kv_cache.k_scale_name.clear();
        q.kv_cache.v_scale_name.clear();
        break;
    }
  }
  if (!o.kv_cache_skip_layers.empty()) {
    if (!is_fp8(q.kv_cache.dtype))
      throw Error("--kv-cache-dtype-skip-layers: the KV cache is not FP8 (" +
                  std::string(name(q.kv_cache.dtype)) + "); add --kv-cache-dtype fp8");
    for (int l : o.kv_cache_skip_layers) {
      if (l < 0 || (num_layers && l >= *num_layers))
        throw Error("--kv-cache-dtype-skip-layers: layer " + std::to_string(l) + " does not exist (the model has " +
                    (num_layers ? std::to_string(*num_layers) : std::string("?")) + " layers)");
      if (std::find(q.kv_cache.skip_layers.begin(), q.kv_cache.skip_layers.end(), l) == q.kv_cache.skip_layers.end())
        q.kv_cache.skip_layers.push_back(l);
    }
    std::sort(q.kv_cache.skip_layers.begin(), q.kv_cache.skip_layers.end());
  }
  quant = std::move(q);
}

}  // namespace fp8lm::io
