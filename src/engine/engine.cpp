#include "engine/engine.h"

#include <algorithm>
#include <map>
#include <utility>

#include "common/error.h"

namespace fp8lm::engine {

namespace {

// Greedy without penalties or logprobs: the token is the logits' argmax (the
// lowest id on ties, as the sampler's), which the backend can take itself.
bool plain_greedy(const SamplingParams& p, int32_t logprobs) {
  return p.greedy() && p.repetition_penalty == 1.0f && p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f &&
         logprobs < 0;
}

}  // namespace

struct Engine::Active {
  Active(Runtime& rt, Request r, int64_t max_new)
      : request(std::move(r)),
        sampler(request.params, request.prompt),
        output(rt.has_tokenizer() && request.detokenize ? &rt.tokenizer() : nullptr, request.params, rt.eos_ids(),
               max_new) {
    seq.tokens = request.prompt;
  }
  Request request;
  Sampler sampler;        // its own seed and draw counter: the draws do not depend on the batch
  SequenceOutput output;  // stop conditions and streamed text, as generate()
  Sequence seq;
};

Engine::Engine(Runtime& runtime, SchedulerConfig config)
    : rt_(runtime), scheduler_(runtime.blocks(), runtime.block_size(), config) {
  blocks_total_ = runtime.blocks().num_total();
}

Engine::~Engine() {
  // Blocks of unfinished requests go back to the runtime's allocator.
  for (auto& [id, a] : active_) scheduler_.remove(&a->seq);
}

RequestId Engine::add_request(Request request) {
  request.params.validate();
  if (request.logprobs < -1) throw Error("logprobs: " + std::to_string(request.logprobs) + " must be -1 (off) or >= 0");
  const int64_t context = rt_.config().max_position_embeddings;
  const int64_t vocab = rt_.model().vocab_size();
  const auto prompt_len = int64_t(request.prompt.size());
  if (request.prompt.empty()) throw Error("the prompt is empty: nothing to generate from");
  for (const int32_t id : request.prompt)
    if (id < 0 || id >= vocab)
      throw Error("prompt token id " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(vocab));
  const int64_t max_tokens = request.params.max_tokens;
  if (prompt_len + max_tokens > context)
    throw Error("the prompt (" + std::to_string(prompt_len) + " tokens) + max_tokens (" + std::to_string(max_tokens) +
                ") = " + std::to_string(prompt_len + max_tokens) + " tokens is beyond the model's context of " +
                std::to_string(context) + " tokens");
  // The last generated token is never written to the cache.
  const int64_t positions = prompt_len + max_tokens - 1;
  if (!scheduler_.fits_in_cache(positions))
    throw Error("the request needs " + std::to_string(positions) + " KV-cache positions (prompt " +
                std::to_string(prompt_len) + " + max_tokens " + std::to_string(max_tokens) + " - 1), " +
                std::to_string(scheduler_.blocks_for(positions)) + " blocks of " + std::to_string(rt_.block_size()) +
                "; the whole KV cache has " + std::to_string(blocks_total_) +
                " blocks (a larger --kv-cache-tokens helps)");
  auto active = std::make_unique<Active>(rt_, std::move(request), max_tokens);
  std::lock_guard lock(mutex_);
  const RequestId id = next_id_++;
  active->seq.id = id;
  pending_.push_back(std::move(active));
  ++queued_;
  return id;
}

void Engine::cancel(RequestId id) {
  std::lock_guard lock(mutex_);
  cancels_.push_back(id);
}

bool Engine::has_work() const {
  {
    std::lock_guard lock(mutex_);
    if (!pending_.empty() || !cancels_.empty()) return true;
  }
  return !scheduler_.empty();
}

void Engine::update_metrics() {
  running_ = scheduler_.num_running();
  waiting_ = scheduler_.num_waiting();
  blocks_used_ = scheduler_.blocks_used();
  preemptions_ = scheduler_.num_preemptions();
  peak_running_ = scheduler_.peak_running();
  prefix_queries_ = scheduler_.prefix_cache_queries();
  prefix_hits_ = scheduler_.prefix_cache_hits();
}

std::vector<RequestOutput> Engine::step() {
  std::vector<std::unique_ptr<Active>> arrived;
  std::vector<RequestId> cancelled;
  {
    std::lock_guard lock(mutex_);
    arrived.swap(pending_);
    cancelled.swap(cancels_);
  }
  for (auto& a : arrived) {
    scheduler_.add(&a->seq);
    const RequestId id = a->seq.id;
    active_.emplace(id, std::move(a));
  }

  std::vector<RequestOutput> outputs;
  std::vector<RequestId> done;
  auto finish = [&](Active& a, RequestOutput out, std::string reason) {
    scheduler_.remove(&a.seq);
    out.finished = true;
    out.finish_reason = std::move(reason);
    outputs.push_back(std::move(out));
    done.push_back(a.seq.id);
  };
  auto output_of = [](const Active& a) {
    RequestOutput out;
    out.id = a.seq.id;
    out.prompt_tokens = int64_t(a.request.prompt.size());
    out.cached_tokens = a.seq.num_cached_tokens;
    out.completion_tokens = int64_t(a.output.tokens().size());
    return out;
  };

  for (const RequestId id : cancelled) {
    const auto it = active_.find(id);
    if (it == active_.end() || std::find(done.begin(), done.end(), id) != done.end()) continue;
    finish(*it->second, output_of(*it->second), "cancelled");
  }

  const std::vector<ScheduledSequence> batch = scheduler_.schedule();
  // The metrics as of this schedule, before the (long) forward call; the
  // arrivals leave the queued count only now, so that num_waiting() never
  // loses sight of them in between (the server's waiting limit reads it).
  update_metrics();
  queued_ -= int64_t(arrived.size());
  if (!batch.empty()) {
    inputs_.clear();
    std::vector<uint8_t> samples;
    for (const ScheduledSequence& s : batch) {
      const Sequence& q = *s.seq;
      inputs_.push_back({std::span<const int32_t>(q.tokens).subspan(size_t(q.num_computed), size_t(s.num_tokens)),
                         q.num_computed, q.block_table, false});
      samples.push_back(s.samples() ? 1 : 0);
    }
    // When every row sampled this step is plain greedy, the argmax is taken
    // where the logits are: on a GPU a batch of 256 would otherwise copy
    // 256 × vocab floats to the host and scan them there, every step.
    bool argmax_only = true;
    for (size_t i = 0; i < batch.size() && argmax_only; ++i)
      if (samples[i]) {
        const Active& a = *active_.at(batch[i].seq->id);
        argmax_only = plain_greedy(a.request.params, a.request.logprobs);
      }
    // Otherwise, unless a row asks for logprobs (they need the raw
    // log-softmax on the host), the backend samples every row itself from the
    // sampler's description of its next draw; rows that sample nothing this
    // step take the argmax, and their token is dropped.
    bool on_device = !argmax_only;
    for (size_t i = 0; i < batch.size() && on_device; ++i)
      on_device = !samples[i] || active_.at(batch[i].seq->id)->request.logprobs < 0;
    if (on_device) {
      rows_.assign(batch.size(), backend::RowSampling{});
      for (size_t i = 0; i < batch.size(); ++i)
        if (samples[i]) rows_[i] = active_.at(batch[i].seq->id)->sampler.row_sampling();
        else rows_[i].temperature = 0.0f;
    }
    bool failed = false;
    try {
      if (argmax_only) rt_.model().forward_greedy(inputs_, rt_.kv_cache(), argmax_);
      else if (on_device) rt_.model().forward_sample(inputs_, rt_.kv_cache(), rows_, argmax_);
      else rt_.model().forward(inputs_, rt_.kv_cache(), logits_);
    } catch (const OutOfMemoryError& e) {
      // The device had no memory for this step: its requests fail (their KV
      // blocks are freed, their clients told why) and the engine goes on with
      // the others, rather than the process dying.
      failed = true;
      for (const ScheduledSequence& s : batch) {
        Active& a = *active_.at(s.seq->id);
        RequestOutput out = output_of(a);
        out.error = std::string("out of device memory in a step of ") + std::to_string(inputs_.size()) +
                    " sequences: " + e.what();
        finish(a, std::move(out), "error");
      }
    }
    if (!failed) {
      ++steps_;
      scheduler_.commit(batch);
      const int64_t vocab = rt_.model().vocab_size();
      for (size_t i = 0; i < batch.size(); ++i) {
        if (!samples[i]) continue;  // a prompt chunk short of the end: its logits are not needed
        Active& a = *active_.at(batch[i].seq->id);
        std::vector<SampleResult> logprobs;
        int32_t token = 0;
        if (argmax_only || on_device) {
          token = argmax_[i];
          a.sampler.accept(token);
        } else {
          const std::span<float> row = std::span<float>(logits_).subspan(i * size_t(vocab), size_t(vocab));
          if (a.request.logprobs >= 0) {
            logprobs.push_back(a.sampler.sample_with_logprobs(row, a.request.logprobs));
            token = logprobs.back().token;
          } else {
            token = a.sampler.sample(row);
          }
        }
        ++generated_;
        SequenceOutput::Step s = a.output.push(token);
        RequestOutput out = output_of(a);
        out.new_tokens.push_back(token);
        out.logprobs = std::move(logprobs);
        out.text = std::move(s.text) + s.tail;
        if (s.finished) {
          finish(a, std::move(out), std::move(s.finish_reason));
        } else {
          a.seq.tokens.push_back(token);
          outputs.push_back(std::move(out));
        }
      }
    }
  }
  update_metrics();

  // Callbacks last, with the engine's state consistent; finished requests are
  // forgotten after their final callback.
  struct Forget {
    Engine& e;
    std::vector<RequestId>& ids;
    ~Forget() {
      for (const RequestId id : ids) e.active_.erase(id);
    }
  } forget{*this, done};
  for (const RequestOutput& out : outputs) {
    const Active& a = *active_.at(out.id);
    if (a.request.on_output) a.request.on_output(out);
  }
  return outputs;
}

std::vector<Completion> Engine::run_to_completion() {
  std::map<RequestId, Completion> seen;
  std::vector<Completion> finished;
  while (has_work()) {
    for (RequestOutput& out : step()) {
      Completion& c = seen[out.id];
      c.id = out.id;
      c.prompt_tokens = out.prompt_tokens;
      c.cached_tokens = out.cached_tokens;
      c.tokens.insert(c.tokens.end(), out.new_tokens.begin(), out.new_tokens.end());
      c.text += out.text;
      if (out.finished) {
        c.finish_reason = out.finish_reason;
        c.error = out.error;
        finished.push_back(std::move(c));
        seen.erase(out.id);
      }
    }
  }
  std::sort(finished.begin(), finished.end(), [](const Completion& a, const Completion& b) { return a.id < b.id; });
  return finished;
}

}  // namespace fp8lm::engine
