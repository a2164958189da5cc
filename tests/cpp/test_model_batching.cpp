// Properties the engine relies on, checked bit for bit on the tiny fixture
// models (dense, MoE and DeepSeek-V3's MLA): a sequence's logits do not depend on what it is batched with (prefill
// and decode mixed in one step), on how its prompt is split into chunks, or on
// the number of threads. Dynamic per-tensor activation scales are the one
// documented exception (the scale spans the whole call) and are not tested here.
#include <gtest/gtest.h>

#include <cstring>

#include "common/error.h"
#include "cpp/model_fixtures.h"

namespace fp8lm::test {
namespace {

struct Setup {
  const char* model;
  const char* quantization;  // nullptr = as stored
  const char* kv;
  const char* fixtures = "models";  // or kMoeFixtures, kDeepseekFixtures
  const char* label = nullptr;        // the test's name when not the model's
};

class ModelInvariance : public ::testing::TestWithParam<Setup> {
 protected:
  io::LoadOverrides overrides() const {
    io::LoadOverrides o;
    if (GetParam().quantization) o.quantization = io::parse_online_quant(GetParam().quantization);
    o.kv_cache_dtype = io::parse_kv_cache_dtype(GetParam().kv);
    return o;
  }
  const nlohmann::json& manifest() const { return manifest_of(GetParam().fixtures)["models"][GetParam().model]; }
  std::filesystem::path dir() const { return model_fixture_dir(manifest()["dir"]); }
  std::vector<std::vector<int32_t>> prompts() const {
    std::vector<std::vector<int32_t>> out;
    for (const auto& p : manifest()["prompts"]) out.push_back(ids_of(p));
    return out;
  }
};

bool bit_equal(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

TEST_P(ModelInvariance, ChunkedPrefillEqualsOneShot) {
  LoadedModel lm(dir(), overrides(), 2);
  const std::vector<int32_t> ids = prompts().back();
  const std::vector<float> whole = lm.prompt_logits(ids);
  const int64_t vocab = lm.model->vocab_size();
  // The same prompt in chunks of 5, then token by token, on fresh blocks.
  for (int64_t chunk : {int64_t(5), int64_t(1)}) {
    const std::vector<int64_t> blocks = lm.new_blocks(int64_t(ids.size()));
    std::vector<float> logits;
    for (int64_t start = 0; start < int64_t(ids.size()); start += chunk) {
      const int64_t n = std::min<int64_t>(chunk, int64_t(ids.size()) - start);
      const model::SequenceInput in{std::span(ids).subspan(size_t(start), size_t(n)), start, blocks, true};
      lm.model->forward({&in, 1}, *lm.cache, logits);
      ASSERT_TRUE(bit_equal(logits.data(), whole.data() + start * vocab, size_t(n * vocab)))
          << "chunk size " << chunk << ", positions " << start << ".." << start + n - 1;
    }
  }
}

TEST_P(ModelInvariance, BatchedEqualsAlone) {
  LoadedModel lm(dir(), overrides(), 2);
  const auto ps = prompts();
  const int64_t vocab = lm.model->vocab_size();
  std::vector<std::vector<float>> alone;
  for (const auto& p : ps) alone.push_back(lm.prompt_logits(p));

  // Step 1: sequence 0 prefills its first 3 tokens alone. Step 2, one batch:
  // the rest of sequence 0 as a chunk at position 3 (a continuation over
  // cached context), sequence 1 whole with every logit, sequence 2 whole with
  // its last logit only.
  std::vector<std::vector<int64_t>> tables;
  for (const auto& p : ps) tables.push_back(lm.new_blocks(int64_t(p.size())));
  std::vector<float> logits;
  const model::SequenceInput first{std::span(ps[0]).first(3), 0, tables[0], true};
  lm.model->forward({&first, 1}, *lm.cache, logits);
  std::vector<model::SequenceInput> batch = {
      {std::span(ps[0]).subspan(3), 3, tables[0], true},
      {ps[1], 0, tables[1], true},
      {ps[2], 0, tables[2], false},  // last row only
  };
  lm.model->forward(batch, *lm.cache, logits);
  size_t row = 0;
  const int64_t rest0 = int64_t(ps[0].size()) - 3;
  EXPECT_TRUE(bit_equal(logits.data(), alone[0].data() + 3 * vocab, size_t(rest0 * vocab)));
  row += size_t(rest0);
  EXPECT_TRUE(bit_equal(logits.data() + row * size_t(vocab), alone[1].data(), ps[1].size() * size_t(vocab)));
  row += ps[1].size();
  EXPECT_TRUE(bit_equal(logits.data() + row * size_t(vocab), alone[2].data() + (ps[2].size() - 1) * size_t(vocab),
                        size_t(vocab)));
  EXPECT_EQ(logits.size(), (row + 1) * size_t(vocab));
}

TEST_P(ModelInvariance, ThreadCountDoesNotChangeResults) {
  LoadedModel one(dir(), overrides(), 1);
  LoadedModel three(dir(), overrides(), 3);
  for (const auto& p : prompts()) {
    const std::vector<float> a = one.prompt_logits(p), b = three.prompt_logits(p);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_TRUE(bit_equal(a.data(), b.data(), a.size()));
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ModelInvariance,
                         ::testing::Values(Setup{"llama", nullptr, "fp32"}, Setup{"qwen2", "fp8:channel", "bf16"},
                                           Setup{"qwen3", "fp8:block", "fp8_e4m3"},
                                           Setup{"mistral", "fp8:weight-only", "fp8_e5m2"},
                                           // MoE: rows routed to different experts in one step.
                                           Setup{"qwen3_moe", nullptr, "fp32", kMoeFixtures},
                                           Setup{"mixtral", nullptr, "fp8_e4m3", kMoeFixtures},
                                           // FP8 experts in each row-wise scheme (a dynamic per-tensor
                                           // scale spans the call, as for dense layers).
                                           Setup{"qwen3_moe", "fp8:block", "fp32", kMoeFixtures, "qwen3_moe_fp8_block"},
                                           Setup{"mixtral", "fp8:channel", "bf16", kMoeFixtures, "mixtral_fp8_channel"},
                                           Setup{"qwen3_moe_nonorm", "fp8:weight-only", "fp8_e4m3", kMoeFixtures,
                                                 "qwen3_moe_nonorm_fp8_weight_only"},
                                           // DeepSeek-V3: MLA over the latent cache (F32 and BF16 entries),
                                           // grouped sigmoid routing, shared experts, block FP8 as stored.
                                           Setup{"deepseek_v3", nullptr, "fp32", kDeepseekFixtures},
                                           Setup{"deepseek_v3_no_q_lora", nullptr, "bf16", kDeepseekFixtures},
                                           Setup{"deepseek_v3", "fp8:channel", "bf16", kDeepseekFixtures,
                                                 "deepseek_v3_fp8_channel"},
                                           Setup{"deepseek_v3_fp8_block", nullptr, "bf16", kDeepseekFixtures},
                                           Setup{"deepseek_v3", nullptr, "fp8_e4m3", kDeepseekFixtures,
                                                 "deepseek_v3_kv_fp8_e4m3"}),
                         [](const auto& p) { return std::string(p.param.label ? p.param.label : p.param.model); });

TEST(ModelErrors, PositionsBeyondTheContextAndShortBlockTables) {
  LoadedModel lm(model_fixture_dir("llama"), {}, 1);
  const int64_t context = lm.spec.config.max_position_embeddings;
  std::vector<int32_t> ids(4, 5);
  std::vector<int64_t> blocks = lm.new_blocks(context + 16);
  std::vector<float> logits;
  const model::SequenceInput late{ids, context - 2, blocks, false};
  EXPECT_THROW(lm.model->forward({&late, 1}, *lm.cache, logits), Error);
  const std::vector<int64_t> one_block(1, 0);
  const model::SequenceInput short_table{ids, 15, one_block, false};
  EXPECT_THROW(lm.model->forward({&short_table, 1}, *lm.cache, logits), Error);
  const std::vector<int32_t> bad_id = {int32_t(lm.model->vocab_size())};
  const model::SequenceInput oov{bad_id, 0, blocks, false};
  EXPECT_THROW(lm.model->forward({&oov, 1}, *lm.cache, logits), Error);
}

}  // namespace
}  // namespace fp8lm::test
