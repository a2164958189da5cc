// --load-format dummy (loader/dummy_weights.h, io::read_model_spec_dummy):
// for every fixture checkpoint and override the dummy weights have exactly the
// storage, shapes, scale grids and activation settings the real loader gives
// for the same config; they are deterministic for a seed (whatever the thread
// count); their standard deviation is sigma in BF16 and dequantized FP8 alike;
// the model runs on them with finite logits, without a tokenizer; and a bad
// directory or config is refused with a named error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/error.h"
#include "cpp/model_fixtures.h"
#include "cpp/test_util.h"
#include "engine/runtime.h"
#include "loader/dummy_weights.h"
#include "numerics/fp8_format.h"

namespace fp8lm::test {
namespace {

namespace fs = std::filesystem;

fs::path checkpoint(const std::string& name) { return fs::path(FP8LM_FIXTURE_DIR) / "checkpoints" / name; }

using test::ConfigDir;

std::string llama_config(int hidden, int intermediate, int layers, int vocab, bool tied = false,
                         const std::string& arch = "LlamaForCausalLM", const std::string& extra = "") {
  return R"({"architectures": [")" + arch + R"("], "model_type": "llama", "hidden_size": )" + std::to_string(hidden) +
         R"(, "intermediate_size": )" + std::to_string(intermediate) + R"(, "num_hidden_layers": )" +
         std::to_string(layers) + R"(, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": )" +
         std::to_string(vocab) + R"(, "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
          "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": )" +
         (tied ? "true" : "false") + extra + "}";
}

io::LoadOverrides dummy(io::LoadOverrides o = {}) {
  o.load_format = io::LoadFormat::kDummy;
  return o;
}

// ---- the same storage as the real loader ------------------------------------------

void expect_same_linear(const weights::LinearWeight& real, const weights::LinearWeight& d, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(int(real.element), int(d.element));
  EXPECT_EQ(real.n, d.n);
  EXPECT_EQ(real.k, d.k);
  EXPECT_EQ(real.bias.size(), d.bias.size());
  EXPECT_NE(d.data, nullptr);
  if (!real.is_fp8()) return;
  EXPECT_EQ(real.format(), d.format());
  EXPECT_EQ(real.scale_layout, d.scale_layout);
  EXPECT_EQ(real.scales.size(), d.scales.size());
  EXPECT_EQ(int(real.activation), int(d.activation));
  EXPECT_EQ(real.activation_group, d.activation_group);
  EXPECT_EQ(real.activation_scale_upper_bound, d.activation_scale_upper_bound);
  EXPECT_EQ(real.input_scale > 0.0f, d.input_scale > 0.0f);
}

struct SameCase {
  std::string checkpoint;
  std::string quantization;  // "" = none
  bool fp8_embeddings = false;
  std::string kv = "";
};

void PrintTo(const SameCase& c, std::ostream* os) {
  *os << c.checkpoint << " " << (c.quantization.empty() ? "as is" : c.quantization)
      << (c.fp8_embeddings ? " --fp8-embeddings" : "") << (c.kv.empty() ? "" : " kv " + c.kv);
}

class DummyMatchesLoader : public ::testing::TestWithParam<SameCase> {};

TEST_P(DummyMatchesLoader, SpecAndWeights) {
  const SameCase& c = GetParam();
  io::LoadOverrides o;
  if (!c.quantization.empty()) o.quantization = io::parse_online_quant(c.quantization);
  if (!c.kv.empty()) o.kv_cache_dtype = io::parse_kv_cache_dtype(c.kv);
  o.fp8_embeddings = c.fp8_embeddings;
  const fs::path dir = checkpoint(c.checkpoint);
  const io::ModelSpec real = io::read_model_spec(dir, o);
  const io::ModelSpec d = io::read_model_spec(dir, dummy(o));
  ASSERT_TRUE(d.dummy_weights);
  EXPECT_EQ(d.files, nullptr);
  EXPECT_EQ(real.parameter_count, d.parameter_count);
  EXPECT_EQ(real.quantization.describe(), d.quantization.describe());
  EXPECT_EQ(real.kv_cache().dtype, d.kv_cache().dtype);
  EXPECT_TRUE(d.kv_cache().k_scale_name.empty());
  const io::MemoryEstimate mr = io::estimate_memory(real), md = io::estimate_memory(d);
  EXPECT_EQ(mr.weights_bf16, md.weights_bf16);
  EXPECT_EQ(mr.weights_fp8, md.weights_fp8);
  ASSERT_EQ(real.linears.size(), d.linears.size());
  for (size_t i = 0; i < real.linears.size(); ++i) {
    EXPECT_EQ(real.linears[i].module.name, d.linears[i].module.name);
    EXPECT_EQ(real.linears[i].scheme, d.linears[i].scheme) << real.linears[i].module.name;
  }

  const loader::HostModelWeights wr = loader::load_host_weights(real);
  const loader::HostModelWeights wd = loader::load_host_weights(d);  // dispatches to dummy_host_weights
  expect_same_linear(wr.embedding, wd.embedding, "embedding");
  expect_same_linear(wr.lm_head, wd.lm_head, "lm_head");
  EXPECT_EQ(wr.lm_head.data == wr.embedding.data, wd.lm_head.data == wd.embedding.data);
  EXPECT_EQ(wr.final_norm.size(), wd.final_norm.size());
  ASSERT_EQ(wr.layers.size(), wd.layers.size());
  for (size_t i = 0; i < wr.layers.size(); ++i) {
    const loader::HostLayer &a = wr.layers[i], &b = wd.layers[i];
    EXPECT_EQ(a.input_norm.size(), b.input_norm.size());
    EXPECT_EQ(a.post_attention_norm.size(), b.post_attention_norm.size());
    EXPECT_EQ(a.q_norm.size(), b.q_norm.size());
    EXPECT_EQ(a.k_norm.size(), b.k_norm.size());
    for (float x : b.input_norm) ASSERT_EQ(x, 1.0f);
    for (float x : b.q_norm) ASSERT_EQ(x, 1.0f);
    const std::string p = "layer " + std::to_string(i) + " ";
    expect_same_linear(a.q, b.q, p + "q");
    expect_same_linear(a.k, b.k, p + "k");
    expect_same_linear(a.v, b.v, p + "v");
    expect_same_linear(a.o, b.o, p + "o");
    expect_same_linear(a.gate, b.gate, p + "gate");
    expect_same_linear(a.up, b.up, p + "up");
    expect_same_linear(a.down, b.down, p + "down");
  }
  EXPECT_TRUE(wd.k_scales.empty());
  EXPECT_TRUE(wd.v_scales.empty());
  EXPECT_EQ(loader::resident_weight_bytes(wr), loader::resident_weight_bytes(wd));
}

std::vector<SameCase> same_cases() {
  std::vector<SameCase> out;
  for (const char* m : {"llama_bf16", "qwen2_bf16", "qwen3_bf16", "mistral_bf16"})
    for (const char* q : {"", "fp8", "fp8:tensor", "fp8:channel", "fp8:block", "fp8:weight-only"}) {
      out.push_back({m, q});
      if (std::string(q) == "fp8") out.push_back({m, q, true, "fp8"});
    }
  out.push_back({"llama_bf16", "", true});
  // Serialized FP8 configs: the scheme comes from config.json's quantization_config.
  for (const char* m : {"ct_fp8_dynamic_llama", "ct_fp8_static_kv_qwen3", "hf_fp8_block_llama", "fbgemm_fp8_llama",
                        "modelopt_fp8_llama"})
    out.push_back({m, ""});
  return out;
}

std::string same_name(const ::testing::TestParamInfo<SameCase>& p) {
  std::string s = p.param.checkpoint + "_" + (p.param.quantization.empty() ? "asis" : p.param.quantization) +
                  (p.param.fp8_embeddings ? "_fp8emb" : "") + (p.param.kv.empty() ? "" : "_kv" + p.param.kv);
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DummyMatchesLoader, ::testing::ValuesIn(same_cases()), same_name);

// ---- values ------------------------------------------------------------------

std::vector<float> dequantized_here(const weights::LinearWeight& w) {
  std::vector<float> out(size_t(w.n * w.k));
  const auto* codes = static_cast<const uint8_t*>(w.data);
  const ScaleLayout& l = w.scale_layout;
  const int64_t sc = l.scale_cols(w.k);
  auto scale_index = [&](int64_t r, int64_t c) -> int64_t {
    switch (l.granularity) {
      case Granularity::kTensor: return 0;
      case Granularity::kChannel:
      case Granularity::kToken: return r;
      case Granularity::kGroup: return r * sc + c / l.group_cols;
      case Granularity::kBlock: return (r / l.group_rows) * sc + c / l.group_cols;
    }
    return 0;
  };
  for (int64_t r = 0; r < w.n; ++r)
    for (int64_t c = 0; c < w.k; ++c) {
      const float s = w.scales.at(size_t(scale_index(r, c)));
      out[size_t(r * w.k + c)] = fp8_to_float(codes[r * w.k + c], w.format()) * s;
    }
  return out;
}

std::vector<float> bf16_values(const weights::LinearWeight& w) {
  std::vector<float> out(size_t(w.n * w.k));
  const auto* b = static_cast<const uint16_t*>(w.data);
  for (size_t i = 0; i < out.size(); ++i) out[i] = bf16_to_float(b[i]);
  return out;
}

void expect_normal_scale(const std::vector<float>& v, double sigma, const std::string& what) {
  double sum = 0.0, sq = 0.0, amax = 0.0;
  for (float x : v) sum += x, sq += double(x) * x, amax = std::max(amax, double(std::fabs(x)));
  const double mean = sum / double(v.size());
  const double sd = std::sqrt(sq / double(v.size()) - mean * mean);
  EXPECT_NEAR(sd, sigma, 0.05 * sigma) << what;
  EXPECT_LT(std::fabs(mean), 0.01 * sigma) << what;
  EXPECT_LE(amax, sigma * loader::dummy_weight_bound() * 1.01) << what;
  EXPECT_GT(amax, sigma * 2.5) << what;  // a bell, not a narrow uniform
}

// A tensor big enough to measure: up_proj of a [1024 → 4096] MLP (4 M values).
TEST(DummyWeights, StdIsSigmaInBf16AndEveryFp8Scheme) {
  ConfigDir dir(llama_config(1024, 4096, 1, 512));
  const io::ModelSpec bf16_spec = io::read_model_spec(dir.path(), dummy());
  const loader::HostModelWeights bf16 = loader::dummy_host_weights(bf16_spec);
  ASSERT_EQ(int(bf16.layers[0].up.element), int(ElementType::kBF16));
  const std::vector<float> ref = bf16_values(bf16.layers[0].up);
  expect_normal_scale(ref, 0.02, "bf16 up_proj");
  expect_normal_scale(bf16_values(bf16.embedding), 0.02, "bf16 embedding");

  for (const char* q : {"fp8:tensor", "fp8:channel", "fp8:block", "fp8:weight-only"}) {
    io::LoadOverrides o = dummy();
    o.quantization = io::parse_online_quant(q);
    const loader::HostModelWeights w = loader::dummy_host_weights(io::read_model_spec(dir.path(), o));
    ASSERT_TRUE(w.layers[0].up.is_fp8()) << q;
    const std::vector<float> deq = dequantized_here(w.layers[0].up);
    expect_normal_scale(deq, 0.02, q);
    // The same draw as the BF16 model: equal within E4M3 rounding (2^-4 relative, subnormals absolute).
    double worst = 0.0;
    for (size_t i = 0; i < deq.size(); ++i) {
      const double tol = std::fabs(ref[i]) * (1.0 / 16 + 1.0 / 128) + 0.02 * loader::dummy_weight_bound() / 448 / 8;
      worst = std::max(worst, std::fabs(double(deq[i]) - ref[i]) / tol);
    }
    EXPECT_LE(worst, 1.0) << q;
  }

  // --fp8-embeddings: per-row FP8, the same values again.
  io::LoadOverrides o = dummy();
  o.fp8_embeddings = true;
  const loader::HostModelWeights w = loader::dummy_host_weights(io::read_model_spec(dir.path(), o));
  ASSERT_TRUE(w.embedding.is_fp8());
  EXPECT_EQ(w.embedding.scales.size(), size_t(512));
  EXPECT_EQ(int(w.embedding.activation), int(ActivationQuant::kNone));
  expect_normal_scale(dequantized_here(w.embedding), 0.02, "fp8 embedding");

  // Another sigma is honoured.
  loader::DummyWeightOptions opt;
  opt.sigma = 0.05f;
  expect_normal_scale(bf16_values(loader::dummy_host_weights(bf16_spec, opt).layers[0].up), 0.05, "sigma 0.05");
}

TEST(DummyWeights, BiasesAreSmallNormsAreOne) {
  const io::ModelSpec spec = io::read_model_spec(checkpoint("qwen2_bf16"), dummy());
  const loader::HostModelWeights w = loader::dummy_host_weights(spec);
  ASSERT_FALSE(w.layers[0].q.bias.empty());
  for (float b : w.layers[0].q.bias) EXPECT_LE(std::fabs(b), 0.02f * float(loader::dummy_weight_bound()) * 1.01f);
  EXPECT_NE(w.layers[0].q.bias, w.layers[0].k.bias);
  for (float x : w.final_norm) EXPECT_EQ(x, 1.0f);
  for (float x : w.layers[1].post_attention_norm) EXPECT_EQ(x, 1.0f);
}

bool same_bytes(const weights::LinearWeight& a, const weights::LinearWeight& b) {
  const size_t width = a.is_fp8() ? 1 : 2;
  return a.n == b.n && a.k == b.k && a.scales == b.scales && a.bias == b.bias &&
         std::memcmp(a.data, b.data, size_t(a.n * a.k) * width) == 0;
}

TEST(DummyWeights, DeterministicForASeedOnAnyThreadCount) {
  for (const char* q : {"", "fp8:block"}) {
    io::LoadOverrides o = dummy();
    if (*q) o.quantization = io::parse_online_quant(q);
    const io::ModelSpec spec = io::read_model_spec(checkpoint("qwen2_bf16"), o);
    loader::DummyWeightOptions one, many, other;
    one.threads = 1;
    many.threads = 7;
    other.seed = 12345;
    const loader::HostModelWeights a = loader::dummy_host_weights(spec, one);
    const loader::HostModelWeights b = loader::dummy_host_weights(spec, many);
    const loader::HostModelWeights c = loader::dummy_host_weights(spec, other);
    EXPECT_TRUE(same_bytes(a.embedding, b.embedding));
    EXPECT_TRUE(same_bytes(a.lm_head, b.lm_head));
    for (size_t i = 0; i < a.layers.size(); ++i)
      for (auto m : {&loader::HostLayer::q, &loader::HostLayer::k, &loader::HostLayer::v, &loader::HostLayer::o,
                     &loader::HostLayer::gate, &loader::HostLayer::up, &loader::HostLayer::down}) {
        EXPECT_TRUE(same_bytes(a.layers[i].*m, b.layers[i].*m)) << q << " layer " << i;
        EXPECT_FALSE(same_bytes(a.layers[i].*m, c.layers[i].*m)) << q << " layer " << i;
      }
    // Different tensors are different streams.
    EXPECT_FALSE(same_bytes(a.layers[0].gate, a.layers[0].up));
  }
  // The default seed is fixed: one known value (guards against an accidental change of the generator).
  const loader::HostModelWeights w = loader::dummy_host_weights(io::read_model_spec(checkpoint("llama_bf16"), dummy()));
  const auto* e = static_cast<const uint16_t*>(w.embedding.data);
  const float first = bf16_to_float(e[0]);
  EXPECT_TRUE(std::isfinite(first) && std::fabs(first) < 0.07f);
  const loader::HostModelWeights w2 = loader::dummy_host_weights(io::read_model_spec(checkpoint("llama_bf16"), dummy()));
  EXPECT_EQ(e[0], static_cast<const uint16_t*>(w2.embedding.data)[0]);
}

// ---- running it --------------------------------------------------------------

TEST(DummyWeights, ForwardGivesFiniteLogitsForEveryArchitectureAndScheme) {
  for (const char* m : {"llama_bf16", "qwen2_bf16", "qwen3_bf16", "mistral_bf16", "ct_fp8_static_kv_qwen3",
                        "hf_fp8_block_llama"})
    for (const char* q : {"", "fp8", "fp8:block"}) {
      io::LoadOverrides o = dummy();
      const bool serialized = std::string(m).rfind("ct_", 0) == 0 || std::string(m).rfind("hf_", 0) == 0;
      if (*q && serialized) continue;
      if (*q) o.quantization = io::parse_online_quant(q);
      LoadedModel lm(checkpoint(m), o, 2);
      const std::vector<int32_t> tokens = {1, 5, 9, 17, 33, 65, 100, 3};
      const std::vector<float> logits = lm.prompt_logits(tokens);
      ASSERT_EQ(logits.size(), tokens.size() * size_t(lm.spec.config.vocab_size));
      float amax = 0.0f;
      for (float x : logits) {
        ASSERT_TRUE(std::isfinite(x)) << m << " " << q;
        amax = std::max(amax, std::fabs(x));
      }
      EXPECT_GT(amax, 0.0f) << m << " " << q;
    }
}

// A directory with config.json alone: the runtime loads without a tokenizer,
// calibrates an FP8 KV cache on random ids, and refuses text with a clear error.
TEST(DummyWeights, RuntimeWithoutTokenizer) {
  ConfigDir dir(llama_config(64, 128, 2, 300));
  engine::RuntimeOptions opt;
  opt.threads = 2;
  opt.kv_cache_tokens = 64;
  io::LoadOverrides o = dummy();
  o.quantization = io::OnlineQuant::kChannelToken;
  o.kv_cache_dtype = KvCacheDType::kFP8E4M3;
  const auto rt = engine::Runtime::load(dir.path(), o, opt);
  EXPECT_FALSE(rt->has_tokenizer());
  EXPECT_EQ(rt->eos_ids(), std::vector<int32_t>{2});
  try {
    (void)rt->tokenizer();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no tokenizer.json (--load-format dummy"), std::string::npos) << e.what();
  }
  bool calibrated = false, dummy_note = false;
  for (const std::string& n : rt->notes()) {
    calibrated |= n.find("random token ids") != std::string::npos;
    dummy_note |= n.find("--load-format dummy") != std::string::npos;
  }
  EXPECT_TRUE(calibrated);
  EXPECT_TRUE(dummy_note);
  for (const backend::KvLayerFormat& f : rt->kv_formats()) {
    EXPECT_GT(f.k_scale, 0.0f);
    EXPECT_NE(f.k_scale, 1.0f);
  }

  // With --no-kv-calibration the scales stay 1.0.
  opt.calibrate_kv_scales = false;
  const auto rt1 = engine::Runtime::load(dir.path(), o, opt);
  for (const backend::KvLayerFormat& f : rt1->kv_formats()) EXPECT_EQ(f.k_scale, 1.0f);

  // Without --load-format dummy the same directory is not a checkpoint.
  EXPECT_THROW(engine::Runtime::load(dir.path(), {}, opt), Error);
}

// RuntimeOptions::load_tokenizer off: a real checkpoint without tokenizer.json (the tiny
// fixtures) loads for token ids alone, and one with a tokenizer.json leaves it unread.
TEST(DummyWeights, RuntimeWithTheTokenizerSkipped) {
  engine::RuntimeOptions opt;
  opt.threads = 2;
  opt.kv_cache_tokens = 64;
  EXPECT_THROW(engine::Runtime::load(model_fixture_dir("qwen2"), {}, opt), Error) << "no tokenizer.json";
  opt.load_tokenizer = false;
  const auto rt = engine::Runtime::load(model_fixture_dir("qwen2"), {}, opt);
  EXPECT_FALSE(rt->has_tokenizer());
  const std::vector<int32_t> ids = {1, 17, 42, 9};
  const std::vector<int64_t> table = {0};
  const model::SequenceInput in{ids, 0, table, false};
  std::vector<float> logits;
  rt->model().forward({&in, 1}, logits);
  EXPECT_EQ(int64_t(logits.size()), rt->config().vocab_size);
  const auto shipped = engine::Runtime::load(
      std::filesystem::path(FP8LM_SOURCE_DIR) / model_manifest()["shipped"]["dir"].get<std::string>(), {}, opt);
  EXPECT_FALSE(shipped->has_tokenizer());
  try {
    (void)shipped->tokenizer();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("loaded without its tokenizer"), std::string::npos) << e.what();
  }
}

// ---- errors ------------------------------------------------------------------

std::string error_of(const fs::path& dir, const io::LoadOverrides& o = dummy()) {
  try {
    const io::ModelSpec s = io::read_model_spec(dir, o);
    (void)loader::dummy_host_weights(s);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(DummyWeights, Errors) {
  EXPECT_NE(error_of("/nonexistent/fp8lm/model").find("not a model directory"), std::string::npos);
  {
    ConfigDir empty("");
    EXPECT_NE(error_of(empty.path()).find("config.json: no such file"), std::string::npos) << error_of(empty.path());
  }
  {
    ConfigDir bad("{\"architectures\": [\"LlamaForCausalLM\"], ");
    EXPECT_NE(error_of(bad.path()).find("config.json"), std::string::npos) << error_of(bad.path());
  }
  {
    ConfigDir gpt2(llama_config(64, 128, 2, 300, false, "GPT2LMHeadModel"));
    EXPECT_NE(error_of(gpt2.path()).find("GPT2LMHeadModel"), std::string::npos) << error_of(gpt2.path());
  }
  {
    ConfigDir no_vocab(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64})");
    EXPECT_FALSE(error_of(no_vocab.path()).empty());
  }
  // MoE: a router and every expert's projections per layer are generated, the
  // experts in FP8 under --quantization fp8 (the router never: BF16).
  const loader::HostModelWeights moe = loader::dummy_host_weights(io::read_model_spec(checkpoint("qwen3_moe_bf16"), dummy()));
  ASSERT_TRUE(moe.layers.at(0).moe.has_value());
  EXPECT_EQ(moe.layers[0].moe->down.size(), 4u);
  EXPECT_EQ(moe.layers[0].moe->router.n, 4);
  io::LoadOverrides fp8_moe = dummy();
  fp8_moe.quantization = io::OnlineQuant::kChannelToken;
  const loader::HostModelWeights moe8 =
      loader::dummy_host_weights(io::read_model_spec(checkpoint("qwen3_moe_bf16"), fp8_moe));
  EXPECT_EQ(moe8.layers.at(0).moe->down.at(3).element, ElementType::kE4M3);
  EXPECT_EQ(moe8.layers[0].moe->down[3].activation, ActivationQuant::kDynamicToken);
  EXPECT_EQ(moe8.layers[0].moe->router.element, ElementType::kBF16);
  // Overrides apply as for a real checkpoint: no online quantization of an FP8 config.
  io::LoadOverrides o = dummy();
  o.quantization = io::OnlineQuant::kBlock;
  EXPECT_NE(error_of(checkpoint("ct_fp8_dynamic_llama"), o).find("already quantized"), std::string::npos);
  EXPECT_THROW(io::parse_load_format("safetensors"), Error);
  EXPECT_EQ(io::parse_load_format("dummy"), io::LoadFormat::kDummy);
  EXPECT_EQ(io::parse_load_format("auto"), io::LoadFormat::kAuto);
  loader::DummyWeightOptions bad_sigma;
  bad_sigma.sigma = 0.0f;
  EXPECT_THROW(loader::dummy_host_weights(io::read_model_spec(checkpoint("llama_bf16"), dummy()), bad_sigma), Error);
}

}  // namespace
}  // namespace fp8lm::test
