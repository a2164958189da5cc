// EAGLE-3 heads' configs and checkpoints (io/eagle3_config_json.h) against the heads that
// speculators itself wrote (tools/make_eagle3_fixtures.py: Eagle3DraftModel.save_pretrained), the
// EAGLE authors' layout made from them by renaming, and hostile variants of both.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fixtures.h"
#include "io/checkpoint_files.h"
#include "io/eagle3_config_json.h"
#include "io/json_file.h"
#include "io/safetensors_writer.h"
#include "test_util.h"

namespace fp8lm {
namespace {

using nlohmann::json;
using test::ConfigDir;
using test::expect_error;

const char* const kCases[] = {"llama_basic", "llama_norm_before_residual", "llama_norm_output_fc_norm"};

std::filesystem::path case_dir(const std::string& name) { return test::fixture_path("eagle3/" + name); }

json case_json(const std::string& name) { return io::read_json_file(case_dir(name) / "case.json"); }
json config_json(const std::string& name) { return io::read_json_file(case_dir(name) / "config.json"); }

// A copy of a fixture head in a temporary directory: its config as `config` says, its tensors
// renamed by `rename` (return "" to drop one) and their bytes changed by `edit`.
struct HeadCopy {
  ConfigDir dir{""};
  HeadCopy(const std::string& name, const json& config,
           const std::function<std::string(const std::string&)>& rename = [](const std::string& n) { return n; },
           const std::function<void(const std::string&, std::vector<std::byte>&)>& edit = nullptr) {
    std::ofstream(dir.path() / "config.json") << config.dump();
    const io::CheckpointFiles files(case_dir(name));
    std::vector<std::vector<std::byte>> keep;
    std::vector<io::TensorToWrite> out;
    for (const std::string& n : files.tensor_names()) {
      const std::string to = rename(n);
      if (to.empty()) continue;
      const std::span<const std::byte> b = files.bytes(n);
      keep.emplace_back(b.begin(), b.end());
      if (edit) edit(n, keep.back());
      const io::TensorInfo& t = files.tensor(n);
      out.push_back({to, t.dtype, t.shape, keep.back(), nullptr});
    }
    io::write_safetensors(dir.path() / "model.safetensors", out, io::SafetensorsMetadata{{"format", "pt"}});
  }
  const std::filesystem::path& path() const { return dir.path(); }
};

TEST(Eagle3Config, SpeculatorsHeadsReadAsSpeculatorsWroteThem) {
  for (const char* name : kCases) {
    SCOPED_TRACE(name);
    const io::Eagle3Checkpoint ck = io::read_eagle3_checkpoint(case_dir(name));
    const Eagle3HeadConfig& c = ck.config;
    const json want = case_json(name);
    const json layer = config_json(name)["transformer_layer_config"];
    EXPECT_EQ(c.layout, Eagle3HeadConfig::Layout::kSpeculators);
    EXPECT_EQ(c.layer.hidden_size, layer["hidden_size"].get<int64_t>());
    EXPECT_EQ(c.layer.num_attention_heads, layer["num_attention_heads"].get<int>());
    EXPECT_EQ(c.layer.num_key_value_heads, layer["num_key_value_heads"].get<int>());
    EXPECT_EQ(c.layer.head_dim, layer["head_dim"].get<int64_t>());
    EXPECT_EQ(c.layer.intermediate_size, layer["intermediate_size"].get<int64_t>());
    EXPECT_EQ(c.layer.vocab_size, layer["vocab_size"].get<int64_t>());
    EXPECT_EQ(c.draft_vocab_size, config_json(name)["draft_vocab_size"].get<int64_t>());
    EXPECT_EQ(c.target_hidden_size, c.layer.hidden_size);
    EXPECT_EQ(c.aux_layer_ids, (std::vector<int>{1, 4, 7}));
    EXPECT_EQ(c.norm_before_residual, want["norm_before_residual"].get<bool>());
    EXPECT_EQ(c.norm_output, want["norm_output"].get<bool>());
    EXPECT_EQ(c.fc_norm, want["fc_norm"].get<bool>());
    EXPECT_TRUE(ck.own_embedding);  // speculators saves embed_tokens.weight
    // Every tensor the checkpoint holds is one the config asks for.
    const io::CheckpointFiles files(case_dir(name));
    EXPECT_EQ(files.tensor_count(), eagle3_tensors(c, true).size());
  }
}

TEST(Eagle3Config, TheEagleReleaseLayoutReadsTheSame) {
  // The authors' layout: a flat Llama config naming LlamaForCausalLMEagle3, the layer under
  // midlayer.*, no embedding (the target's).
  json flat = config_json("llama_basic")["transformer_layer_config"];
  flat["architectures"] = json::array({"LlamaForCausalLMEagle3"});
  flat["draft_vocab_size"] = config_json("llama_basic")["draft_vocab_size"];
  HeadCopy head("llama_basic", flat, [](const std::string& n) -> std::string {
    if (n == "embed_tokens.weight") return "";
    return n.rfind("layers.0.", 0) == 0 ? "midlayer." + n.substr(9) : n;
  });
  const io::Eagle3Checkpoint ck = io::read_eagle3_checkpoint(head.path());
  const io::Eagle3Checkpoint ref = io::read_eagle3_checkpoint(case_dir("llama_basic"));
  EXPECT_EQ(ck.config.layout, Eagle3HeadConfig::Layout::kEagleRelease);
  EXPECT_FALSE(ck.own_embedding);
  EXPECT_EQ(ck.config.layer.hidden_size, ref.config.layer.hidden_size);
  EXPECT_EQ(ck.config.draft_vocab_size, ref.config.draft_vocab_size);
  EXPECT_TRUE(ck.config.aux_layer_ids.empty());  // the release names none: vLLM's default then
  EXPECT_EQ(eagle3_default_aux_layers(32), (std::vector<int>{2, 16, 29}));
  EXPECT_TRUE(io::is_eagle3_config(flat));
  EXPECT_TRUE(io::is_eagle3_config(config_json("llama_basic")));
  EXPECT_FALSE(io::is_eagle3_config(config_json("llama_basic")["transformer_layer_config"]));
}

TEST(Eagle3Config, WhatTheHeadDoesNotImplementIsRefusedByName) {
  const json base = config_json("llama_basic");
  auto refused = [&](const std::function<void(json&)>& change, const std::string& what) {
    json c = base;
    change(c);
    expect_error([&] { io::parse_eagle3_config(c, "config.json"); }, what);
  };
  refused([](json& c) { c["speculators_model_type"] = "eagle"; }, "speculators model type 'eagle'");
  refused([](json& c) { c["speculators_model_type"] = "mlp_speculator"; }, "'mlp_speculator' is not implemented");
  refused([](json& c) { c["transformer_layer_config"]["model_type"] = "qwen3"; }, "model_type 'qwen3'");
  refused([](json& c) { c["transformer_layer_config"]["num_hidden_layers"] = 2; }, "2 decoder layers");
  refused([](json& c) { c["transformer_layer_config"]["sliding_window"] = 64; }, "sliding-window");
  refused([](json& c) { c["transformer_layer_config"]["attention_bias"] = true; }, "biases");
  refused([](json& c) { c["transformer_layer_config"]["layer_types"] = json::array({"sliding_attention"}); },
          "layer type \"sliding_attention\"");
  refused([](json& c) { c["transformer_layer_config"]["hidden_act"] = "gelu"; }, "hidden_act");
  refused([](json& c) { c.erase("transformer_layer_config"); }, "'transformer_layer_config' is missing");
  refused([](json& c) { c["norm_before_fc"] = true; }, "norm_before_fc");
  refused([](json& c) { c["draft_vocab_size"] = 0; }, "'draft_vocab_size' (0)");
  refused([](json& c) { c["draft_vocab_size"] = 257; }, "'draft_vocab_size' (257)");
  refused([](json& c) { c.erase("draft_vocab_size"); }, "'draft_vocab_size' is missing");
  refused([](json& c) { c["target_hidden_size"] = 128; }, "target_hidden_size 128");
  refused([](json& c) { c["eagle_aux_hidden_state_layer_ids"] = json::array(); }, "1 to 16 layers");
  refused([](json& c) { c["eagle_aux_hidden_state_layer_ids"] = json::array({1, -2, 3}); }, "holds -2");
  refused([](json& c) { c["eagle_aux_hidden_state_layer_ids"] = "1,2,3"; }, "must be an array");
  refused([](json& c) { c["norm_output"] = "yes"; }, "'norm_output'");
  expect_error([] { io::parse_eagle3_config(json{{"architectures", {"LlamaForCausalLM"}}}, "config.json"); },
               "not an EAGLE-3 head");
  expect_error([] { io::parse_eagle3_config(json::array(), "config.json"); }, "expected a JSON object");
}

TEST(Eagle3Config, CheckpointsThatDoNotMatchTheirConfigAreRefused) {
  const json base = config_json("llama_basic");
  auto drop = [](const std::string& gone) {
    return [gone](const std::string& n) { return n == gone ? std::string() : n; };
  };
  auto same = [](const std::string& n) { return n; };
  expect_error([&] { io::read_eagle3_checkpoint(HeadCopy("llama_basic", base, drop("lm_head.weight")).path()); },
               "no tensor 'lm_head.weight'");
  expect_error([&] { io::read_eagle3_checkpoint(HeadCopy("llama_basic", base, drop("d2t")).path()); }, "no tensor 'd2t'");
  expect_error(
      [&] { io::read_eagle3_checkpoint(HeadCopy("llama_basic", base, drop("layers.0.hidden_norm.weight")).path()); },
      "'layers.0.hidden_norm.weight'");
  // A config whose sizes the tensors do not have.
  json wide = base;
  wide["transformer_layer_config"]["intermediate_size"] = 128;
  expect_error([&] { io::read_eagle3_checkpoint(HeadCopy("llama_basic", wide).path()); },
               "'layers.0.mlp.gate_proj.weight' has shape [96, 64], the config gives [128, 64]");
  // d2t pointing outside the target vocabulary, two draft ids on one target id, t2d disagreeing.
  auto set_d2t = [](int64_t id, int64_t value) {
    return [id, value](const std::string& n, std::vector<std::byte>& b) {
      if (n == "d2t") std::memcpy(b.data() + id * 8, &value, 8);
    };
  };
  expect_error([&] { io::read_eagle3_checkpoint(HeadCopy("llama_basic", base, same, set_d2t(5, 100000)).path()); },
               "d2t maps draft id 5 outside the target vocabulary");
  auto collide = [](const std::string& n, std::vector<std::byte>& b) {  // draft id 1 onto draft id 0's target
    if (n != "d2t") return;
    int64_t first = 0;
    std::memcpy(&first, b.data(), 8);
    const int64_t offset = first - 1;
    std::memcpy(b.data() + 8, &offset, 8);
  };
  expect_error([&] { io::read_eagle3_checkpoint(HeadCopy("llama_basic", base, same, collide).path()); },
               "d2t maps two draft ids to target id");
  expect_error(
      [&] {
        io::read_eagle3_checkpoint(HeadCopy("llama_basic", base, same, [](const std::string& n, std::vector<std::byte>& b) {
                                     if (n == "t2d")
                                       for (std::byte& x : b) x = std::byte{1};
                                   }).path());
      },
      "which d2t never reaches");
}

}  // namespace
}  // namespace fp8lm
