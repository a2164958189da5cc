// fp8lm quantize against LLM Compressor (tools/make_quantize_fixtures.py):
// the data-free presets byte for byte (config.json and model.safetensors),
// the static preset's weights byte for byte and its calibrated scales within
// the float32-vs-BF16 forward difference; online quantization giving the same
// bytes and logits as the written checkpoint; errors that leave nothing behind.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "cpp/checkpoint_fixtures.h"
#include "cpp/model_fixtures.h"
#include "cpp/test_util.h"
#include "io/checkpoint_files.h"
#include "numerics/fp8_format.h"
#include "quantize/compressed_tensors_writer.h"

namespace fp8lm::test {
namespace {

namespace fs = std::filesystem;

fs::path quantize_fixture(const std::string& name) { return fs::path(FP8LM_FIXTURE_DIR) / "quantize" / name; }

// A fresh path under the system temp dir, removed at the end of the test.
class TempOut {
 public:
  explicit TempOut(const std::string& tag)
      : dir_(fs::temp_directory_path() / ("fp8lm-test-quantize-" + std::to_string(::getpid()) + "-" + tag)) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~TempOut() { fs::remove_all(dir_); }
  fs::path out() const { return dir_ / "out"; }
  const fs::path& dir() const { return dir_; }

 private:
  fs::path dir_;
};

std::vector<uint8_t> file_bytes(const fs::path& p) { return read_bytes(p.string()); }

quantize::QuantizeSummary write(const std::string& model, quantize::Preset preset, const fs::path& out,
                                const calibration::CalibrationStats* calib = nullptr, bool kv = false) {
  const io::ModelSpec spec = io::read_model_spec(model_fixture_dir(model));
  quantize::QuantizeOptions o;
  o.preset = preset;
  o.kv_cache_fp8 = kv;
  return quantize::write_compressed_tensors(spec, out, o, calib);
}

struct DataFree {
  const char* model;
  const char* preset;
};

class DataFreePresets : public ::testing::TestWithParam<DataFree> {};

TEST_P(DataFreePresets, FilesEqualLlmCompressorByteForByte) {
  TempOut tmp(std::string(GetParam().model) + GetParam().preset);
  write(GetParam().model, quantize::parse_preset(GetParam().preset), tmp.out());
  const fs::path ref = quantize_fixture(std::string(GetParam().model) + "_" + GetParam().preset);
  EXPECT_EQ(file_bytes(tmp.out() / "model.safetensors"), file_bytes(ref / "model.safetensors"));
  EXPECT_EQ(file_bytes(tmp.out() / "config.json"), file_bytes(ref / "config.json"));
}

// --quantization fp8:channel / fp8:block at load: the same codes and scales as
// the written checkpoint, so both paths run identical weights.
TEST_P(DataFreePresets, OnlineQuantizationGivesTheSameBytes) {
  const bool block = std::string(GetParam().preset) == "FP8_BLOCK";
  io::LoadOverrides o;
  o.quantization = block ? io::OnlineQuant::kBlock : io::OnlineQuant::kChannelToken;
  const io::ModelSpec spec = io::read_model_spec(model_fixture_dir(GetParam().model), o);
  const loader::HostModelWeights w = loader::load_host_weights(spec);
  const io::CheckpointFiles ref(quantize_fixture(std::string(GetParam().model) + "_" + GetParam().preset));
  const char* names[] = {"q", "k", "v", "o", "gate", "up", "down"};
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const loader::HostLayer& l = w.layers[i];
    const weights::LinearWeight* lin[] = {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down};
    const char* modules[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                             "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
    for (size_t j = 0; j < 7; ++j) {
      SCOPED_TRACE(std::string("layer ") + std::to_string(i) + " " + names[j]);
      const std::string p = "model.layers." + std::to_string(i) + "." + modules[j];
      const std::span<const std::byte> codes = ref.bytes(p + ".weight");
      ASSERT_TRUE(lin[j]->is_fp8());
      ASSERT_EQ(codes.size(), size_t(lin[j]->n * lin[j]->k));
      EXPECT_EQ(std::memcmp(codes.data(), lin[j]->data, codes.size()), 0);
      const std::span<const std::byte> scales = ref.bytes(p + ".weight_scale");
      ASSERT_EQ(scales.size(), 2 * lin[j]->scales.size());
      for (size_t s = 0; s < lin[j]->scales.size(); ++s) {
        uint16_t b;
        std::memcpy(&b, scales.data() + 2 * s, 2);
        EXPECT_EQ(bf16_to_float(b), lin[j]->scales[s]) << "scale " << s;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DataFreePresets,
                         ::testing::Values(DataFree{"llama", "FP8_DYNAMIC"}, DataFree{"llama", "FP8_BLOCK"},
                                           DataFree{"qwen3", "FP8_DYNAMIC"}, DataFree{"qwen3", "FP8_BLOCK"}),
                         [](const auto& p) { return std::string(p.param.model) + "_" + p.param.preset; });

TEST(QuantizeRoundTrip, WrittenCheckpointRunsLikeOnlineQuantization) {
  TempOut tmp("roundtrip");
  write("llama", quantize::Preset::kFp8Dynamic, tmp.out());
  io::LoadOverrides online;
  online.quantization = io::OnlineQuant::kChannelToken;
  LoadedModel a(model_fixture_dir("llama"), online, 2);
  LoadedModel b(tmp.out(), {}, 2);
  for (const auto& p : model_manifest()["models"]["llama"]["prompts"]) {
    const std::vector<float> x = a.prompt_logits(ids_of(p)), y = b.prompt_logits(ids_of(p));
    ASSERT_EQ(x.size(), y.size());
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0);
  }
}

// FP8 (static) + FP8 KV cache: weights are data-free, so byte-identical; the
// calibrated scales come from fp8lm's float32 forward where LLM Compressor ran
// the model in BF16 (each op rounded): the fixture README measured that a
// float32 forward lands within 1 BF16 ulp of its input scales (≤ 0.6 %), so
// 2 BF16 ulps (2^-7 relative) is the bound.
TEST(QuantizeStatic, WeightsExactAndInputScalesWithinTheForwardDifference) {
  const nlohmann::json ids = nlohmann::json::parse(file_bytes(quantize_fixture("calibration_ids.json")));
  std::vector<std::vector<int32_t>> samples;
  for (const auto& s : ids["input_ids"]) samples.push_back(s.get<std::vector<int32_t>>());
  ASSERT_EQ(samples.size(), 4u);
  LoadedModel lm(model_fixture_dir("llama"), {}, 2);
  const calibration::CalibrationStats stats = calibration::calibrate(*lm.model, *lm.ops, samples);
  EXPECT_EQ(stats.tokens, 4 * 32);

  TempOut tmp("static");
  write("llama", quantize::Preset::kFp8, tmp.out(), &stats, /*kv=*/true);
  const io::CheckpointFiles got(tmp.out()), ref(quantize_fixture("llama_FP8_kv"));
  ASSERT_EQ(got.tensor_names(), ref.tensor_names());
  for (const std::string& name : ref.tensor_names()) {
    SCOPED_TRACE(name);
    const io::TensorInfo &g = got.tensor(name), &r = ref.tensor(name);
    ASSERT_EQ(g.dtype, r.dtype);
    ASSERT_EQ(g.shape, r.shape);
    const auto gb = got.bytes(name), rb = ref.bytes(name);
    const bool calibrated = name.ends_with("input_scale") || name.ends_with("k_scale") || name.ends_with("v_scale");
    if (!calibrated) {
      EXPECT_EQ(std::memcmp(gb.data(), rb.data(), gb.size()), 0);
      continue;
    }
    uint16_t gv, rv;
    std::memcpy(&gv, gb.data(), 2);
    std::memcpy(&rv, rb.data(), 2);
    const float gs = bf16_to_float(gv), rs = bf16_to_float(rv);
    if (name.ends_with("input_scale")) {
      EXPECT_NEAR(gs, rs, 0x1p-7 * rs);
    } else {
      // LLM Compressor's KV observer is an exponential moving average that the
      // first calibration sequence dominates; fp8lm takes the maximum over all
      // of them (amax / 448, the documented meaning of k_scale), so it is never
      // below LLM Compressor's value beyond the forward difference.
      EXPECT_GE(gs, rs * (1.0f - 0x1p-7f));
    }
  }
  // The calibrated checkpoint loads and runs with its FP8 KV cache.
  LoadedModel q(tmp.out(), {}, 1);
  EXPECT_EQ(q.cache->layer_format(0).element, backend::KvElement::kE4M3);
  EXPECT_EQ(q.cache->layer_format(0).k_scale, round_to_bf16(calibration::kv_scale(stats.k_amax[0])));
  EXPECT_FALSE(q.prompt_logits(samples[0]).empty());
}

// MoE models against LLM Compressor (tools/make_quantize_moe_fixtures.py, and
// make_checkpoint_fixtures.py for Qwen3-MoE FP8_BLOCK): every expert
// quantized, the routers and lm_head kept, `ignore` by module name in the
// model's module order.
struct MoeCase {
  const char* source;     // tests/fixtures/checkpoints/<source>
  const char* preset;
  std::vector<std::string> ignore;
  const char* reference;  // relative to tests/fixtures
};

class MoePresets : public ::testing::TestWithParam<MoeCase> {};

fs::path write_moe(const MoeCase& m, const fs::path& out) {
  const io::ModelSpec spec = io::read_model_spec(checkpoint_fixture(m.source));
  quantize::QuantizeOptions o;
  o.preset = quantize::parse_preset(m.preset);
  o.ignore = m.ignore;
  quantize::write_compressed_tensors(spec, out, o, nullptr);
  return fs::path(FP8LM_FIXTURE_DIR) / m.reference;
}

TEST_P(MoePresets, FilesEqualLlmCompressorByteForByte) {
  TempOut tmp("moe");
  const fs::path ref = write_moe(GetParam(), tmp.out());
  EXPECT_EQ(file_bytes(tmp.out() / "model.safetensors"), file_bytes(ref / "model.safetensors"));
  EXPECT_EQ(file_bytes(tmp.out() / "config.json"), file_bytes(ref / "config.json"));
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, MoePresets,
    ::testing::Values(MoeCase{"qwen3_moe_bf16", "FP8_BLOCK", {}, "checkpoints/ct_fp8_block_qwen3_moe"},
                      MoeCase{"qwen3_moe_bf16", "FP8_DYNAMIC", {}, "quantize/moe_qwen3_FP8_DYNAMIC"},
                      MoeCase{"qwen3_moe_bf16",
                              "FP8_DYNAMIC",
                              {R"(re:.*layers\.1\.mlp\.experts\..*)", "model.layers.0.self_attn.o_proj"},
                              "quantize/moe_qwen3_FP8_DYNAMIC_ignore"}),
    [](const auto& p) { return std::string(p.param.preset) + (p.param.ignore.empty() ? "" : "_ignore") + "_" +
                               std::to_string(p.index); });

// Mixtral: LLM Compressor 0.14 (transformers 5.17) writes the experts as
// block_sparse_moe.experts.E.gate_proj / up_proj / down_proj, names that neither
// fp8lm nor vLLM's Mixtral loader read; fp8lm keeps the checkpoint's w1 / w3 / w2.
// With that renaming every tensor is LLM Compressor's byte for byte, and
// config.json is its file byte for byte.
TEST(QuantizeMoe, MixtralEqualsLlmCompressorTensorByTensor) {
  TempOut tmp("mixtral");
  const fs::path ref = write_moe({"mixtral_bf16", "FP8_BLOCK", {}, "quantize/moe_mixtral_FP8_BLOCK"}, tmp.out());
  EXPECT_EQ(file_bytes(tmp.out() / "config.json"), file_bytes(ref / "config.json"));
  const io::CheckpointFiles got(tmp.out()), want(ref);
  ASSERT_EQ(got.tensor_names().size(), want.tensor_names().size());
  for (const std::string& name : got.tensor_names()) {
    SCOPED_TRACE(name);
    std::string producer = name;
    for (const auto& [w, proj] : {std::pair{".w1.", ".gate_proj."}, {".w3.", ".up_proj."}, {".w2.", ".down_proj."}})
      if (const size_t at = producer.find(w); at != std::string::npos) producer.replace(at, 4, proj);
    ASSERT_NE(want.find(producer), nullptr);
    EXPECT_EQ(got.tensor(name).dtype, want.tensor(producer).dtype);
    EXPECT_EQ(got.tensor(name).shape, want.tensor(producer).shape);
    const auto a = got.bytes(name), b = want.bytes(producer);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size()), 0);
  }
}

// The written MoE checkpoint runs exactly like --quantization fp8 of its
// source (the same experts' codes and scales, so the same logits bit for
// bit), for both MoE architectures (qwen3_moe has a dense layer too) and both
// data-free presets.
// The checkpoint `written` from `src` computes the logits online quantization of `src` with the
// same preset computes, bit for bit, on `prompts` (a fixture manifest's prompts).
void expect_runs_like_online(const fs::path& src, const fs::path& written, quantize::Preset preset,
                             const nlohmann::json& prompts) {
  io::LoadOverrides online;
  online.quantization =
      preset == quantize::Preset::kFp8Block ? io::OnlineQuant::kBlock : io::OnlineQuant::kChannelToken;
  LoadedModel a(src, online, 2);
  LoadedModel b(written, {}, 2);
  for (const auto& p : prompts) {
    const std::vector<float> x = a.prompt_logits(ids_of(p)), y = b.prompt_logits(ids_of(p));
    ASSERT_EQ(x.size(), y.size());
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0);
  }
}

TEST(QuantizeMoe, WrittenCheckpointRunsLikeOnlineQuantization) {
  for (const char* model : {"qwen3_moe", "mixtral"})
    for (const quantize::Preset preset : {quantize::Preset::kFp8Dynamic, quantize::Preset::kFp8Block}) {
      SCOPED_TRACE(std::string(model) + " " + std::string(quantize::name(preset)));
      TempOut tmp(std::string("moe-roundtrip-") + model);
      const fs::path dir = model_fixture_dir(std::string("moe/") + model);
      quantize::QuantizeOptions o;
      o.preset = preset;
      quantize::write_compressed_tensors(io::read_model_spec(dir), tmp.out(), o, nullptr);
      const loader::HostModelWeights w = loader::load_host_weights(io::read_model_spec(tmp.out()));
      ASSERT_TRUE(w.layers[0].moe);
      EXPECT_EQ(w.layers[0].moe->router.element, ElementType::kBF16);
      EXPECT_EQ(w.layers[0].moe->down[1].element, ElementType::kE4M3);
      expect_runs_like_online(dir, tmp.out(), preset, moe_manifest()["models"][model]["prompts"]);
    }
}

// A layer's experts run as one block with one scheme (loader::check_supported):
// --ignore keeping some of them is refused by name, before anything is
// written; the static preset with a calibration that did not observe the
// experts is refused by the first expert's name.
TEST(QuantizeMoe, SplitExpertsAndUncalibratedExpertsRefused) {
  TempOut tmp("moe-errors");
  const io::ModelSpec spec = io::read_model_spec(checkpoint_fixture("mixtral_bf16"));
  quantize::QuantizeOptions o;
  o.ignore = {"model.layers.1.block_sparse_moe.experts.2.w3"};
  std::string e = error_of([&] { quantize::write_compressed_tensors(spec, tmp.out(), o, nullptr); });
  EXPECT_NE(e.find("--ignore keeps model.layers.1.block_sparse_moe.experts.2.w3 in bfloat16 but not "
                   "model.layers.1.block_sparse_moe.experts.0.w1"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("the experts of layer 1 as one block with one scheme"), std::string::npos) << e;
  // The pattern the message suggests keeps the whole block, and is accepted.
  o.ignore = {R"(re:model\.layers\.1\.block_sparse_moe\.experts\..*)"};
  const quantize::QuantizeSummary s = quantize::write_compressed_tensors(spec, tmp.out(), o, nullptr);
  EXPECT_EQ(s.quantized.size(), 4u + 12u + 4u);  // layer 0's attention and experts, layer 1's attention
  fs::remove_all(tmp.out());

  o.ignore.clear();
  o.preset = quantize::Preset::kFp8;
  const calibration::CalibrationStats none;
  e = error_of([&] { quantize::write_compressed_tensors(spec, tmp.out(), o, &none); });
  EXPECT_NE(e.find("calibration recorded no input range for 'model.layers.0.self_attn.q_proj'"), std::string::npos)
      << e;
  for (const auto& entry : fs::directory_iterator(tmp.dir())) ADD_FAILURE() << "left behind: " << entry.path();
}

// Static FP8 on Qwen3-MoE against LLM Compressor (moe_qwen3_FP8, calibrated on
// calibration_ids.json, every expert over every token: oneshot's default
// moe_calibrate_all_experts). Weights are data-free: byte-identical. Input
// scales: LLM Compressor 0.14 ran this model's calibration WITHOUT a causal
// mask (eager attention given attention_mask=None; fixture README, "MoE"),
// fp8lm with the model's causal attention, so only the scales no attention
// reaches are comparable: layer 0's q/k/v input, within the dense convention's
// 2 BF16 ulps. Every expert's gate/up scale is then the layer's one block-input
// range (all tokens), as in the fixture; down scales differ per expert.
TEST(QuantizeMoe, StaticPresetAgainstLlmCompressor) {
  const nlohmann::json ids = nlohmann::json::parse(file_bytes(quantize_fixture("calibration_ids.json")));
  std::vector<std::vector<int32_t>> samples;
  for (const auto& s : ids["input_ids"]) samples.push_back(s.get<std::vector<int32_t>>());
  LoadedModel lm(checkpoint_fixture("qwen3_moe_bf16"), {}, 2);
  const io::ModelSpec& spec = lm.spec;
  lm.model->observe_all_experts(loader::load_host_weights(spec));
  const calibration::CalibrationStats stats = calibration::calibrate(*lm.model, *lm.ops, samples);

  TempOut tmp("moe-static");
  quantize::QuantizeOptions o;
  o.preset = quantize::Preset::kFp8;
  quantize::write_compressed_tensors(spec, tmp.out(), o, &stats);
  const fs::path ref_dir = quantize_fixture("moe_qwen3_FP8");
  const io::CheckpointFiles got(tmp.out()), ref(ref_dir);
  EXPECT_EQ(file_bytes(tmp.out() / "config.json"), file_bytes(ref_dir / "config.json"));
  ASSERT_EQ(got.tensor_names(), ref.tensor_names());
  const auto scale_of = [](const io::CheckpointFiles& f, const std::string& name) {
    uint16_t b;
    std::memcpy(&b, f.bytes(name).data(), 2);
    return bf16_to_float(b);
  };
  for (const std::string& name : ref.tensor_names()) {
    SCOPED_TRACE(name);
    ASSERT_EQ(got.tensor(name).dtype, ref.tensor(name).dtype);
    ASSERT_EQ(got.tensor(name).shape, ref.tensor(name).shape);
    if (name.ends_with("input_scale")) continue;
    const auto gb = got.bytes(name), rb = ref.bytes(name);
    EXPECT_EQ(std::memcmp(gb.data(), rb.data(), gb.size()), 0);
  }
  for (const char* p : {"q_proj", "k_proj", "v_proj"}) {
    const std::string n = std::string("model.layers.0.self_attn.") + p + ".input_scale";
    EXPECT_NEAR(scale_of(got, n), scale_of(ref, n), 0x1p-7 * scale_of(ref, n)) << n;
  }
  for (int layer = 0; layer < 2; ++layer) {
    const std::string e = "model.layers." + std::to_string(layer) + ".mlp.experts.";
    const float block = scale_of(got, e + "0.gate_proj.input_scale");
    std::set<float> downs;
    for (int x = 0; x < 4; ++x) {
      for (const char* p : {"gate_proj", "up_proj"}) {
        EXPECT_EQ(scale_of(got, e + std::to_string(x) + "." + p + ".input_scale"), block);
        EXPECT_EQ(scale_of(ref, e + std::to_string(x) + "." + p + ".input_scale"),
                  scale_of(ref, e + "0.gate_proj.input_scale"));
      }
      downs.insert(scale_of(got, e + std::to_string(x) + ".down_proj.input_scale"));
    }
    EXPECT_EQ(downs.size(), 4u);
  }
  // The written checkpoint loads (static scales: the block's largest per vLLM's rule) and runs.
  LoadedModel q(tmp.out(), {}, 1);
  const std::vector<float> logits = q.prompt_logits(samples[0]);
  ASSERT_FALSE(logits.empty());
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
}

// DeepSeek-V3 (MLA + DeepSeekMoE) against LLM Compressor
// (tools/make_quantize_deepseek_fixtures.py): every nn.Linear quantized — the
// MLA projections including the 144-row kv_a_proj_with_mqa (a ragged block), the
// routed and the shared experts; the router (not an nn.Linear in transformers)
// kept and listed; e_score_correction_bias written in float32 (a float32 buffer
// in transformers); `ignore` in module order (shared experts after the router);
// the multi-token-prediction layer not written. Where a fixture keeps only the
// header of LLM Compressor's model.safetensors (to stay small), the header —
// names, dtypes, shapes and offsets — is compared byte for byte and the file's
// size checked against it; the tensor bytes are those of the whole-file cases.
struct DeepseekCase {
  const char* source;  // tests/fixtures/models/deepseek/<source>
  const char* preset;
  std::vector<std::string> ignore;
  const char* reference;  // tests/fixtures/quantize/<reference>
  bool whole_file;        // model.safetensors committed, else its header only
};

void PrintTo(const DeepseekCase& d, std::ostream* os) { *os << d.reference; }

class DeepseekPresets : public ::testing::TestWithParam<DeepseekCase> {};

TEST_P(DeepseekPresets, FilesEqualLlmCompressorByteForByte) {
  const DeepseekCase& d = GetParam();
  TempOut tmp(std::string("deepseek-") + d.reference);
  const io::ModelSpec spec = io::read_model_spec(model_fixture_dir(std::string("deepseek/") + d.source));
  quantize::QuantizeOptions o;
  o.preset = quantize::parse_preset(d.preset);
  o.ignore = d.ignore;
  const quantize::QuantizeSummary s = quantize::write_compressed_tensors(spec, tmp.out(), o, nullptr);
  const fs::path ref = quantize_fixture(d.reference);
  EXPECT_EQ(file_bytes(tmp.out() / "config.json"), file_bytes(ref / "config.json"));
  const std::vector<uint8_t> got = file_bytes(tmp.out() / "model.safetensors");
  if (d.whole_file) {
    EXPECT_EQ(got, file_bytes(ref / "model.safetensors"));
  } else {
    const std::vector<uint8_t> header = file_bytes(ref / "model.safetensors.header");
    ASSERT_GE(got.size(), header.size());
    EXPECT_EQ(std::vector<uint8_t>(got.begin(), got.begin() + std::ptrdiff_t(header.size())), header);
    // The file ends where the header's last tensor does.
    const auto json = nlohmann::json::parse(header.begin() + 8, header.end());
    uint64_t end = 0;
    for (const auto& [name, t] : json.items())
      if (name != "__metadata__") end = std::max(end, t["data_offsets"][1].get<uint64_t>());
    EXPECT_EQ(got.size(), header.size() + end);
  }
  // The MTP layer (only deepseek_v3_no_q_lora has one on disk) is reported, not written.
  EXPECT_EQ(s.dropped.empty(), std::string(d.source) != "deepseek_v3_no_q_lora");
  for (const std::string& t : s.dropped) EXPECT_TRUE(t.starts_with("model.layers.2.")) << t;
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, DeepseekPresets,
    ::testing::Values(DeepseekCase{"deepseek_v3", "FP8_DYNAMIC", {}, "deepseek_v3_FP8_DYNAMIC", true},
                      DeepseekCase{"deepseek_v3", "FP8_BLOCK", {}, "deepseek_v3_FP8_BLOCK", true},
                      DeepseekCase{"deepseek_v3",
                                   "FP8_DYNAMIC",
                                   {R"(re:.*layers\.2\.mlp\.experts\..*)", R"(re:.*layers\.1\.mlp\.shared_experts\..*)",
                                    "model.layers.1.self_attn.kv_a_proj_with_mqa"},
                                   "deepseek_v3_FP8_DYNAMIC_ignore",
                                   false},
                      DeepseekCase{"deepseek_v3_no_q_lora", "FP8_BLOCK", {}, "deepseek_v3_no_q_lora_FP8_BLOCK", false}),
    [](const auto& p) { return std::string(p.param.reference); });

// The written DeepSeek-V3 checkpoint runs exactly like --quantization fp8 of its
// source: the same codes and scales (the float32 correction bias equal to the
// BF16 one widened; the MTP layer, which the model never runs, not written), so
// the same logits bit for bit.
TEST(QuantizeDeepseek, WrittenCheckpointRunsLikeOnlineQuantization) {
  for (const char* model : {"deepseek_v3", "deepseek_v3_no_q_lora"})
    for (const quantize::Preset preset : {quantize::Preset::kFp8Dynamic, quantize::Preset::kFp8Block}) {
      SCOPED_TRACE(std::string(model) + " " + std::string(quantize::name(preset)));
      TempOut tmp("deepseek-roundtrip");
      const fs::path dir = model_fixture_dir(std::string("deepseek/") + model);
      quantize::QuantizeOptions o;
      o.preset = preset;
      quantize::write_compressed_tensors(io::read_model_spec(dir), tmp.out(), o, nullptr);
      expect_runs_like_online(dir, tmp.out(), preset, deepseek_manifest()["models"][model]["prompts"]);
    }
}

// What is not checked against LLM Compressor for MLA is refused by name,
// before anything is written (check_supported runs before calibration too).
TEST(QuantizeDeepseek, StaticPresetAndKvCacheRefusedByName) {
  TempOut tmp("deepseek-errors");
  const io::ModelSpec spec = io::read_model_spec(model_fixture_dir("deepseek/deepseek_v3"));
  quantize::QuantizeOptions o;
  o.preset = quantize::Preset::kFp8;
  const calibration::CalibrationStats none;
  std::string e = error_of([&] { quantize::check_supported(spec, o); });
  EXPECT_NE(e.find("--scheme FP8 (static activation scales) is not supported for DeepseekV3ForCausalLM"),
            std::string::npos)
      << e;
  EXPECT_EQ(error_of([&] { quantize::write_compressed_tensors(spec, tmp.out(), o, &none); }), e);
  o.preset = quantize::Preset::kFp8Block;
  o.kv_cache_fp8 = true;
  e = error_of([&] { quantize::write_compressed_tensors(spec, tmp.out(), o, &none); });
  EXPECT_NE(e.find("--kv-cache-dtype fp8 is not supported for DeepseekV3ForCausalLM"), std::string::npos) << e;
  for (const auto& entry : fs::directory_iterator(tmp.dir())) ADD_FAILURE() << "left behind: " << entry.path();
}

TEST(QuantizeErrors, RefusedWithoutTouchingAnything) {
  TempOut tmp("errors");
  const io::ModelSpec spec = io::read_model_spec(model_fixture_dir("llama"));
  quantize::QuantizeOptions o;
  // The output exists: refused, the directory left as it was.
  fs::create_directories(tmp.out());
  std::ofstream(tmp.out() / "keep.txt") << "mine";
  EXPECT_THROW(quantize::write_compressed_tensors(spec, tmp.out(), o, nullptr), Error);
  EXPECT_TRUE(fs::exists(tmp.out() / "keep.txt"));
  fs::remove_all(tmp.out());
  // A static preset or an FP8 KV cache without calibration.
  o.preset = quantize::Preset::kFp8;
  EXPECT_THROW(quantize::write_compressed_tensors(spec, tmp.out(), o, nullptr), Error);
  o.preset = quantize::Preset::kFp8Dynamic;
  o.kv_cache_fp8 = true;
  EXPECT_THROW(quantize::write_compressed_tensors(spec, tmp.out(), o, nullptr), Error);
  o.kv_cache_fp8 = false;
  // An invalid --ignore regex; an FP8 checkpoint as input.
  o.ignore = {"re:("};
  EXPECT_THROW(quantize::write_compressed_tensors(spec, tmp.out(), o, nullptr), Error);
  o.ignore.clear();
  const io::ModelSpec fp8 = io::read_model_spec(quantize_fixture("llama_FP8_DYNAMIC"));
  EXPECT_THROW(quantize::write_compressed_tensors(fp8, tmp.out(), o, nullptr), Error);
  EXPECT_THROW(quantize::parse_preset("FP4"), Error);
  // Nothing was left behind: no output, no staging directory.
  EXPECT_FALSE(fs::exists(tmp.out()));
  for (const auto& e : fs::directory_iterator(tmp.dir())) ADD_FAILURE() << "left behind: " << e.path();
}

TEST(QuantizeIgnore, KeptModulesStayBf16AndAreListed) {
  TempOut tmp("ignore");
  const io::ModelSpec spec = io::read_model_spec(model_fixture_dir("llama"));
  quantize::QuantizeOptions o;
  o.ignore = {"re:.*down_proj$", "model.layers.0.self_attn.q_proj"};
  const quantize::QuantizeSummary s = quantize::write_compressed_tensors(spec, tmp.out(), o, nullptr);
  EXPECT_EQ(s.quantized.size(), 14u - 3u);
  const io::ModelSpec out = io::read_model_spec(tmp.out());
  for (const io::LinearLayerSpec& l : out.linears) {
    const bool kept = l.module.name.ends_with("down_proj") || l.module.name == "model.layers.0.self_attn.q_proj" ||
                      l.module.name == "lm_head";
    EXPECT_EQ(l.scheme.quantized, !kept) << l.module.name;
  }
}

}  // namespace
}  // namespace fp8lm::test
