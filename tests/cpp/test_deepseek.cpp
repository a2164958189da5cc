// DeepSeek-V3 (issue 45) below and beside the whole-model logits test
// (test_model_logits: the tiny DeepseekV3ForCausalLM checkpoints of
// tools/make_deepseek_fixtures.py against transformers) and the invariance
// tests (test_model_batching: batched == alone, chunks == one prefill):
//  * greedy tokens equal transformers' generate (float32 cache: exact), and the
//    engine (preemption, prefix caching, chunked prefill) gives each request what
//    it gets alone;
//  * multi-head latent attention absorbed == decompressed, and both equal a
//    float64 evaluation of the definition (transformers' expand_kv form); the
//    whole model decompressed against transformers and absorbed;
//  * the latent cache: one entry a token, its bytes, no V; FP8 scales calibrated;
//  * config.json: the fields as parsed, and a table of malformed or
//    unimplemented values, each refused naming its field;
//  * a backend without MLA (the CUDA backend today) refused at load by name; the
//    MTP layer read past; dummy weights (fp8lm quantize: test_quantize.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/mla_attention.h"
#include "common/error.h"
#include "cpp/model_fixtures.h"
#include "cpp/test_util.h"
#include "engine/engine.h"
#include "engine/runtime.h"
#include "io/model_config_json.h"
#include "io/model_spec.h"
#include "spec/rope.h"

namespace fp8lm::test {
namespace {

const nlohmann::json& deepseek_model(const std::string& name) { return deepseek_manifest()["models"][name]; }

nlohmann::json fixture_config(const std::string& name) {
  std::ifstream f(model_fixture_dir(deepseek_model(name)["dir"]) / "config.json");
  return nlohmann::json::parse(f);
}

// ---------------------------------------------------------------- greedy tokens

// With a float32 cache fp8lm computes what transformers computes in float32; the
// fixture tool recorded the reference's top-2 margin of every step, the smallest
// 4.5e-4 — hundreds of times the logits' float32 noise (max|Δ| ~1e-6 in
// test_model_logits) — so every token must match. The prompt is prefilled, then
// each token decoded alone (a step of one token), the argmax taken by the backend
// (LlamaModel::forward_greedy), as the engine's greedy steps run.
void check_greedy(const std::string& name) {
  io::LoadOverrides o;
  o.kv_cache_dtype = io::parse_kv_cache_dtype("fp32");
  LoadedModel lm(model_fixture_dir(deepseek_model(name)["dir"]), o, 2);
  for (const nlohmann::json& p : deepseek_model(name)["greedy"]) {
    std::vector<int32_t> tokens = ids_of(p["ids"]);
    const std::vector<int32_t> want = ids_of(p["greedy"]);
    const std::vector<int64_t> blocks = lm.new_blocks(int64_t(tokens.size() + want.size()));
    std::vector<int32_t> got, next;
    int64_t done = 0;
    while (got.size() < want.size()) {
      const model::SequenceInput in{std::span(tokens).subspan(size_t(done)), done, blocks, false};
      lm.model->forward_greedy({&in, 1}, *lm.cache, next);
      done = int64_t(tokens.size());
      got.push_back(next.at(0));
      tokens.push_back(next.at(0));
    }
    EXPECT_EQ(got, want) << "prompt " << p["ids"].dump();
  }
}

TEST(DeepseekGreedy, EqualsTransformersWithQLora) { check_greedy("deepseek_v3"); }
TEST(DeepseekGreedy, EqualsTransformersWithoutQLora) { check_greedy("deepseek_v3_no_q_lora"); }

// The engine over the latent cache: 6 greedy requests (the fixture's prompts and copies that
// share their first 16 tokens), 24 tokens each, in a cache of 5 blocks of 16 tokens — too small for all at once,
// so sequences are preempted and recomputed — with prefix caching on, chunked prefill (32 tokens
// a step) and async scheduling: every request's tokens equal the same request run alone, and
// the fixture prompts' equal transformers' greedy tokens. Block bookkeeping (block tables,
// prefix cache, preemption) is per block, whatever a token's entry holds: this checks that the
// latent cache's sizing and addressing agree with it.
void check_engine() {
  const std::string name = "deepseek_v3";
  io::LoadOverrides o;
  o.kv_cache_dtype = io::parse_kv_cache_dtype("fp32");
  engine::RuntimeOptions opt;
  opt.threads = 2;
  opt.load_tokenizer = false;
  opt.kv_cache_tokens = 5 * 16;
  opt.max_num_seqs = 6;
  auto rt = engine::Runtime::load(model_fixture_dir(deepseek_model(name)["dir"]), o, opt);
  std::vector<std::vector<int32_t>> prompts, want;
  for (const nlohmann::json& p : deepseek_model(name)["greedy"]) {
    prompts.push_back(ids_of(p["ids"]));
    want.push_back(ids_of(p["greedy"]));
  }
  const std::vector<int32_t> longest = prompts.back();  // 24 tokens
  for (int32_t tail : {7, 9, 11}) {
    std::vector<int32_t> p(longest.begin(), longest.begin() + 16);  // one full block shared
    for (int i = 0; i < 6; ++i) p.push_back(tail + i);
    prompts.push_back(p);
  }
  auto request = [](const std::vector<int32_t>& prompt) {
    engine::Request r;
    r.prompt = prompt;
    r.params.temperature = 0.0f;
    r.params.max_tokens = 24;
    r.params.ignore_eos = true;
    r.detokenize = false;
    return r;
  };
  engine::SchedulerConfig config;
  config.max_num_seqs = 6;
  config.max_num_batched_tokens = 32;
  config.enable_prefix_caching = true;
  std::vector<std::vector<int32_t>> alone;
  for (const auto& p : prompts) {
    engine::Engine e(*rt, config);
    e.add_request(request(p));
    alone.push_back(e.run_to_completion().at(0).tokens);
  }
  engine::Engine e(*rt, config);
  for (const auto& p : prompts) e.add_request(request(p));
  std::vector<engine::Completion> done = e.run_to_completion();
  ASSERT_EQ(done.size(), prompts.size());
  std::sort(done.begin(), done.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(done[i].tokens, alone[i]) << "request " << i;
    if (i < want.size()) {
      EXPECT_EQ(std::vector<int32_t>(alone[i].begin(), alone[i].begin() + int64_t(want[i].size())), want[i])
          << "prompt " << i << " against transformers (its first 8 tokens)";
    }
  }
  EXPECT_GT(e.num_preemptions(), 0) << "the cache (" << rt->blocks().num_total()
                                    << " blocks) was meant to be too small for every sequence at once";
  EXPECT_GT(e.prefix_cache_hits(), 0) << "the shared first block was meant to be found cached";
  EXPECT_EQ(rt->blocks().num_free(), rt->blocks().num_total());
}

TEST(DeepseekEngine, BatchedWithPreemptionAndPrefixCacheEqualsAlone) { check_engine(); }

// ---------------------------------------------------------------- absorbed == decompressed

struct MlaCase {
  int heads = 3;
  int64_t nope = 8, rope = 6, v = 5, latent = 20;
};

// out[row][h][d] from the definition in float64: each cached latent expanded by
// kv_b (k_nope = W_UK c, v = W_UV c), scores q·k × scale, softmax, Σ p v.
std::vector<double> reference(const MlaCase& m, const std::vector<float>& kv_b, const std::vector<float>& q,
                              const std::vector<float>& entries, int64_t rows, float scale) {
  const int64_t qk = m.nope + m.rope, entry = m.latent + m.rope, per_head = m.nope + m.v;
  std::vector<double> out(size_t(rows * m.heads * m.v));
  for (int64_t r = 0; r < rows; ++r)
    for (int h = 0; h < m.heads; ++h) {
      std::vector<double> scores(size_t(r + 1)), values(size_t((r + 1) * m.v));
      for (int64_t j = 0; j <= r; ++j) {
        const float* c = entries.data() + j * entry;
        double s = 0.0;
        for (int64_t n = 0; n < m.nope; ++n) {
          double k = 0.0;
          for (int64_t l = 0; l < m.latent; ++l) k += double(kv_b[size_t((h * per_head + n) * m.latent + l)]) * c[l];
          s += double(q[size_t(r * m.heads * qk + h * qk + n)]) * k;
        }
        for (int64_t d = 0; d < m.rope; ++d)
          s += double(q[size_t(r * m.heads * qk + h * qk + m.nope + d)]) * c[m.latent + d];
        scores[size_t(j)] = s * scale;
        for (int64_t d = 0; d < m.v; ++d) {
          double v = 0.0;
          for (int64_t l = 0; l < m.latent; ++l)
            v += double(kv_b[size_t((h * per_head + m.nope + d) * m.latent + l)]) * c[l];
          values[size_t(j * m.v + d)] = v;
        }
      }
      double top = scores[0], sum = 0.0;
      for (const double s : scores) top = std::max(top, s);
      for (double& s : scores) sum += (s = std::exp(s - top));
      for (int64_t d = 0; d < m.v; ++d) {
        double o = 0.0;
        for (int64_t j = 0; j <= r; ++j) o += scores[size_t(j)] * values[size_t(j * m.v + d)];
        out[size_t((r * m.heads + h) * m.v + d)] = o / sum;
      }
    }
  return out;
}

// One sequence of 11 tokens: a prefill of 7, then 4 decode steps (one token each), through a
// float32 latent cache, absorbed and decompressed; both against the float64 definition. The
// bound (fixed first): 1e-5 of the largest output — float32 dot products of ≤ 20 terms are
// good to a few 1e-7; a swapped W_UK / W_UV, a wrong head offset or a missing rope part moves
// outputs by their own size.
TEST(MlaAttention, AbsorbedEqualsDecompressedEqualsDefinition) {
  const MlaCase m;
  const int64_t rows = 11, qk = m.nope + m.rope, entry = m.latent + m.rope;
  std::mt19937 rng(45);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  auto random = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = dist(rng);
    return v;
  };
  const std::vector<float> kv_b = random(m.heads * (m.nope + m.v) * m.latent);
  const std::vector<float> q = random(rows * m.heads * qk), latent = random(rows * m.latent);
  const std::vector<float> k_pe = random(rows * m.rope);
  const cpu::MlaUpProjections up = cpu::make_mla_up_projections(
      weights::high_precision(ElementType::kF32, kv_b.data(), m.heads * (m.nope + m.v), m.latent), m.heads, m.nope,
      m.v);
  backend::MlaParams p{m.heads, m.nope, m.rope, m.v, m.latent, 0.3f, true};
  std::vector<float> entries;
  for (int64_t r = 0; r < rows; ++r) {
    entries.insert(entries.end(), latent.begin() + r * m.latent, latent.begin() + (r + 1) * m.latent);
    entries.insert(entries.end(), k_pe.begin() + r * m.rope, k_pe.begin() + (r + 1) * m.rope);
  }
  const std::vector<double> want = reference(m, kv_b, q, entries, rows, p.scale);
  double largest = 0.0;
  for (const double x : want) largest = std::max(largest, std::fabs(x));

  ThreadPool pool(2);
  std::vector<std::vector<float>> outs;
  for (const bool absorbed : {true, false}) {
    p.absorbed = absorbed;
    cpu::PagedKvCache cache({1, 1, entry, 4, 4, 0, true}, {backend::KvLayerFormat{ElementType::kF32}});
    const std::vector<int64_t> table = {2, 0, 3};
    std::vector<float> out(size_t(rows * m.heads * m.v));
    for (int64_t start = 0; start < rows; start += start == 0 ? 7 : 1) {
      const int64_t n = start == 0 ? 7 : 1;
      const backend::AttentionSequence seq{0, n, start, table};
      cpu::mla_attention(q.data() + start * m.heads * qk, latent.data() + start * m.latent, k_pe.data() + start * m.rope,
                         up, out.data() + start * m.heads * m.v, {&seq, 1}, p, cache, 0, &pool);
    }
    for (size_t i = 0; i < out.size(); ++i)
      ASSERT_NEAR(out[i], want[i], 1e-5 * largest) << (absorbed ? "absorbed" : "decompressed") << " output " << i;
    outs.push_back(out);
  }
  for (size_t i = 0; i < outs[0].size(); ++i) EXPECT_NEAR(outs[0][i], outs[1][i], 1e-5 * largest) << i;
}

// The whole model with decompressed MLA: transformers' logits within the same bound as absorbed
// (test_model_logits), and absorbed within float32 noise of it (1e-4 of the largest logit,
// against ~1e-6 measured; the bound of the logits test is 2^-8 ≈ 4e-3).
TEST(MlaAttention, ModelDecompressedEqualsAbsorbedAndTransformers) {
  for (const char* name : {"deepseek_v3", "deepseek_v3_no_q_lora"}) {
    SCOPED_TRACE(name);
    const nlohmann::json& m = deepseek_model(name);
    io::LoadOverrides o;
    o.kv_cache_dtype = io::parse_kv_cache_dtype("fp32");
    LoadedModel absorbed(model_fixture_dir(m["dir"]), o, 2), decompressed(model_fixture_dir(m["dir"]), o, 2);
    decompressed.model->set_mla_absorbed(false);
    for (size_t p = 0; p < m["prompts"].size(); ++p) {
      const std::vector<int32_t> ids = ids_of(m["prompts"][p]);
      const std::vector<float> ref = read_array<float>(kDeepseekFixtures, m["cases"][0]["logits"][p]);
      const std::vector<float> a = absorbed.prompt_logits(ids), d = decompressed.prompt_logits(ids);
      EXPECT_LE(max_abs_diff(d, ref), 0x1p-8 * max_abs(ref)) << "prompt " << p;
      EXPECT_LE(max_abs_diff(a, d), 1e-4 * max_abs(ref)) << "prompt " << p;
    }
  }
}

TEST(MlaAttention, RefusesAGqaCacheAndMismatchedShapes) {
  const MlaCase m;
  std::vector<float> kv_b(static_cast<size_t>(m.heads * (m.nope + m.v) * m.latent), 0.5f);
  const auto w = weights::high_precision(ElementType::kF32, kv_b.data(), m.heads * (m.nope + m.v), m.latent);
  EXPECT_NE(error_of([&] { (void)cpu::make_mla_up_projections(w, m.heads, m.nope + 1, m.v); }).find("kv_b_proj is ["),
            std::string::npos);
  const cpu::MlaUpProjections up = cpu::make_mla_up_projections(w, m.heads, m.nope, m.v);
  const backend::MlaParams p{m.heads, m.nope, m.rope, m.v, m.latent, 0.3f, true};
  std::vector<float> q(64 * 64), out(64 * 64);
  const std::vector<int64_t> table = {0};
  const backend::AttentionSequence seq{0, 1, 0, table};
  cpu::PagedKvCache gqa({1, 1, m.latent + m.rope, 4, 2}, {backend::KvLayerFormat{ElementType::kF32}});
  EXPECT_NE(error_of([&] { cpu::mla_attention(q.data(), q.data(), q.data(), up, out.data(), {&seq, 1}, p, gqa, 0); })
                .find("not a latent cache"),
            std::string::npos);
  cpu::PagedKvCache narrow({1, 1, m.latent, 4, 2, 0, true}, {backend::KvLayerFormat{ElementType::kF32}});
  EXPECT_NE(error_of([&] { cpu::mla_attention(q.data(), q.data(), q.data(), up, out.data(), {&seq, 1}, p, narrow, 0); })
                .find("need their sum"),
            std::string::npos);
}

// ---------------------------------------------------------------- the latent cache

TEST(MlaCache, OneEntryATokenForAllHeads) {
  LoadedModel lm(model_fixture_dir(deepseek_model("deepseek_v3")["dir"]), {}, 1);
  const ModelConfig& c = lm.spec.config;
  const backend::KvCacheShape shape = lm.model->kv_cache_shape(16, 8);
  EXPECT_TRUE(shape.latent);
  EXPECT_EQ(shape.num_kv_heads, 1);
  EXPECT_EQ(shape.head_dim, 128 + 16);  // kv_lora_rank + qk_rope_head_dim
  const std::vector<backend::KvLayerFormat> bf16(size_t(c.num_hidden_layers));
  EXPECT_EQ(backend::kv_bytes_per_token(shape, bf16), uint64_t(3 * 144 * 2));
  // inspect's figures: the same, and what GQA with the same 4 KV heads would hold
  // (K of 16 + 16, V of 24 per head): 3 layers × 4 × 56 × 2 bytes.
  const io::MemoryEstimate e = io::estimate_memory(lm.spec);
  EXPECT_EQ(e.kv_per_token_bf16, uint64_t(3 * 144 * 2));
  EXPECT_EQ(e.kv_per_token_gqa_bf16, uint64_t(3 * 4 * 56 * 2));
  // The CPU cache holds no V array: half the bytes a K + V cache of the same width takes.
  cpu::PagedKvCache latent({3, 1, 144, 16, 8, 0, true}, bf16), kv({3, 1, 144, 16, 8}, bf16);
  EXPECT_EQ(2 * latent.bytes(), kv.bytes());
  std::vector<float> entry(144, 1.0f), out(144);
  EXPECT_NE(error_of([&] { latent.store(0, 0, 0, entry.data(), entry.data()); }).find("no v"), std::string::npos);
  latent.store(0, 0, 0, entry.data(), nullptr);
  EXPECT_NE(error_of([&] { latent.load_v(0, 0, 0, 0, out.data()); }).find("holds no v"), std::string::npos);
  EXPECT_NE(error_of([] { (void)backend::kv_bytes_per_token({1, 2, 8, 16, 1, 0, true}, {backend::KvLayerFormat{}}); })
                .find("num_kv_heads must be 1"),
            std::string::npos);
}

// An FP8 latent cache without scales in the checkpoint (DeepSeek's have none) is calibrated at
// load, as a GQA cache is: each layer's scale the amax of the entries it stores over the
// calibration tokens / 448 — not 1.0, and different per layer. (Its logits against the
// emulation: test_model_logits, deepseek_v3 kv_fp8_e4m3 / kv_fp8_e4m3_scaled.)
TEST(MlaCache, Fp8LatentCacheCalibratedAtLoad) {
  io::LoadOverrides o;
  o.kv_cache_dtype = io::parse_kv_cache_dtype("fp8_e4m3");
  engine::RuntimeOptions opt;
  opt.threads = 2;
  opt.load_tokenizer = false;  // random token ids calibrate
  auto rt = engine::Runtime::load(model_fixture_dir(deepseek_model("deepseek_v3")["dir"]), o, opt);
  const std::vector<backend::KvLayerFormat>& f = rt->kv_formats();
  ASSERT_EQ(f.size(), size_t(3));
  for (const backend::KvLayerFormat& l : f) {
    EXPECT_EQ(l.element, ElementType::kE4M3);
    EXPECT_GT(l.k_scale, 0.0f);
    EXPECT_NE(l.k_scale, 1.0f);
  }
  EXPECT_NE(f[0].k_scale, f[1].k_scale);
  EXPECT_TRUE(rt->kv_cache().shape().latent);
}

// ---------------------------------------------------------------- config.json

TEST(DeepseekConfig, FieldsAsParsed) {
  const ModelConfig c = io::parse_model_config(fixture_config("deepseek_v3"), "config.json");
  EXPECT_EQ(c.arch, Architecture::kDeepseekV3);
  EXPECT_TRUE(c.is_mla());
  EXPECT_EQ(c.mla.q_lora_rank, 32);
  EXPECT_EQ(c.mla.kv_lora_rank, 128);
  EXPECT_EQ(c.mla.qk_nope_head_dim, 16);
  EXPECT_EQ(c.mla.qk_rope_head_dim, 16);
  EXPECT_EQ(c.mla.v_head_dim, 24);
  EXPECT_EQ(c.head_dim, 16);  // RoPE's width, as transformers sets it
  EXPECT_TRUE(c.mla.rope_interleave);
  EXPECT_EQ(c.mla.num_nextn_predict_layers, 1);
  EXPECT_EQ(c.moe.num_experts, 8);
  EXPECT_EQ(c.moe.num_experts_per_tok, 2);
  EXPECT_EQ(c.moe.n_group, 4);
  EXPECT_EQ(c.moe.topk_group, 2);
  EXPECT_EQ(c.moe.n_shared_experts, 2);
  EXPECT_EQ(c.moe.scoring, MoeScoring::kSigmoid);
  EXPECT_TRUE(c.moe.correction_bias);
  EXPECT_TRUE(c.moe.norm_topk_prob);
  EXPECT_DOUBLE_EQ(c.moe.routed_scaling_factor, 2.5);
  EXPECT_FALSE(c.is_moe_layer(0));  // first_k_dense_replace 1
  EXPECT_TRUE(c.is_moe_layer(1));
  EXPECT_TRUE(c.is_moe_layer(2));
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kYarn);
  // qk_head_dim^-1/2 · mscale², mscale = 0.1 · mscale_all_dim · ln(factor) + 1 (factor 4, all_dim 1).
  const double mscale = 0.1 * std::log(4.0) + 1.0;
  EXPECT_FLOAT_EQ(mla_softmax_scale(c), float(1.0 / std::sqrt(32.0) * mscale * mscale));

  const ModelConfig n = io::parse_model_config(fixture_config("deepseek_v3_no_q_lora"), "config.json");
  EXPECT_EQ(n.mla.q_lora_rank, 0);  // null: q_proj
  EXPECT_FALSE(n.mla.rope_interleave);
  EXPECT_FLOAT_EQ(mla_softmax_scale(n), float(1.0 / std::sqrt(32.0)));  // no YaRN: no correction
}

struct Refusal {
  const char* change;  // merged into the fixture's config.json
  const char* named;   // what the error must contain
};

// Each value malformed, out of range, or one transformers' DeepseekV3 does not implement (so
// no reference exists for it): refused, naming the field, never silently replaced.
TEST(DeepseekConfig, RefusedByName) {
  const Refusal table[] = {
      {R"({"q_lora_rank": 0})", "'q_lora_rank'"},
      {R"({"q_lora_rank": "32"})", "q_lora_rank"},
      {R"({"kv_lora_rank": -1})", "'kv_lora_rank'"},
      {R"({"qk_rope_head_dim": 15})", "'qk_rope_head_dim' must be even"},
      {R"({"qk_nope_head_dim": 0})", "'qk_nope_head_dim'"},
      {R"({"v_head_dim": 0})", "'v_head_dim'"},
      {R"({"n_routed_experts": 0})", "'n_routed_experts'"},
      {R"({"num_experts_per_tok": 9})", "'num_experts_per_tok'"},
      {R"({"n_shared_experts": 0})", "'n_shared_experts'"},
      {R"({"scoring_func": "softmax"})", "'scoring_func'"},
      {R"({"topk_method": "group_limited_greedy"})", "'topk_method'"},
      {R"({"topk_method": "greedy"})", "'topk_method'"},
      {R"({"moe_layer_freq": 2})", "'moe_layer_freq'"},
      {R"({"ep_size": 8})", "'ep_size'"},
      {R"({"n_group": 3})", "'n_group'"},
      {R"({"n_group": 8})", "'n_group'"},
      {R"({"topk_group": 5})", "'topk_group'"},
      {R"({"topk_group": 1, "num_experts_per_tok": 3})", "'topk_group'"},
      {R"({"first_k_dense_replace": 4})", "'first_k_dense_replace'"},
      {R"({"routed_scaling_factor": 0})", "'routed_scaling_factor'"},
      {R"({"routed_scaling_factor": "2.5"})", "routed_scaling_factor"},
      {R"({"norm_topk_prob": 1})", "norm_topk_prob"},
      {R"({"rope_interleave": "yes"})", "rope_interleave"},
      {R"({"attention_bias": true})", "'attention_bias'"},
      {R"({"num_nextn_predict_layers": -1})", "'num_nextn_predict_layers'"},
      {R"({"model_type": "deepseek_v2"})", "'model_type'"},
      {R"({"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "mscale": 0, "rope_theta": 10000.0}})",
       "'mscale'"},
      {R"({"rope_parameters": {"rope_type": "dynamic", "factor": 4.0, "rope_theta": 10000.0}})", "dynamic"},
      {R"({"rope_parameters": {"rope_type": "linear", "factor": 4.0, "mscale_all_dim": 1.0, "rope_theta": 1e4}})",
       "'rope_parameters.mscale_all_dim'"},
      {R"({"num_key_value_heads": 2})", "'num_key_value_heads'"},
  };
  for (const Refusal& r : table) {
    nlohmann::json c = fixture_config("deepseek_v3");
    c.merge_patch(nlohmann::json::parse(r.change));
    const std::string e = error_of([&] {
      const ModelConfig m = io::parse_model_config(c, "config.json");
      (void)RopeTable(m);  // RoPE types the table cannot compute are refused there
    });
    EXPECT_NE(e.find(r.named), std::string::npos) << r.change << " gave: " << e;
  }
}

// ---------------------------------------------------------------- a backend without MLA

// A backend that runs MoE but not MLA (the CUDA backend until issue 45's kernels exist): the
// model refuses at load, before uploading anything, naming what is missing.
class NoMlaOps final : public backend::Ops {
 public:
  std::string name() const override { return "no-mla"; }
  bool supports_moe() const override { return true; }
  std::unique_ptr<backend::Weight> upload_linear(const weights::LinearWeight&) override { unused(); }
  std::unique_ptr<backend::Weight> upload_vector(std::vector<float>) override { unused(); }
  std::unique_ptr<backend::Weight> upload_embedding(const weights::LinearWeight&) override { unused(); }
  std::unique_ptr<backend::KvCache> make_kv_cache(const backend::KvCacheShape&,
                                                  std::vector<backend::KvLayerFormat>) override {
    unused();
  }
  backend::Tensor alloc(int64_t, int64_t) override { unused(); }
  void reset_scratch() override { unused(); }
  void begin_step(const backend::StepInputs&) override { unused(); }
  void embedding(const backend::Weight&, backend::Tensor) override { unused(); }
  void rms_norm(backend::Tensor, const backend::Weight&, float, backend::Tensor, const backend::Weight*) override {
    unused();
  }
  void add_rms_norm(backend::Tensor, backend::Tensor, const backend::Weight&, float, backend::Tensor,
                    const backend::Weight*) override {
    unused();
  }
  void head_rms_norm(backend::Tensor, int64_t, const backend::Weight&, float) override { unused(); }
  void add(backend::Tensor, backend::Tensor) override { unused(); }
  void linear(backend::Tensor, const backend::Weight&, backend::Tensor) override { unused(); }
  void rope_qk(backend::Tensor, backend::Tensor, int64_t, const RopeTable&) override { unused(); }
  void silu_mul(backend::Tensor, backend::Tensor, backend::Tensor) override { unused(); }
  void attention(backend::Tensor, backend::Tensor, backend::Tensor, backend::Tensor, const backend::AttentionParams&,
                 backend::KvCache&, int) override {
    unused();
  }
  void gather_rows(backend::Tensor, backend::Tensor) override { unused(); }
  void to_host(backend::Tensor, std::span<float>) override { unused(); }
  void argmax_rows(backend::Tensor, std::span<int32_t>) override { unused(); }

 private:
  [[noreturn]] static void unused() { throw Error("NoMlaOps: nothing may be uploaded before the refusal"); }
};

TEST(DeepseekBackend, BackendWithoutMlaRefusedAtLoad) {
  const io::ModelSpec spec = io::read_model_spec(model_fixture_dir(deepseek_model("deepseek_v3")["dir"]), {});
  const loader::HostModelWeights w = loader::load_host_weights(spec);
  NoMlaOps ops;
  const std::string e = error_of([&] { model::LlamaModel m(spec.config, w, ops); });
  EXPECT_NE(e.find("multi-head latent attention on no-mla is not implemented yet (issue 45)"), std::string::npos) << e;
  EXPECT_NE(e.find("latent KV cache"), std::string::npos) << e;
}

// The checkpoint's multi-token-prediction layer (model.layers.2.*) is read past, and nothing
// else unexpected is: a stray tensor beside it is still named.
TEST(DeepseekCheckpoint, MtpLayerSkippedNothingElse) {
  const nlohmann::json& m = deepseek_model("deepseek_v3_no_q_lora");
  ASSERT_FALSE(m["mtp_tensors"].empty());
  const io::ModelSpec spec = io::read_model_spec(model_fixture_dir(m["dir"]), {});
  EXPECT_EQ(spec.config.mla.num_nextn_predict_layers, 1);
  for (const nlohmann::json& t : m["mtp_tensors"]) EXPECT_TRUE(spec.files->find(t.get<std::string>()) != nullptr);
  nlohmann::json c = fixture_config("deepseek_v3_no_q_lora");
  c["num_nextn_predict_layers"] = 0;  // then the MTP layer is unexpected
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "deepseek_no_mtp";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(model_fixture_dir(m["dir"]) / "model.safetensors", dir / "model.safetensors",
                             std::filesystem::copy_options::overwrite_existing);
  std::ofstream(dir / "config.json") << c.dump();
  const std::string e = error_of([&] { (void)io::read_model_spec(dir, {}); });
  EXPECT_NE(e.find("unexpected tensor 'model.layers.2."), std::string::npos) << e;
}

// A checkpoint that does not match its config is named tensor by tensor, never loaded: here the
// config says kv_lora_rank 64 (the checkpoint's is 128), so every MLA tensor that depends on it is.
TEST(DeepseekCheckpoint, ShapesAuditedAgainstTheConfig) {
  const nlohmann::json& m = deepseek_model("deepseek_v3_no_q_lora");
  nlohmann::json c = fixture_config("deepseek_v3_no_q_lora");
  c["kv_lora_rank"] = 64;
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "deepseek_wrong_rank";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(model_fixture_dir(m["dir"]) / "model.safetensors", dir / "model.safetensors",
                             std::filesystem::copy_options::overwrite_existing);
  std::ofstream(dir / "config.json") << c.dump();
  const std::string e = error_of([&] { (void)io::read_model_spec(dir, {}); });
  for (const char* named : {"tensor 'model.layers.0.self_attn.kv_a_proj_with_mqa.weight' has shape [144, 64], "
                            "expected [80, 64]",
                            "tensor 'model.layers.1.self_attn.kv_b_proj.weight' has shape [160, 128], expected [160, 64]",
                            "tensor 'model.layers.0.self_attn.kv_a_layernorm.weight' has shape [128], expected [64]"})
    EXPECT_NE(e.find(named), std::string::npos) << named << "\n" << e;
}

// --load-format dummy (the device benchmarks' way to run Moonlight-sized configs without
// weights): every DeepSeek-V3 tensor generated from config.json, in BF16 and in the config's
// block FP8, and a prefill + decode runs to finite logits.
TEST(DeepseekCheckpoint, DummyWeightsRun) {
  for (const char* name : {"deepseek_v3", "deepseek_v3_fp8_block"}) {
    SCOPED_TRACE(name);
    io::LoadOverrides o;
    o.load_format = io::LoadFormat::kDummy;
    LoadedModel lm(model_fixture_dir(deepseek_model(name)["dir"]), o, 1);
    std::vector<float> logits = lm.prompt_logits({5, 6, 7, 8});
    ASSERT_EQ(logits.size(), size_t(4 * 256));
    for (const float x : logits) ASSERT_TRUE(std::isfinite(x));
  }
}

// fp8lm quantize of DeepSeek-V3: tests/cpp/test_quantize.cpp (QuantizeDeepseek, DeepseekPresets).

}  // namespace
}  // namespace fp8lm::test
