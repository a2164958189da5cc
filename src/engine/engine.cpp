#include "engine/engine.h"

#include <algorithm>
#include <map>
#include <thread>
#include <utility>

#include "common/error.h"
#include "common/thread_pool.h"
#include "engine/request_grammar.h"

namespace fp8lm::engine {

namespace {

// Greedy without penalties or logprobs: the token is the logits' argmax (the
// lowest id on ties, as the sampler's), which the backend can take itself.
bool plain_greedy(const SamplingParams& p, int32_t logprobs) {
  return p.greedy() && !p.has_penalties() && logprobs < 0;
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
  int64_t sampled = 0;        // its tokens sampled in launched steps (some maybe to come)
  bool in_scheduler = true;   // until finished, or its last token (max_tokens) is launched
  bool finished = false;      // its final output is made
  bool speculate = false;     // drafts are verified for it (the engine speculates, and it may)
  int64_t last_step = 0;      // the last launched step (Launch::number) with a row of it
  // Why the request failed in work of its own (its row could not be sampled, its
  // text or stop checks threw): it finishes with "error" when its row is emitted,
  // and the rest of the batch goes on.
  std::string error;
  // Structured outputs: its grammar and the mask of its next draw. The tokens collect keeps are
  // accepted where the next mask is filled (while the device runs the next forward), or before
  // the output is emitted — not on the critical path between a step's tokens and the next launch.
  std::unique_ptr<RequestGrammar> grammar;

  // Accepts the kept tokens; a token the grammar refuses fails the request.
  void settle() {
    if (const std::optional<int32_t> t = grammar->settle(); t && error.empty())
      error = "sampling failed: token " + std::to_string(*t) + " is not allowed by the request's grammar";
  }
};

// A step given to the device: its batch, which rows sample and how, and (once
// collected) their tokens.
struct Engine::Launch {
  enum class Mode {
    kArgmax,  // every row sampled is plain greedy: the backend takes the argmax
    kDevice,  // the backend samples every row from the samplers' descriptions
    kHost,    // logprobs wanted: the logits come to the host, which samples
  };
  int64_t number = 0;  // steps_ once launched: 1, 2, …
  std::vector<ScheduledSequence> batch;
  std::vector<uint8_t> samples;  // per row: its logits are sampled (ScheduledSequence::samples at scheduling)
  // Speculative decoding, per row: the drafts it verifies (empty: none), and where its logits
  // rows begin (a verify row has draft.size() + 1 of them, every other row one).
  std::vector<std::vector<int32_t>> draft;
  std::vector<size_t> first_row;
  size_t logits_rows = 0;
  std::vector<int64_t> start;  // per row: the position of its first token (once launched)
  Mode mode = Mode::kArgmax;
  // Per row: where its token goes in seq.tokens (a placeholder until collected), or kNoSlot
  // where the token is the request's last (max_tokens) and none goes there.
  std::vector<size_t> slot;
  std::vector<int32_t> tokens;                       // per logits row, from the backend
  std::vector<std::vector<int32_t>> kept;           // per row, once collected: its tokens (a verify row's kept)
  std::vector<std::vector<SampleResult>> logprobs;  // per row, kHost with logprobs
};

namespace {
constexpr int32_t kPlaceholder = -1;  // outside every vocabulary: the model refuses it if it ever ran
constexpr size_t kNoSlot = size_t(-1);
}  // namespace

Engine::Engine(Runtime& runtime, SchedulerConfig config, std::optional<SpeculativeConfig> speculative,
               Drafter* drafter)
    : rt_(runtime), scheduler_(runtime.blocks(), runtime.block_size(), config), speculative_(speculative),
      drafter_(speculative ? &resolve_drafter(*speculative, drafter, own_drafter_) : nullptr) {
  blocks_total_ = runtime.blocks().num_total();
}

Engine::~Engine() {
  // A step still on the device finishes before the blocks it writes change hands.
  if (in_flight_ && in_flight_->mode != Launch::Mode::kHost) {
    try {
      std::vector<int32_t> dropped;
      rt_.model().wait_tokens(dropped);
    } catch (const std::exception&) {
      // Its tokens are dropped either way; a destructor does not throw.
    }
  }
  // Blocks of unfinished requests go back to the runtime's allocator (and the draft model's).
  for (auto& [id, a] : active_) {
    if (a->in_scheduler) scheduler_.remove(&a->seq);
    if (drafter_ != nullptr) drafter_->release(id);
  }
}

RequestId Engine::add_request(Request request) {
  request.params.validate();
  if (request.logprobs < -1) throw Error("logprobs: " + std::to_string(request.logprobs) + " must be -1 (off) or >= 0");
  const int64_t context = rt_.max_model_len();  // the model's context, or less (--max-model-len)
  const int64_t vocab = rt_.model().vocab_size();
  const auto prompt_len = int64_t(request.prompt.size());
  if (request.prompt.empty()) throw Error("the prompt is empty: nothing to generate from");
  for (const int32_t id : request.prompt)
    if (id < 0 || id >= vocab)
      throw Error("prompt token id " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(vocab));
  const int64_t max_tokens = request.params.max_tokens;
  if (prompt_len + max_tokens > context)
    throw Error("the prompt (" + std::to_string(prompt_len) + " tokens) + max_tokens (" + std::to_string(max_tokens) +
                ") = " + std::to_string(prompt_len + max_tokens) + " tokens is beyond the context of " +
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
  active->speculate = speculative_.has_value() && active->request.speculate && active->request.logprobs < 0 &&
                      !active->request.grammar;
  if (active->request.grammar)
    active->grammar = std::make_unique<RequestGrammar>(active->request.grammar, vocab, rt_.eos_ids(),
                                                       active->request.params, active->sampler);
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
  return in_flight_ != nullptr || !scheduler_.empty();
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

SpeculativeStats Engine::speculative_stats() const {
  std::lock_guard lock(stats_mutex_);
  return spec_stats_;
}

bool Engine::drafting() const {
  if (!speculative_) return false;
  const int limit = speculative_->disable_by_batch_size;
  return limit == 0 || scheduler_.num_running() < limit;
}

// The drafts a request has room for after its next step's own token: up to k, within max_tokens.
int64_t Engine::draft_room(const Active& a) const {
  return std::min<int64_t>(a.request.params.max_tokens - a.sampled - 1, speculative_->num_speculative_tokens);
}

// Drafts for every decoding sequence that speculates (its last token known: no step in flight),
// as many as its max_tokens leaves room for after the step's own token, all from one call of the
// drafter.
void Engine::draft() {
  std::vector<Drafter::Request> want;
  std::vector<Sequence*> seqs;
  for (auto& [id, ap] : active_) {
    Active& a = *ap;
    Sequence& q = a.seq;
    if (!a.speculate || a.finished || !a.in_scheduler || q.num_computed == 0 ||
        int64_t(q.tokens.size()) - q.num_computed != 1)
      continue;
    const int64_t room = draft_room(a);
    if (room <= 0) continue;
    want.push_back({q.id, q.tokens, int(room), {}});
    seqs.push_back(&q);
  }
  drafted_.clear();
  if (want.empty()) return;
  drafter_->draft(want);
  for (size_t i = 0; i < want.size(); ++i) {
    const std::vector<int32_t>& d = want[i].draft;
    const auto n = std::min<int64_t>(int64_t(d.size()), want[i].max_tokens);
    if (n <= 0) continue;
    seqs[i]->tokens.insert(seqs[i]->tokens.end(), d.begin(), d.begin() + n);
    seqs[i]->num_draft = n;
    drafted_.push_back(seqs[i]);
  }
}

RequestOutput Engine::output_of(const Active& a) const {
  RequestOutput out;
  out.id = a.seq.id;
  out.prompt_tokens = int64_t(a.request.prompt.size());
  out.cached_tokens = a.seq.num_cached_tokens;
  out.completion_tokens = int64_t(a.output.tokens().size());
  return out;
}

// How the batch samples: decided from the requests' parameters alone, so before
// the tokens of the step in flight are known.
std::unique_ptr<Engine::Launch> Engine::plan(std::vector<ScheduledSequence> batch) {
  auto l = std::make_unique<Launch>();
  l->batch = std::move(batch);
  for (const ScheduledSequence& s : l->batch) l->samples.push_back(s.samples() ? 1 : 0);
  // When every row sampled this step is plain greedy, the argmax is taken
  // where the logits are: on a GPU a batch of 256 would otherwise copy
  // 256 × vocab floats to the host and scan them there, every step.
  // Otherwise, unless a row asks for logprobs (they need the raw log-softmax
  // on the host), the backend samples every row itself from the sampler's
  // description of its next draw; rows that sample nothing this step take the
  // argmax, and their token is dropped.
  // A verify row of a request that samples (or has penalties) needs its probabilities at each
  // position: the logits come to the host.
  bool argmax_only = true, on_device = true;
  l->draft.resize(l->batch.size());
  for (size_t i = 0; i < l->batch.size(); ++i) {
    const Sequence& q = *l->batch[i].seq;
    l->first_row.push_back(l->logits_rows);
    if (q.num_draft > 0) l->draft[i].assign(q.tokens.end() - q.num_draft, q.tokens.end());
    l->logits_rows += l->draft[i].size() + 1;
    if (!l->samples[i]) continue;
    const Active& a = *active_.at(q.id);
    const bool greedy = plain_greedy(a.request.params, a.request.logprobs) && !a.grammar;
    argmax_only = argmax_only && greedy;
    on_device = on_device && a.request.logprobs < 0 && (greedy || l->draft[i].empty());
  }
  l->mode = argmax_only ? Launch::Mode::kArgmax : on_device ? Launch::Mode::kDevice : Launch::Mode::kHost;
  return l;
}

std::string Engine::launch(Launch& l) {
  inputs_.clear();
  l.start.clear();
  for (size_t i = 0; i < l.batch.size(); ++i) {
    const Sequence& q = *l.batch[i].seq;
    l.start.push_back(q.num_computed);
    inputs_.push_back({std::span<const int32_t>(q.tokens).subspan(size_t(q.num_computed), size_t(l.batch[i].num_tokens)),
                       q.num_computed, q.block_table, !l.draft[i].empty()});
  }
  // The samplers' descriptions come after the tokens before them were accepted (collect). A
  // verify row here is plain greedy: the same description at each of its positions.
  if (l.mode == Launch::Mode::kDevice) {
    rows_.assign(l.logits_rows, backend::RowSampling{});
    for (size_t i = 0; i < l.batch.size(); ++i) {
      backend::RowSampling row;
      if (l.samples[i]) row = active_.at(l.batch[i].seq->id)->sampler.row_sampling();
      else row.temperature = 0.0f;
      std::fill_n(rows_.begin() + int64_t(l.first_row[i]), l.draft[i].size() + 1, row);
    }
  }
  // Structured outputs' masks (rows_ and the samplers point at them): on the host while the
  // device runs the forward, before its sampling is queued.
  try {
    switch (l.mode) {
      case Launch::Mode::kArgmax: rt_.model().start_greedy(inputs_); break;
      case Launch::Mode::kDevice: rt_.model().start_sample(inputs_, rows_, [&] { fill_masks(l); }); break;
      case Launch::Mode::kHost:
        fill_masks(l);
        rt_.model().forward(inputs_, logits_);
        break;
    }
  } catch (const OutOfMemoryError& e) {
    // The device had no memory for this step: its requests fail (step() frees
    // their KV blocks and tells their clients why) and the engine goes on with
    // the others, rather than the process dying.
    return std::string("out of device memory in a step of ") + std::to_string(inputs_.size()) +
           " sequences: " + e.what();
  }
  return {};
}

// After a launch: the scheduled tokens count as computed (the next schedule
// builds on them), and each sampled row gets the placeholder its token will fill.
void Engine::commit(Launch& l) {
  l.number = ++steps_;
  scheduler_.commit(l.batch);
  l.slot.assign(l.batch.size(), kNoSlot);
  for (size_t i = 0; i < l.batch.size(); ++i) {
    Active& a = *active_.at(l.batch[i].seq->id);
    a.last_step = l.number;
    if (!l.samples[i] || !l.draft[i].empty()) continue;  // a verify row's tokens are placed at collect
    if (++a.sampled < a.request.params.max_tokens) {
      l.slot[i] = a.seq.tokens.size();
      a.seq.tokens.push_back(kPlaceholder);
    } else {
      // Its last token: nothing more to schedule, and its blocks and slot are free
      // for the next schedule (a later step's writes queue after this one's).
      scheduler_.remove(&a.seq);
      a.in_scheduler = false;
    }
  }
}

// Waits for the launched step's tokens; each sampler accepts its row's, and the
// placeholders get them (so the next launch reads them). A verify row keeps the drafts its
// request's tokens confirm and one token more; the sequence drops the rest.
void Engine::collect(Launch& l) {
  const int64_t vocab = rt_.model().vocab_size();
  if (l.mode == Launch::Mode::kHost) {
    l.logprobs.assign(l.batch.size(), {});
  } else {
    rt_.model().wait_tokens(l.tokens);
    if (l.tokens.size() != l.logits_rows)
      throw Error("internal: a step of " + std::to_string(l.logits_rows) + " logits rows gave " +
                  std::to_string(l.tokens.size()) + " tokens");
  }
  l.kept.assign(l.batch.size(), {});
  std::vector<int32_t> verified;
  for (size_t i = 0; i < l.batch.size(); ++i) {
    if (!l.samples[i]) continue;  // a prompt chunk short of the end: its logits are not needed
    Active& a = *active_.at(l.batch[i].seq->id);
    if (a.finished) continue;  // stopped (or cancelled) after this step was launched: the row is dropped
    const std::vector<int32_t>& draft = l.draft[i];
    std::vector<int32_t>& kept = l.kept[i];
    int accepted = 0;
    // A row that cannot be sampled fails its own request (emit finishes it), never
    // the batch. Its placeholder gets token 0, which any vocabulary has: the next
    // step may already read it, and that row's token is dropped.
    try {
      const size_t rows = draft.size() + 1;
      if (l.mode == Launch::Mode::kHost) {
        const std::span<float> logits = std::span<float>(logits_).subspan(l.first_row[i] * size_t(vocab), rows * size_t(vocab));
        if (!draft.empty()) {
          VerifiedDraft v = verify_draft_rows(a.sampler, logits, draft);
          kept = std::move(v.tokens);
          accepted = v.accepted;
        } else if (a.request.logprobs >= 0) {
          l.logprobs[i].push_back(a.sampler.sample_with_logprobs(logits, a.request.logprobs));
          kept.push_back(l.logprobs[i].back().token);
        } else {
          kept.push_back(a.sampler.sample(logits));
        }
      } else {
        verified.assign(l.tokens.begin() + int64_t(l.first_row[i]), l.tokens.begin() + int64_t(l.first_row[i] + rows));
        for (const int32_t t : verified)
          if (t < 0 || t >= vocab) throw Error(backend::kNoTokenReason);
        accepted = accepted_prefix(draft, verified);
        kept.assign(verified.begin(), verified.begin() + accepted + 1);
      }
      // sample() has recorded its token; the rest are recorded here.
      if (l.mode != Launch::Mode::kHost || !draft.empty())
        for (const int32_t t : kept) a.sampler.accept(t);
      if (a.grammar) a.grammar->keep(kept);
    } catch (const std::exception& e) {
      a.error = std::string("sampling failed: ") + e.what();
      kept.assign(1, 0);
      accepted = 0;
    }
    if (draft.empty()) {
      if (l.slot[i] != kNoSlot) a.seq.tokens[l.slot[i]] = kept[0];
      continue;
    }
    {
      std::lock_guard lock(stats_mutex_);
      spec_stats_.add(int(draft.size()), accepted);
    }
    scheduler_.accept_drafts(a.seq, accepted);
    drafter_->keep(a.seq.id, int64_t(a.seq.tokens.size()));
    a.sampled += int64_t(kept.size());
    if (a.sampled < a.request.params.max_tokens) {
      l.slot[i] = a.seq.tokens.size();
      a.seq.tokens.push_back(kept.back());
    } else {
      scheduler_.remove(&a.seq);  // its last token: as commit() for a row without drafts
      a.in_scheduler = false;
    }
  }
  if (drafter_ != nullptr && drafter_->reads_target_states()) show_drafter(l);
}

// fn(0 … n - 1), on the grammar threads when there are enough rows to pay for waking them (each
// call touches one request's matcher alone). fn does not throw.
void Engine::for_each_grammar_row(size_t n, const std::function<void(size_t)>& fn) {
  constexpr size_t kRowsPerThread = 16;
  if (n < 2 * kRowsPerThread) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  if (!grammar_threads_) {
    const unsigned hw = std::thread::hardware_concurrency();
    grammar_threads_ = std::make_unique<ThreadPool>(int(std::clamp(hw / 2, 1u, 8u)));
  }
  const auto tasks = int64_t((n + kRowsPerThread - 1) / kRowsPerThread);
  grammar_threads_->parallel_for(tasks, [&](int64_t t, int) {
    for (size_t i = size_t(t) * kRowsPerThread; i < std::min(n, size_t(t + 1) * kRowsPerThread); ++i) fn(i);
  });
}

// A drafter that reads the target's hidden states (EAGLE-3) sees the collected step before the
// next one runs: every row, and what each sequence that speculates next wants drafted.
void Engine::show_drafter(const Launch& l) {
  std::vector<Drafter::StepRows> rows;
  const bool drafts = drafting();
  for (size_t i = 0; i < l.batch.size(); ++i) {
    const Sequence& q = *l.batch[i].seq;
    const Active& a = *active_.at(q.id);
    int64_t want = 0;
    if (drafts && l.samples[i] && a.speculate && a.in_scheduler && !a.finished && a.error.empty())
      want = draft_room(a);
    rows.push_back({q.id, l.start[i], l.batch[i].num_tokens, q.tokens, q.block_table, int(std::max<int64_t>(want, 0))});
  }
  drafter_->after_target_step(rows);
}

// The collected tokens through each request's stop checks and detokenizer: a verify row's one
// by one, up to the first that ends the request.
void Engine::emit(Launch& l, std::vector<RequestOutput>& outputs, const Finish& finish) {
  for (size_t i = 0; i < l.batch.size(); ++i) {
    if (!l.samples[i]) continue;
    Active& a = *active_.at(l.batch[i].seq->id);
    if (a.finished) continue;
    if (a.grammar) a.settle();  // usually done already, while the next step's masks were filled
    std::vector<int32_t> tokens;
    std::string text;
    SequenceOutput::Step s;
    for (const int32_t token : l.kept[i]) {
      if (!a.error.empty()) break;
      try {
        s = a.output.push(token);  // detokenizing and stop checks: the request's own work
      } catch (const std::exception& e) {
        a.error = std::string("detokenizing or stop checking failed: ") + e.what();
        break;
      }
      tokens.push_back(token);
      text += s.text + s.tail;
      if (s.finished) break;
    }
    // A complete grammar whose stop token ends no output of its own (ignore_eos) ends it here.
    if (a.error.empty() && a.grammar) {
      try {
        text += a.grammar->end_if_complete(a.output, s);
      } catch (const std::exception& e) {
        a.error = std::string("detokenizing or stop checking failed: ") + e.what();
      }
    }
    if (!a.error.empty()) {
      fail(a, finish);
      continue;
    }
    generated_ += int64_t(tokens.size());
    RequestOutput out = output_of(a);
    out.new_tokens = std::move(tokens);
    if (l.mode == Launch::Mode::kHost) out.logprobs = std::move(l.logprobs[i]);
    out.text = std::move(text);
    if (s.finished) finish(a, std::move(out), std::move(s.finish_reason));
    else if (l.slot[i] == kNoSlot)
      throw Error("internal: request " + std::to_string(a.seq.id) + " sampled its max_tokens but did not finish");
    else outputs.push_back(std::move(out));
  }
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
  const Finish finish = [&](Active& a, RequestOutput out, std::string reason) {
    if (a.in_scheduler) scheduler_.remove(&a.seq);
    if (drafter_ != nullptr) drafter_->release(a.seq.id);
    a.in_scheduler = false;
    a.finished = true;
    out.finished = true;
    out.finish_reason = std::move(reason);
    outputs.push_back(std::move(out));
    done.push_back(a.seq.id);
  };
  for (const RequestId id : cancelled) {
    const auto it = active_.find(id);
    if (it == active_.end() || it->second->finished) continue;
    finish(*it->second, output_of(*it->second), "cancelled");
  }
  std::vector<RequestId> failed;
  failed.swap(callback_failed_);
  for (const RequestId id : failed) {
    const auto it = active_.find(id);
    if (it != active_.end() && !it->second->finished) fail(*it->second, finish);
  }

  // Speculative decoding drafts from every sequence's last token: the step in flight (if any)
  // is handled first, and the step that drafts runs synchronously.
  std::unique_ptr<Launch> previous = std::move(in_flight_);
  const bool drafts = drafting();
  if (drafts) {
    if (previous) {
      collect(*previous);
      emit(*previous, outputs, finish);
      previous.reset();
    }
    draft();
  }

  // The next batch, scheduled while the step in flight (if any) still runs.
  std::vector<ScheduledSequence> batch = scheduler_.schedule();
  // A sequence whose drafts the schedule dropped (budget, preemption) keeps only its own tokens
  // in the drafter too.
  for (Sequence* q : drafted_)
    if (q->num_draft == 0) drafter_->keep(q->id, int64_t(q->tokens.size()));
  drafted_.clear();
  std::unique_ptr<Launch> next = batch.empty() ? nullptr : plan(std::move(batch));
  // The metrics as of this schedule, before the (long) forward call; the
  // arrivals leave the queued count only now, so that num_waiting() never
  // loses sight of them in between (the server's waiting limit reads it).
  update_metrics();
  queued_ -= int64_t(arrived.size());

  // The step in flight gives its tokens to the placeholders the next batch reads;
  // the next step starts; only then is the last one's output handled.
  if (previous) collect(*previous);
  std::string failure;
  if (next) {
    failure = launch(*next);
    if (failure.empty()) commit(*next);
  }
  if (previous) emit(*previous, outputs, finish);
  if (next && !failure.empty()) {
    for (const ScheduledSequence& s : next->batch) {
      Active& a = *active_.at(s.seq->id);
      if (a.finished) continue;
      RequestOutput out = output_of(a);
      out.error = failure;
      finish(a, std::move(out), "error");
    }
  } else if (next && scheduler_.config().async_scheduling && !drafts) {
    in_flight_ = std::move(next);
  } else if (next) {
    collect(*next);
    emit(*next, outputs, finish);
  }
  update_metrics();

  // Callbacks last, with the engine's state consistent. Finished requests are
  // forgotten after their final callback, unless the step in flight has a row
  // of theirs: those when it has been collected.
  std::vector<RequestId> keep;
  for (const RequestId id : done)
    (in_flight_ && active_.at(id)->last_step == in_flight_->number ? keep : retired_).push_back(id);
  struct Forget {
    Engine& e;
    std::vector<RequestId> keep;
    ~Forget() {
      for (const RequestId id : e.retired_) e.active_.erase(id);
      e.retired_ = std::move(keep);
    }
  } forget{*this, std::move(keep)};
  for (const RequestOutput& out : outputs) {
    Active& a = *active_.at(out.id);
    if (!a.request.on_output) continue;
    // A callback that throws fails its own request (at the next step, with the
    // engine's state consistent), never the others of the step.
    std::string what;
    try {
      a.request.on_output(out);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
      what = "an exception of unknown type";
    }
    if (!what.empty() && !out.finished && !a.finished && a.error.empty()) {
      a.error = "the request's output callback failed: " + what;
      callback_failed_.push_back(out.id);
    }
  }
  return outputs;
}

// Each constrained row's mask from its matcher, once it has accepted the tokens collect kept
// (Active::settle): here, on a few threads while the device runs the forward. A request whose
// grammar fails here fails alone: its row samples unconstrained and its token is dropped.
void Engine::fill_masks(const Launch& l) {
  std::vector<Active*> rows;
  for (size_t i = 0; i < l.batch.size(); ++i) {
    if (!l.samples[i]) continue;
    Active& a = *active_.at(l.batch[i].seq->id);
    if (a.grammar && !a.finished && a.error.empty()) rows.push_back(&a);
  }
  for_each_grammar_row(rows.size(), [&](size_t i) {
    Active& a = *rows[i];
    try {
      a.settle();  // the tokens of the step before
      if (a.error.empty()) a.grammar->fill_mask();
    } catch (const std::exception& e) {
      a.error = std::string("structured outputs: the grammar's mask failed: ") + e.what();
    }
    if (!a.error.empty()) a.grammar->allow_all();  // its row's token is dropped
  });
}

void Engine::fail(Active& a, const Finish& finish) {
  RequestOutput out = output_of(a);
  out.error = a.error;
  finish(a, std::move(out), "error");
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
