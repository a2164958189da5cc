// quantization_config -> per-module schemes and the KV-cache scheme: every
// fixture against what its producer configured (expected.json), real and
// documented configs of each format, and every unsupported or malformed input.
#include <gtest/gtest.h>

#include "checkpoint_fixtures.h"
#include "io/model_config_json.h"
#include "io/quant_config.h"
#include "spec/model_config.h"
#include "spec/model_tensors.h"

namespace fp8lm::io {
namespace {

using nlohmann::json;
using test::expect_error;

KvCacheDType kv_dtype_from(const std::string& s) {
  if (s == "auto") return KvCacheDType::kAuto;
  if (s == "fp8_e4m3") return KvCacheDType::kFP8E4M3;
  throw std::runtime_error("unknown kv dtype in expected.json: " + s);
}

TEST(QuantFixtures, SchemesEqualWhatTheProducerConfigured) {
  for (const std::string& name : test::checkpoint_fixture_names()) {
    SCOPED_TRACE(name);
    const auto dir = test::checkpoint_fixture(name);
    const json expected = read_json_file(dir / "expected.json");
    const CheckpointQuantization q = parse_quantization(read_json_file(dir / "config.json"), dir);
    EXPECT_EQ(q.format, expected.at("format").get<std::string>());
    for (const auto& [module, scheme] : expected.at("modules").items()) {
      SCOPED_TRACE(module);
      const LinearQuantScheme got = q.scheme_for(module);
      EXPECT_EQ(test::fields(got), test::fields(test::scheme_from(scheme)));
    }
    const json& kv = expected.at("kv_cache");
    EXPECT_EQ(q.kv_cache.dtype, kv_dtype_from(kv.at("dtype")));
    EXPECT_EQ(q.kv_cache.k_scale_name, kv.at("k_scale_name").get<std::string>());
    EXPECT_EQ(q.kv_cache.v_scale_name, kv.at("v_scale_name").get<std::string>());
    EXPECT_TRUE(q.kv_cache.skip_layers.empty());
  }
}

// Every scale the scheme names exists on disk with the shape its layout gives,
// and no quantized module lacks one: the scheme and the tensors agree.
TEST(QuantFixtures, EveryScaleTensorIsWhereTheSchemeSays) {
  for (const std::string& name : test::checkpoint_fixture_names()) {
    SCOPED_TRACE(name);
    const auto dir = test::checkpoint_fixture(name);
    const json tensors = read_json_file(dir / "expected.json").at("tensors");
    const ModelConfig c = read_model_config(dir);
    const CheckpointQuantization q = parse_quantization(read_json_file(dir / "config.json"), dir);
    for (const LinearModule& m : linear_modules(c)) {
      SCOPED_TRACE(m.name);
      const LinearQuantScheme s = q.scheme_for(m.name);
      const json& w = tensors.at(m.name + ".weight");
      EXPECT_EQ(w.at("dtype"), s.quantized ? "F8_E4M3" : "BF16");
      if (!s.quantized) {
        EXPECT_FALSE(tensors.contains(m.name + ".weight_scale"));
        EXPECT_FALSE(tensors.contains(m.name + ".weight_scale_inv"));
        continue;
      }
      const json& scale = tensors.at(m.name + "." + s.weight_scale_suffix);
      std::vector<int64_t> shape = scale.at("shape");
      int64_t numel = 1;
      for (int64_t d : shape) numel *= d;
      EXPECT_EQ(numel, s.weight_scales.scale_rows(m.out_features) * s.weight_scales.scale_cols(m.in_features));
      if (shape.size() == 2) {
        EXPECT_EQ(shape[0], s.weight_scales.scale_rows(m.out_features));
        EXPECT_EQ(shape[1], s.weight_scales.scale_cols(m.in_features));
      }
      EXPECT_EQ(tensors.contains(m.name + ".input_scale"), s.activation == ActivationQuant::kStaticTensor);
    }
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      for (const std::string& tmpl : {q.kv_cache.k_scale_name, q.kv_cache.v_scale_name}) {
        if (tmpl.empty()) continue;
        std::string n = tmpl;
        n.replace(n.find("{layer}"), 7, std::to_string(l));
        EXPECT_TRUE(tensors.contains(n)) << n;
      }
    }
  }
}

TEST(QuantFixtures, ModelOptLegacyFileIsFound) {
  const auto dir = test::checkpoint_fixture("modelopt_fp8_llama");
  const CheckpointQuantization q = parse_quantization(read_json_file(dir / "config.json"), dir);
  EXPECT_EQ(q.variant, "FP8");
  EXPECT_NE(q.source.find("hf_quant_config.json"), std::string::npos);
  // exclude_modules "model.layers.1.mlp.down*" is a wildcard.
  EXPECT_FALSE(q.scheme_for("model.layers.1.mlp.down_proj").quantized);
  EXPECT_TRUE(q.scheme_for("model.layers.0.mlp.down_proj").quantized);
}

// ---- real configs

TEST(QuantRealConfigs, DeepSeekR1Block) {
  const auto p = test::shared_hf_config("deepseek-ai__DeepSeek-R1");
  if (!p) GTEST_SKIP() << "../shared/data/hf absent";
  const CheckpointQuantization q = parse_quantization(read_json_file(*p), p->parent_path());
  EXPECT_EQ(q.format, "fp8");
  const LinearQuantScheme s = q.scheme_for("model.layers.3.mlp.experts.12.gate_proj");
  EXPECT_TRUE(s.quantized);
  EXPECT_EQ(s.weight_scales.granularity, Granularity::kBlock);
  EXPECT_EQ(s.weight_scales.group_rows, 128);
  EXPECT_EQ(s.weight_scales.group_cols, 128);
  EXPECT_EQ(s.weight_scale_suffix, "weight_scale_inv");
  EXPECT_EQ(s.activation, ActivationQuant::kDynamicGroup);
  EXPECT_EQ(s.activation_group, 128);
  EXPECT_FALSE(q.scheme_for("lm_head").quantized);
  EXPECT_FALSE(q.scheme_for("model.layers.3.mlp.gate").quantized);  // router
  EXPECT_EQ(q.kv_cache.dtype, KvCacheDType::kAuto);
}

TEST(QuantRealConfigs, UnquantizedConfigs) {
  for (const char* repo : {"meta-llama__Llama-3.1-8B", "Qwen__Qwen3-30B-A3B", "mistralai__Mixtral-8x7B-v0.1"}) {
    const auto p = test::shared_hf_config(repo);
    if (!p) GTEST_SKIP() << "../shared/data/hf absent";
    const CheckpointQuantization q = parse_quantization(read_json_file(*p), p->parent_path());
    EXPECT_EQ(q.format, "none");
    EXPECT_FALSE(q.scheme_for("model.layers.0.self_attn.q_proj").quantized);
  }
}

// ---- documented configs of each format (../shared/docs/fp8-checkpoint-formats.md)

CheckpointQuantization parse_qc(const std::string& qc_text) {
  json config = json::parse(R"({"architectures": ["LlamaForCausalLM"]})");
  config["quantization_config"] = json::parse(qc_text);
  return parse_quantization(config, "/model");
}

TEST(HfFp8, PerTensorStaticWithKv) {
  // amd/Llama-3.1-8B-Instruct-FP8-KV (§2.8)
  const auto q = parse_qc(R"({"activation_scheme": "static", "ignored_layers": ["lm_head"],
                              "kv_cache_scheme": "static", "quant_method": "fp8"})");
  const LinearQuantScheme s = q.scheme_for("model.layers.0.self_attn.q_proj");
  EXPECT_EQ(s.weight_scales.granularity, Granularity::kTensor);
  EXPECT_EQ(s.weight_scale_suffix, "weight_scale");
  EXPECT_EQ(s.activation, ActivationQuant::kStaticTensor);
  EXPECT_EQ(q.kv_cache.dtype, KvCacheDType::kFP8E4M3);
  EXPECT_EQ(q.kv_cache.k_scale_name, "model.layers.{layer}.self_attn.k_proj.output_scale");
}

TEST(HfFp8, PerTensorDynamicAndExclusions) {
  const auto q = parse_qc(R"({"activation_scheme": "dynamic", "quant_method": "fp8",
      "modules_to_not_convert": ["model.layers.0.self_attn", "model.layers.1.mlp.experts.3.up_proj"]})");
  EXPECT_EQ(q.scheme_for("model.layers.1.self_attn.q_proj").activation, ActivationQuant::kDynamicToken);
  EXPECT_FALSE(q.scheme_for("model.layers.0.self_attn.q_proj").quantized);  // inside a listed module
  EXPECT_TRUE(q.scheme_for("model.layers.10.self_attn.q_proj").quantized);   // not a prefix match
  // vLLM fuses a layer's experts: naming one keeps the whole block unquantized.
  EXPECT_FALSE(q.scheme_for("model.layers.1.mlp.experts.0.gate_proj").quantized);
  EXPECT_TRUE(q.scheme_for("model.layers.2.mlp.experts.3.up_proj").quantized);
  // ignored_layers wins over modules_to_not_convert, as in vLLM.
  const auto q2 = parse_qc(R"({"activation_scheme": "dynamic", "quant_method": "fp8",
      "ignored_layers": ["model.layers.1.self_attn.q_proj"], "modules_to_not_convert": ["model.layers.0.self_attn.q_proj"]})");
  EXPECT_TRUE(q2.scheme_for("model.layers.0.self_attn.q_proj").quantized);
  EXPECT_FALSE(q2.scheme_for("model.layers.1.self_attn.q_proj").quantized);
}

TEST(HfFp8, ScaleFormatAndErrors) {
  EXPECT_TRUE(parse_qc(R"({"activation_scheme": "dynamic", "quant_method": "fp8", "scale_fmt": "ue8m0",
                           "weight_block_size": [128, 128]})").power_of_two_scales);
  expect_error([] { parse_qc(R"({"activation_scheme": "static", "quant_method": "fp8", "weight_block_size": [128, 128]})"); },
               {"activation_scheme 'dynamic'"});
  expect_error([] { parse_qc(R"({"quant_method": "fp8"})"); }, {"activation_scheme", "missing"});
  expect_error([] { parse_qc(R"({"activation_scheme": "sometimes", "quant_method": "fp8"})"); }, {"activation_scheme"});
  expect_error([] { parse_qc(R"({"activation_scheme": "dynamic", "quant_method": "fp8", "weight_block_size": [128]})"); },
               {"weight_block_size"});
  expect_error([] { parse_qc(R"({"activation_scheme": "dynamic", "quant_method": "fp8", "weight_block_size": [0, 128]})"); },
               {"weight_block_size[0]"});
  expect_error([] { parse_qc(R"({"activation_scheme": "dynamic", "quant_method": "fp8", "fmt": "e5m2"})"); }, {"fmt", "e5m2"});
  expect_error([] { parse_qc(R"({"activation_scheme": "dynamic", "quant_method": "fp8", "scale_fmt": "e8"})"); }, {"scale_fmt"});
  expect_error([] { parse_qc(R"({"activation_scheme": "dynamic", "quant_method": "fp8", "kv_cache_scheme": 3})"); },
               {"kv_cache_scheme"});
  expect_error([] { parse_qc(R"({"activation_scheme": "dynamic", "quant_method": "fp8", "ignored_layers": "lm_head"})"); },
               {"ignored_layers", "list"});
  expect_error([] { parse_qc(R"({"activation_scheme": "dynamic", "quant_method": "fp8", "ignored_layers": [1]})"); },
               {"ignored_layers", "strings"});
}

const char* kCtPerTensorDynamic2024 = R"({
  "config_groups": {"group_0": {
    "input_activations": {"actorder": null, "block_structure": null, "dynamic": true, "group_size": null,
      "num_bits": 8, "observer": null, "observer_kwargs": {}, "strategy": "token", "symmetric": true, "type": "float"},
    "output_activations": null, "targets": ["Linear"],
    "weights": {"actorder": null, "block_structure": null, "dynamic": false, "group_size": null,
      "num_bits": 8, "observer": "minmax", "observer_kwargs": {}, "strategy": "tensor", "symmetric": true, "type": "float"}}},
  "format": "float-quantized", "global_compression_ratio": 1.4590163841019816, "ignore": ["lm_head"],
  "kv_cache_scheme": null, "quant_method": "compressed-tensors", "quantization_status": "compressed"})";

TEST(CompressedTensors, DocumentedConfigs) {
  const auto q = parse_qc(kCtPerTensorDynamic2024);
  const LinearQuantScheme s = q.scheme_for("model.layers.0.mlp.down_proj");
  EXPECT_EQ(s.weight_scales.granularity, Granularity::kTensor);
  EXPECT_EQ(s.activation, ActivationQuant::kDynamicToken);

  // 2024 files kept the block under `compression_config`.
  json config = json::parse(R"({"architectures": ["LlamaForCausalLM"]})");
  config["compression_config"] = json::parse(kCtPerTensorDynamic2024);
  EXPECT_EQ(parse_quantization(config, "/m").format, "compressed-tensors");
}

std::string ct_group(const std::string& weights, const std::string& input, const std::string& extra = "") {
  return R"({"quant_method": "compressed-tensors", "format": "float-quantized", )" + extra +
         R"("config_groups": {"group_0": {"targets": ["Linear"], "weights": )" + weights +
         R"(, "input_activations": )" + input + "}}}";
}

const std::string kW = R"({"num_bits": 8, "type": "float", "strategy": "channel", "dynamic": false})";

TEST(CompressedTensors, Strategies) {
  auto one = [](const std::string& w, const std::string& a) {
    return parse_qc(ct_group(w, a)).scheme_for("model.layers.0.self_attn.o_proj");
  };
  const auto wo = one(kW, "null");  // FP8 weight-only (W8A16)
  EXPECT_TRUE(wo.quantized);
  EXPECT_EQ(wo.activation, ActivationQuant::kNone);
  const auto g = one(R"({"num_bits": 8, "type": "float", "strategy": "group", "group_size": 64})",
                     R"({"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": true})");
  EXPECT_EQ(test::fields(g.weight_scales), test::fields(ScaleLayout::group(64)));
  EXPECT_EQ(g.activation, ActivationQuant::kDynamicTensor);
  // strategy inferred from group_size, and the legacy "128x128" block string.
  EXPECT_EQ(one(R"({"num_bits": 8, "type": "float", "group_size": -1})", "null").weight_scales.granularity,
            Granularity::kChannel);
  const auto b = one(R"({"num_bits": 8, "type": "float", "strategy": "block", "block_structure": "128x64"})",
                     R"({"num_bits": 8, "type": "float", "strategy": "group", "group_size": 64, "dynamic": true})");
  EXPECT_EQ(test::fields(b.weight_scales), test::fields(ScaleLayout::block(128, 64)));
  EXPECT_EQ(b.activation_group, 64);
}

TEST(CompressedTensors, TargetsAndIgnore) {
  const auto q = parse_qc(R"({"quant_method": "compressed-tensors", "format": "float-quantized",
    "ignore": ["lm_head", "re:.*mlp.gate$", "model.layers.1.self_attn.o_proj"],
    "config_groups": {
      "group_0": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
                  "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": true}},
      "group_1": {"targets": ["re:.*down_proj"], "weights": {"num_bits": 8, "type": "float", "strategy": "tensor"},
                  "input_activations": null},
      "group_2": {"targets": ["model.layers.0.mlp.down_proj"], "weights": {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]},
                  "input_activations": {"num_bits": 8, "type": "float", "strategy": "group", "group_size": 128, "dynamic": true}}}})");
  EXPECT_EQ(q.scheme_for("model.layers.0.mlp.up_proj").weight_scales.granularity, Granularity::kChannel);
  EXPECT_EQ(q.scheme_for("model.layers.1.mlp.down_proj").weight_scales.granularity, Granularity::kTensor);  // regex beats class
  EXPECT_EQ(q.scheme_for("model.layers.0.mlp.down_proj").weight_scales.granularity, Granularity::kBlock);   // name beats regex
  EXPECT_FALSE(q.scheme_for("model.layers.1.self_attn.o_proj").quantized);
  EXPECT_TRUE(q.scheme_for("model.layers.0.self_attn.o_proj").quantized);
  // re: is Python's re.match: anchored at the start only.
  const auto q2 = parse_qc(R"({"quant_method": "compressed-tensors", "ignore": ["re:layers"],
    "config_groups": {"g": {"targets": ["re:model\\.layers\\.0\\."], "weights": {"num_bits": 8, "type": "float"}}}})");
  EXPECT_TRUE(q2.scheme_for("model.layers.0.mlp.up_proj").quantized);
  EXPECT_FALSE(q2.scheme_for("model.layers.1.mlp.up_proj").quantized);  // no target matches
}

TEST(CompressedTensors, KvCacheNamesByVersion) {
  const std::string kv = R"("kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": false, "symmetric": true}, )";
  const auto now = parse_qc(ct_group(kW, "null", kv + R"("version": "0.12.2", )"));
  EXPECT_EQ(now.kv_cache.dtype, KvCacheDType::kFP8E4M3);
  EXPECT_EQ(now.kv_cache.k_scale_name, "model.layers.{layer}.self_attn.k_scale");
  const auto old = parse_qc(ct_group(kW, "null", kv + R"("version": "0.5.1", )"));
  EXPECT_EQ(old.kv_cache.v_scale_name, "model.layers.{layer}.self_attn.v_proj.output_scale");
  expect_error([&] { parse_qc(ct_group(kW, "null", R"("kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "attn_head"}, )")); },
               {"kv_cache_scheme", "attn_head"});
  expect_error([&] { parse_qc(ct_group(kW, "null", R"("kv_cache_scheme": {"num_bits": 8, "type": "int"}, )")); },
               {"kv_cache_scheme", "not FP8"});
}

TEST(CompressedTensors, NotFp8OrMalformed) {
  const std::string int4 = R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
    "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128}}}})";
  expect_error([&] { parse_qc(int4); }, {"pack-quantized", "not supported"});
  std::string int4_no_format = int4;
  int4_no_format.replace(int4_no_format.find(R"("format": "pack-quantized",)"), 27, "");
  expect_error([&] { parse_qc(int4_no_format); }, {"group_0.weights", "num_bits 4", "not FP8"});
  expect_error([&] { parse_qc(ct_group(R"({"num_bits": 8})", "null")); }, {"type 'int'", "not FP8"});
  expect_error([&] { parse_qc(ct_group(kW, R"({"num_bits": 8, "type": "float", "strategy": "token", "dynamic": false})")); },
               {"input_activations", "static strategy 'token'"});
  expect_error([&] { parse_qc(ct_group(R"({"num_bits": 8, "type": "float", "strategy": "block"})", "null")); },
               {"block_structure"});
  expect_error([&] { parse_qc(ct_group(R"({"num_bits": 8, "type": "float", "strategy": "group"})", "null")); },
               {"group_size"});
  expect_error([&] { parse_qc(ct_group(R"({"num_bits": 8, "type": "float", "symmetric": false})", "null")); },
               {"asymmetric"});
  expect_error([&] { parse_qc(ct_group(R"({"num_bits": 8, "type": "float", "dynamic": true})", "null")); },
               {"dynamic weight"});
  expect_error([&] { parse_qc(ct_group(kW, "null", R"("ignore": ["re:(unclosed"], )")); },
               {"ignore", "re:(unclosed", "not a valid regular expression"});
  expect_error([&] { parse_qc(ct_group(kW, "null", R"("ignore": [""], )")); }, {"empty module name"});
  expect_error([&] { parse_qc(R"({"quant_method": "compressed-tensors"})"); }, {"config_groups"});
  expect_error([&] { parse_qc(R"({"quant_method": "compressed-tensors", "config_groups": {"g": {"targets": [], "weights": {}}}})"); },
               {"targets"});
  expect_error([&] { parse_qc(R"({"quant_method": "compressed-tensors", "config_groups": {"g": {"targets": ["Linear"]}}})"); },
               {"no 'weights'"});
  expect_error([&] { parse_qc(ct_group(kW, "null", R"("sparsity_config": {"format": "sparse-24-bitmask"}, )")); },
               {"sparse"});
  expect_error([&] { parse_qc(ct_group(kW, "null", R"("transform_config": {"x": 1}, )")); }, {"transform_config"});
  std::string with_out = ct_group(kW, "null");
  with_out.replace(with_out.find(R"("targets")"), 0, R"("output_activations": {"num_bits": 8, "type": "float"}, )");
  expect_error([&] { parse_qc(with_out); }, {"output_activations"});
}

TEST(ModelOpt, FlatConfigJsonLayout) {
  const auto q = parse_qc(R"({"config_groups": {"group_0": {"input_activations": {"dynamic": false, "num_bits": 8, "type": "float"},
      "weights": {"dynamic": false, "num_bits": 8, "type": "float"}, "targets": ["Linear"]}},
    "ignore": ["lm_head", "*.mlp.gate"], "kv_cache_scheme": {"dynamic": false, "num_bits": 8, "type": "float"},
    "producer": {"name": "modelopt", "version": "0.29.0"}, "quant_algo": "FP8_PER_CHANNEL_PER_TOKEN", "quant_method": "modelopt"})");
  EXPECT_EQ(q.format, "modelopt");
  const LinearQuantScheme s = q.scheme_for("model.layers.0.mlp.up_proj");
  EXPECT_EQ(s.weight_scales.granularity, Granularity::kChannel);
  EXPECT_EQ(s.activation, ActivationQuant::kDynamicToken);
  EXPECT_EQ(q.kv_cache.k_scale_name, "model.layers.{layer}.self_attn.k_proj.k_scale");

  const auto pb = parse_qc(R"({"quant_method": "modelopt", "quant_algo": "fp8_pb_wo", "ignore": ["layers.1."]})");
  EXPECT_EQ(test::fields(pb.scheme_for("model.layers.0.mlp.up_proj").weight_scales), test::fields(ScaleLayout::block(128, 128)));
  EXPECT_FALSE(pb.scheme_for("model.layers.1.mlp.up_proj").quantized);  // substring, as vLLM
  // vLLM also recognises the nested block by its producer.
  const auto nested = parse_qc(R"({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "FP8"}})");
  EXPECT_EQ(nested.scheme_for("model.layers.0.mlp.up_proj").activation, ActivationQuant::kStaticTensor);
  expect_error([] { parse_qc(R"({"quant_method": "modelopt", "quant_algo": "NVFP4"})"); },
               {"NVFP4", "FP8_PB_WO"});
  expect_error([] { parse_qc(R"({"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": "INT8"})"); },
               {"kv_cache_quant_algo", "INT8"});
  expect_error([] { parse_qc(R"({"quant_method": "modelopt"})"); }, {"quant_algo", "missing"});
}

TEST(Fbgemm, SchemeAndRequiredKeys) {
  const auto q = parse_qc(R"({"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0, "modules_to_not_convert": null})");
  const LinearQuantScheme s = q.scheme_for("model.layers.0.mlp.up_proj");
  EXPECT_EQ(s.weight_scales.granularity, Granularity::kChannel);
  EXPECT_EQ(s.activation, ActivationQuant::kDynamicToken);
  EXPECT_FLOAT_EQ(s.activation_scale_upper_bound, 1200.0f);
  expect_error([] { parse_qc(R"({"quant_method": "fbgemm_fp8", "modules_to_not_convert": []})"); },
               {"activation_scale_ub", "missing"});
  expect_error([] { parse_qc(R"({"quant_method": "fbgemm_fp8", "activation_scale_ub": 1.0})"); },
               {"modules_to_not_convert", "missing"});
  expect_error([] { parse_qc(R"({"quant_method": "fbgemm_fp8", "activation_scale_ub": -1, "modules_to_not_convert": []})"); },
               {"activation_scale_ub", "positive"});
}

TEST(QuantConfig, UnsupportedFormatsAreNamed) {
  for (const char* m : {"awq", "gptq", "bitsandbytes", "mxfp4", "gguf", "quark", "ptpc_fp8"}) {
    SCOPED_TRACE(m);
    expect_error([&] { parse_qc(std::string(R"({"quant_method": ")") + m + R"(", "bits": 4})"); },
                 {std::string("'") + m + "'", "not supported", "compressed-tensors", "modelopt", "fbgemm_fp8"});
  }
  expect_error([] { parse_qc(R"({"bits": 4})"); }, {"quant_method", "missing"});
  expect_error([] { parse_qc(R"({"quant_method": 8})"); }, {"quant_method", "string"});
  json config = json::parse(R"({"quantization_config": [1, 2]})");
  expect_error([&] { parse_quantization(config, "/m"); }, {"/m/config.json", "quantization_config", "object"});
  expect_error([&] { parse_quantization(json::array(), "/m"); }, {"object"});
}

TEST(QuantConfig, NeverQuantizedModules) {
  for (const char* n : {"lm_head", "model.embed_tokens", "model.norm", "model.layers.0.input_layernorm",
                        "model.layers.0.self_attn.q_norm", "model.layers.0.mlp.gate", "model.layers.0.block_sparse_moe.gate"})
    EXPECT_TRUE(never_quantized(n)) << n;
  for (const char* n : {"model.layers.0.mlp.gate_proj", "model.layers.0.mlp.experts.0.gate_proj",
                        "model.layers.0.block_sparse_moe.experts.0.w1"})
    EXPECT_FALSE(never_quantized(n)) << n;
}

TEST(ModulePatterns, Fnmatch) {
  EXPECT_TRUE(fnmatch("model.layers.1.mlp.down_proj", "model.layers.1.mlp.down*"));
  EXPECT_TRUE(fnmatch("lm_head", "lm_head"));
  EXPECT_TRUE(fnmatch("model.layers.12.mlp.gate", "*.mlp.gate"));
  EXPECT_FALSE(fnmatch("model.layers.12.mlp.gate_proj", "*.mlp.gate"));
  EXPECT_TRUE(fnmatch("model.layers.3.x", "model.layers.[0-4].?"));
  EXPECT_FALSE(fnmatch("model.layers.5.x", "model.layers.[!5].x"));
  EXPECT_TRUE(fnmatch("a[b", "a[b"));  // unterminated bracket is literal
  EXPECT_TRUE(fnmatch("", "*"));
  EXPECT_FALSE(fnmatch("abc", ""));
  EXPECT_TRUE(fnmatch(std::string(200, 'a'), "*a*a*a*a*a*a*b*") == false);
}

}  // namespace
}  // namespace fp8lm::io
