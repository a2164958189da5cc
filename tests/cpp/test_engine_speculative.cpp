// Speculative decoding in the batched engine (engine/engine.h, issue 42) on the shipped model:
// every request of a batch gives exactly what engine::generate gives alone with the same
// drafter — greedy, seeded sampling, penalties — and greedy requests exactly what they give
// without speculation; under a tight token budget, a small KV cache (preemption) and prefix
// caching too. Plus the scheduler's handling of drafts on its own: the budget cuts drafts, a
// preempted sequence loses them, and no block holding a rejected draft enters the prefix cache.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "cpp/model_fixtures.h"
#include "engine/draft_model.h"
#include "engine/engine.h"
#include "engine/generate.h"

// A namespace of its own: the test program compiles as unity units.
namespace fp8lm::test::speculative_engine {
namespace {

std::unique_ptr<engine::Runtime> load_shipped(int64_t kv_cache_tokens = 0) {
  engine::RuntimeOptions opt;
  opt.threads = 2;
  opt.kv_cache_tokens = kv_cache_tokens;
  return engine::Runtime::load(
      std::filesystem::path(FP8LM_SOURCE_DIR) / model_manifest()["shipped"]["dir"].get<std::string>(), {}, opt);
}

engine::SpeculativeConfig ngram(int k) {
  engine::SpeculativeConfig c;
  c.num_speculative_tokens = k;
  c.prompt_lookup_min = 1;
  c.prompt_lookup_max = 3;
  return c;
}

struct Case {
  std::vector<int32_t> prompt;
  engine::SamplingParams params;
};

// 16 requests whose prompts repeat a random phrase (so prompt lookup drafts from the start; the
// shipped model's continuations soon repeat themselves too): greedy, seeded sampling, and both
// with penalties; max_tokens 6 … 36; some stop on EOS.
std::vector<Case> make_cases(const engine::Runtime& rt) {
  std::mt19937_64 rng(4242);
  std::uniform_int_distribution<int32_t> pick(100, int32_t(rt.config().vocab_size) - 1);
  std::vector<Case> cases;
  for (int i = 0; i < 16; ++i) {
    Case c;
    std::vector<int32_t> phrase(size_t(3 + i % 6));
    for (int32_t& t : phrase) t = pick(rng);
    for (int r = 0; r < 2 + i % 3; ++r) c.prompt.insert(c.prompt.end(), phrase.begin(), phrase.end());
    c.params.max_tokens = 6 + (i * 11) % 31;
    c.params.ignore_eos = i % 5 != 0;
    if (i % 2 == 0) {
      c.params.temperature = 0.0f;
    } else {
      c.params.temperature = 0.8f;
      c.params.top_p = 0.9f;
      c.params.top_k = i % 4 == 1 ? 40 : 0;
      c.params.seed = 77 + uint64_t(i);
    }
    if (i % 8 >= 6) {
      c.params.repetition_penalty = 1.25f;
      c.params.frequency_penalty = 0.3f;
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

std::vector<engine::Completion> run_engine(engine::Engine& eng, const std::vector<Case>& cases) {
  for (const Case& c : cases) eng.add_request({c.prompt, c.params, {}});
  return eng.run_to_completion();
}

void expect_same(const std::vector<engine::Completion>& got, const std::vector<engine::GenerationResult>& want,
                 const std::vector<Case>& cases, bool greedy_only) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (greedy_only && !cases[i].params.greedy()) continue;
    SCOPED_TRACE("request " + std::to_string(i));
    EXPECT_EQ(got[i].tokens, want[i].tokens);
    EXPECT_EQ(got[i].text, want[i].text);
    EXPECT_EQ(got[i].finish_reason, want[i].finish_reason);
  }
}

TEST(EngineSpeculative, BatchEqualsGenerateAloneAndGreedyEqualsNoSpeculation) {
  auto rt = load_shipped();
  const std::vector<Case> cases = make_cases(*rt);
  const engine::SpeculativeConfig spec = ngram(4);
  std::vector<engine::GenerationResult> alone_spec, alone_plain;
  engine::SpeculativeStats alone_stats;
  for (const Case& c : cases) {
    alone_spec.push_back(engine::generate(*rt, c.prompt, c.params, {}, &spec));
    alone_stats.steps += alone_spec.back().speculative.steps;
    alone_stats.accepted += alone_spec.back().speculative.accepted;
    alone_plain.push_back(c.params.greedy() ? engine::generate(*rt, c.prompt, c.params) : alone_spec.back());
  }
  engine::Engine eng(*rt, {/*max_num_batched_tokens=*/256, /*max_num_seqs=*/8}, spec);
  const std::vector<engine::Completion> got = run_engine(eng, cases);
  expect_same(got, alone_spec, cases, /*greedy_only=*/false);
  expect_same(got, alone_plain, cases, /*greedy_only=*/true);

  const engine::SpeculativeStats st = eng.speculative_stats();
  EXPECT_EQ(st.steps, alone_stats.steps);
  EXPECT_EQ(st.accepted, alone_stats.accepted);
  EXPECT_GT(st.accepted, 0);
  int64_t generated = 0;
  for (const auto& c : got) generated += int64_t(c.tokens.size());
  EXPECT_EQ(eng.num_generated_tokens(), generated);
  EXPECT_EQ(rt->blocks().num_free(), rt->blocks().num_total());
  std::printf("[ engine, ngram k=4 ] %lld verify rows, %lld of %lld drafted tokens kept, %lld steps for %lld tokens\n",
              static_cast<long long>(st.steps), static_cast<long long>(st.accepted),
              static_cast<long long>(st.drafted), static_cast<long long>(eng.num_steps()),
              static_cast<long long>(generated));
}

// A 12-token budget (a verify step of 4 + 1 tokens beside prompt chunks: drafts are cut), a KV
// cache of 96 positions (preemption by recomputation drops drafts), prefix caching on (the
// prompts share their phrases' blocks, and a rejected draft must never be shared): greedy
// requests give the tokens they give without speculation.
TEST(EngineSpeculative, UnderBudgetPreemptionAndPrefixCachingGreedyIsUnchanged) {
  auto rt = load_shipped(/*kv_cache_tokens=*/96);
  std::vector<Case> cases = make_cases(*rt);
  // Shared prefixes: every second greedy prompt starts with the one before.
  for (size_t i = 2; i < cases.size(); i += 4) cases[i].prompt.insert(cases[i].prompt.begin(), cases[i - 2].prompt.begin(), cases[i - 2].prompt.end());
  std::vector<engine::GenerationResult> plain;
  for (const Case& c : cases) plain.push_back(engine::generate(*rt, c.prompt, c.params));
  engine::SchedulerConfig sc{/*max_num_batched_tokens=*/12, /*max_num_seqs=*/6, /*enable_prefix_caching=*/true};
  engine::Engine eng(*rt, sc, ngram(4));
  const std::vector<engine::Completion> got = run_engine(eng, cases);
  expect_same(got, plain, cases, /*greedy_only=*/true);
  EXPECT_GT(eng.num_preemptions(), 0);
  EXPECT_GT(eng.prefix_cache_hits(), 0);
  EXPECT_GT(eng.speculative_stats().accepted, 0);
  for (const auto& c : got) EXPECT_TRUE(c.error.empty()) << c.error;
}

// disable_by_batch_size 2: four equal greedy requests run in lockstep without drafts (never
// fewer than 2 running) and finish together; at 8 the same batch drafts.
TEST(EngineSpeculative, DisableByBatchSizeStopsDrafting) {
  auto rt = load_shipped();
  std::vector<Case> cases(4, make_cases(*rt)[2]);
  for (Case& c : cases) c.params.ignore_eos = true;
  for (const int limit : {2, 8}) {
    engine::SpeculativeConfig spec = ngram(4);
    spec.disable_by_batch_size = limit;
    engine::Engine eng(*rt, {256, 8}, spec);
    const std::vector<engine::Completion> got = run_engine(eng, cases);
    for (const auto& c : got) EXPECT_EQ(c.tokens, got[0].tokens);
    if (limit == 2) EXPECT_EQ(eng.speculative_stats().steps, 0);
    else EXPECT_GT(eng.speculative_stats().accepted, 0);
  }
}

// Requests that opt out, or ask for logprobs, decode one token a step beside those that draft.
TEST(EngineSpeculative, OptedOutAndLogprobRequestsDoNotDraft) {
  auto rt = load_shipped();
  const Case c = make_cases(*rt)[4];
  engine::Engine eng(*rt, {256, 8}, ngram(4));
  engine::Request off{c.prompt, c.params, {}};
  off.speculate = false;
  engine::Request lp{c.prompt, c.params, {}};
  lp.logprobs = 2;
  eng.add_request(off);
  eng.add_request(lp);
  const std::vector<engine::Completion> got = eng.run_to_completion();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].tokens, got[1].tokens);
  EXPECT_EQ(got[0].tokens, engine::generate(*rt, c.prompt, c.params).tokens);
  EXPECT_EQ(eng.speculative_stats().steps, 0);
}

// A draft model: the shipped model itself quantized to FP8 online (the target's vocabulary, and
// nearly its greedy choices). Every request of the batch — greedy, seeded, penalties — equals
// generate alone with the same draft model, greedy ones equal no speculation, most drafts are
// kept, and the draft model's KV blocks all come back.
TEST(EngineSpeculative, DraftModelBatchEqualsGenerateAlone) {
  auto rt = load_shipped();
  engine::SpeculativeConfig spec;
  spec.method = engine::SpeculativeConfig::Method::kDraftModel;
  spec.model = (std::filesystem::path(FP8LM_SOURCE_DIR) / model_manifest()["shipped"]["dir"].get<std::string>()).string();
  spec.quantization = "fp8";
  spec.num_speculative_tokens = 3;
  engine::RuntimeOptions opt;
  opt.threads = 2;
  opt.kv_cache_tokens = 4096;
  const std::unique_ptr<engine::DraftModel> draft = engine::DraftModel::load(spec, opt);
  draft->check_target(rt->config().vocab_size);
  std::vector<Case> cases = make_cases(*rt);
  cases.resize(8);
  std::vector<engine::GenerationResult> alone_spec, alone_plain;
  for (const Case& c : cases) {
    alone_spec.push_back(engine::generate(*rt, c.prompt, c.params, {}, &spec, draft.get()));
    alone_plain.push_back(c.params.greedy() ? engine::generate(*rt, c.prompt, c.params) : alone_spec.back());
  }
  EXPECT_EQ(draft->runtime().blocks().num_free(), draft->runtime().blocks().num_total());
  {
    engine::Engine eng(*rt, {256, 8}, spec, draft.get());
    const std::vector<engine::Completion> got = run_engine(eng, cases);
    expect_same(got, alone_spec, cases, /*greedy_only=*/false);
    expect_same(got, alone_plain, cases, /*greedy_only=*/true);
    EXPECT_GT(eng.speculative_stats().accepted, 0);
  }
  {
    // Greedy requests alone: the FP8 draft's argmax is mostly the target's.
    std::vector<Case> greedy;
    for (const Case& c : cases)
      if (c.params.greedy() && !c.params.has_penalties()) greedy.push_back(c);
    engine::Engine eng(*rt, {256, 8}, spec, draft.get());
    (void)run_engine(eng, greedy);
    const engine::SpeculativeStats st = eng.speculative_stats();
    EXPECT_GT(st.acceptance_rate(), 0.8) << st.accepted << " of " << st.drafted;
    std::printf("[ engine, FP8 draft of the shipped model, k=3, greedy ] %lld of %lld drafted tokens kept\n",
                static_cast<long long>(st.accepted), static_cast<long long>(st.drafted));
  }
  EXPECT_EQ(draft->runtime().blocks().num_free(), draft->runtime().blocks().num_total());
  EXPECT_EQ(rt->blocks().num_free(), rt->blocks().num_total());
}

TEST(EngineSpeculative, ADraftModelOfAnotherVocabularyIsRefused) {
  engine::SpeculativeConfig spec;
  spec.method = engine::SpeculativeConfig::Method::kDraftModel;
  // The tool-call fixture: the shipped tokenizer with 16 added tokens (16,400 ids).
  spec.model = (std::filesystem::path(FP8LM_FIXTURE_DIR) / "models" / "tool_calls").string();
  spec.num_speculative_tokens = 2;
  engine::RuntimeOptions opt;
  opt.kv_cache_tokens = 256;
  const std::unique_ptr<engine::DraftModel> draft = engine::DraftModel::load(spec, opt);
  try {
    draft->check_target(16384);
    ADD_FAILURE() << "a draft of another vocabulary was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("must share the target's tokenizer"), std::string::npos) << e.what();
  }
}

// ---- the scheduler's drafts alone (no model) ----------------------------------------------

engine::Sequence seq_of(engine::RequestId id, std::vector<int32_t> tokens) {
  engine::Sequence q;
  q.id = id;
  q.tokens = std::move(tokens);
  return q;
}

void add_drafts(engine::Sequence& q, const std::vector<int32_t>& drafts) {
  q.tokens.insert(q.tokens.end(), drafts.begin(), drafts.end());
  q.num_draft = int64_t(drafts.size());
}

TEST(SchedulerDrafts, RejectedDraftsNeverEnterThePrefixCache) {
  engine::BlockAllocator blocks(16);
  engine::Scheduler s(blocks, 4, {64, 8, /*enable_prefix_caching=*/true});
  engine::Sequence a = seq_of(1, {10, 11, 12, 13, 14, 15});  // block 0 full, 2 tokens in block 1
  s.add(&a);
  auto batch = s.schedule();
  s.commit(batch);
  a.tokens.push_back(16);  // the step's token: position 6
  EXPECT_EQ(blocks.num_cached(), 1);
  // Drafts 90 91 92 fill block 1 (positions 6, 7) and start block 2: the verify step runs 4 tokens.
  add_drafts(a, {90, 91, 92});
  batch = s.schedule();
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(batch[0].num_tokens, 4);
  EXPECT_TRUE(batch[0].samples());
  s.commit(batch);
  EXPECT_EQ(blocks.num_cached(), 1);  // block 1 holds drafts: not registered
  s.accept_drafts(a, 0);              // none kept: the model said 17 after 16
  EXPECT_EQ(a.num_computed, 7);
  EXPECT_EQ(a.tokens, (std::vector<int32_t>{10, 11, 12, 13, 14, 15, 16}));
  EXPECT_EQ(blocks.num_cached(), 1);
  a.tokens.push_back(17);
  // A prompt equal to the rejected draft's block finds only block 0.
  engine::Sequence b = seq_of(2, {10, 11, 12, 13, 14, 15, 16, 90, 91});
  s.add(&b);
  batch = s.schedule();
  EXPECT_EQ(b.num_cached_tokens, 4);
  s.commit(batch);
  // a's next step fills block 1 with its own tokens: 16, 17 at positions 6, 7.
  EXPECT_EQ(a.num_computed, 8);
  s.remove(&a);
  s.remove(&b);
  engine::Sequence c = seq_of(3, {10, 11, 12, 13, 14, 15, 16, 17, 5});
  s.add(&c);
  s.schedule();
  EXPECT_EQ(c.num_cached_tokens, 8);
  s.remove(&c);
}

TEST(SchedulerDrafts, KeptDraftsFillBlocksThatAreCached) {
  engine::BlockAllocator blocks(16);
  engine::Scheduler s(blocks, 4, {64, 8, /*enable_prefix_caching=*/true});
  engine::Sequence a = seq_of(1, {10, 11, 12});
  s.add(&a);
  s.commit(s.schedule());
  a.tokens.push_back(13);
  add_drafts(a, {14, 15, 16});
  s.commit(s.schedule());
  s.accept_drafts(a, 2);  // 14, 15 kept: block 1 is 14 15 + …; block 0 (10 11 12 13) full
  EXPECT_EQ(a.num_computed, 6);
  EXPECT_EQ(a.tokens, (std::vector<int32_t>{10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(blocks.num_cached(), 1);
  a.tokens.push_back(20);
  add_drafts(a, {21});
  s.commit(s.schedule());
  s.accept_drafts(a, 1);  // 20 21 kept: block 1 = 14 15 20 21 is full of the sequence's own tokens
  EXPECT_EQ(blocks.num_cached(), 2);
  s.remove(&a);
}

TEST(SchedulerDrafts, TheBudgetCutsDraftsAndUnscheduledSequencesLoseThem) {
  engine::BlockAllocator blocks(32);
  engine::Scheduler s(blocks, 4, {/*max_num_batched_tokens=*/4, /*max_num_seqs=*/4});
  engine::Sequence a = seq_of(1, {1, 2}), b = seq_of(2, {3, 4});
  s.add(&a);
  s.add(&b);
  s.commit(s.schedule());
  a.tokens.push_back(5);
  b.tokens.push_back(6);
  add_drafts(a, {7, 8, 9, 10});  // 5 tokens: more than the budget of 4
  add_drafts(b, {11});
  auto batch = s.schedule();
  ASSERT_EQ(batch.size(), 1u);  // a takes the whole budget: its last token and 3 drafts
  EXPECT_EQ(batch[0].seq, &a);
  EXPECT_EQ(batch[0].num_tokens, 4);
  EXPECT_EQ(a.num_draft, 3);
  EXPECT_EQ(b.num_draft, 0);  // not scheduled: its draft is dropped, its token stays
  EXPECT_EQ(b.tokens, (std::vector<int32_t>{3, 4, 6}));
  s.commit(batch);
  s.accept_drafts(a, 3);
  EXPECT_EQ(a.num_computed, 6);
  s.remove(&a);
  s.remove(&b);
}

TEST(SchedulerDrafts, APreemptedSequenceLosesItsDrafts) {
  engine::BlockAllocator blocks(3);
  engine::Scheduler s(blocks, 4, {64, 4});
  engine::Sequence a = seq_of(1, {1, 2, 3, 4, 5, 6, 7}), b = seq_of(2, {8, 9, 10});
  s.add(&a);
  s.add(&b);
  s.commit(s.schedule());  // a: 2 blocks, b: 1 block — the cache is full
  a.tokens.push_back(11);
  b.tokens.push_back(12);
  add_drafts(b, {13, 14});  // b's drafts fit its block: positions 3, 4 → 2 blocks; none is free
  auto batch = s.schedule();
  // a's decode (position 7) fits its blocks; b drops its drafts before anyone is preempted, and
  // then fits too.
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(b.num_draft, 0);
  EXPECT_EQ(s.num_preemptions(), 0);
  s.commit(batch);
  a.tokens.push_back(15);  // position 8: a third block, which only b's can give
  b.tokens.push_back(16);
  add_drafts(b, {17});
  batch = s.schedule();
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(batch[0].seq, &a);
  EXPECT_EQ(s.num_preemptions(), 1);
  EXPECT_EQ(b.num_draft, 0);  // recomputed from its own tokens when readmitted
  EXPECT_EQ(b.num_computed, 0);
  EXPECT_EQ(b.tokens, (std::vector<int32_t>{8, 9, 10, 12, 16}));
  s.remove(&a);
  s.remove(&b);
}

}  // namespace
}  // namespace fp8lm::test::speculative_engine
