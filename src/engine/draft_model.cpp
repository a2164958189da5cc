#include "engine/draft_model.h"

#include <algorithm>
#include <string>

#include "common/error.h"
#include "io/load_overrides.h"

namespace fp8lm::engine {

std::unique_ptr<DraftModel> DraftModel::load(const SpeculativeConfig& config, const RuntimeOptions& options) {
  if (config.method != SpeculativeConfig::Method::kDraftModel)
    throw Error("internal: a draft model for a speculative config without one");
  io::LoadOverrides o;
  if (!config.quantization.empty()) o.quantization = io::parse_online_quant(config.quantization);
  std::unique_ptr<Runtime> rt;
  try {
    rt = Runtime::load(config.model, o, options);
  } catch (const Error& e) {
    throw Error(std::string("--speculative-config: the draft model: ") + e.what());
  }
  return std::make_unique<DraftModel>(std::move(rt), options.max_num_batched_tokens);
}

void DraftModel::check_target(int64_t target_vocab) const {
  const int64_t vocab = rt_->config().vocab_size;
  if (vocab != target_vocab)
    throw Error("--speculative-config: the draft model's vocabulary has " + std::to_string(vocab) +
                " tokens, the target's " + std::to_string(target_vocab) +
                ": a draft model must share the target's tokenizer");
}

DraftModel::DraftModel(std::unique_ptr<Runtime> runtime, int64_t max_batched_tokens)
    : rt_(std::move(runtime)), max_batched_tokens_(std::max<int64_t>(max_batched_tokens, 1)) {}

DraftModel::~DraftModel() {
  for (auto& [id, s] : states_) drop(s);
}

bool DraftModel::reserve(State& s, int64_t positions) {
  const int64_t needed = blocks_for_tokens(positions, rt_->block_size()) - int64_t(s.blocks.size());
  if (needed <= 0) return true;
  std::optional<std::vector<int64_t>> got = rt_->blocks().allocate(needed);
  if (!got) return false;
  s.blocks.insert(s.blocks.end(), got->begin(), got->end());
  return true;
}

void DraftModel::drop(State& s) {
  rt_->blocks().free(s.blocks);
  s.blocks.clear();
  s.computed = 0;
}

void DraftModel::draft(std::span<Request> requests) {
  struct Job {
    Request* r;
    State* s;
    int32_t feed;  // the token the next decode step feeds
  };
  std::vector<Job> jobs;
  const int64_t context = rt_->max_model_len();
  for (Request& r : requests) {
    r.draft.clear();
    const auto len = int64_t(r.tokens.size());
    // The positions this call writes: the tokens but the last not yet cached, the last, and every
    // draft but the last; within the draft model's context.
    const int64_t k = std::min<int64_t>(r.max_tokens, context - len + 1);
    if (len == 0 || k <= 0) continue;
    State& s = states_[r.id];
    s.computed = std::min(s.computed, len - 1);
    if (!reserve(s, len + k - 1)) {
      drop(s);  // no room now: this sequence drafts nothing this step, and recomputes later
      continue;
    }
    r.max_tokens = int(k);
    jobs.push_back({&r, &s, r.tokens.back()});
  }
  if (jobs.empty()) return;

  std::vector<model::SequenceInput> in;
  std::vector<int32_t> ids;
  // The draft caches brought up to each sequence's tokens but the last, in forward calls of at
  // most max_batched_tokens_ tokens (only the cache matters here, not the tokens).
  for (;;) {
    in.clear();
    std::vector<std::pair<State*, int64_t>> ran;
    int64_t budget = max_batched_tokens_;
    for (const Job& j : jobs) {
      const int64_t pending = int64_t(j.r->tokens.size()) - 1 - j.s->computed;
      if (pending <= 0 || budget <= 0) continue;
      const int64_t n = std::min(pending, budget);
      in.push_back({j.r->tokens.subspan(size_t(j.s->computed), size_t(n)), j.s->computed, j.s->blocks, false});
      ran.emplace_back(j.s, n);
      budget -= n;
    }
    if (in.empty()) break;
    rt_->model().forward_greedy(in, ids);
    for (const auto& [s, n] : ran) s->computed += n;
  }
  // k decode steps: the last token, then each draft, one position a sequence a step.
  std::vector<Job*> live;
  for (int step = 0;; ++step) {
    in.clear();
    live.clear();
    for (Job& j : jobs) {
      if (step >= j.r->max_tokens) continue;
      in.push_back({{&j.feed, 1}, j.s->computed, j.s->blocks, false});
      live.push_back(&j);
    }
    if (in.empty()) break;
    rt_->model().forward_greedy(in, ids);
    for (size_t i = 0; i < live.size(); ++i) {
      live[i]->r->draft.push_back(ids[i]);
      live[i]->feed = ids[i];
      ++live[i]->s->computed;
    }
  }
}

void DraftModel::keep(uint64_t id, int64_t length) {
  const auto it = states_.find(id);
  if (it != states_.end()) it->second.computed = std::min(it->second.computed, std::max<int64_t>(length, 0));
}

void DraftModel::release(uint64_t id) {
  const auto it = states_.find(id);
  if (it == states_.end()) return;
  drop(it->second);
  states_.erase(it);
}

}  // namespace fp8lm::engine
