// Decode steps padded to the graph ladder (backend::decode_graph_rows), as the
// CUDA backend gets them, forced on the CPU backend (cpu_pad_decode_batches) on
// the shipped model: the real rows' logits and tokens, and what they leave in
// the KV cache, are bit for bit those of the unpadded steps; the padding
// blocks come out of the capacity and are never handed to a sequence; and a
// control proves the padding rows really run, in the padding block.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "common/error.h"
#include "cpp/model_fixtures.h"
#include "cpp/test_util.h"
#include "engine/engine.h"
#include "engine/runtime.h"

namespace fp8lm::test {
namespace {

std::unique_ptr<engine::Runtime> load_shipped(bool pad, const std::string& quant = "", const std::string& kv = "bf16",
                                              int64_t kv_cache_tokens = 2048) {
  io::LoadOverrides o;
  if (!quant.empty()) o.quantization = io::parse_online_quant(quant);
  o.kv_cache_dtype = io::parse_kv_cache_dtype(kv);
  engine::RuntimeOptions opt;
  opt.threads = 2;
  opt.kv_cache_tokens = kv_cache_tokens;
  opt.cpu_pad_decode_batches = pad;
  const auto dir = std::filesystem::path(FP8LM_SOURCE_DIR) / model_manifest()["shipped"]["dir"].get<std::string>();
  return engine::Runtime::load(dir, o, opt);
}

bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(DecodeGraphRows, TheLadder) {
  using backend::decode_graph_rows;
  const std::vector<std::pair<int64_t, int64_t>> cases = {{1, 1},     {2, 2},     {3, 4},     {4, 4},    {5, 8},
                                                          {8, 8},     {9, 16},    {16, 16},   {17, 24},  {249, 256},
                                                          {256, 256}, {257, 272}, {272, 272}, {273, 288}};
  for (const auto& [rows, want] : cases) EXPECT_EQ(decode_graph_rows(rows), want) << rows << " rows";
  std::set<int64_t> sizes;
  int64_t most_padding = 0;
  for (int64_t rows = 1; rows <= 1024; ++rows) {
    const int64_t padded = decode_graph_rows(rows);
    ASSERT_GE(padded, rows);
    EXPECT_EQ(decode_graph_rows(padded), padded) << "a ladder size pads to itself";
    most_padding = std::max(most_padding, padded - rows);
    if (rows <= 256) sizes.insert(padded);
  }
  EXPECT_EQ(most_padding, backend::kMaxDecodePadding);
  EXPECT_EQ(sizes.size(), 35u);  // 1, 2, 4 and the 32 multiples of 8 up to 256
  expect_error([] { (void)decode_graph_rows(0); }, "at least one row");
}

// n sequences with prompts of different lengths (so the decode steps attend
// over different contexts), each in blocks of its own.
struct Batch {
  std::vector<std::vector<int32_t>> tokens;  // prompt, then the fed tokens
  std::vector<std::vector<int64_t>> tables;
};

Batch make_batch(int n, int64_t vocab, int64_t decode_steps) {
  std::mt19937_64 rng(777 + uint64_t(n));
  std::uniform_int_distribution<int32_t> pick(100, int32_t(vocab) - 1);
  Batch b;
  int64_t next_block = 0;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> prompt(size_t(1 + 5 * i + (i % 3) * 7));
    for (int32_t& t : prompt) t = pick(rng);
    b.tokens.push_back(prompt);
    std::vector<int64_t> table;
    for (int64_t k = 0; k < (int64_t(prompt.size()) + decode_steps + 1 + 15) / 16; ++k) table.push_back(next_block++);
    b.tables.push_back(table);
  }
  return b;
}

struct Case {
  const char* quant;
  const char* kv;
};

void PrintTo(const Case& c, std::ostream* os) { *os << (*c.quant ? c.quant : "bf16") << ", KV " << c.kv; }

class DecodePadding : public testing::TestWithParam<Case> {};

// Batches of 3, 5 and 9 sequences (padded to 4, 8 and 16 rows): a prefill of
// every prompt, then decode steps through forward and forward_greedy, a verify
// step of 3 tokens a sequence (padded to 4, 8 and 16 sequences), then
// each sequence alone reading back its cache (a step of one row: never
// padded) — every logit and token bit for bit equal to the unpadded run's.
TEST_P(DecodePadding, RealRowsAndTheirCacheAreUnchanged) {
  auto plain = load_shipped(false, GetParam().quant, GetParam().kv);
  auto padded = load_shipped(true, GetParam().quant, GetParam().kv);
  const int64_t vocab = plain->config().vocab_size;
  const backend::KvCacheShape shape = padded->kv_cache().shape();
  ASSERT_EQ(shape.padding_blocks, 1);
  ASSERT_EQ(plain->kv_cache().shape().padding_blocks, 0);
  constexpr int64_t kSteps = 3;
  for (const auto& [n, rows] : {std::pair{3, 4}, std::pair{5, 8}, std::pair{9, 16}}) {
    SCOPED_TRACE(std::to_string(n) + " sequences");
    EXPECT_EQ(padded->model().rank(0).model->decode_step_rows(n, padded->kv_cache()), rows);
    EXPECT_EQ(plain->model().rank(0).model->decode_step_rows(n, plain->kv_cache()), n);
    Batch b = make_batch(n, vocab, kSteps + 2);  // the decode steps, then a verify step of 3 tokens
    for (const auto& t : b.tables)
      for (const int64_t block : t) ASSERT_LT(block, padded->blocks().num_total()) << "a sequence's block";

    // The prompts in one step (not a decode step: never padded).
    std::vector<model::SequenceInput> in;
    for (int i = 0; i < n; ++i) in.push_back({b.tokens[size_t(i)], 0, b.tables[size_t(i)], false});
    std::vector<float> want, got;
    plain->model().forward(in, want);
    padded->model().forward(in, got);
    ASSERT_TRUE(bit_equal(want, got)) << "prefill";

    // Decode steps, each sequence at its own position, fed the plain run's
    // argmax; the middle one through forward_greedy (the ids come from the
    // backend there, and must be equal too).
    auto append_argmax = [&](const std::vector<float>& logits) {
      for (int i = 0; i < n; ++i) {
        const auto row = logits.begin() + int64_t(i) * vocab;
        b.tokens[size_t(i)].push_back(int32_t(std::max_element(row, row + vocab) - row));
      }
    };
    append_argmax(want);
    for (int64_t step = 0; step < kSteps; ++step) {
      SCOPED_TRACE("decode step " + std::to_string(step));
      in.clear();
      for (int i = 0; i < n; ++i)
        in.push_back({std::span<const int32_t>(&b.tokens[size_t(i)].back(), 1),
                      int64_t(b.tokens[size_t(i)].size()) - 1, b.tables[size_t(i)], false});
      if (step == 1) {
        std::vector<int32_t> ids_want, ids_got;
        plain->model().forward_greedy(in, ids_want);
        padded->model().forward_greedy(in, ids_got);
        ASSERT_EQ(ids_want.size(), size_t(n)) << "one id per real sequence";
        ASSERT_EQ(ids_want, ids_got);
        for (int i = 0; i < n; ++i) b.tokens[size_t(i)].push_back(ids_want[size_t(i)]);
      } else {
        plain->model().forward(in, want);
        padded->model().forward(in, got);
        ASSERT_EQ(want.size(), size_t(n * vocab)) << "one logits row per real sequence";
        ASSERT_TRUE(bit_equal(want, got));
        append_argmax(want);
      }
    }

    // A speculative verify step: each sequence its last token and two more, every position's
    // logits, padded as a decode step is (verify_step_sequences).
    // Padding sequences of 3 positions each, in the padding block's 16: 3 → 4 and 5 → 8; 9 → 16
    // would need 21, so that step runs at its own size.
    EXPECT_EQ(padded->model().rank(0).model->verify_step_sequences(n, 3, padded->kv_cache()), n == 9 ? 9 : rows);
    EXPECT_EQ(plain->model().rank(0).model->verify_step_sequences(n, 3, plain->kv_cache()), n);
    std::vector<std::vector<int32_t>> fed(static_cast<size_t>(n));
    in.clear();
    for (int i = 0; i < n; ++i) {
      std::vector<int32_t>& t = b.tokens[size_t(i)];
      fed[size_t(i)] = {t.back(), t[0], t[t.size() / 2]};
      in.push_back({fed[size_t(i)], int64_t(t.size()) - 1, b.tables[size_t(i)], true});
    }
    plain->model().forward(in, want);
    padded->model().forward(in, got);
    ASSERT_EQ(want.size(), size_t(n * 3 * vocab)) << "three logits rows per real sequence";
    ASSERT_TRUE(bit_equal(want, got)) << "verify step";
    for (int i = 0; i < n; ++i) b.tokens[size_t(i)].insert(b.tokens[size_t(i)].end(), fed[size_t(i)].begin() + 1, fed[size_t(i)].end());

    // Read-back: each sequence alone decodes once more over everything it
    // cached. A K/V entry the padding had changed would change these bits.
    for (int i = 0; i < n; ++i) {
      const std::vector<int32_t>& t = b.tokens[size_t(i)];
      const model::SequenceInput one{{&t.back(), 1}, int64_t(t.size()) - 1, b.tables[size_t(i)], false};
      plain->model().forward({&one, 1}, want);
      padded->model().forward({&one, 1}, got);
      ASSERT_TRUE(bit_equal(want, got)) << "sequence " << i << " reading its cache back";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shipped, DecodePadding,
                         testing::Values(Case{"", "bf16"}, Case{"fp8", "bf16"}, Case{"fp8", "fp8"},
                                         Case{"fp8:block", "bf16"}),
                         [](const testing::TestParamInfo<Case>& p) {
                           std::string q = *p.param.quant ? p.param.quant : "bf16";
                           for (char& c : q)
                             if (c == ':') c = '_';
                           return q + "_kv_" + p.param.kv;
                         });

// The control: a sequence given the padding block (which the runtime never
// does) has its first position overwritten by the padding row of a padded
// step, so what it reads back differs — the padding rows run, and write there.
TEST(DecodePaddingControl, PaddingRowsWriteThePaddingBlock) {
  auto plain = load_shipped(false);
  auto padded = load_shipped(true);
  const int64_t pad_block = padded->kv_cache().shape().num_blocks - 1;
  const std::vector<std::vector<int32_t>> prompts = {{101, 202, 303, 404, 505}, {606, 707}, {808, 909, 1001}};
  const std::vector<std::vector<int64_t>> tables = {{pad_block}, {0}, {1}};
  std::vector<model::SequenceInput> in;
  for (size_t i = 0; i < 3; ++i) in.push_back({prompts[i], 0, tables[i], false});
  std::vector<float> want, got;
  plain->model().forward(in, want);
  padded->model().forward(in, got);
  ASSERT_TRUE(bit_equal(want, got));
  const int32_t next = 42;
  in.clear();
  for (size_t i = 0; i < 3; ++i) in.push_back({{&next, 1}, int64_t(prompts[i].size()), tables[i], false});
  ASSERT_EQ(padded->model().rank(0).model->decode_step_rows(3, padded->kv_cache()), 4);
  plain->model().forward(in, want);
  padded->model().forward(in, got);
  EXPECT_EQ(want.size(), got.size());
  EXPECT_FALSE(bit_equal(want, got)) << "sequence 0 attends over position 0, which the padding row overwrote";
  const model::SequenceInput one{{&next, 1}, int64_t(prompts[0].size()) + 1, tables[0], false};
  plain->model().forward({&one, 1}, want);
  padded->model().forward({&one, 1}, got);
  EXPECT_FALSE(bit_equal(want, got));
}

// A dynamic per-tensor activation scale spans every row of a step: padding
// rows would change it, so such a model is never padded.
TEST(DecodePaddingControl, NoPaddingUnderADynamicPerTensorScale) {
  auto padded = load_shipped(true, "fp8:tensor");
  EXPECT_EQ(padded->model().rank(0).model->decode_step_rows(3, padded->kv_cache()), 3);
  auto per_token = load_shipped(true, "fp8");
  EXPECT_EQ(per_token->model().rank(0).model->decode_step_rows(3, per_token->kv_cache()), 4);
}

// The padding block comes out of the capacity and is never handed out.
TEST(DecodePaddingCapacity, ThePaddingBlockIsNoSequencesBlock) {
  auto plain = load_shipped(false, "", "bf16", 2048);
  auto padded = load_shipped(true, "", "bf16", 2048);
  EXPECT_EQ(plain->blocks().num_total(), 128);
  EXPECT_EQ(plain->kv_cache().shape().num_blocks, 128);
  EXPECT_EQ(padded->kv_cache().shape().num_blocks, 128) << "the same memory";
  EXPECT_EQ(padded->kv_cache().shape().padding_blocks, 1);
  EXPECT_EQ(padded->blocks().num_total(), 127) << "the capacity reported shrinks by the padding block";
  EXPECT_EQ(padded->kv_cache_bytes(), plain->kv_cache_bytes());
  const std::optional<std::vector<int64_t>> all = padded->blocks().allocate(padded->blocks().num_free());
  ASSERT_TRUE(all.has_value());
  EXPECT_EQ(all->size(), 127u);
  for (const int64_t b : *all) EXPECT_LT(b, 127) << "block " << b << " is the padding block";
  EXPECT_FALSE(padded->blocks().allocate(1).has_value());
  padded->blocks().free(*all);

  // The CPU's default cache holds one full context for sequences, the padding block beside it.
  auto dflt_plain = load_shipped(false, "", "bf16", 0);
  auto dflt_padded = load_shipped(true, "", "bf16", 0);
  EXPECT_EQ(dflt_padded->blocks().num_total(), dflt_plain->blocks().num_total());
  EXPECT_EQ(dflt_padded->kv_cache().shape().num_blocks, dflt_plain->kv_cache().shape().num_blocks + 1);
  EXPECT_GE(dflt_padded->blocks().num_total() * dflt_padded->block_size(), dflt_padded->config().max_position_embeddings);

  expect_error([] { (void)load_shipped(true, "", "bf16", 16); }, "leaves no block for sequences");
}

// The engine over padded decode steps: every request's tokens and text equal
// the unpadded engine's, with the same usable capacity (the padded runtime is
// given one block more) under preemption.
TEST(DecodePaddingEngine, ServingGivesTheSameTokens) {
  auto plain = load_shipped(false, "fp8", "bf16", 96);
  auto padded = load_shipped(true, "fp8", "bf16", 112);
  ASSERT_EQ(plain->blocks().num_total(), padded->blocks().num_total());
  std::mt19937_64 rng(99);
  std::uniform_int_distribution<int32_t> pick(100, int32_t(plain->config().vocab_size) - 1);
  std::vector<engine::Request> requests;
  for (int i = 0; i < 14; ++i) {
    engine::Request r;
    r.prompt.resize(size_t(1 + (i * 11) % 29));
    for (int32_t& t : r.prompt) t = pick(rng);
    r.params.max_tokens = 4 + (i * 7) % 19;
    r.params.ignore_eos = true;
    if (i % 3 == 1) {
      r.params.temperature = 0.8f;
      r.params.seed = 500 + uint64_t(i);
    } else {
      r.params.temperature = 0.0f;
    }
    requests.push_back(r);
  }
  auto serve = [&](engine::Runtime& rt, int64_t& preemptions) {
    engine::Engine eng(rt, engine::SchedulerConfig{/*max_num_batched_tokens=*/24, /*max_num_seqs=*/11});
    for (const engine::Request& r : requests) eng.add_request(r);
    std::vector<engine::Completion> out = eng.run_to_completion();
    preemptions = eng.num_preemptions();
    return out;
  };
  int64_t pre_plain = 0, pre_padded = 0;
  const std::vector<engine::Completion> want = serve(*plain, pre_plain);
  const std::vector<engine::Completion> got = serve(*padded, pre_padded);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(want[i].tokens, got[i].tokens) << "request " << i;
    EXPECT_EQ(want[i].text, got[i].text) << "request " << i;
    EXPECT_EQ(want[i].finish_reason, got[i].finish_reason) << "request " << i;
  }
  EXPECT_GT(pre_plain, 0) << "the small cache should force preemption";
  EXPECT_EQ(pre_plain, pre_padded);
}

}  // namespace
}  // namespace fp8lm::test
