// The batched engine (engine/engine.h) on the shipped model, in BF16 and with
// --quantization fp8 (channel weights × per-token activations): many requests
// of different lengths, batched under a small token budget (chunked prefill)
// and a small KV cache (preemption), must each give exactly what
// engine::generate gives alone — greedy and seeded sampling. Plus the
// scheduler's policy on its own, cancellation, stop strings, refused
// requests, and requests added from another thread.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <thread>

#include "common/error.h"
#include "cpp/model_fixtures.h"
#include "engine/engine.h"
#include "engine/generate.h"

namespace fp8lm::test {
namespace {

std::filesystem::path shipped_dir() {
  return std::filesystem::path(FP8LM_SOURCE_DIR) / model_manifest()["shipped"]["dir"].get<std::string>();
}

std::unique_ptr<engine::Runtime> load_shipped(const std::string& quant, int64_t kv_cache_tokens = 0) {
  io::LoadOverrides o;
  if (!quant.empty()) o.quantization = io::parse_online_quant(quant);
  engine::RuntimeOptions opt;
  opt.threads = 2;
  opt.kv_cache_tokens = kv_cache_tokens;
  return engine::Runtime::load(shipped_dir(), o, opt);
}

// 24 requests: prompts of 1..48 ids (random ordinary tokens, fixed seed),
// max_tokens 3..24; even ones greedy, odd ones seeded sampling.
struct Case {
  std::vector<int32_t> prompt;
  engine::SamplingParams params;
};

std::vector<Case> make_cases(const engine::Runtime& rt) {
  std::mt19937_64 rng(12345);
  std::uniform_int_distribution<int32_t> pick(100, int32_t(rt.config().vocab_size) - 1);
  std::vector<Case> cases;
  for (int i = 0; i < 24; ++i) {
    Case c;
    c.prompt.resize(size_t(1 + (i * 37) % 48));
    for (int32_t& t : c.prompt) t = pick(rng);
    c.params.max_tokens = 3 + (i * 13) % 22;
    c.params.ignore_eos = i % 3 != 0;  // some may stop early on EOS
    if (i % 2 == 0) {
      c.params.temperature = 0.0f;
    } else {
      c.params.temperature = 0.9f;
      c.params.top_p = 0.95f;
      c.params.top_k = i % 4 == 1 ? 50 : 0;
      c.params.seed = 1000 + uint64_t(i);
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

// References: each case generated alone, computed once per quantization.
const std::vector<engine::GenerationResult>& references(const std::string& quant) {
  static std::map<std::string, std::vector<engine::GenerationResult>> cache;
  auto it = cache.find(quant);
  if (it != cache.end()) return it->second;
  auto rt = load_shipped(quant);
  std::vector<engine::GenerationResult> refs;
  for (const Case& c : make_cases(*rt)) refs.push_back(engine::generate(*rt, c.prompt, c.params));
  return cache.emplace(quant, std::move(refs)).first->second;
}

void expect_same(const std::vector<engine::Completion>& got, const std::vector<engine::GenerationResult>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    EXPECT_EQ(got[i].tokens, want[i].tokens);
    EXPECT_EQ(got[i].text, want[i].text);
    EXPECT_EQ(got[i].finish_reason, want[i].finish_reason);
    EXPECT_EQ(got[i].prompt_tokens, want[i].prompt_tokens);
  }
}

std::vector<engine::Completion> run_cases(engine::Runtime& rt, engine::Engine& eng) {
  for (const Case& c : make_cases(rt)) eng.add_request({c.prompt, c.params, {}});
  return eng.run_to_completion();
}

class EngineBatching : public testing::TestWithParam<std::string> {};

TEST_P(EngineBatching, ChunkedPrefillBatchEqualsGenerateAlone) {
  auto rt = load_shipped(GetParam());
  // A 32-token budget: prompts of up to 48 tokens are prefilled in chunks,
  // beside up to 7 other sequences' decodes.
  auto eng = std::make_unique<engine::Engine>(*rt, engine::SchedulerConfig{/*max_num_batched_tokens=*/32, /*max_num_seqs=*/8});
  const auto got = run_cases(*rt, *eng);
  expect_same(got, references(GetParam()));
  EXPECT_EQ(eng->peak_running(), 8);
  EXPECT_EQ(eng->num_preemptions(), 0);
  EXPECT_EQ(eng->kv_blocks_used(), 0);
  EXPECT_EQ(rt->blocks().num_free(), rt->blocks().num_total());
  int64_t generated = 0;
  for (const auto& c : got) generated += int64_t(c.tokens.size());
  EXPECT_EQ(eng->num_generated_tokens(), generated);
  EXPECT_FALSE(eng->has_work());
}

TEST_P(EngineBatching, PreemptionByRecomputationKeepsTokens) {
  // 80 cached tokens (5 blocks): the longest request (at most 48 + 24 - 1
  // positions) fits alone, eight running ones cannot.
  auto rt = load_shipped(GetParam(), 80);
  auto eng = std::make_unique<engine::Engine>(*rt, engine::SchedulerConfig{/*max_num_batched_tokens=*/64, /*max_num_seqs=*/8});
  const auto got = run_cases(*rt, *eng);
  expect_same(got, references(GetParam()));
  EXPECT_GT(eng->num_preemptions(), 0);
  EXPECT_EQ(eng->kv_blocks_used(), 0);
  EXPECT_EQ(rt->blocks().num_free(), rt->blocks().num_total());
}

INSTANTIATE_TEST_SUITE_P(Shipped, EngineBatching, testing::Values("", "fp8"),
                         [](const testing::TestParamInfo<std::string>& p) { return p.param.empty() ? "bf16" : "fp8"; });

engine::SamplingParams greedy(int32_t n) {
  engine::SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = n;
  p.ignore_eos = true;
  return p;
}

TEST(EngineBatchingShipped, CancelFreesBlocks) {
  auto rt = load_shipped("");
  engine::Engine eng(*rt, {64, 4});
  std::map<engine::RequestId, int> finals;
  std::map<engine::RequestId, std::string> reasons;
  std::vector<engine::RequestId> ids;
  for (int i = 0; i < 6; ++i) {
    engine::Request r{std::vector<int32_t>(size_t(10 + i), 200 + i), greedy(40), {}};
    r.on_output = [&](const engine::RequestOutput& o) {
      if (o.finished) ++finals[o.id], reasons[o.id] = o.finish_reason;
    };
    ids.push_back(eng.add_request(std::move(r)));
  }
  for (int s = 0; s < 5; ++s) eng.step();
  EXPECT_EQ(eng.num_running(), 4);
  EXPECT_EQ(eng.num_waiting(), 2);
  EXPECT_GT(eng.kv_blocks_used(), 0);
  eng.cancel(ids[0]);       // running, mid-generation
  eng.cancel(ids[5]);       // still waiting
  eng.cancel(ids[5]);       // twice: ignored
  eng.cancel(12345);        // unknown: ignored
  eng.step();
  EXPECT_EQ(reasons[ids[0]], "cancelled");
  EXPECT_EQ(reasons[ids[5]], "cancelled");
  EXPECT_EQ(eng.num_running(), 4);  // the other waiting one admitted in the cancelled one's place
  EXPECT_EQ(eng.num_waiting(), 0);
  const auto rest = eng.run_to_completion();
  ASSERT_EQ(rest.size(), 4u);
  for (const auto& c : rest) EXPECT_EQ(c.finish_reason, "length");
  for (const engine::RequestId id : ids) EXPECT_EQ(finals[id], 1) << id;
  EXPECT_EQ(eng.kv_blocks_used(), 0);
  EXPECT_EQ(rt->blocks().num_free(), rt->blocks().num_total());

  // Cancelling everything mid-run leaves the cache empty too.
  for (int i = 0; i < 3; ++i) eng.add_request({std::vector<int32_t>(20, 300), greedy(30), {}});
  for (int s = 0; s < 3; ++s) eng.step();
  EXPECT_GT(eng.kv_blocks_used(), 0);
  for (engine::RequestId id = ids.back() + 1; id <= ids.back() + 3; ++id) eng.cancel(id);
  eng.step();
  EXPECT_FALSE(eng.has_work());
  EXPECT_EQ(eng.kv_blocks_used(), 0);
}

TEST(EngineBatchingShipped, StopStringsAsGenerate) {
  auto rt = load_shipped("");
  // A stop string taken from the middle of a greedy continuation.
  const std::vector<int32_t> prompt = ids_of(model_manifest()["shipped"]["prompts"][0]["ids"]);
  const std::string full = engine::generate(*rt, prompt, greedy(40)).text;
  ASSERT_GT(full.size(), 40u);
  engine::SamplingParams p = greedy(40);
  size_t at = full.size() / 2;  // three ASCII bytes: never half a UTF-8 character
  while (at + 3 < full.size() && (uint8_t(full[at]) | uint8_t(full[at + 1]) | uint8_t(full[at + 2])) >= 0x80) ++at;
  p.stop = {full.substr(at, 3), "\xE2\x80\x94never"};
  const engine::GenerationResult want = engine::generate(*rt, prompt, p);
  ASSERT_EQ(want.finish_reason, "stop");

  engine::Engine eng(*rt, {16, 4});
  std::string streamed;
  int finished = 0;
  for (int i = 0; i < 3; ++i) eng.add_request({std::vector<int32_t>(size_t(5 + 7 * i), 400), greedy(20), {}});
  const engine::RequestId id = eng.add_request({prompt, p, [&](const engine::RequestOutput& o) {
                                                  streamed += o.text;
                                                  finished += o.finished;
                                                }});
  const auto got = eng.run_to_completion();
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[3].id, id);
  EXPECT_EQ(got[3].tokens, want.tokens);
  EXPECT_EQ(got[3].text, want.text);
  EXPECT_EQ(streamed, want.text);
  EXPECT_EQ(got[3].finish_reason, "stop");
  EXPECT_EQ(finished, 1);
  EXPECT_EQ(want.text, full.substr(0, want.text.size()));
  EXPECT_LE(want.text.size(), at);
}

TEST(EngineBatchingShipped, RefusesWhatCanNeverFit) {
  auto rt = load_shipped("", 64);
  engine::Engine eng(*rt, {32, 4});
  const int64_t context = rt->config().max_position_embeddings;
  const auto message = [&](std::vector<int32_t> prompt, engine::SamplingParams p) {
    try {
      eng.add_request({std::move(prompt), p, {}});
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string cache = message(std::vector<int32_t>(40, 100), greedy(40));  // 79 positions > 64
  EXPECT_NE(cache.find("KV cache"), std::string::npos) << cache;
  EXPECT_NE(cache.find("79"), std::string::npos) << cache;
  EXPECT_EQ(message(std::vector<int32_t>(40, 100), greedy(25)), "");  // 64 positions: fits exactly
  const std::string ctx = message(std::vector<int32_t>(size_t(context - 10), 100), greedy(20));
  EXPECT_NE(ctx.find("context"), std::string::npos) << ctx;
  EXPECT_NE(message({}, greedy(4)).find("empty"), std::string::npos);
  EXPECT_NE(message({1, int32_t(rt->config().vocab_size)}, greedy(4)).find("vocabulary"), std::string::npos);
  engine::SamplingParams bad = greedy(4);
  bad.top_p = 0.0f;
  EXPECT_NE(message({1, 2}, bad).find("top_p"), std::string::npos);
  bad = greedy(4);
  bad.stop = {""};
  EXPECT_FALSE(message({1, 2}, bad).empty());
  EXPECT_THROW(engine::Engine(*rt, {4, 8}), Error);  // budget below max_num_seqs

  const auto done = eng.run_to_completion();  // the one that fitted
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].tokens.size(), 25u);
  EXPECT_EQ(eng.kv_blocks_used(), 0);
}

TEST(EngineBatchingShipped, RequestsFromAnotherThread) {
  auto rt = load_shipped("");
  engine::Engine eng(*rt, {64, 4});
  std::vector<engine::GenerationResult> want;
  for (int i = 0; i < 6; ++i) want.push_back(engine::generate(*rt, std::vector<int32_t>(size_t(3 + i), 500 + i), greedy(6)));
  std::mutex m;
  std::map<engine::RequestId, std::vector<int32_t>> got;
  std::map<engine::RequestId, int> index;
  std::atomic<int> finished{0};
  std::thread client([&] {
    for (int i = 0; i < 6; ++i) {
      engine::Request r{std::vector<int32_t>(size_t(3 + i), 500 + i), greedy(6), [&](const engine::RequestOutput& o) {
                          std::lock_guard lock(m);
                          got[o.id].insert(got[o.id].end(), o.new_tokens.begin(), o.new_tokens.end());
                          if (o.finished) ++finished;
                        }};
      const engine::RequestId id = eng.add_request(std::move(r));
      {
        std::lock_guard lock(m);
        index[id] = i;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (finished < 6 && std::chrono::steady_clock::now() < deadline) {
    if (eng.has_work()) eng.step();
    else std::this_thread::yield();
  }
  client.join();
  ASSERT_EQ(finished, 6);
  for (const auto& [id, i] : index) EXPECT_EQ(got[id], want[size_t(i)].tokens) << i;
  EXPECT_EQ(eng.kv_blocks_used(), 0);
}

// ---- the scheduler's policy alone (no model) -------------------------------------

engine::Sequence seq(engine::RequestId id, size_t prompt_len) {
  engine::Sequence q;
  q.id = id;
  q.tokens.assign(prompt_len, 1);
  return q;
}

TEST(SchedulerPolicy, DecodesFirstThenChunksUnderTheBudget) {
  engine::BlockAllocator blocks(100);
  engine::Scheduler s(blocks, 4, {10, 3});
  engine::Sequence a = seq(1, 7), b = seq(2, 12), c = seq(3, 2), d = seq(4, 2);
  for (engine::Sequence* q : {&a, &b, &c, &d}) s.add(q);
  auto batch = s.schedule();  // a whole (7), then 3 of b; c waits on the budget
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch[0].seq, &a);
  EXPECT_EQ(batch[0].num_tokens, 7);
  EXPECT_TRUE(batch[0].samples());
  EXPECT_EQ(batch[1].seq, &b);
  EXPECT_EQ(batch[1].num_tokens, 3);
  EXPECT_FALSE(batch[1].samples());
  s.commit(batch);
  a.tokens.push_back(5);  // a sampled a token: a decode next
  batch = s.schedule();   // a decodes (1), b's next chunk (9 left, 9 of budget)
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch[0].seq, &a);
  EXPECT_EQ(batch[0].num_tokens, 1);
  EXPECT_EQ(batch[1].seq, &b);
  EXPECT_EQ(batch[1].num_tokens, 9);
  EXPECT_TRUE(batch[1].samples());
  s.commit(batch);
  a.tokens.push_back(5);
  b.tokens.push_back(5);
  batch = s.schedule();  // two decodes, then c admitted; d waits on max_num_seqs
  ASSERT_EQ(batch.size(), 3u);
  EXPECT_EQ(batch[2].seq, &c);
  EXPECT_EQ(s.num_running(), 3);
  EXPECT_EQ(s.num_waiting(), 1);
  s.commit(batch);
  s.remove(&a);
  s.remove(&b);
  s.remove(&c);
  batch = s.schedule();
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(batch[0].seq, &d);
  s.commit(batch);
  s.remove(&d);
  EXPECT_TRUE(s.empty());
  EXPECT_EQ(blocks.num_free(), 100);
}

TEST(SchedulerPolicy, PreemptsTheMostRecentlyAdmitted) {
  engine::BlockAllocator blocks(5);  // 20 positions in blocks of 4
  engine::Scheduler s(blocks, 4, {64, 8});
  engine::Sequence a = seq(1, 4), b = seq(2, 4), c = seq(3, 8), d = seq(4, 8);
  for (engine::Sequence* q : {&a, &b, &c, &d}) s.add(q);
  // The forward call: the scheduled tokens are cached, every sampling sequence gets a token.
  auto advance = [&](const std::vector<engine::ScheduledSequence>& batch) {
    std::vector<engine::Sequence*> sampled;
    for (const auto& x : batch)
      if (x.samples()) sampled.push_back(x.seq);
    s.commit(batch);
    for (engine::Sequence* q : sampled) q->tokens.push_back(7);
  };
  auto ids = [](const std::vector<engine::ScheduledSequence>& batch) {
    std::vector<engine::RequestId> v;
    for (const auto& x : batch) v.push_back(x.seq->id);
    return v;
  };

  auto batch = s.schedule();  // a, b (1 block each), c (2); d's 2 blocks do not fit
  EXPECT_EQ(ids(batch), (std::vector<engine::RequestId>{1, 2, 3}));
  EXPECT_EQ(blocks.num_free(), 1);
  advance(batch);
  batch = s.schedule();  // a takes the free block; b needs one: c, the latest admitted, is preempted
  EXPECT_EQ(ids(batch), (std::vector<engine::RequestId>{1, 2}));
  EXPECT_EQ(s.num_preemptions(), 1);
  EXPECT_EQ(c.num_computed, 0);
  EXPECT_TRUE(c.block_table.empty());
  EXPECT_EQ(c.tokens.size(), 9u);  // prompt + its generated token: recomputed on re-admission
  EXPECT_EQ(s.num_waiting(), 2);
  for (int i = 0; i < 3; ++i) {  // decodes up to 8 cached positions each (2 blocks); c does not fit back
    advance(batch);
    batch = s.schedule();
    EXPECT_EQ(ids(batch), (std::vector<engine::RequestId>{1, 2}));
  }
  advance(batch);
  batch = s.schedule();  // both need a third block, one is free: a takes it, b can only preempt itself
  EXPECT_EQ(ids(batch), (std::vector<engine::RequestId>{1}));
  EXPECT_EQ(s.num_preemptions(), 2);
  EXPECT_EQ(b.num_computed, 0);
  advance(batch);
  s.remove(&a);
  batch = s.schedule();  // the preempted go first, latest preempted at the front: b recomputes its 9 tokens
  ASSERT_EQ(ids(batch), (std::vector<engine::RequestId>{2}));
  EXPECT_EQ(batch[0].num_tokens, 9);
  EXPECT_TRUE(batch[0].samples());
  advance(batch);
  s.remove(&b);
  batch = s.schedule();
  EXPECT_EQ(ids(batch), (std::vector<engine::RequestId>{3, 4}));
  advance(batch);
  s.remove(&c);
  s.remove(&d);
  EXPECT_TRUE(s.empty());
  EXPECT_EQ(blocks.num_free(), 5);
}

}  // namespace
}  // namespace fp8lm::test
