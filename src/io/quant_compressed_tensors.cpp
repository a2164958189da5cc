// compressed-tensors (LLM Compressor) FP8: config groups with targets, an
// ignore list and an optional KV-cache scheme (formats doc §3).
#include <charconv>

#include "common/error.h"
#include "io/json_file.h"
#include "io/quant_formats.h"

namespace fp8lm::io::detail {
namespace {

using nlohmann::json;

// The fields of one QuantizationArgs object that decide an FP8 scheme.
struct Args {
  std::string strategy;  // tensor, channel, group, block, token, tensor_group, attn_head
  int64_t group_size = 0;
  int64_t block_rows = 0, block_cols = 0;
  bool dynamic = false;
};

bool is_fp8_format(const std::string& f) { return f == "float-quantized" || f == "naive-quantized"; }

void parse_block_structure(const json& v, Args& a, const std::string& w) {
  auto dim = [&](const json& d) {
    if (!d.is_number_integer() || d.get<int64_t>() <= 0 || d.get<int64_t>() > (int64_t{1} << 20))
      throw Error(w + ": block_structure entries must be positive integers, got " + v.dump());
    return d.get<int64_t>();
  };
  if (v.is_array() && v.size() == 2) {
    a.block_rows = dim(v[0]);
    a.block_cols = dim(v[1]);
    return;
  }
  if (v.is_string()) {  // legacy "128x128"
    const std::string s = v.get<std::string>();
    const size_t x = s.find('x');
    int64_t r = 0, c = 0;
    if (x != std::string::npos) {
      const auto r1 = std::from_chars(s.data(), s.data() + x, r);
      const auto r2 = std::from_chars(s.data() + x + 1, s.data() + s.size(), c);
      if (r1.ec == std::errc() && r1.ptr == s.data() + x && r2.ec == std::errc() &&
          r2.ptr == s.data() + s.size() && r > 0 && c > 0 && r <= (1 << 20) && c <= (1 << 20)) {
        a.block_rows = r;
        a.block_cols = c;
        return;
      }
    }
  }
  throw Error(w + ": block_structure must be [rows, cols] or \"RxC\", got " + v.dump());
}

// Checks that the args describe symmetric 8-bit float (FP8 E4M3) and reads the
// granularity, inferring the strategy as compressed-tensors does when absent.
Args parse_args(const json& obj, const std::string& w) {
  if (!obj.is_object()) throw Error(w + " must be an object, got " + std::string(obj.type_name()));
  const int64_t bits = optional<int64_t>(obj, "num_bits", w).value_or(8);
  const std::string type = optional<std::string>(obj, "type", w).value_or("int");
  if (bits != 8 || type != "float")
    throw Error(w + ": num_bits " + std::to_string(bits) + ", type '" + type +
                "' is not FP8; fp8lm reads compressed-tensors checkpoints quantized to FP8 "
                "(num_bits 8, type float) only");
  if (!optional<bool>(obj, "symmetric", w).value_or(true))
    throw Error(w + ": asymmetric FP8 (symmetric: false) is not supported");
  Args a;
  const auto dyn = obj.find("dynamic");
  if (dyn != obj.end() && !dyn->is_null()) {
    if (!dyn->is_boolean())
      throw Error(w + ": field 'dynamic' is " + dyn->dump() + "; fp8lm reads true or false");
    a.dynamic = dyn->get<bool>();
  }
  std::optional<int64_t> gs = optional<int64_t>(obj, "group_size", w);
  std::optional<std::string> st = optional<std::string>(obj, "strategy", w);
  if (st) a.strategy = *st;
  else a.strategy = !gs ? "tensor" : *gs == -1 ? "channel" : "group";
  if (a.strategy == "group" || a.strategy == "tensor_group") {
    if (!gs || *gs <= 0 || *gs > (int64_t{1} << 20))
      throw Error(w + ": strategy '" + a.strategy + "' needs a positive group_size");
    a.group_size = *gs;
  }
  const auto bs = obj.find("block_structure");
  const bool has_block = bs != obj.end() && !bs->is_null();
  if (a.strategy == "block") {
    if (!has_block) throw Error(w + ": strategy 'block' needs block_structure");
    parse_block_structure(*bs, a, w);
  } else if (has_block) {
    throw Error(w + ": block_structure is only allowed with strategy 'block'");
  }
  return a;
}

LinearQuantScheme group_scheme(const json& group, const std::string& w) {
  LinearQuantScheme s;
  s.quantized = true;
  s.weight_format = Fp8Format::kE4M3;
  const auto wt = group.find("weights");
  if (wt == group.end() || wt->is_null())
    throw Error(w + ": the group has no 'weights'; fp8lm reads groups that quantize weights to FP8");
  const Args a = parse_args(*wt, w + ".weights");
  if (a.dynamic) throw Error(w + ".weights: dynamic weight quantization is not supported");
  if (a.strategy == "tensor") s.weight_scales = ScaleLayout::tensor();
  else if (a.strategy == "channel") s.weight_scales = ScaleLayout::channel();
  else if (a.strategy == "block") s.weight_scales = ScaleLayout::block(a.block_rows, a.block_cols);
  else if (a.strategy == "group") s.weight_scales = ScaleLayout::group(a.group_size);
  else throw Error(w + ".weights: strategy '" + a.strategy + "' is not supported for FP8 weights "
                   "(tensor, channel, block, group)");

  const auto in = group.find("input_activations");
  if (in == group.end() || in->is_null()) {
    s.activation = ActivationQuant::kNone;  // weight-only, W8A16
  } else {
    const Args ia = parse_args(*in, w + ".input_activations");
    if (ia.dynamic && ia.strategy == "token") s.activation = ActivationQuant::kDynamicToken;
    else if (ia.dynamic && ia.strategy == "tensor") s.activation = ActivationQuant::kDynamicTensor;
    else if (ia.dynamic && ia.strategy == "group") {
      s.activation = ActivationQuant::kDynamicGroup;
      s.activation_group = ia.group_size;
    } else if (!ia.dynamic && ia.strategy == "tensor") s.activation = ActivationQuant::kStaticTensor;
    else throw Error(w + ".input_activations: " + std::string(ia.dynamic ? "dynamic" : "static") +
                     " strategy '" + ia.strategy + "' is not supported (static tensor, dynamic token, "
                     "dynamic tensor, dynamic group)");
  }
  const auto out = group.find("output_activations");
  if (out != group.end() && !out->is_null())
    throw Error(w + ": output_activations quantization is not supported");
  if (std::optional<std::string> f = optional<std::string>(group, "format", w); f && !is_fp8_format(*f))
    throw Error(w + ": group format '" + *f + "' is not FP8 (float-quantized or naive-quantized)");
  return s;
}

// "0.5.1" < 0.6.0? Unparseable or absent versions count as current.
bool before_0_6(const std::string& v) {
  int major = 0, minor = 0;
  const char* p = v.data();
  const char* end = v.data() + v.size();
  auto r = std::from_chars(p, end, major);
  if (r.ec != std::errc() || r.ptr == end || *r.ptr != '.') return false;
  r = std::from_chars(r.ptr + 1, end, minor);
  if (r.ec != std::errc()) return false;
  return major == 0 && minor < 6;
}

}  // namespace

CheckpointQuantization parse_compressed_tensors(const json& qc, const std::string& where) {
  CheckpointQuantization q;
  q.format = "compressed-tensors";
  const std::optional<std::string> fmt = optional<std::string>(qc, "format", where);
  if (fmt && !is_fp8_format(*fmt) && *fmt != "mixed-precision")
    throw Error(where + ": compressed-tensors format '" + *fmt +
                "' is not supported; fp8lm reads FP8 checkpoints (float-quantized, naive-quantized)");
  q.variant = fmt.value_or("float-quantized");

  // Sparse and rotated (SpinQuant/QuIP) checkpoints need more than FP8 GEMMs.
  const auto sp = qc.find("sparsity_config");
  if (sp != qc.end() && sp->is_object() && !sp->empty()) {
    const auto sf = sp->find("format");
    if (!(sf != sp->end() && *sf == "dense"))
      throw Error(where + ": sparse compressed-tensors checkpoints (sparsity_config) are not supported");
  }
  const auto tc = qc.find("transform_config");
  if (tc != qc.end() && !tc->is_null() && !(tc->is_object() && tc->empty()))
    throw Error(where + ": transform_config (rotations) is not supported");

  const auto groups = qc.find("config_groups");
  if (groups == qc.end() || !groups->is_object() || groups->empty())
    throw Error(where + ": field 'config_groups' must be a non-empty object");
  for (const auto& [gname, group] : groups->items()) {
    const std::string w = where + ": config_groups." + gname;
    if (!group.is_object()) throw Error(w + " must be an object");
    QuantRule rule;
    rule.name = gname;
    rule.targets = pattern_list(group, "targets", PatternStyle::kCompressedTensors, w);
    if (rule.targets.empty()) throw Error(w + ": field 'targets' must be a non-empty list");
    rule.scheme = group_scheme(group, w);
    q.rules.push_back(std::move(rule));
  }
  q.ignore = pattern_list(qc, "ignore", PatternStyle::kCompressedTensors, where);

  const auto kv = qc.find("kv_cache_scheme");
  if (kv != qc.end() && !kv->is_null()) {
    const std::string w = where + ": kv_cache_scheme";
    const Args a = parse_args(*kv, w);
    if (a.dynamic) throw Error(w + ": dynamic KV-cache scales are not supported");
    if (a.strategy == "attn_head")
      throw Error(w + ": per-head KV-cache scales (strategy attn_head) are not supported yet");
    if (a.strategy != "tensor") throw Error(w + ": strategy '" + a.strategy + "' is not supported (tensor)");
    q.kv_cache.dtype = KvCacheDType::kFP8E4M3;
    // compressed-tensors < 0.6 stored the scales as the k/v projections' output scales.
    const std::string version = optional<std::string>(qc, "version", where).value_or("");
    const bool old = before_0_6(version);
    q.kv_cache.k_scale_name = old ? kKvOutputK : kKvSelfAttnK;
    q.kv_cache.v_scale_name = old ? kKvOutputV : kKvSelfAttnV;
  }
  return q;
}

}  // namespace fp8lm::io::detail
