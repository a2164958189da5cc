// Hugging Face "fp8", FBGEMM FP8 and NVIDIA ModelOpt FP8: single-scheme
// formats (one scheme for every linear layer, an exclusion list, a KV flag).
#include <algorithm>
#include <cctype>
#include <cmath>

#include "common/error.h"
#include "io/json_file.h"
#include "io/quant_formats.h"

namespace fp8lm::io::detail {
namespace {

using nlohmann::json;

std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::toupper(c)); });
  return s;
}

LinearQuantScheme fp8_scheme(ScaleLayout weights, ActivationQuant act) {
  LinearQuantScheme s;
  s.quantized = true;
  s.weight_format = Fp8Format::kE4M3;
  s.weight_scales = weights;
  s.activation = act;
  return s;
}

KvCacheScheme fp8_kv(const char* k_name, const char* v_name) {
  KvCacheScheme kv;
  kv.dtype = KvCacheDType::kFP8E4M3;
  kv.k_scale_name = k_name;
  kv.v_scale_name = v_name;
  return kv;
}

int64_t positive_int(const json& v, const std::string& what) {
  if (!v.is_number_integer() || v.get<int64_t>() <= 0 || v.get<int64_t>() > (int64_t{1} << 20))
    throw Error(what + " must be a positive integer, got " + v.dump());
  return v.get<int64_t>();
}

}  // namespace

std::vector<ModulePattern> pattern_list(const json& obj, const std::string& key, PatternStyle style,
                                        const std::string& where) {
  std::vector<ModulePattern> out;
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return out;
  if (!it->is_array()) throw Error(where + ": field '" + key + "' must be a list of module names");
  for (const json& e : *it) {
    if (!e.is_string()) throw Error(where + ": field '" + key + "' must contain strings, got " + e.dump());
    out.emplace_back(e.get<std::string>(), style, where + ": " + key);
  }
  return out;
}

QuantRule all_linear_layers(const LinearQuantScheme& scheme) {
  return {"all linear layers", {ModulePattern("Linear", PatternStyle::kCompressedTensors, "")}, scheme};
}

CheckpointQuantization parse_hf_fp8(const json& qc, const std::string& where) {
  CheckpointQuantization q;
  q.format = "fp8";
  const std::string act = required<std::string>(qc, "activation_scheme", where);
  if (act != "static" && act != "dynamic")
    throw Error(where + ": field 'activation_scheme' must be 'static' or 'dynamic', got '" + act + "'");
  if (std::optional<std::string> fmt = optional<std::string>(qc, "fmt", where); fmt && *fmt != "e4m3")
    throw Error(where + ": field 'fmt' is '" + *fmt + "'; the fp8 format stores E4M3 weights ('e4m3')");
  if (std::optional<std::string> sf = optional<std::string>(qc, "scale_fmt", where)) {
    if (*sf == "ue8m0") q.power_of_two_scales = true;
    else if (*sf != "float")
      throw Error(where + ": field 'scale_fmt' must be 'float' or 'ue8m0', got '" + *sf + "'");
  }
  if (qc.contains("modules_to_convert") && !qc["modules_to_convert"].is_null() &&
      !(qc["modules_to_convert"].is_array() && qc["modules_to_convert"].empty()))
    throw Error(where + ": field 'modules_to_convert' (FP8 embeddings) is not supported");

  LinearQuantScheme s;
  const auto bs = qc.find("weight_block_size");
  if (bs != qc.end() && !bs->is_null()) {
    // DeepSeek / Qwen3-FP8: block weights, activations per token per bk channels.
    if (!bs->is_array() || bs->size() != 2)
      throw Error(where + ": field 'weight_block_size' must be [rows, cols], got " + bs->dump());
    const int64_t bn = positive_int((*bs)[0], where + ": weight_block_size[0]");
    const int64_t bk = positive_int((*bs)[1], where + ": weight_block_size[1]");
    if (act != "dynamic")
      throw Error(where + ": block-quantized fp8 checkpoints need activation_scheme 'dynamic', got '" + act + "'");
    s = fp8_scheme(ScaleLayout::block(bn, bk), ActivationQuant::kDynamicGroup);
    s.activation_group = bk;
    s.weight_scale_suffix = "weight_scale_inv";
    q.variant = "block " + std::to_string(bn) + "x" + std::to_string(bk);
  } else {
    // AutoFP8-era per-tensor: static input_scale, or dynamic per token (what
    // vLLM does on GPUs with row-wise scaled FP8 GEMMs).
    s = fp8_scheme(ScaleLayout::tensor(),
                   act == "static" ? ActivationQuant::kStaticTensor : ActivationQuant::kDynamicToken);
    q.variant = "per-tensor, " + act + " activations";
  }
  q.rules.push_back(all_linear_layers(s));
  // vLLM reads ignored_layers first, then modules_to_not_convert.
  const bool has_ignored = qc.contains("ignored_layers") && !qc["ignored_layers"].is_null();
  q.ignore = pattern_list(qc, has_ignored ? "ignored_layers" : "modules_to_not_convert",
                          PatternStyle::kModuleList, where);

  const auto kv = qc.find("kv_cache_scheme");
  if (kv != qc.end() && !kv->is_null()) {
    if (kv->is_string() && kv->get<std::string>() == "static") {
      q.kv_cache = fp8_kv(kKvOutputK, kKvOutputV);  // AutoFP8's names
    } else if (kv->is_object()) {
      // Newer exporters write a compressed-tensors style QuantizationArgs.
      const auto bits = kv->find("num_bits");
      const auto type = kv->find("type");
      if (bits == kv->end() || *bits != 8 || type == kv->end() || *type != "float")
        throw Error(where + ": kv_cache_scheme " + kv->dump() + " is not an 8-bit float (FP8) scheme");
      q.kv_cache = fp8_kv(kKvSelfAttnK, kKvSelfAttnV);
    } else {
      throw Error(where + ": field 'kv_cache_scheme' must be \"static\", an object or null, got " + kv->dump());
    }
  }
  return q;
}

CheckpointQuantization parse_fbgemm_fp8(const json& qc, const std::string& where) {
  CheckpointQuantization q;
  q.format = "fbgemm_fp8";
  q.variant = "per-channel weights, dynamic per-token activations";
  // vLLM requires both keys; the list may be null.
  if (!qc.contains("modules_to_not_convert"))
    throw Error(where + ": required field 'modules_to_not_convert' is missing");
  const double ub = required<double>(qc, "activation_scale_ub", where);
  if (!std::isfinite(ub) || ub <= 0 || ub > 3.0e38)
    throw Error(where + ": field 'activation_scale_ub' must be a positive number, got " +
                qc["activation_scale_ub"].dump());
  LinearQuantScheme s = fp8_scheme(ScaleLayout::channel(), ActivationQuant::kDynamicToken);
  s.activation_scale_upper_bound = static_cast<float>(ub);
  q.rules.push_back(all_linear_layers(s));
  q.ignore = pattern_list(qc, "modules_to_not_convert", PatternStyle::kModuleList, where);
  return q;
}

CheckpointQuantization parse_modelopt(const json& block, const std::string& where) {
  CheckpointQuantization q;
  q.format = "modelopt";
  // Legacy hf_quant_config.json nests {"quantization": {...}}; the flat
  // config.json block has the same fields at the top with `ignore`.
  const bool legacy = block.contains("quantization");
  const std::string w = legacy ? where + ": quantization" : where;
  const json& src = legacy ? block["quantization"] : block;
  if (!src.is_object()) throw Error(w + " must be an object");

  std::optional<std::string> algo = optional<std::string>(src, "quant_algo", w);
  if (!algo) throw Error(w + ": required field 'quant_algo' is missing");
  const std::string a = upper(*algo);
  q.variant = a;
  LinearQuantScheme s;
  if (a == "FP8") {
    s = fp8_scheme(ScaleLayout::tensor(), ActivationQuant::kStaticTensor);
  } else if (a == "FP8_PER_CHANNEL_PER_TOKEN") {
    s = fp8_scheme(ScaleLayout::channel(), ActivationQuant::kDynamicToken);
  } else if (a == "FP8_PB_WO") {
    // Weight-only 128x128 blocks; vLLM runs them with dynamic 1x128 groups.
    s = fp8_scheme(ScaleLayout::block(128, 128), ActivationQuant::kDynamicGroup);
    s.activation_group = 128;
  } else {
    throw Error(w + ": ModelOpt quant_algo '" + *algo +
                "' is not supported; fp8lm reads FP8, FP8_PER_CHANNEL_PER_TOKEN and FP8_PB_WO");
  }
  q.rules.push_back(all_linear_layers(s));
  q.ignore = pattern_list(src, legacy ? "exclude_modules" : "ignore", PatternStyle::kModelOpt, w);

  std::optional<std::string> kv_algo = optional<std::string>(src, "kv_cache_quant_algo", w);
  bool kv_fp8 = false;
  if (kv_algo) {
    if (upper(*kv_algo) != "FP8")
      throw Error(w + ": kv_cache_quant_algo '" + *kv_algo + "' is not supported; fp8lm reads FP8 or null");
    kv_fp8 = true;
  } else if (!legacy && src.contains("kv_cache_scheme") && !src["kv_cache_scheme"].is_null()) {
    const json& kv = src["kv_cache_scheme"];
    if (!kv.is_object() || !kv.contains("num_bits") || kv["num_bits"] != 8 || !kv.contains("type") ||
        kv["type"] != "float")
      throw Error(w + ": kv_cache_scheme " + kv.dump() + " is not an 8-bit float (FP8) scheme");
    kv_fp8 = true;
  }
  if (kv_fp8) q.kv_cache = fp8_kv(kKvModelOptK, kKvModelOptV);
  return q;
}

}  // namespace fp8lm::io::detail
