// config.json -> ModelConfig, and the tensor list each architecture needs:
// real Hugging Face configs (numbers checked against the files), the tiny
// checkpoints transformers saved (tensor names and shapes as written), and
// malformed input.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <set>

#include "checkpoint_fixtures.h"
#include "io/eagle3_config_json.h"
#include "io/model_config_json.h"
#include "spec/model_config.h"
#include "spec/model_tensors.h"
#include "spec/rope.h"

namespace fp8lm {
namespace {

using nlohmann::json;
using test::expect_error;

ModelConfig real_config(const std::string& repo) {
  const auto p = test::shared_hf_config(repo);
  if (!p) return {};
  return io::parse_model_config(io::read_json_file(*p), p->string());
}

#define SKIP_WITHOUT_SHARED(repo) \
  if (!test::shared_hf_config(repo)) GTEST_SKIP() << "../shared/data/hf/" repo " is absent"

const LinearModule& find_linear(const std::vector<LinearModule>& ms, const std::string& name) {
  for (const LinearModule& m : ms)
    if (m.name == name) return m;
  throw std::runtime_error("no linear module " + name);
}

TEST(RealConfigs, Llama31_8B) {
  SKIP_WITHOUT_SHARED("meta-llama__Llama-3.1-8B");
  const ModelConfig c = real_config("meta-llama__Llama-3.1-8B");
  EXPECT_EQ(c.arch, Architecture::kLlama);
  EXPECT_EQ(c.num_hidden_layers, 32);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.intermediate_size, 14336);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kLlama3);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.qkv_bias || c.o_bias || c.mlp_bias || c.qk_norm || c.is_moe());
  EXPECT_EQ(c.dtype, ModelDType::kBF16);
  EXPECT_EQ(c.bos_token_ids, std::vector<int64_t>{128000});
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{128001});

  const auto ms = linear_modules(c);
  EXPECT_EQ(ms.size(), 32u * 7 + 1);
  EXPECT_EQ(int64_t(ms.size()), count_linear_modules(c));
  const LinearModule& k = find_linear(ms, "model.layers.31.self_attn.k_proj");
  EXPECT_EQ(k.out_features, 1024);
  EXPECT_EQ(k.in_features, 4096);
  const LinearModule& d = find_linear(ms, "model.layers.0.mlp.down_proj");
  EXPECT_EQ(d.out_features, 4096);
  EXPECT_EQ(d.in_features, 14336);
  EXPECT_EQ(ms.back().name, "lm_head");
  EXPECT_EQ(ms.back().out_features, 128256);
}

TEST(RealConfigs, Llama32_3B_TiedAndExplicitHeadDim) {
  SKIP_WITHOUT_SHARED("meta-llama__Llama-3.2-3B");
  const ModelConfig c = real_config("meta-llama__Llama-3.2-3B");
  EXPECT_EQ(c.num_hidden_layers, 28);
  EXPECT_EQ(c.hidden_size, 3072);
  EXPECT_EQ(c.num_attention_heads, 24);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 32.0);
  const auto ms = linear_modules(c);
  EXPECT_EQ(ms.size(), 28u * 7);  // no lm_head: tied to the embeddings
  EXPECT_EQ(find_linear(ms, "model.layers.0.self_attn.q_proj").out_features, 24 * 128);
}

TEST(RealConfigs, TinyLlama) {
  SKIP_WITHOUT_SHARED("TinyLlama__TinyLlama_v1.1");
  const ModelConfig c = real_config("TinyLlama__TinyLlama_v1.1");
  EXPECT_EQ(c.num_hidden_layers, 22);
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.intermediate_size, 5632);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab_size, 32000);
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kNone);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);  // absent: the default
  EXPECT_EQ(c.dtype, ModelDType::kF32);
}

TEST(RealConfigs, Qwen25_7B_QkvBiasNoWindow) {
  SKIP_WITHOUT_SHARED("Qwen__Qwen2.5-7B");
  const ModelConfig c = real_config("Qwen__Qwen2.5-7B");
  EXPECT_EQ(c.arch, Architecture::kQwen2);
  EXPECT_EQ(c.num_hidden_layers, 28);
  EXPECT_EQ(c.hidden_size, 3584);
  EXPECT_EQ(c.intermediate_size, 18944);
  EXPECT_EQ(c.num_attention_heads, 28);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.vocab_size, 152064);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_FALSE(c.sliding_window.has_value());  // use_sliding_window: false
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  const auto ms = linear_modules(c);
  EXPECT_TRUE(find_linear(ms, "model.layers.0.self_attn.v_proj").has_bias);
  EXPECT_FALSE(find_linear(ms, "model.layers.0.self_attn.o_proj").has_bias);
  int biases = 0;
  for (const ExpectedTensor& t : expected_tensors(c)) biases += t.role == TensorRole::kBias;
  EXPECT_EQ(biases, 28 * 3);
}

TEST(RealConfigs, Qwen3_8B_QkNorm) {
  SKIP_WITHOUT_SHARED("Qwen__Qwen3-8B");
  const ModelConfig c = real_config("Qwen__Qwen3-8B");
  EXPECT_EQ(c.arch, Architecture::kQwen3);
  EXPECT_EQ(c.num_hidden_layers, 36);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.intermediate_size, 12288);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{151645});
  int qk_norms = 0;
  for (const ExpectedTensor& t : expected_tensors(c))
    if (t.name.find("q_norm") != std::string::npos) {
      ++qk_norms;
      EXPECT_EQ(t.shape, std::vector<int64_t>{128});
    }
  EXPECT_EQ(qk_norms, 36);
}

TEST(RealConfigs, Qwen3_30B_A3B_Moe) {
  SKIP_WITHOUT_SHARED("Qwen__Qwen3-30B-A3B");
  const ModelConfig c = real_config("Qwen__Qwen3-30B-A3B");
  EXPECT_EQ(c.arch, Architecture::kQwen3Moe);
  EXPECT_EQ(c.num_hidden_layers, 48);
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 128);  // explicit: not 2048 / 32
  EXPECT_EQ(c.moe.num_experts, 128);
  EXPECT_EQ(c.moe.num_experts_per_tok, 8);
  EXPECT_EQ(c.moe.moe_intermediate_size, 768);
  EXPECT_TRUE(c.moe.norm_topk_prob);
  for (int l = 0; l < 48; ++l) EXPECT_TRUE(c.is_moe_layer(l));
  const auto ms = linear_modules(c);
  EXPECT_EQ(ms.size(), 48u * (4 + 1 + 128 * 3) + 1);
  const LinearModule& q = find_linear(ms, "model.layers.0.self_attn.q_proj");
  EXPECT_EQ(q.out_features, 4096);
  EXPECT_EQ(q.in_features, 2048);
  const LinearModule& router = find_linear(ms, "model.layers.5.mlp.gate");
  EXPECT_EQ(router.kind, LinearKind::kRouter);
  EXPECT_EQ(router.out_features, 128);
  const LinearModule& g = find_linear(ms, "model.layers.47.mlp.experts.127.gate_proj");
  EXPECT_EQ(g.out_features, 768);
  EXPECT_EQ(g.in_features, 2048);
  EXPECT_EQ(find_linear(ms, "model.layers.0.mlp.experts.0.down_proj").in_features, 768);
}

TEST(RealConfigs, Mixtral8x7B) {
  SKIP_WITHOUT_SHARED("mistralai__Mixtral-8x7B-v0.1");
  const ModelConfig c = real_config("mistralai__Mixtral-8x7B-v0.1");
  EXPECT_EQ(c.arch, Architecture::kMixtral);
  EXPECT_EQ(c.num_hidden_layers, 32);
  EXPECT_EQ(c.moe.num_experts, 8);
  EXPECT_EQ(c.moe.num_experts_per_tok, 2);
  EXPECT_EQ(c.moe.moe_intermediate_size, 14336);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_FALSE(c.sliding_window.has_value());
  const auto ms = linear_modules(c);
  EXPECT_EQ(ms.size(), 32u * (4 + 1 + 8 * 3) + 1);
  const LinearModule& w2 = find_linear(ms, "model.layers.3.block_sparse_moe.experts.7.w2");
  EXPECT_EQ(w2.out_features, 4096);
  EXPECT_EQ(w2.in_features, 14336);
  EXPECT_EQ(find_linear(ms, "model.layers.3.block_sparse_moe.gate").kind, LinearKind::kRouter);
}

// DeepSeek-R1 (the DeepSeek-V3 architecture, issue 45): MLA and DeepSeekMoE as its config.json
// (written for DeepSeek's own modeling code) gives them; rope_interleave is absent, so
// transformers' default (true) holds.
TEST(RealConfigs, DeepSeekR1) {
  SKIP_WITHOUT_SHARED("deepseek-ai__DeepSeek-R1");
  const ModelConfig c = real_config("deepseek-ai__DeepSeek-R1");
  EXPECT_EQ(c.arch, Architecture::kDeepseekV3);
  EXPECT_EQ(c.mla.q_lora_rank, 1536);
  EXPECT_EQ(c.mla.kv_lora_rank, 512);
  EXPECT_EQ(c.mla.qk_nope_head_dim, 128);
  EXPECT_EQ(c.mla.qk_rope_head_dim, 64);
  EXPECT_EQ(c.mla.v_head_dim, 128);
  EXPECT_EQ(c.mla.latent_width(), 576);  // the cache entry a token
  EXPECT_TRUE(c.mla.rope_interleave);
  EXPECT_EQ(c.mla.num_nextn_predict_layers, 1);
  EXPECT_EQ(c.moe.num_experts, 256);
  EXPECT_EQ(c.moe.num_experts_per_tok, 8);
  EXPECT_EQ(c.moe.n_group, 8);
  EXPECT_EQ(c.moe.topk_group, 4);
  EXPECT_EQ(c.moe.n_shared_experts, 1);
  EXPECT_EQ(c.moe.first_k_dense_replace, 3);
  EXPECT_DOUBLE_EQ(c.moe.routed_scaling_factor, 2.5);
  EXPECT_FALSE(c.is_moe_layer(2));
  EXPECT_TRUE(c.is_moe_layer(3));
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kYarn);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 40.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.mscale_all_dim, 1.0);
  const std::vector<LinearModule> ms = linear_modules(c);
  const LinearModule& kv_a = find_linear(ms, "model.layers.0.self_attn.kv_a_proj_with_mqa");
  EXPECT_EQ(kv_a.out_features, 576);  // not a multiple of 128: a ragged FP8 block row
  EXPECT_EQ(kv_a.in_features, 7168);
  EXPECT_EQ(find_linear(ms, "model.layers.0.self_attn.kv_b_proj").out_features, 128 * (128 + 128));
  EXPECT_EQ(find_linear(ms, "model.layers.0.self_attn.q_b_proj").out_features, 128 * 192);
  EXPECT_EQ(find_linear(ms, "model.layers.3.mlp.shared_experts.gate_proj").out_features, 2048);
  EXPECT_EQ(find_linear(ms, "model.layers.3.mlp.gate").kind, LinearKind::kRouter);
  EXPECT_EQ(find_linear(ms, "model.layers.60.mlp.experts.255.down_proj").in_features, 2048);
}

// ---- the tiny checkpoints: tensor names and shapes exactly as the producer wrote them

bool is_scale(const std::string& name) {
  for (const char* s : {".weight_scale", ".weight_scale_inv", ".input_scale", ".k_scale", ".v_scale"})
    if (name.size() > std::string(s).size() && name.ends_with(s)) return true;
  return false;
}

TEST(Fixtures, ExpectedTensorsMatchWhatTheProducerWrote) {
  for (const std::string& name : test::checkpoint_fixture_names()) {
    SCOPED_TRACE(name);
    const auto dir = test::checkpoint_fixture(name);
    const json expected = io::read_json_file(dir / "expected.json");
    const ModelConfig c = io::read_model_config(dir);

    std::map<std::string, std::vector<int64_t>> on_disk;
    for (const auto& [t, info] : expected.at("tensors").items())
      if (!is_scale(t)) on_disk[t] = info.at("shape").get<std::vector<int64_t>>();
    std::map<std::string, std::vector<int64_t>> wanted;
    for (const ExpectedTensor& t : expected_tensors(c)) wanted[t.name] = t.shape;
    EXPECT_EQ(wanted, on_disk);

    std::set<std::string> modules;
    for (const LinearModule& m : linear_modules(c)) modules.insert(m.name);
    std::set<std::string> producer_modules;
    for (const auto& [m, s] : expected.at("modules").items()) producer_modules.insert(m);
    EXPECT_EQ(modules, producer_modules);
  }
}

TEST(Fixtures, ArchitectureSpecifics) {
  const ModelConfig llama = io::read_model_config(test::checkpoint_fixture("llama_bf16"));
  EXPECT_EQ(llama.rope_scaling.type, RopeScalingType::kLlama3);  // transformers 5 rope_parameters
  EXPECT_DOUBLE_EQ(llama.rope_scaling.factor, 8.0);
  EXPECT_EQ(llama.dtype, ModelDType::kBF16);  // transformers 5 `dtype`
  const ModelConfig mistral = io::read_model_config(test::checkpoint_fixture("mistral_bf16"));
  EXPECT_EQ(mistral.sliding_window, 32);
  const ModelConfig qwen3 = io::read_model_config(test::checkpoint_fixture("qwen3_bf16"));
  EXPECT_TRUE(qwen3.tie_word_embeddings);
  const ModelConfig moe = io::read_model_config(test::checkpoint_fixture("qwen3_moe_bf16"));
  EXPECT_EQ(moe.moe.num_experts, 4);  // transformers 5 writes num_local_experts
  const ModelConfig mixtral = io::read_model_config(test::checkpoint_fixture("mixtral_bf16"));
  EXPECT_EQ(mixtral.head_dim, 16);  // head_dim: null -> hidden / heads
}

// ---- the tensor-name table (spec, loader and dummy weights all read it)

TEST(TensorNames, TableSpellsTheCheckpointNames) {
  EXPECT_EQ(kEmbedTokensWeight, "model.embed_tokens.weight");
  EXPECT_EQ(kFinalNormWeight, "model.norm.weight");
  EXPECT_EQ(kLmHead, "lm_head");
  const LayerTensorNames n = layer_tensor_names(12);
  EXPECT_EQ(n.input_norm, "model.layers.12.input_layernorm.weight");
  EXPECT_EQ(n.post_attention_norm, "model.layers.12.post_attention_layernorm.weight");
  EXPECT_EQ(n.q_norm, "model.layers.12.self_attn.q_norm.weight");
  EXPECT_EQ(n.k_norm, "model.layers.12.self_attn.k_norm.weight");
  EXPECT_EQ(n.q_proj, "model.layers.12.self_attn.q_proj");
  EXPECT_EQ(n.k_proj, "model.layers.12.self_attn.k_proj");
  EXPECT_EQ(n.v_proj, "model.layers.12.self_attn.v_proj");
  EXPECT_EQ(n.o_proj, "model.layers.12.self_attn.o_proj");
  EXPECT_EQ(n.gate_proj, "model.layers.12.mlp.gate_proj");
  EXPECT_EQ(n.up_proj, "model.layers.12.mlp.up_proj");
  EXPECT_EQ(n.down_proj, "model.layers.12.mlp.down_proj");
}

// Every expected tensor outside the MoE blocks is a name of the table: what the
// loader reads through the table is exactly what the audit requires.
TEST(TensorNames, ExpectedTensorsComeFromTheTable) {
  for (const std::string& fixture : test::checkpoint_fixture_names()) {
    SCOPED_TRACE(fixture);
    const ModelConfig c = io::read_model_config(test::checkpoint_fixture(fixture));
    std::set<std::string> from_table = {std::string(kEmbedTokensWeight), std::string(kFinalNormWeight)};
    std::vector<std::string> modules;
    if (!c.tie_word_embeddings) modules.push_back(std::string(kLmHead));
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      const LayerTensorNames n = layer_tensor_names(l);
      from_table.insert({n.input_norm, n.post_attention_norm});
      if (c.qk_norm) from_table.insert({n.q_norm, n.k_norm});
      modules.insert(modules.end(), {n.q_proj, n.k_proj, n.v_proj, n.o_proj});
      if (!c.is_moe_layer(l)) modules.insert(modules.end(), {n.gate_proj, n.up_proj, n.down_proj});
    }
    const std::vector<LinearModule> linears = linear_modules(c);
    for (const std::string& m : modules) {
      const LinearModule& lm = find_linear(linears, m);
      from_table.insert(m + ".weight");
      if (lm.has_bias) from_table.insert(m + ".bias");
    }
    const std::vector<ExpectedTensor> expected = expected_tensors(c);
    EXPECT_EQ(expected.front().name, kEmbedTokensWeight);
    EXPECT_EQ(expected.back().name, kFinalNormWeight);
    std::set<std::string> rest;
    for (const ExpectedTensor& t : expected)
      if (from_table.erase(t.name) == 0) rest.insert(t.name);
    EXPECT_TRUE(from_table.empty()) << "table names the architecture does not expect: " << *from_table.begin();
    for (const std::string& name : rest)
      EXPECT_TRUE(c.is_moe() && (name.find(".experts.") != std::string::npos || name.ends_with(".gate.weight")))
          << name << " is spelled outside the table";
  }
}

// ---- variants and malformed input

json base_llama() {
  return json::parse(R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 512,
    "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16"})");
}

ModelConfig parse(const json& j) { return io::parse_model_config(j, "config.json"); }

TEST(ModelConfigParse, Defaults) {
  json j = base_llama();
  j.erase("num_key_value_heads");
  const ModelConfig c = parse(j);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_TRUE(c.bos_token_ids.empty());
}

TEST(ModelConfigParse, RopeTypes) {
  json j = base_llama();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  EXPECT_EQ(parse(j).rope_scaling.type, RopeScalingType::kLinear);
  j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 4}};
  EXPECT_EQ(parse(j).rope_scaling.type, RopeScalingType::kDynamic);
  j["rope_scaling"] = {{"rope_type", "default"}};
  EXPECT_EQ(parse(j).rope_scaling.type, RopeScalingType::kNone);
  j["rope_scaling"] = json::parse(R"({"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
      "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096, "type": "yarn"})");
  const RopeScaling y = parse(j).rope_scaling;
  EXPECT_EQ(y.type, RopeScalingType::kYarn);
  EXPECT_DOUBLE_EQ(y.factor, 40);
  EXPECT_EQ(y.original_max_position_embeddings, 4096);
  EXPECT_DOUBLE_EQ(y.mscale_all_dim, 1.0);
  EXPECT_FALSE(y.attention_factor.has_value());
  // transformers takes mscale / mscale_all_dim only when both are given (`if mscale and
  // mscale_all_dim`); with mscale absent the attention factor is 0.1 ln(factor) + 1, not the ratio
  // with an assumed mscale of 1 (which would be 1 here).
  EXPECT_FLOAT_EQ(RopeTable(parse(j)).attention_factor(), 1.0f);
  j["rope_scaling"].erase("mscale");
  EXPECT_EQ(parse(j).rope_scaling.mscale, 0.0);  // not given
  EXPECT_FLOAT_EQ(RopeTable(parse(j)).attention_factor(), float(0.1 * std::log(40.0) + 1.0));
  j["rope_scaling"] = {{"rope_type", "longrope"}, {"factor", 2}};
  expect_error([&] { parse(j); }, {"rope_scaling", "longrope", "not supported"});
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8}};
  expect_error([&] { parse(j); }, {"low_freq_factor", "missing"});
  j.erase("rope_scaling");
  j["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 2}, {"rope_theta", 123.0}};
  EXPECT_DOUBLE_EQ(parse(j).rope_theta, 123.0);
}

TEST(ModelConfigParse, TokenIdsIntOrList) {
  json j = base_llama();
  j["eos_token_id"] = {2, 5, 7};
  j["bos_token_id"] = 1;
  EXPECT_EQ(parse(j).eos_token_ids, (std::vector<int64_t>{2, 5, 7}));
  j["eos_token_id"] = "2";
  expect_error([&] { parse(j); }, {"eos_token_id"});
  j["eos_token_id"] = 999;
  expect_error([&] { parse(j); }, {"eos_token_id", "vocab_size"});
}

TEST(ModelConfigParse, QwenSlidingWindowAndMoeLayers) {
  json j = base_llama();
  j["architectures"] = {"Qwen2ForCausalLM"};
  j["model_type"] = "qwen2";
  j["sliding_window"] = 4096;
  j["use_sliding_window"] = false;
  EXPECT_FALSE(parse(j).sliding_window.has_value());
  j["use_sliding_window"] = true;
  j["max_window_layers"] = 1;
  EXPECT_EQ(parse(j).sliding_window, 4096);
  EXPECT_EQ(parse(j).sliding_window_from_layer, 1);

  json m = base_llama();
  m["architectures"] = {"Qwen3MoeForCausalLM"};
  m["model_type"] = "qwen3_moe";
  m["num_hidden_layers"] = 4;
  m["num_experts"] = 8;
  m["num_experts_per_tok"] = 2;
  m["moe_intermediate_size"] = 32;
  m["decoder_sparse_step"] = 2;
  m["mlp_only_layers"] = {3};
  const ModelConfig c = parse(m);
  EXPECT_FALSE(c.is_moe_layer(0));
  EXPECT_TRUE(c.is_moe_layer(1));
  EXPECT_FALSE(c.is_moe_layer(2));
  EXPECT_FALSE(c.is_moe_layer(3));  // mlp_only
  EXPECT_EQ(count_linear_modules(c), int64_t(linear_modules(c).size()));
  m["num_experts_per_tok"] = 9;
  expect_error([&] { parse(m); }, {"num_experts_per_tok"});
  m["num_experts_per_tok"] = 2;
  m["mlp_only_layers"] = {4};
  expect_error([&] { parse(m); }, {"mlp_only_layers"});
}

// Issue 16 (10): a config value that changes the math and that fp8lm does not
// implement is refused, naming the field and the value; it used to be ignored
// ("hidden_act": "relu6" ran as SiLU).
TEST(ModelConfigParse, UnimplementedValuesAreRefusedByName) {
  struct Case {
    const char* what;
    std::function<void(json&)> edit;
    std::vector<std::string> message;
  };
  const std::vector<Case> cases = {
      {"hidden_act", [](json& j) { j["hidden_act"] = "relu6"; }, {"config.json", "hidden_act", "relu6", "silu"}},
      {"hidden_act gelu", [](json& j) { j["hidden_act"] = "gelu_pytorch_tanh"; }, {"hidden_act", "gelu_pytorch_tanh"}},
      {"hidden_act type", [](json& j) { j["hidden_act"] = 3; }, {"hidden_act"}},
      {"hidden_activation", [](json& j) { j["hidden_activation"] = "gelu"; }, {"hidden_activation", "gelu"}},
      {"partial rotary", [](json& j) { j["partial_rotary_factor"] = 0.5; }, {"partial_rotary_factor", "0.5"}},
      {"partial rotary in rope_parameters",
       [](json& j) { j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e4}, {"partial_rotary_factor", 0.25}}; },
       {"rope_parameters", "partial_rotary_factor", "0.25"}},
      {"attn softcap", [](json& j) { j["attn_logit_softcapping"] = 50.0; }, {"attn_logit_softcapping", "50"}},
      {"final softcap", [](json& j) { j["final_logit_softcapping"] = 30.0; }, {"final_logit_softcapping", "30"}},
      {"llama4 qk norm", [](json& j) { j["use_qk_norm"] = true; }, {"use_qk_norm", "true"}},
      {"model_type", [](json& j) { j["model_type"] = "gemma2"; }, {"model_type", "gemma2", "LlamaForCausalLM", "llama"}},
      {"mistral attention bias",
       [](json& j) { j["architectures"] = {"MistralForCausalLM"}; j["model_type"] = "mistral"; j["attention_bias"] = true; },
       {"attention_bias", "true", "MistralForCausalLM"}},
      {"qwen3 mlp bias",
       [](json& j) { j["architectures"] = {"Qwen3ForCausalLM"}; j["model_type"] = "qwen3"; j["mlp_bias"] = true; },
       {"mlp_bias", "true", "Qwen3ForCausalLM"}},
      {"layer_types value", [](json& j) { j["layer_types"] = {"full_attention", "chunked_attention"}; },
       {"layer_types", "chunked_attention"}},
      {"layer_types length", [](json& j) { j["layer_types"] = {"full_attention"}; }, {"layer_types", "2"}},
      {"layer_types sliding without a window",
       [](json& j) { j["layer_types"] = {"full_attention", "sliding_attention"}; }, {"layer_types", "sliding_attention", "1"}},
      {"yarn truncate",
       [](json& j) { j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"truncate", false}}; },
       {"rope_scaling", "truncate", "false"}},
      {"mrope", [](json& j) { j["rope_scaling"] = {{"rope_type", "default"}, {"mrope_section", {16, 24, 24}}}; },
       {"rope_scaling", "mrope_section"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    json j = base_llama();
    c.edit(j);
    expect_error([&] { parse(j); }, c.message);
  }
  // What fp8lm implements still loads: SiLU under either name, a full
  // rotary, no softcapping, layer_types that agree with the window.
  json j = base_llama();
  j["hidden_act"] = "swish";
  j["partial_rotary_factor"] = 1.0;
  j["attn_logit_softcapping"] = nullptr;
  j["final_logit_softcapping"] = nullptr;
  j["layer_types"] = {"full_attention", "full_attention"};
  j["mlp_bias"] = true;
  EXPECT_TRUE(parse(j).mlp_bias);
  json q = base_llama();
  q["architectures"] = {"Qwen2ForCausalLM"};
  q["model_type"] = "qwen2";
  q["hidden_act"] = "silu";
  q["sliding_window"] = 64;
  q["use_sliding_window"] = true;
  q["max_window_layers"] = 1;
  q["layer_types"] = {"full_attention", "sliding_attention"};
  EXPECT_EQ(parse(q).sliding_window, 64);
  q["layer_types"] = {"sliding_attention", "sliding_attention"};
  expect_error([&] { parse(q); }, {"layer_types", "0", "full_attention"});
}

// Every config.json this project ships or tests with still loads.
TEST(ModelConfigParse, ShippedAndFixtureConfigsLoad) {
  int n = 0;
  for (const auto* root : {FP8LM_SOURCE_DIR "/models", FP8LM_SOURCE_DIR "/tests/fixtures"}) {
    for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
      if (e.path().filename() != "config.json") continue;
      const json j = io::read_json_file(e.path());
      if (!j.is_object() || !j.contains("architectures")) continue;  // not a model config (negative fixtures)
      SCOPED_TRACE(e.path().string());
      if (io::is_eagle3_config(j)) {  // an EAGLE-3 head: its own reader (test_eagle3_config.cpp)
        EXPECT_NO_THROW(io::parse_eagle3_config(j, e.path().string()));
        continue;
      }
      EXPECT_NO_THROW(io::parse_model_config(j, e.path().string()));
      ++n;
    }
  }
  EXPECT_GT(n, 10);
}

TEST(ModelConfigParse, MalformedInputIsNamed) {
  struct Case {
    const char* what;
    std::function<void(json&)> edit;
    std::vector<std::string> message;
  };
  const std::vector<Case> cases = {
      {"missing field", [](json& j) { j.erase("hidden_size"); }, {"config.json", "hidden_size", "missing"}},
      {"wrong type", [](json& j) { j["num_hidden_layers"] = "32"; }, {"num_hidden_layers", "integer", "string"}},
      {"zero", [](json& j) { j["vocab_size"] = 0; }, {"vocab_size"}},
      {"negative", [](json& j) { j["num_attention_heads"] = -4; }, {"num_attention_heads"}},
      {"huge", [](json& j) { j["hidden_size"] = int64_t{1} << 40; }, {"hidden_size"}},
      {"kv heads", [](json& j) { j["num_key_value_heads"] = 3; }, {"num_key_value_heads", "divide"}},
      {"head_dim", [](json& j) { j["hidden_size"] = 66; }, {"hidden_size", "head_dim"}},
      {"eps", [](json& j) { j["rms_norm_eps"] = 0; }, {"rms_norm_eps", "positive"}},
      {"eps type", [](json& j) { j["rms_norm_eps"] = "x"; }, {"rms_norm_eps"}},
      {"dtype", [](json& j) { j["torch_dtype"] = "int8"; }, {"torch_dtype", "int8"}},
      {"unknown arch", [](json& j) { j["architectures"] = {"GPT2LMHeadModel"}; },
       {"GPT2LMHeadModel", "Qwen3MoeForCausalLM"}},
      {"no arch", [](json& j) { j.erase("architectures"); }, {"architectures", "missing"}},
      {"arch type", [](json& j) { j["architectures"] = "LlamaForCausalLM"; }, {"architectures"}},
      {"two archs", [](json& j) { j["architectures"] = {"LlamaForCausalLM", "X"}; }, {"architectures"}},
      {"rope type", [](json& j) { j["rope_scaling"] = 3; }, {"rope_scaling"}},
      {"bool", [](json& j) { j["tie_word_embeddings"] = 1; }, {"tie_word_embeddings", "boolean"}},
      {"moe fields", [](json& j) { j["architectures"] = {"MixtralForCausalLM"}; j["model_type"] = "mixtral"; }, {"num_local_experts", "missing"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    json j = base_llama();
    c.edit(j);
    expect_error([&] { parse(j); }, c.message);
  }
  expect_error([] { parse(json::array()); }, {"config.json", "object"});
  expect_error([] { io::read_model_config("/nonexistent/model"); }, {"config.json", "cannot open"});
}

}  // namespace
}  // namespace fp8lm
