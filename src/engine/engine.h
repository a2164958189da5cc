// The batched engine: many requests generated together by continuous batching
// (engine/scheduler.h), each exactly as generate() would generate it alone —
// same tokens for greedy and for seeded sampling (every request has its own
// sampler; a draw's uniform depends only on the request's seed and the draw's
// index, wherever the row is sampled), same stop handling and streamed text.
//
// Threading: add_request(), cancel() and the metrics accessors may be called
// from any thread at any time. step(), has_work() and run_to_completion()
// belong to one thread (the engine loop). New requests and cancellations are
// queued under a mutex and take effect at the start of the next step().
// Callbacks run on the engine thread inside step(), without the queue lock
// held: they may call add_request() or cancel(), never step().
//
// Async scheduling (SchedulerConfig::async_scheduling, the default; vLLM's):
// step() schedules the next batch while the device still runs the one before,
// whose sampled tokens enter that batch as placeholders (Sequence::tokens
// gets -1 for each, filled in when they come back, before the batch starts).
// Only then does it start the new batch, and handle the previous one's tokens
// (stop checks, detokenization, callbacks) while the device runs it. So the
// device waits for the host only for the step's start itself, and a step's
// output is returned by the step() call after the one that started it. A
// request that stops at step N on a stop token or string (known only then)
// has a row in step N+1 whose token is dropped; one that reaches max_tokens
// is never scheduled past it. Tokens are those of the synchronous loop.
//
// Speculative decoding (a SpeculativeConfig; engine/speculative.h): at the start of a step every
// decoding sequence whose request speculates gets drafted tokens (n-gram: prompt lookup), and the
// step verifies them with its last token, each position's result back — the argmax on the
// backend where the request is plain greedy, else the logits on the host, where its sampler
// verifies each draft (speculative sampling: the tokens are distributed as without drafts). A
// row then yields the confirmed drafts and one token more; the rest are rolled back
// (Scheduler::accept_drafts). The drafts follow the step before's tokens, so steps that draft run
// synchronously (a step's output is returned by the step() call that started it); at
// disable_by_batch_size running sequences or more nothing is drafted and async scheduling is back.
// Requests with logprobs decode one token a step.
//
// Structured outputs (Request::grammar, issue 43): a constrained request's sequence has its
// grammar's state (engine/request_grammar.h); each step its mask of allowed tokens is computed on the
// host while the device runs the step's forward (LlamaModel::start_sample's before_sampling) and
// applied where the row is sampled, and each token it generates is accepted into the matcher.
// It ends with a stop token once its grammar is complete (or at max_tokens / a stop string). Such
// requests decode one token a step.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/runtime.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/sequence_output.h"
#include "engine/speculative.h"

namespace fp8lm {
class ThreadPool;
}  // namespace fp8lm

namespace fp8lm::structured {
class CompiledGrammar;
}  // namespace fp8lm::structured

namespace fp8lm::engine {

// What one step did for one request.
struct RequestOutput {
  RequestId id = 0;
  // Generated this step (a stop token included): zero or one, or up to k + 1 in a verify step.
  std::vector<int32_t> new_tokens;
  std::string text;                 // text that became final this step (stop string excluded)
  bool finished = false;
  // When finished: "stop", "length", "cancelled", or "error": the backend ran
  // out of memory in this request's step, or work of the request's own failed
  // (its row could not be sampled, its detokenizing, stop checks or callback
  // threw); `error` says what failed. The other requests go on either way:
  // step() throws only for a fault of the device or the engine itself.
  std::string finish_reason;
  std::string error;
  int64_t prompt_tokens = 0;
  // Prompt tokens found in the prefix cache when the request was first
  // admitted (0 without prefix caching, or before admission).
  int64_t cached_tokens = 0;
  int64_t completion_tokens = 0;    // generated so far, new_tokens included
  // When the request asked for logprobs: one entry per new token (OpenAI's
  // logprobs of the raw logits, with the request's top alternatives).
  std::vector<SampleResult> logprobs;
};

struct Request {
  std::vector<int32_t> prompt;  // token ids, at least one
  SamplingParams params;
  // Called on the engine thread for every step that produced tokens or text
  // for this request, and once with finished = true.
  std::function<void(const RequestOutput&)> on_output;
  // -1: no logprobs; n >= 0: each new token's logprob and the n most likely
  // alternatives (RequestOutput::logprobs). Sampling is the same either way.
  int32_t logprobs = -1;
  // false: no text at all (RequestOutput::text stays empty), as for a model
  // without a tokenizer; stop strings then never match.
  bool detokenize = true;
  // With the engine's speculative config: false decodes this request one token a step.
  bool speculate = true;
  // Structured outputs: the output is a text of this grammar's language, compiled against the
  // model's vocabulary (structured::GrammarCompiler, off the engine's thread); null: any text.
  std::shared_ptr<const structured::CompiledGrammar> grammar = nullptr;
};

// A finished request, as run_to_completion() reports it.
struct Completion {
  RequestId id = 0;
  std::vector<int32_t> tokens;
  std::string text;
  std::string finish_reason;
  std::string error;          // as RequestOutput::error
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;  // as RequestOutput::cached_tokens
};

class Engine {
 public:
  // `runtime` must outlive the engine, which uses its model, KV cache and
  // blocks exclusively while it has work.
  // `speculative`: drafts verified a step (see above); none: one token a sequence a step. A
  // config with a draft model or an EAGLE-3 head needs `drafter`, the loaded drafter
  // (engine/draft_model.h, engine/eagle3_drafter.h: it sees every collected step before the next
  // one runs), which must outlive the engine; the n-gram drafter is the engine's own.
  Engine(Runtime& runtime, SchedulerConfig config = {}, std::optional<SpeculativeConfig> speculative = std::nullopt,
         Drafter* drafter = nullptr);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Checks the request and queues it; returns its id (1, 2, …). Throws
  // fp8lm::Error for bad sampling parameters, an empty prompt, a token id
  // outside the vocabulary, prompt + max_tokens beyond the context, or a
  // sequence the whole KV cache could never hold.
  RequestId add_request(Request request);

  // Ends a request at the next step: its blocks are freed and its callback
  // gets finished = true, finish_reason "cancelled". An id that is unknown or
  // already finished is ignored.
  void cancel(RequestId id);

  // One scheduling round and (when anything runs) one forward call; returns
  // what it produced per request (also passed to each request's callback):
  // with async scheduling, the output of the forward call the previous step()
  // started.
  std::vector<RequestOutput> step();

  // Requests queued, waiting or running, or a step's output still to come.
  bool has_work() const;

  // Steps until no work is left; every request that finished meanwhile, by
  // id, with what it generated during this call.
  std::vector<Completion> run_to_completion();

  // Metrics, readable from any thread (as of the last step's scheduling, and
  // again at its end).
  int64_t num_running() const { return running_.load(); }
  int64_t num_waiting() const { return waiting_.load() + queued_.load(); }  // queued for the next step included
  int64_t kv_blocks_used() const { return blocks_used_.load(); }
  int64_t kv_blocks_total() const { return blocks_total_; }
  int64_t num_preemptions() const { return preemptions_.load(); }
  int64_t num_generated_tokens() const { return generated_.load(); }
  int64_t num_steps() const { return steps_.load(); }            // forward calls
  int64_t peak_running() const { return peak_running_.load(); }
  // Prefix caching: prompt tokens looked up at admissions, and those found cached.
  int64_t prefix_cache_queries() const { return prefix_queries_.load(); }
  int64_t prefix_cache_hits() const { return prefix_hits_.load(); }
  const SchedulerConfig& config() const { return scheduler_.config(); }
  // Speculative decoding: drafted and accepted tokens, verify rows, per draft position.
  SpeculativeStats speculative_stats() const;
  const std::optional<SpeculativeConfig>& speculative_config() const { return speculative_; }

 private:
  struct Active;
  struct Launch;
  using Finish = std::function<void(Active&, RequestOutput, std::string)>;

  Runtime& rt_;
  Scheduler scheduler_;
  std::optional<SpeculativeConfig> speculative_;
  std::unique_ptr<Drafter> own_drafter_;  // the n-gram drafter
  Drafter* drafter_ = nullptr;
  std::vector<Sequence*> drafted_;  // the sequences draft() gave drafts this step
  int64_t blocks_total_ = 0;

  mutable std::mutex mutex_;  // guards the three below
  std::vector<std::unique_ptr<Active>> pending_;
  std::vector<RequestId> cancels_;
  RequestId next_id_ = 1;

  // Engine thread only. A finished request stays in active_ while a launched step still has a
  // row of it (retired_), so that the row's sequence outlives the step.
  std::unordered_map<RequestId, std::unique_ptr<Active>> active_;
  std::unique_ptr<Launch> in_flight_;  // async scheduling: the step the device runs, output pending
  std::vector<RequestId> retired_;     // finished, kept until in_flight_ is collected
  std::vector<RequestId> callback_failed_;  // their callback threw: they fail at the next step
  std::vector<float> logits_;
  std::vector<backend::RowSampling> rows_;  // start_sample's descriptions, one per row
  std::vector<model::SequenceInput> inputs_;
  std::unique_ptr<ThreadPool> grammar_threads_;  // structured outputs' masks and accepts, made when needed

  mutable std::mutex stats_mutex_;  // guards spec_stats_
  SpeculativeStats spec_stats_;

  std::atomic<int64_t> running_{0}, waiting_{0}, blocks_used_{0}, preemptions_{0}, generated_{0}, steps_{0},
      peak_running_{0}, queued_{0}, prefix_queries_{0}, prefix_hits_{0};

  void update_metrics();
  bool drafting() const;  // speculative decoding drafts in the coming step
  void draft();
  std::unique_ptr<Launch> plan(std::vector<ScheduledSequence> batch);
  std::string launch(Launch& step);  // empty, or why the device could not run it
  void commit(Launch& step);
  void collect(Launch& step);
  void show_drafter(const Launch& step);
  void fill_masks(const Launch& step);
  void for_each_grammar_row(size_t n, const std::function<void(size_t)>& fn);
  int64_t draft_room(const Active& a) const;
  void emit(Launch& step, std::vector<RequestOutput>& outputs, const Finish& finish);
  RequestOutput output_of(const Active& a) const;
  void fail(Active& a, const Finish& finish);  // finishes `a` with "error" and a.error
};

}  // namespace fp8lm::engine
