// --fp8-attention through the runtime (engine/runtime.h RuntimeOptions::fp8_attention; the numerics
// are cpu/attention.h's, checked against their definition in test_cpu_attention.cpp): it needs an
// FP8 E4M3 KV cache and says so by name; on the shipped model it changes the outputs (its
// roundings run) and generation runs; multi-head latent attention refuses it by name.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "cpp/model_fixtures.h"
#include "cpp/test_util.h"
#include "cuda/model_trace.h"
#include "engine/generate.h"
#include "engine/runtime.h"
#include "io/load_overrides.h"

namespace fp8lm::test {
namespace {

std::filesystem::path shipped() {
  return std::filesystem::path(FP8LM_SOURCE_DIR) / model_manifest()["shipped"]["dir"].get<std::string>();
}

std::unique_ptr<engine::Runtime> load(const std::filesystem::path& dir, const std::string& kv, bool fp8_attention,
                                      bool tokenizer = true) {
  io::LoadOverrides o;
  o.kv_cache_dtype = io::parse_kv_cache_dtype(kv);
  engine::RuntimeOptions opt;
  opt.threads = 2;
  opt.kv_cache_tokens = 1024;
  opt.fp8_attention = fp8_attention;
  opt.load_tokenizer = tokenizer;
  return engine::Runtime::load(dir, o, opt);
}

TEST(Fp8Attention, NeedsAnE4m3KvCache) {
  for (const char* kv : {"bf16", "fp8_e5m2"}) {
    const std::string e = error_of([&] { load(shipped(), kv, true); });
    EXPECT_NE(e.find("--fp8-attention: needs an FP8 E4M3 KV cache (--kv-cache-dtype fp8)"), std::string::npos)
        << kv << ": " << e;
  }
}

TEST(Fp8Attention, ItsRoundingsRunOnTheShippedModel) {
  auto plain = load(shipped(), "fp8", false);
  auto fp8 = load(shipped(), "fp8", true);
  const std::vector<uint32_t> ids = plain->tokenizer().encode("It was a dark and stormy night, and the wind");
  const std::vector<int32_t> prompt(ids.begin(), ids.end());
  engine::SamplingParams greedy;
  greedy.temperature = 0.0f, greedy.max_tokens = 24, greedy.ignore_eos = true;
  ASSERT_EQ(engine::generate(*fp8, prompt, greedy).tokens.size(), engine::generate(*plain, prompt, greedy).tokens.size());
  // The prompt's last logits: close (the same model, attention's inputs rounded to 3 mantissa
  // bits) but not the same bytes.
  const std::vector<float> la = run(*plain, prompt, {}).rows.back(), lb = run(*fp8, prompt, {}).rows.back();
  ASSERT_EQ(la.size(), lb.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < la.size(); ++i) {
    ASSERT_TRUE(std::isfinite(lb[i]));
    diff += std::abs(double(la[i]) - double(lb[i]));
    scale += std::abs(double(la[i]));
  }
  EXPECT_GT(diff, 0.0) << "--fp8-attention gave the same logits: its roundings did not run";
  EXPECT_LT(diff, 0.1 * scale) << "--fp8-attention moved the logits by more than a tenth of their size";
}

TEST(Fp8Attention, MultiHeadLatentAttentionRefusesIt) {
  const std::filesystem::path dir = model_fixture_dir("deepseek/deepseek_v3");
  const std::string e = error_of([&] {
    auto rt = load(dir, "fp8", true, false);
    engine::SamplingParams p;
    p.max_tokens = 2;
    engine::generate(*rt, std::vector<int32_t>{5, 9, 17}, p);
  });
  EXPECT_NE(e.find("FP8 attention (--fp8-attention) is not implemented for multi-head latent attention"),
            std::string::npos)
      << e;
}

}  // namespace
}  // namespace fp8lm::test
