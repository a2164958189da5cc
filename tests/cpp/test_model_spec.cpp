// A checkpoint checked against its config and schemes: every producer's
// fixture is accepted with the schemes the producer recorded, and every kind
// of damage — a tensor missing, one too many, a wrong dtype or shape, a scale
// of the wrong granularity — is refused with the tensor named.
#include <gtest/gtest.h>

#include <functional>

#include "checkpoint_fixtures.h"
#include "io/model_spec.h"
#include "io/safetensors_writer.h"
#include "safetensors_test_util.h"

namespace fp8lm::io {
namespace {

using test::checkpoint_fixture;

// Copies a fixture's config files and rewrites its tensors through `edit`.
void copy_with_edit(const std::string& fixture, const std::filesystem::path& out,
                    const std::function<void(std::vector<TensorToWrite>&)>& edit) {
  const std::filesystem::path src = checkpoint_fixture(fixture);
  for (const auto& e : std::filesystem::directory_iterator(src))
    if (e.path().extension() == ".json" && e.path().filename() != "expected.json")
      std::filesystem::copy_file(e.path(), out / e.path().filename());
  const CheckpointFiles files(src);
  std::vector<TensorToWrite> tensors;
  for (const std::string& name : files.tensor_names()) {
    const TensorInfo& t = files.tensor(name);
    tensors.push_back({name, t.dtype, t.shape, files.bytes(name), {}});
  }
  edit(tensors);
  write_safetensors(out / "model.safetensors", tensors, SafetensorsMetadata{{"format", "pt"}});
}

std::string spec_error(const std::filesystem::path& dir, const LoadOverrides& o = {}) {
  return test::error_message([&] { (void)read_model_spec(dir, o); });
}

TEST(ModelSpec, EveryFixtureMatchesWhatItsProducerRecorded) {
  for (const std::string& name : test::checkpoint_fixture_names()) {
    const nlohmann::json expected = read_json_file(checkpoint_fixture(name) / "expected.json");
    const ModelSpec spec = read_model_spec(checkpoint_fixture(name));
    EXPECT_EQ(spec.quantization.format, expected["format"].get<std::string>()) << name;
    ASSERT_EQ(spec.linears.size(), expected["modules"].size()) << name;
    for (const LinearLayerSpec& l : spec.linears) {
      ASSERT_TRUE(expected["modules"].contains(l.module.name)) << name << ": " << l.module.name;
      EXPECT_EQ(test::fields(l.scheme), test::fields(test::scheme_from(expected["modules"][l.module.name])))
          << name << ": " << l.module.name;
    }
    int64_t on_disk = 0;
    for (const auto& [dtype, use] : spec.dtypes) on_disk += use.tensors;
    EXPECT_EQ(on_disk, int64_t(expected["tensors"].size())) << name;
  }
}

TEST(ModelSpec, MemoryEstimateCountsBytes) {
  const ModelSpec spec = read_model_spec(checkpoint_fixture("ct_fp8_dynamic_llama"));
  const MemoryEstimate m = estimate_memory(spec);
  EXPECT_EQ(m.weights_bf16, uint64_t(spec.parameter_count) * 2);
  // FP8: each quantized [N, K] weight is N·K bytes + N float32 channel scales
  uint64_t want = 0;
  int64_t linear_params = 0;
  for (const LinearLayerSpec& l : spec.linears) {
    const auto nk = uint64_t(l.module.out_features * l.module.in_features);
    linear_params += int64_t(nk);
    want += l.scheme.quantized ? nk + 4 * uint64_t(l.module.out_features) : 2 * nk;
  }
  want += 2 * uint64_t(spec.parameter_count - linear_params);
  EXPECT_EQ(m.weights_fp8, want);
  const ModelConfig& c = spec.config;
  EXPECT_EQ(m.kv_per_token_bf16, uint64_t(2 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim * 2));
  EXPECT_EQ(m.kv_per_token_fp8 * 2, m.kv_per_token_bf16);
}

TEST(ModelSpec, OnlineQuantizationChangesSchemesNotTensors) {
  LoadOverrides o;
  o.quantization = OnlineQuant::kBlock;
  const ModelSpec spec = read_model_spec(checkpoint_fixture("llama_bf16"), o);
  for (const LinearLayerSpec& l : spec.linears) {
    if (l.module.kind == LinearKind::kLmHead) {
      EXPECT_FALSE(l.scheme.quantized);
      continue;
    }
    EXPECT_TRUE(l.scheme.quantized) << l.module.name;
    EXPECT_FALSE(l.scheme.weights_serialized) << l.module.name;
    EXPECT_EQ(l.scheme.weight_scales, ScaleLayout::block(128, 128)) << l.module.name;
    EXPECT_TRUE(l.weight_scale_name.empty()) << "an online scheme reads no scale tensor";
  }
  const std::string err = spec_error(checkpoint_fixture("ct_fp8_dynamic_llama"), o);
  EXPECT_NE(err.find("already"), std::string::npos) << err;
}

struct Damage {
  const char* fixture;
  const char* what;
  std::function<void(std::vector<TensorToWrite>&)> edit;
  std::vector<std::string> message_parts;
};

std::vector<TensorToWrite>::iterator find(std::vector<TensorToWrite>& ts, const std::string& name) {
  auto it = std::find_if(ts.begin(), ts.end(), [&](const TensorToWrite& t) { return t.name == name; });
  if (it == ts.end()) throw std::runtime_error("fixture has no tensor " + name);
  return it;
}

TEST(ModelSpec, DamagedCheckpointsAreRefusedWithTheTensorNamed) {
  static const std::byte zeros[4096] = {};
  const std::vector<Damage> cases = {
      {"llama_bf16", "missing weight",
       [](auto& ts) { ts.erase(find(ts, "model.layers.1.mlp.up_proj.weight")); },
       {"missing tensor 'model.layers.1.mlp.up_proj.weight'"}},
      {"llama_bf16", "unexpected tensor",
       [](auto& ts) { ts.push_back({"model.layers.0.mlp.extra.weight", DType::kBF16, {2}, std::span(zeros, 4), {}}); },
       {"unexpected tensor 'model.layers.0.mlp.extra.weight'"}},
      {"llama_bf16", "wrong dtype",
       [](auto& ts) {
         auto it = find(ts, "model.norm.weight");
         it->dtype = DType::kI16;
       },
       {"'model.norm.weight' is I16"}},
      {"ct_fp8_dynamic_llama", "missing weight scale",
       [](auto& ts) { ts.erase(find(ts, "model.layers.0.self_attn.q_proj.weight_scale")); },
       {"missing tensor 'model.layers.0.self_attn.q_proj.weight_scale'"}},
      {"ct_fp8_dynamic_llama", "scale of the wrong granularity",
       [](auto& ts) {
         auto it = find(ts, "model.layers.0.self_attn.q_proj.weight_scale");
         it->shape = {1};
         it->data = std::span(zeros, 2);
       },
       {"'model.layers.0.self_attn.q_proj.weight_scale' has shape [1]", "expected [64, 1]"}},
      {"ct_fp8_dynamic_llama", "FP8 weight stored as BF16",
       [](auto& ts) {
         auto it = find(ts, "model.layers.1.mlp.down_proj.weight");
         const uint64_t n = it->shape[0], k = it->shape[1];
         static std::vector<std::byte> wide;
         wide.assign(n * k * 2, std::byte{0});
         it->dtype = DType::kBF16;
         it->data = wide;
       },
       {"'model.layers.1.mlp.down_proj.weight' is BF16, expected F8_E4M3"}},
      {"ct_fp8_static_kv_qwen3", "missing KV scale",
       [](auto& ts) { ts.erase(find(ts, "model.layers.1.self_attn.v_scale")); },
       {"missing tensor 'model.layers.1.self_attn.v_scale'"}},
      {"ct_fp8_static_kv_qwen3", "missing static input scale",
       [](auto& ts) { ts.erase(find(ts, "model.layers.0.mlp.gate_proj.input_scale")); },
       {"missing tensor 'model.layers.0.mlp.gate_proj.input_scale'"}},
  };
  for (const Damage& d : cases) {
    test::ScratchDir dir;
    copy_with_edit(d.fixture, dir.path(), d.edit);
    const std::string err = spec_error(dir.path());
    for (const std::string& part : d.message_parts)
      EXPECT_NE(err.find(part), std::string::npos) << d.what << ": '" << part << "' not in:\n" << err;
    EXPECT_NE(err.find(dir.path().string()), std::string::npos) << d.what << ": directory not named";
  }
}

TEST(ModelSpec, NotAModelDirectory) {
  test::ScratchDir dir;
  EXPECT_NE(spec_error(dir.path() / "nope").find("not a model directory"), std::string::npos);
  EXPECT_NE(spec_error(dir.path()).find("config.json: cannot open file"), std::string::npos);
}

}  // namespace
}  // namespace fp8lm::io
