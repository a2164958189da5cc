#include "engine/generate.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "common/error.h"
#include "engine/sequence_output.h"
#include "engine/request_grammar.h"

namespace fp8lm::engine {
namespace {

constexpr uint64_t kSequence = 1;  // the one sequence's id for the drafter

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Blocks of one sequence, returned to the allocator however generation ends.
class SequenceBlocks {
 public:
  SequenceBlocks(BlockAllocator& a, int block_size) : alloc_(a), block_size_(block_size) {}
  ~SequenceBlocks() { alloc_.free(table_); }
  SequenceBlocks(const SequenceBlocks&) = delete;
  SequenceBlocks& operator=(const SequenceBlocks&) = delete;

  // Makes room for `positions` positions.
  void reserve(int64_t positions) {
    const int64_t needed = blocks_for_tokens(positions, block_size_) - int64_t(table_.size());
    if (needed <= 0) return;
    std::optional<std::vector<int64_t>> got = alloc_.allocate(needed);
    if (!got)
      throw Error("the KV cache is full: " + std::to_string(positions) + " positions need " +
                  std::to_string(blocks_for_tokens(positions, block_size_)) + " blocks of " +
                  std::to_string(block_size_) + ", " + std::to_string(alloc_.num_free()) +
                  " are free (a larger --kv-cache-tokens helps)");
    table_.insert(table_.end(), got->begin(), got->end());
  }
  std::span<const int64_t> table() const { return table_; }

 private:
  BlockAllocator& alloc_;
  int block_size_;
  std::vector<int64_t> table_;
};

}  // namespace

GenerationResult generate(Runtime& rt, std::span<const int32_t> prompt, const SamplingParams& params,
                          const std::function<void(std::string_view)>& on_text, const SpeculativeConfig* speculative,
                          Drafter* drafter, std::shared_ptr<const structured::CompiledGrammar> grammar) {
  params.validate();
  if (grammar && speculative != nullptr)
    throw Error("structured outputs decode one token a step: a grammar and a speculative config together are refused");
  // The n-gram drafter is made here; a draft model is the caller's (loaded once for many calls).
  std::unique_ptr<Drafter> ngram;
  if (speculative != nullptr) drafter = &resolve_drafter(*speculative, drafter, ngram);
  struct Release {  // the drafter forgets this sequence however generation ends
    Drafter* d;
    ~Release() {
      if (d != nullptr) d->release(kSequence);
    }
  } release{speculative != nullptr ? drafter : nullptr};
  const int64_t context = rt.max_model_len();  // the model's context, or less (--max-model-len)
  if (prompt.empty()) throw Error("the prompt is empty: nothing to generate from");
  if (int64_t(prompt.size()) >= context) {
    const int64_t model_context = rt.config().max_position_embeddings;
    throw Error("the prompt has " + std::to_string(prompt.size()) + " tokens; " +
                (context < model_context ? "max_model_len is " + std::to_string(context) +
                                               " tokens, which leaves no room to generate (--max-model-len; the "
                                               "model's context is " + std::to_string(model_context) + ")"
                                         : "the model's context is " + std::to_string(context) +
                                               " tokens, which leaves no room to generate"));
  }
  const int64_t max_new = std::min<int64_t>(params.max_tokens, context - int64_t(prompt.size()));

  GenerationResult r;
  r.prompt_tokens = int64_t(prompt.size());
  Sampler sampler(params, prompt);
  SequenceOutput output(&rt.tokenizer(), params, rt.eos_ids(), max_new);
  std::unique_ptr<RequestGrammar> constraint;  // structured outputs
  if (grammar)
    constraint = std::make_unique<RequestGrammar>(grammar, rt.model().vocab_size(), rt.eos_ids(), params, sampler);
  auto emit = [&](const std::string& piece) {
    if (piece.empty()) return;
    r.text += piece;
    if (on_text) on_text(piece);
  };

  SequenceBlocks blocks(rt.blocks(), rt.block_size());
  std::vector<int32_t> sampled;
  std::vector<float> logits;  // a sampled verify step's rows
  std::vector<int32_t> step(prompt.begin(), prompt.end());
  std::vector<int32_t> history(prompt.begin(), prompt.end());  // the drafter's view: prompt and output
  int64_t position = 0;
  const auto start = std::chrono::steady_clock::now();
  auto decode_start = start;
  // A generated token into the sampler (penalties, draw counter), the drafter's history and the
  // output; true when it ends the sequence.
  auto keep = [&](int32_t token) {
    sampler.accept(token);
    history.push_back(token);
    if (constraint) {
      constraint->keep({&token, 1});
      if (constraint->settle())
        throw Error("internal: token " + std::to_string(token) + " is not allowed by the grammar");
    }
    SequenceOutput::Step s = output.push(token);
    // A complete grammar whose stop token ends no output of its own (ignore_eos) ends it here.
    if (constraint) s.tail += constraint->end_if_complete(output, s);
    emit(s.text);
    emit(s.tail);
    if (s.finished) r.finish_reason = s.finish_reason;
    return s.finished;
  };
  // A drafter that reads the target's hidden states (EAGLE-3) sees each step once its tokens are
  // kept, before the next one runs: its rows, and how many drafts the next step has room for.
  const bool shows_steps = speculative != nullptr && drafter->reads_target_states();
  auto show_step = [&](int64_t start_position, int64_t rows) {
    if (!shows_steps) return;
    const int64_t room = std::min<int64_t>(context - position - 1, max_new - int64_t(output.tokens().size()) - 1);
    const Drafter::StepRows s{kSequence, start_position, rows, history, blocks.table(),
                              int(std::clamp<int64_t>(room, 0, speculative->num_speculative_tokens))};
    drafter->after_target_step({&s, 1});
  };
  while (true) {
    if (speculative != nullptr && !output.tokens().empty()) {
      // A verify step: the last token and the drafted ones, each position's logits back.
      const int64_t room = std::min<int64_t>(context - position - 1, max_new - int64_t(output.tokens().size()) - 1);
      Drafter::Request want{kSequence, history, int(std::min<int64_t>(room, speculative->num_speculative_tokens)), {}};
      if (want.max_tokens > 0) drafter->draft({&want, 1});
      std::vector<int32_t>& draft = want.draft;
      if (!draft.empty()) {
        step.insert(step.end(), draft.begin(), draft.end());
        blocks.reserve(position + int64_t(step.size()));
        const model::SequenceInput in{step, position, blocks.table(), true};
        // The step's tokens: plain greedy, the model's argmax at each position while it confirms
        // the draft (only tokens leave the backend); otherwise the sampler verifies each drafted
        // token from the logits (speculative sampling, penalties included). Either way the tokens
        // are distributed as without speculation.
        std::vector<int32_t> kept;
        int accepted = 0;
        if (params.greedy() && !params.has_penalties()) {
          rt.model().forward_greedy({&in, 1}, sampled);
          accepted = accepted_prefix(draft, sampled);
          kept.assign(sampled.begin(), sampled.begin() + accepted + 1);
        } else {
          rt.model().forward({&in, 1}, logits);
          VerifiedDraft v = verify_draft_rows(sampler, logits, draft);
          kept = std::move(v.tokens);
          accepted = v.accepted;
        }
        r.speculative.add(int(draft.size()), accepted);
        drafter->keep(kSequence, int64_t(history.size()) + accepted);  // what the drafter saw and still holds
        const int64_t start_position = position;
        position += accepted + 1;
        bool finished = false;
        for (size_t i = 0; i < kept.size() && !finished; ++i) finished = keep(kept[i]);
        if (finished) break;
        show_step(start_position, int64_t(step.size()));
        step.assign(1, kept.back());
        continue;
      }
    }
    blocks.reserve(position + int64_t(step.size()));
    const model::SequenceInput in{step, position, blocks.table(), false};
    // Sampled where the logits are (the engine's path: the same row math and draw, so a
    // request gives the same tokens here as through the engine), then recorded for the
    // penalties and the draw counter.
    const backend::RowSampling row = sampler.row_sampling();
    if (constraint) constraint->fill_mask();
    rt.model().forward_sample({&in, 1}, {&row, 1}, sampled);
    const int64_t start_position = position;
    position += int64_t(step.size());
    const int32_t token = sampled.at(0);
    if (output.tokens().empty()) {
      r.prefill_seconds = seconds_since(start);
      decode_start = std::chrono::steady_clock::now();
    }
    if (keep(token)) break;
    show_step(start_position, int64_t(step.size()));
    step.assign(1, token);
  }
  r.tokens = output.tokens();
  if (r.tokens.size() > 1) r.decode_seconds = seconds_since(decode_start);
  return r;
}

}  // namespace fp8lm::engine
