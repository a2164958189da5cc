// `fp8lm inspect MODEL`: what a checkpoint is, before anyone serves it — the
// architecture and sizes, the dtypes on disk, the detected FP8 format and the
// scheme of every linear layer (grouped, exceptions listed), the KV-cache
// scheme, and the memory the weights and each token's KV cache need in BF16
// and in FP8. Reads headers only; the checkpoint is checked tensor by tensor.
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/model_flags.h"
#include "io/model_spec.h"
#include "loader/host_weights.h"
#include "spec/model_tensors.h"

namespace fp8lm::cli {
namespace {

using nlohmann::json;

json scheme_json(const LinearQuantScheme& s) {
  if (!s.quantized) return {{"quantized", false}};
  return {{"quantized", true},
          {"weight_format", std::string(name(s.weight_format))},
          {"weight_scales", std::string(name(s.weight_scales.granularity))},
          {"group_rows", s.weight_scales.group_rows},
          {"group_cols", s.weight_scales.group_cols},
          {"weights_serialized", s.weights_serialized},
          {"weight_scale_suffix", s.weight_scale_suffix},
          {"activation", std::string(name(s.activation))},
          {"activation_group", s.activation_group},
          {"input_scale_suffix", s.input_scale_suffix},
          {"activation_scale_upper_bound", s.activation_scale_upper_bound}};
}

struct Group {
  std::string pattern;
  std::string scheme;
  int count = 0;
  std::vector<int> layers;
};

// Linear layers grouped by (name pattern, scheme), in checkpoint order, so
// that exceptions (an lm_head kept in BF16, one layer excluded) stand out.
std::vector<Group> group_linears(const io::ModelSpec& spec) {
  std::vector<Group> groups;
  std::map<std::pair<std::string, std::string>, size_t> index;
  for (const io::LinearLayerSpec& l : spec.linears) {
    const auto key = std::make_pair(io::module_family(l.module.name), l.scheme.describe());
    auto [it, inserted] = index.try_emplace(key, groups.size());
    if (inserted) groups.push_back({key.first, key.second, 0, {}});
    Group& g = groups[it->second];
    ++g.count;
    if (l.module.layer >= 0 && (g.layers.empty() || g.layers.back() != l.module.layer))
      g.layers.push_back(l.module.layer);
  }
  return groups;
}

std::vector<std::string> warnings_for(const io::ModelSpec& spec) {
  std::vector<std::string> w;
  const KvCacheScheme& kv = spec.kv_cache();
  if (kv.dtype == KvCacheDType::kFP8E4M3 && kv.k_scale_name.empty())
    w.push_back("FP8 KV cache without k/v scales in the checkpoint: fp8lm calibrates them at load on its built-in "
                "text (--no-kv-calibration would use 1.0, which loses accuracy); `fp8lm quantize --kv-cache-dtype fp8 "
                "--calib FILE` stores scales calibrated on your data");
  return w;
}

json build_json(const io::ModelSpec& spec) {
  const ModelConfig& c = spec.config;
  const io::MemoryEstimate m = io::estimate_memory(spec);
  json j;
  j["model"] = spec.directory.string();
  j["architecture"] = c.architecture;
  j["model_type"] = c.model_type;
  j["dtype"] = std::string(name(c.dtype));
  j["config"] = {{"num_hidden_layers", c.num_hidden_layers},
                 {"hidden_size", c.hidden_size},
                 {"intermediate_size", c.intermediate_size},
                 {"num_attention_heads", c.num_attention_heads},
                 {"num_key_value_heads", c.num_key_value_heads},
                 {"head_dim", c.head_dim},
                 {"vocab_size", c.vocab_size},
                 {"max_position_embeddings", c.max_position_embeddings},
                 {"rope_theta", c.rope_theta},
                 {"rope_scaling", std::string(name(c.rope_scaling.type))},
                 {"rope_scaling_factor", c.rope_scaling.factor},
                 {"tie_word_embeddings", c.tie_word_embeddings},
                 {"qkv_bias", c.qkv_bias},
                 {"qk_norm", c.qk_norm},
                 {"sliding_window", c.sliding_window ? json(*c.sliding_window) : json(nullptr)},
                 {"num_experts", c.moe.num_experts},
                 {"num_experts_per_tok", c.moe.num_experts_per_tok}};
  j["parameters"] = spec.parameter_count;
  if (c.is_moe()) {
    // Every expert has the same shapes, so a token, which runs top-k of them,
    // uses k / E of the expert parameters (and all of the rest).
    int64_t expert = 0;
    for (const io::LinearLayerSpec& l : spec.linears)
      if (l.module.kind == LinearKind::kExpert) expert += l.module.out_features * l.module.in_features;
    const int64_t e = c.moe.num_experts, k = c.moe.num_experts_per_tok;
    j["expert_parameters"] = expert;
    j["active_parameters"] = spec.parameter_count - expert / e * (e - k);
  }
  j["load_format"] = spec.dummy_weights ? "dummy" : "auto";
  if (spec.files)
    j["files"] = {{"count", spec.files->files().size()},
                  {"sharded", spec.files->sharded()},
                  {"tensors", spec.files->tensor_count()}};
  else  // --load-format dummy: config.json alone
    j["files"] = {{"count", 0}, {"sharded", false}, {"tensors", 0}};
  j["dtypes"] = json::object();  // stays empty with --load-format dummy
  for (const auto& [dtype, use] : spec.dtypes) j["dtypes"][dtype] = {{"tensors", use.tensors}, {"bytes", use.bytes}};
  j["quantization"] = {{"format", spec.quantization.format},
                       {"variant", spec.quantization.variant},
                       {"online", spec.quantization.online},
                       {"description", spec.quantization.describe()}};
  for (const io::LinearLayerSpec& l : spec.linears) j["modules"][l.module.name] = scheme_json(l.scheme);
  j["linear_groups"] = json::array();
  for (const Group& g : group_linears(spec))
    j["linear_groups"].push_back({{"pattern", g.pattern}, {"scheme", g.scheme}, {"count", g.count}, {"layers", g.layers}});
  const KvCacheScheme& kv = spec.kv_cache();
  const auto [k_scales, v_scales] = loader::read_kv_scales(spec);
  j["kv_cache"] = {{"dtype", std::string(name(kv.dtype))},
                   {"k_scale_name", kv.k_scale_name},
                   {"v_scale_name", kv.v_scale_name},
                   {"k_scales", k_scales},
                   {"v_scales", v_scales},
                   {"skip_layers", kv.skip_layers}};
  j["memory"] = {{"weights_bf16_bytes", m.weights_bf16},
                 {"weights_fp8_bytes", m.weights_fp8},
                 {"weights_fp8_assumes", m.fp8_scheme},
                 {"kv_cache_bytes_per_token_bf16", m.kv_per_token_bf16},
                 {"kv_cache_bytes_per_token_fp8", m.kv_per_token_fp8}};
  if (spec.config.is_mla()) j["memory"]["kv_cache_bytes_per_token_gqa_same_heads_bf16"] = m.kv_per_token_gqa_bf16;
  j["warnings"] = warnings_for(spec);
  return j;
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024.0 && u < 4) b /= 1024.0, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", b, units[u]);
  return buf;
}

std::string layer_list(const std::vector<int>& layers, int total) {
  if (layers.empty()) return "";
  if (int(layers.size()) == total) return " x " + std::to_string(total) + " layers";
  std::string s = " (layer" + std::string(layers.size() > 1 ? "s " : " ");
  for (size_t i = 0; i < layers.size(); ++i) s += (i ? "," : "") + std::to_string(layers[i]);
  return s + ")";
}

void print_text(const json& j, const io::ModelSpec& spec) {
  const ModelConfig& c = spec.config;
  const auto& cfg = j["config"];
  std::printf("model         %s\n", j["model"].get<std::string>().c_str());
  std::printf("architecture  %s (%s), saved as %s\n", c.architecture.c_str(), c.model_type.c_str(),
              j["dtype"].get<std::string>().c_str());
  std::printf("sizes         %d layers, hidden %lld, intermediate %lld, %d heads (%d KV, head dim %lld), vocab %lld, "
              "context %lld\n",
              c.num_hidden_layers, (long long)c.hidden_size, (long long)c.intermediate_size, c.num_attention_heads,
              c.num_key_value_heads, (long long)c.head_dim, (long long)c.vocab_size,
              (long long)c.max_position_embeddings);
  std::printf("              rope theta %g, scaling %s%s%s%s%s\n", c.rope_theta,
              cfg["rope_scaling"].get<std::string>().c_str(), c.tie_word_embeddings ? ", tied embeddings" : "",
              c.qkv_bias ? ", qkv bias" : "", c.qk_norm ? ", q/k norm" : "",
              c.sliding_window ? (", sliding window " + std::to_string(*c.sliding_window)).c_str() : "");
  if (c.is_moe())
    std::printf("              MoE: %d experts, top-%d, expert width %lld\n", c.moe.num_experts,
                c.moe.num_experts_per_tok, (long long)c.moe.moe_intermediate_size);
  if (c.is_moe() && c.moe.scoring == MoeScoring::kSigmoid)
    std::printf("              DeepSeekMoE: sigmoid scores + correction bias, top-%d of %d groups, %d shared "
                "expert(s), routed scaling %g, dense layers before %d\n",
                c.moe.topk_group, c.moe.n_group, c.moe.n_shared_experts, c.moe.routed_scaling_factor,
                c.moe.first_k_dense_replace);
  if (c.is_mla())
    std::printf("              MLA: q_lora_rank %lld, kv_lora_rank %lld, qk nope/rope %lld/%lld (head dim above: "
                "RoPE's), v %lld, %s rope%s\n",
                (long long)c.mla.q_lora_rank, (long long)c.mla.kv_lora_rank, (long long)c.mla.qk_nope_head_dim,
                (long long)c.mla.qk_rope_head_dim, (long long)c.mla.v_head_dim,
                c.mla.rope_interleave ? "interleaved" : "half-split",
                c.mla.num_nextn_predict_layers > 0 ? ", MTP layers skipped" : "");
  if (c.is_moe())
    std::printf("parameters    %.2f M, %.2f M of them in experts; active per token %.2f M (top-%d of %d experts)\n",
                double(spec.parameter_count) / 1e6, double(j["expert_parameters"].get<int64_t>()) / 1e6,
                double(j["active_parameters"].get<int64_t>()) / 1e6, c.moe.num_experts_per_tok, c.moe.num_experts);
  else
    std::printf("parameters    %.2f M\n", double(spec.parameter_count) / 1e6);
  std::string dtypes;
  for (const auto& [dtype, use] : j["dtypes"].items())
    dtypes += (dtypes.empty() ? "" : ", ") + dtype + " " + std::to_string(use["tensors"].get<int64_t>()) +
              " tensors (" + human_bytes(double(use["bytes"].get<uint64_t>())) + ")";
  if (spec.files)
    std::printf("files         %zu%s, %zu tensors: %s\n", spec.files->files().size(),
                spec.files->sharded() ? " shards" : " file", spec.files->tensor_count(), dtypes.c_str());
  else
    std::printf("files         none: --load-format dummy (random weights generated from config.json at load)\n");
  std::printf("quantization  %s\n", spec.quantization.describe().c_str());
  std::printf("linear layers %zu\n", spec.linears.size());
  for (const Group& g : group_linears(spec))
    std::printf("  %-48s %s%s\n", g.pattern.c_str(), g.scheme.c_str(),
                (layer_list(g.layers, c.num_hidden_layers) + (g.count > int(g.layers.size()) && !g.layers.empty()
                                                                  ? ", " + std::to_string(g.count) + " modules"
                                                                  : ""))
                    .c_str());
  if (c.tie_word_embeddings) std::printf("  %-48s tied to model.embed_tokens (not quantized)\n", "lm_head");
  const KvCacheScheme& kv = spec.kv_cache();
  std::string kv_text = std::string(name(kv.dtype));
  if (!kv.k_scale_name.empty()) {
    const auto range = [](const json& a) {
      const std::vector<float> v = a.get<std::vector<float>>();
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.4g..%.4g", double(*std::min_element(v.begin(), v.end())),
                    double(*std::max_element(v.begin(), v.end())));
      return std::string(buf);
    };
    kv_text += ", scales " + kv.k_scale_name + " / " + kv.v_scale_name + " (k " + range(j["kv_cache"]["k_scales"]) +
               ", v " + range(j["kv_cache"]["v_scales"]) + " over layers)";
  }
  if (!kv.skip_layers.empty()) kv_text += ", BF16 layers " + j["kv_cache"]["skip_layers"].dump();
  std::printf("kv cache      %s\n", kv_text.c_str());
  const auto& m = j["memory"];
  const double bf16 = double(m["weights_bf16_bytes"].get<uint64_t>());
  const double fp8 = double(m["weights_fp8_bytes"].get<uint64_t>());
  std::printf("weights       BF16 %s | FP8 %s (%.2fx, %s)\n", human_bytes(bf16).c_str(), human_bytes(fp8).c_str(),
              fp8 / bf16, m["weights_fp8_assumes"].get<std::string>().c_str());
  std::printf("kv per token  BF16 %s | FP8 %s\n",
              human_bytes(double(m["kv_cache_bytes_per_token_bf16"].get<uint64_t>())).c_str(),
              human_bytes(double(m["kv_cache_bytes_per_token_fp8"].get<uint64_t>())).c_str());
  if (c.is_mla()) {
    const auto gqa = m["kv_cache_bytes_per_token_gqa_same_heads_bf16"].get<uint64_t>();
    const auto mla = m["kv_cache_bytes_per_token_bf16"].get<uint64_t>();
    std::printf("              MLA: one latent entry a token (%lld latent + %lld rope values a layer); GQA with the "
                "same %d KV heads would need BF16 %s (%.1fx)\n",
                (long long)c.mla.kv_lora_rank, (long long)c.mla.qk_rope_head_dim, c.num_key_value_heads,
                human_bytes(double(gqa)).c_str(), double(gqa) / double(mla));
  }
  for (const auto& w : j["warnings"]) std::printf("warning       %s\n", w.get<std::string>().c_str());
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "inspect", "Describe a checkpoint: architecture, FP8 format and per-layer schemes, KV cache, memory in BF16 vs FP8");
  auto flags = add_model_flags(cmd);
  auto as_json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *as_json, "Print as JSON");
  cmd->callback([flags, as_json] {
    const io::ModelSpec spec = io::read_model_spec(flags->model, flags->overrides());
    const json j = build_json(spec);
    if (*as_json) {
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      print_text(j, spec);
    }
  });
}

}  // namespace fp8lm::cli
