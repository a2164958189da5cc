// Command-line load overrides: flag parsing and their effect on the
// checkpoint's quantization, including every refused combination.
#include <gtest/gtest.h>

#include "checkpoint_fixtures.h"
#include "io/load_overrides.h"
#include "io/model_config_json.h"
#include "spec/model_config.h"
#include "spec/model_tensors.h"

namespace fp8lm::io {
namespace {

using test::expect_error;

CheckpointQuantization fixture_quant(const std::string& name) {
  const auto dir = test::checkpoint_fixture(name);
  return parse_quantization(read_json_file(dir / "config.json"), dir);
}

TEST(OverrideFlags, Quantization) {
  EXPECT_EQ(parse_online_quant("fp8"), OnlineQuant::kChannelToken);
  EXPECT_EQ(parse_online_quant("fp8:channel"), OnlineQuant::kChannelToken);
  EXPECT_EQ(parse_online_quant("fp8:tensor"), OnlineQuant::kPerTensor);
  EXPECT_EQ(parse_online_quant("fp8:block"), OnlineQuant::kBlock);
  for (const char* bad : {"", "FP8", "fp8:", "fp8:token", "int8", "fp8:block:128"})
    expect_error([&] { parse_online_quant(bad); }, {"--quantization", "fp8:block"});
}

TEST(OverrideFlags, KvCacheDtype) {
  EXPECT_EQ(parse_kv_cache_dtype("auto"), KvCacheDType::kAuto);
  EXPECT_EQ(parse_kv_cache_dtype("bf16"), KvCacheDType::kBF16);
  EXPECT_EQ(parse_kv_cache_dtype("fp8"), KvCacheDType::kFP8E4M3);
  EXPECT_EQ(parse_kv_cache_dtype("fp8_e4m3"), KvCacheDType::kFP8E4M3);
  EXPECT_EQ(parse_kv_cache_dtype("fp8_e5m2"), KvCacheDType::kFP8E5M2);
  for (const char* bad : {"", "fp16", "FP8", "e4m3", "fp8_e4m3fn", "int8"})
    expect_error([&] { parse_kv_cache_dtype(bad); }, {"--kv-cache-dtype", std::string("'") + bad + "'", "fp8_e5m2"});
}

TEST(OverrideFlags, LayerList) {
  EXPECT_EQ(parse_layer_list("0,1,31"), (std::vector<int>{0, 1, 31}));
  EXPECT_EQ(parse_layer_list("7"), std::vector<int>{7});
  for (const char* bad : {"", ",", "1,,2", "1,", "-1", "a", "1.5", " 1", "99999999999", "1,1"})
    expect_error([&] { parse_layer_list(bad); }, {"--kv-cache-dtype-skip-layers"});
}

TEST(ApplyOverrides, OnlineQuantizationOfABf16Checkpoint) {
  const auto dir = test::checkpoint_fixture("qwen3_moe_bf16");
  const ModelConfig c = read_model_config(dir);
  for (OnlineQuant oq : {OnlineQuant::kChannelToken, OnlineQuant::kPerTensor, OnlineQuant::kBlock}) {
    CheckpointQuantization q = fixture_quant("qwen3_moe_bf16");
    LoadOverrides o;
    o.quantization = oq;
    o.keep_bf16 = {"model.layers.0.self_attn", "re:.*experts\\.3\\."};
    apply_overrides(q, o, c.num_hidden_layers);
    EXPECT_TRUE(q.online);
    EXPECT_EQ(q.format, "none");
    for (const LinearModule& m : linear_modules(c)) {
      SCOPED_TRACE(m.name);
      const LinearQuantScheme s = q.scheme_for(m.name);
      const bool kept = m.name.starts_with("model.layers.0.self_attn.") ||
                        m.name.find("experts.3.") != std::string::npos;
      const bool expect_quantized = !kept && m.kind != LinearKind::kRouter && m.kind != LinearKind::kLmHead;
      EXPECT_EQ(s.quantized, expect_quantized);
      if (expect_quantized) {
        EXPECT_EQ(test::fields(s), test::fields(online_scheme(oq)));
      }
    }
  }
  const LinearQuantScheme ch = online_scheme(OnlineQuant::kChannelToken);
  EXPECT_FALSE(ch.weights_serialized);
  EXPECT_EQ(ch.weight_scales.granularity, Granularity::kChannel);
  EXPECT_EQ(ch.activation, ActivationQuant::kDynamicToken);
  const LinearQuantScheme bl = online_scheme(OnlineQuant::kBlock);
  EXPECT_EQ(bl.weight_scales.group_rows, 128);
  EXPECT_EQ(bl.activation, ActivationQuant::kDynamicGroup);
  EXPECT_EQ(online_scheme(OnlineQuant::kPerTensor).activation, ActivationQuant::kDynamicTensor);
}

TEST(ApplyOverrides, OnlineQuantizationOfAnFp8CheckpointIsRefused) {
  for (const char* name : {"ct_fp8_dynamic_llama", "hf_fp8_block_llama", "modelopt_fp8_llama", "fbgemm_fp8_llama"}) {
    SCOPED_TRACE(name);
    CheckpointQuantization q = fixture_quant(name);
    LoadOverrides o;
    o.quantization = OnlineQuant::kChannelToken;
    expect_error([&] { apply_overrides(q, o); }, {"--quantization fp8:channel", "already quantized", q.format});
  }
  CheckpointQuantization q = fixture_quant("llama_bf16");
  LoadOverrides o;
  o.quantization = OnlineQuant::kBlock;
  apply_overrides(q, o);
  expect_error([&] { apply_overrides(q, o); }, {"already quantized"});  // twice
}

TEST(ApplyOverrides, KeepBf16NeedsOnlineQuantization) {
  CheckpointQuantization fp8 = fixture_quant("ct_fp8_dynamic_llama");
  LoadOverrides o;
  o.keep_bf16 = {"lm_head"};
  expect_error([&] { apply_overrides(fp8, o); }, {"--keep-bf16", "compressed-tensors"});
  CheckpointQuantization none = fixture_quant("llama_bf16");
  expect_error([&] { apply_overrides(none, o); }, {"--keep-bf16", "--quantization fp8"});
  o.quantization = OnlineQuant::kChannelToken;
  o.keep_bf16 = {"re:[bad"};
  expect_error([&] { apply_overrides(none, o); }, {"--keep-bf16", "re:[bad", "regular expression"});
}

TEST(ApplyOverrides, KvCache) {
  // A checkpoint with calibrated KV scales: FP8 unless told otherwise.
  CheckpointQuantization q = fixture_quant("ct_fp8_static_kv_qwen3");
  LoadOverrides o;
  o.kv_cache_dtype = KvCacheDType::kAuto;
  apply_overrides(q, o);
  EXPECT_EQ(q.kv_cache.dtype, KvCacheDType::kFP8E4M3);
  o.kv_cache_skip_layers = {1, 0};
  apply_overrides(q, o, 2);
  EXPECT_EQ(q.kv_cache.skip_layers, (std::vector<int>{0, 1}));
  EXPECT_EQ(q.kv_cache.k_scale_name, "model.layers.{layer}.self_attn.k_scale");

  CheckpointQuantization e5 = fixture_quant("ct_fp8_static_kv_qwen3");
  o = {};
  o.kv_cache_dtype = KvCacheDType::kFP8E5M2;
  apply_overrides(e5, o);
  EXPECT_EQ(e5.kv_cache.dtype, KvCacheDType::kFP8E5M2);
  EXPECT_TRUE(e5.kv_cache.k_scale_name.empty());

  CheckpointQuantization bf = fixture_quant("ct_fp8_static_kv_qwen3");
  o.kv_cache_dtype = KvCacheDType::kBF16;
  apply_overrides(bf, o);
  EXPECT_EQ(bf.kv_cache.dtype, KvCacheDType::kBF16);

  // FP8 KV on a checkpoint without scales: scale 1.0 (no names), as vLLM.
  CheckpointQuantization none = fixture_quant("llama_bf16");
  o.kv_cache_dtype = KvCacheDType::kFP8E4M3;
  o.kv_cache_skip_layers = {1};
  apply_overrides(none, o, 2);
  EXPECT_EQ(none.kv_cache.dtype, KvCacheDType::kFP8E4M3);
  EXPECT_TRUE(none.kv_cache.k_scale_name.empty());
  EXPECT_EQ(none.kv_cache.skip_layers, std::vector<int>{1});
  EXPECT_EQ(none.format, "none");

  CheckpointQuantization fresh = fixture_quant("llama_bf16");
  o.kv_cache_skip_layers = {2};
  expect_error([&] { apply_overrides(fresh, o, 2); }, {"--kv-cache-dtype-skip-layers", "layer 2", "2 layers"});
  o.kv_cache_dtype.reset();
  o.kv_cache_skip_layers = {0};
  expect_error([&] { apply_overrides(fresh, o, 2); }, {"--kv-cache-dtype-skip-layers", "not FP8", "--kv-cache-dtype fp8"});
}

}  // namespace
}  // namespace fp8lm::io
