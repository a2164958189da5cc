// The persistent decode kernel (src/backend/cuda/persistent/decode_program.h) against the layered
// decode it replaces, on the shipped model: the logits of 12 decode steps after a prompt, for
// BF16 and FP8 (per-channel × per-token, dynamic), with a BF16 and an FP8 KV cache; 64 greedy
// tokens; and a batched decode step against each sequence alone. Then the same logits on tiny
// Qwen2, Qwen3, Mistral and LLM Compressor checkpoints (their bias, q/k norm, sliding window,
// static scales).
//
// Tolerance. Both paths run the same operations with the same roundings (decode_program.h,
// "Numerics"), but sum in other orders: the GEMV's K split and attention's context split differ
// (and the layered path's BF16 projections are cuBLASLt's), so a BF16 output now and then rounds
// the other way, and that difference travels down the layers — the kind of difference
// test_cuda_model.cpp bounds between the GPU and the CPU. The scale for it is that test's: E =
// mean |layered FP8 − layered BF16|, the effect of FP8 quantization itself on the same logits.
// BF16 weights: mean |Δ| ≤ 0.25 E with a BF16 KV cache, 0.5 E with an FP8 one (whose rounding
// the drift moves too), test_cuda_model.cpp's bounds. W8A8: a BF16 output that rounds the other way moves FP8 activation
// codes across rounding boundaries, so the two paths' quantization errors decorrelate as the GPU
// and the CPU's do (test_cuda_model.cpp measured 0.94–1.13 E there): mean |Δ| ≤ 1.5 E. A wrong
// tile, a misplaced K/V entry or a missed dependency gives differences of the logits' own size
// (tens of E). Top-1 tokens agree except at near-ties (model_trace.h).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "cpp/model_fixtures.h"
#include "cuda/model_trace.h"
#include "engine/generate.h"
#include "engine/runtime.h"
#include "io/load_overrides.h"

namespace fp8lm::test {
namespace {

std::unique_ptr<engine::Runtime> load(const std::string& quant, const std::string& kv, backend::DecodeKernel kernel) {
  io::LoadOverrides o;
  if (!quant.empty()) o.quantization = io::parse_online_quant(quant);
  o.kv_cache_dtype = io::parse_kv_cache_dtype(kv);
  engine::RuntimeOptions opt;
  opt.device = backend::Device::kCuda;
  opt.kv_cache_tokens = 4096;
  opt.decode_kernel = kernel;
  return engine::Runtime::load(shipped_dir(), o, opt);
}

// The decode steps' rows of a trace (the prompt's rows come from the prefill, the same path).
Trace decode_rows(const Trace& t, size_t steps) {
  Trace d;
  d.rows.assign(t.rows.end() - int64_t(steps), t.rows.end());
  return d;
}

struct Reference {
  std::vector<int32_t> prompt, fed;
  double quant_effect = 0;
};

const Reference& reference() {
  static const Reference ref = [] {
    Reference r;
    auto bf16 = load("", "bf16", backend::DecodeKernel::kLayered);
    r.prompt = prompt_tokens(*bf16);
    engine::SamplingParams p;
    p.temperature = 0.0f;
    p.max_tokens = 12;
    p.ignore_eos = true;
    r.fed = engine::generate(*bf16, r.prompt, p).tokens;
    auto a = load("", "bf16", backend::DecodeKernel::kLayered);
    auto b = load("fp8", "bf16", backend::DecodeKernel::kLayered);
    r.quant_effect =
        mean_abs_diff(decode_rows(run(*a, r.prompt, r.fed), r.fed.size()), decode_rows(run(*b, r.prompt, r.fed), r.fed.size()));
    return r;
  }();
  return ref;
}

struct Case {
  const char* quant;
  const char* kv;
  double share;  // of the quantization effect
};

class CudaPersistent : public ::testing::TestWithParam<Case> {};

TEST_P(CudaPersistent, DecodeLogitsMatchTheLayeredPath) {
  REQUIRE_HOPPER();
  const Case c = GetParam();
  const Reference& ref = reference();
  ASSERT_GT(ref.quant_effect, 0.0);
  auto layered = load(c.quant, c.kv, backend::DecodeKernel::kLayered);
  auto persistent = load(c.quant, c.kv, backend::DecodeKernel::kPersistent);
  for (const std::string& note : persistent->notes()) EXPECT_EQ(note.find("op by op"), std::string::npos) << note;
  const Trace want = decode_rows(run(*layered, ref.prompt, ref.fed), ref.fed.size());
  const Trace got = decode_rows(run(*persistent, ref.prompt, ref.fed), ref.fed.size());
  const double mean = mean_abs_diff(want, got), worst = max_abs_diff(want, got);
  std::printf("[ %s / kv %s ] persistent vs layered: mean|Δ| %.5f (%.3f of the FP8 effect %.5f), max|Δ| %.4f\n",
              *c.quant ? c.quant : "bf16", c.kv, mean, mean / ref.quant_effect, ref.quant_effect, worst);
  EXPECT_LE(mean, c.share * ref.quant_effect);
  expect_same_top1_and_finite(want, got, worst);
}

INSTANTIATE_TEST_SUITE_P(Schemes, CudaPersistent,
                         ::testing::Values(Case{"", "bf16", 0.25}, Case{"", "fp8", 0.5}, Case{"fp8", "bf16", 1.5},
                                           Case{"fp8", "fp8", 1.5}),
                         [](const auto& param_info) {
                           return std::string(*param_info.param.quant ? param_info.param.quant : "bf16") + "_kv_" + param_info.param.kv;
                         });

// 64 greedy tokens through the engine equal the layered path's, or differ first at a near-tie.
TEST(CudaPersistentGenerate, GreedyTokensEqualTheLayeredPath) {
  REQUIRE_HOPPER();
  for (const char* quant : {"", "fp8"}) {
    auto layered = load(quant, "bf16", backend::DecodeKernel::kLayered);
    auto persistent = load(quant, "bf16", backend::DecodeKernel::kPersistent);
    const std::vector<int32_t> prompt = prompt_tokens(*layered);
    engine::SamplingParams p;
    p.temperature = 0.0f;
    p.max_tokens = 64;
    p.ignore_eos = true;
    const engine::GenerationResult want = engine::generate(*layered, prompt, p);
    const engine::GenerationResult got = engine::generate(*persistent, prompt, p);
    ASSERT_EQ(got.tokens.size(), 64u);
    size_t same = 0;
    while (same < 64 && want.tokens[same] == got.tokens[same]) ++same;
    std::printf("[ greedy %s ] %zu of 64 tokens equal\n", *quant ? quant : "bf16", same);
    if (same < 64) {
      std::vector<int32_t> ctx = prompt;
      ctx.insert(ctx.end(), want.tokens.begin(), want.tokens.begin() + int64_t(same));
      auto fresh = load(quant, "bf16", backend::DecodeKernel::kLayered);
      const Trace t = run(*fresh, ctx, {});
      EXPECT_LT(top2_margin(t.rows.back()), 0.1) << "tokens differ at " << same << " without a near-tie";
    }
  }
}

// The architectures' own paths on transformers-made tiny checkpoints (tests/fixtures/models,
// head_dim 32): Qwen2's q/k/v bias, Qwen3's q/k norm, Mistral's sliding window (8 positions: the
// 12 steps after a longer prompt cross it), and LLM Compressor's static-scale FP8 Qwen3 with its
// FP8 KV cache. The same measure and bounds as above, E from each model's own online FP8.
struct FixtureCase {
  const char* dir;
  const char* quant;  // "" = as stored
  const char* kv;
  double share;
};

class CudaPersistentFixtures : public ::testing::TestWithParam<FixtureCase> {};

std::unique_ptr<engine::Runtime> load_fixture(const std::string& dir, const std::string& quant, const std::string& kv,
                                              backend::DecodeKernel kernel) {
  io::LoadOverrides o;
  if (!quant.empty()) o.quantization = io::parse_online_quant(quant);
  if (!kv.empty()) o.kv_cache_dtype = io::parse_kv_cache_dtype(kv);
  engine::RuntimeOptions opt;
  opt.device = backend::Device::kCuda;
  opt.kv_cache_tokens = 1024;
  opt.decode_kernel = kernel;
  opt.load_tokenizer = false;  // the tiny checkpoints ship no tokenizer.json; the test feeds ids
  return engine::Runtime::load(model_fixture_dir(dir), o, opt);
}

TEST_P(CudaPersistentFixtures, DecodeLogitsMatchTheLayeredPath) {
  REQUIRE_HOPPER();
  const FixtureCase c = GetParam();
  const std::string base = std::string(c.dir) == "llmc_fp8_static_kv_qwen3" ? "qwen3" : c.dir;
  const std::vector<int32_t> prompt = {1, 17, 42, 9, 200, 31, 77, 5, 63, 120, 8, 19, 250, 3};
  std::vector<int32_t> fed;
  for (int i = 0; i < 12; ++i) fed.push_back(int32_t((37 * i + 11) % 256));
  auto bf16 = load_fixture(base, "", "bf16", backend::DecodeKernel::kLayered);
  auto fp8 = load_fixture(base, "fp8", "bf16", backend::DecodeKernel::kLayered);
  const double effect = mean_abs_diff(decode_rows(run(*bf16, prompt, fed), fed.size()),
                                      decode_rows(run(*fp8, prompt, fed), fed.size()));
  ASSERT_GT(effect, 0.0);
  auto layered = load_fixture(c.dir, c.quant, c.kv, backend::DecodeKernel::kLayered);
  auto persistent = load_fixture(c.dir, c.quant, c.kv, backend::DecodeKernel::kPersistent);
  for (const std::string& note : persistent->notes()) EXPECT_EQ(note.find("op by op"), std::string::npos) << note;
  const Trace want = decode_rows(run(*layered, prompt, fed), fed.size());
  const Trace got = decode_rows(run(*persistent, prompt, fed), fed.size());
  const double mean = mean_abs_diff(want, got), worst = max_abs_diff(want, got);
  std::printf("[ %s %s / kv %s ] persistent vs layered: mean|Δ| %.5f (%.3f of E %.5f), max|Δ| %.4f\n", c.dir,
              *c.quant ? c.quant : "as stored", c.kv, mean, mean / effect, effect, worst);
  EXPECT_LE(mean, c.share * effect);
  expect_same_top1_and_finite(want, got, worst);
}

INSTANTIATE_TEST_SUITE_P(Architectures, CudaPersistentFixtures,
                         ::testing::Values(FixtureCase{"qwen2", "", "bf16", 0.25}, FixtureCase{"qwen2", "fp8", "bf16", 1.5},
                                           FixtureCase{"qwen3", "", "bf16", 0.25}, FixtureCase{"qwen3", "fp8", "fp8", 1.5},
                                           FixtureCase{"mistral", "", "bf16", 0.25},
                                           FixtureCase{"mistral", "fp8", "bf16", 1.5},
                                           FixtureCase{"llmc_fp8_static_kv_qwen3", "", "", 1.5}),
                         [](const auto& param_info) {
                           return std::string(param_info.param.dir) + "_" +
                                  (*param_info.param.quant ? param_info.param.quant : "stored") + "_kv_" +
                                  (*param_info.param.kv ? param_info.param.kv : "stored");
                         });

// Rows wider than the fixtures': a 7,680-wide MLP, so that down_proj's rows span 7.5 KB of FP8 (15
// KB in BF16) — more than one 1 KB page per warp of a GEMV tile, as Llama-3.1-8B's do (the
// fixtures above stay within one; a persistent kernel that hung at 8B passed them). Dummy weights
// from tests/fixtures/models/wide_mlp/config.json (no checkpoint to ship).
std::unique_ptr<engine::Runtime> load_wide(const std::string& quant, backend::DecodeKernel kernel) {
  io::LoadOverrides o;
  o.load_format = io::LoadFormat::kDummy;
  if (!quant.empty()) o.quantization = io::parse_online_quant(quant);
  engine::RuntimeOptions opt;
  opt.device = backend::Device::kCuda;
  opt.kv_cache_tokens = 1024;
  opt.decode_kernel = kernel;
  opt.load_tokenizer = false;
  return engine::Runtime::load(model_fixture_dir("wide_mlp"), o, opt);
}

TEST(CudaPersistentWide, RowsOfManyPagesMatchTheLayeredPath) {
  REQUIRE_HOPPER();
  const std::vector<int32_t> prompt = {1, 17, 42, 9, 200, 31, 77, 5, 63, 120, 8, 19, 250, 3};
  std::vector<int32_t> fed;
  for (int i = 0; i < 8; ++i) fed.push_back(int32_t((37 * i + 11) % 512));
  auto bf16 = load_wide("", backend::DecodeKernel::kLayered);
  auto fp8 = load_wide("fp8", backend::DecodeKernel::kLayered);
  const Trace want_bf16 = decode_rows(run(*bf16, prompt, fed), fed.size());
  const Trace want_fp8 = decode_rows(run(*fp8, prompt, fed), fed.size());
  const double effect = mean_abs_diff(want_bf16, want_fp8);
  ASSERT_GT(effect, 0.0);
  for (const auto& [quant, want, share] : {std::tuple{"", &want_bf16, 0.25}, std::tuple{"fp8", &want_fp8, 1.5}}) {
    auto persistent = load_wide(quant, backend::DecodeKernel::kPersistent);
    for (const std::string& note : persistent->notes()) EXPECT_EQ(note.find("op by op"), std::string::npos) << note;
    const Trace got = decode_rows(run(*persistent, prompt, fed), fed.size());
    const double mean = mean_abs_diff(*want, got), worst = max_abs_diff(*want, got);
    std::printf("[ wide MLP %s ] persistent vs layered: mean|Δ| %.5f (%.3f of E %.5f), max|Δ| %.4f\n",
                *quant ? quant : "bf16", mean, mean / effect, effect, worst);
    EXPECT_LE(mean, share * effect);
    expect_same_top1_and_finite(*want, got, worst);
  }
}

// A decode step of three sequences (each in its own blocks, different contexts) gives each the
// logits it gets alone through the same kernel: every GEMV tile computes its rows apart, and only
// attention's context split changes with the batch (the order of its float32 sums), so mean |Δ|
// ≤ 0.05 E, a fifth of the BF16 bound above.
TEST(CudaPersistentBatch, BatchedEqualsAlone) {
  REQUIRE_HOPPER();
  const Reference& ref = reference();
  auto rt = load("", "bf16", backend::DecodeKernel::kPersistent);
  model::LlamaModel& m = *rt->model().rank(0).model;
  const int64_t vocab = rt->config().vocab_size;
  const int bs = rt->block_size();
  const std::vector<std::vector<int32_t>> prompts = {
      std::vector<int32_t>(ref.prompt.begin(), ref.prompt.begin() + 9), ref.prompt,
      std::vector<int32_t>(ref.prompt.rbegin(), ref.prompt.rend() - 3)};
  const int64_t per = int64_t(ref.prompt.size()) / bs + 2;
  auto table = [&](size_t s) {
    std::vector<int64_t> t;
    for (int64_t b = 0; b < per; ++b) t.push_back(int64_t(s) * per + b);
    return t;
  };
  std::vector<float> logits;
  std::vector<std::vector<float>> alone;
  const int32_t next = ref.fed[0];
  for (size_t s = 0; s < prompts.size(); ++s) {  // prefill, then one decode step alone
    const std::vector<int64_t> t = table(s);
    model::SequenceInput pre{prompts[s], 0, t, false};
    m.forward({&pre, 1}, rt->kv_cache(), logits);
    model::SequenceInput step{{&next, 1}, int64_t(prompts[s].size()), t, false};
    m.forward({&step, 1}, rt->kv_cache(), logits);
    alone.push_back(logits);
  }
  // The same step again for all three at once: it rewrites the same cache slots with the same K/V.
  std::vector<std::vector<int64_t>> tables = {table(0), table(1), table(2)};
  std::vector<model::SequenceInput> batch;
  for (size_t s = 0; s < prompts.size(); ++s) batch.push_back({{&next, 1}, int64_t(prompts[s].size()), tables[s], false});
  m.forward(batch, rt->kv_cache(), logits);
  // Rows are independent in every GEMV tile; only attention's context split changes with the
  // batch (fewer splits per sequence), so the sums differ in order alone.
  Trace want, got;
  for (size_t s = 0; s < prompts.size(); ++s) {
    want.rows.push_back(alone[s]);
    got.rows.emplace_back(logits.begin() + int64_t(s) * vocab, logits.begin() + int64_t(s + 1) * vocab);
  }
  const double mean = mean_abs_diff(want, got), worst = max_abs_diff(want, got);
  std::printf("[ batched vs alone ] mean|Δ| %.6f, max|Δ| %.5f\n", mean, worst);
  EXPECT_LE(mean, 0.05 * ref.quant_effect);
  expect_same_top1_and_finite(want, got, worst);
}

}  // namespace
}  // namespace fp8lm::test
