#include "engine/eagle3_drafter.h"

#include <algorithm>
#include <filesystem>
#include <string>

#include "common/error.h"
#include "engine/block_allocator.h"
#include "io/eagle3_config_json.h"
#include "io/json_file.h"
#include "loader/eagle3_weights.h"

namespace fp8lm::engine {
namespace {

[[noreturn]] void refuse(const std::string& why) { throw Error("--speculative-config: the EAGLE-3 head: " + why); }

}  // namespace

std::unique_ptr<Eagle3Drafter> Eagle3Drafter::load(const SpeculativeConfig& config, Runtime& target,
                                                   int64_t max_num_seqs, int64_t max_batched_tokens) {
  if (config.method != SpeculativeConfig::Method::kEagle3)
    throw Error("internal: an EAGLE-3 drafter for a speculative config without one");
  io::Eagle3Checkpoint ck;
  loader::Eagle3HostWeights weights;
  try {
    ck = io::read_eagle3_checkpoint(config.model);
    weights = loader::load_eagle3_host_weights(config.model, ck);
  } catch (const Error& e) {
    refuse(e.what());
  }
  return std::make_unique<Eagle3Drafter>(ck, weights, target, max_num_seqs, max_batched_tokens);
}

uint64_t Eagle3Drafter::kv_bytes_per_token(const SpeculativeConfig& config) {
  try {
    // The config alone: load() checks the checkpoint's tensors once the target is up.
    const std::filesystem::path path = std::filesystem::path(config.model) / "config.json";
    const ModelConfig l = io::parse_eagle3_config(io::read_json_file(path), path.string()).layer;
    // One layer in BF16, the head's cache (the constructor's).
    return backend::kv_bytes_per_token({1, l.num_key_value_heads, l.head_dim, 16, 1}, {backend::KvLayerFormat{}});
  } catch (const Error& e) {
    refuse(e.what());
  }
}

Eagle3Drafter::Eagle3Drafter(const io::Eagle3Checkpoint& checkpoint, const loader::Eagle3HostWeights& weights,
                             Runtime& target, int64_t max_num_seqs, int64_t max_batched_tokens)
    : target_(target) {
  Eagle3HeadConfig cfg = checkpoint.config;
  const ModelConfig& t = target.config();
  if (cfg.layer.vocab_size != t.vocab_size)
    refuse("its vocabulary has " + std::to_string(cfg.layer.vocab_size) + " tokens, the target's " +
           std::to_string(t.vocab_size) + ": a head drafts in its target's tokens");
  if (cfg.target_hidden_size != t.hidden_size)
    refuse("it fuses hidden states of width " + std::to_string(cfg.target_hidden_size) + ", the target's are " +
           std::to_string(t.hidden_size) + " wide");
  if (!checkpoint.own_embedding && cfg.layer.hidden_size != t.hidden_size)
    refuse("it has no embedding table of its own, and its width " + std::to_string(cfg.layer.hidden_size) +
           " is not the target's " + std::to_string(t.hidden_size));
  std::vector<int> aux = cfg.aux_layer_ids.empty() ? eagle3_default_aux_layers(t.num_hidden_layers) : cfg.aux_layer_ids;
  if (aux.size() != weights.fc.size())
    refuse("it names " + std::to_string(aux.size()) + " target layers, and its fc fuses " +
           std::to_string(weights.fc.size()));
  // The head runs at the target's positions, whatever context its own config names (vLLM gives a
  // draft the target's max_model_len); a scaled RoPE keeps the context it was scaled from.
  if (cfg.layer.rope_scaling.original_max_position_embeddings == 0)
    cfg.layer.rope_scaling.original_max_position_embeddings = cfg.layer.max_position_embeddings;
  cfg.layer.max_position_embeddings =
      std::max(cfg.layer.max_position_embeddings, t.max_position_embeddings + kMaxSpeculativeTokens + 2);
  // The target refuses layers it does not have, and tensor parallelism (LlamaModel's checks).
  model::LlamaModel& tm = *target.model().rank(0).model;
  try {
    tm.capture_aux_states(aux);
  } catch (const Error& e) {
    refuse(e.what());
  }
  head_ = std::make_unique<model::Eagle3Head>(cfg, weights, target.ops(),
                                              checkpoint.own_embedding ? nullptr : &tm.embedding());
  const backend::KvCacheShape& ts = target.kv_cache().shape();
  target_blocks_ = ts.num_blocks;
  // A chain of k drafts writes k − 1 slots past the last row the target ran, at most
  // ceil((k − 1) / block size) blocks past a sequence's table.
  const int64_t per_seq = blocks_for_tokens(kMaxSpeculativeTokens - 1, ts.block_size);
  spare_blocks_ = std::max<int64_t>(max_num_seqs, 1) * per_seq;
  // and blocks written and never read: the rows of a sequence whose blocks went back before the
  // head saw its step (its last token sampled, or preempted), each row a slot of its own — a
  // step's rows, a block more a sequence for where they start.
  unread_blocks_ =
      blocks_for_tokens(std::max<int64_t>(max_batched_tokens, 1), ts.block_size) + std::max<int64_t>(max_num_seqs, 1);
  cache_ = target.ops().make_kv_cache(
      head_->kv_cache_shape(ts.block_size, target_blocks_ + spare_blocks_ + unread_blocks_), {backend::KvLayerFormat{}});
}

void Eagle3Drafter::draft(std::span<Request> requests) {
  for (Request& r : requests) {
    r.draft.clear();
    const auto it = drafts_.find(r.id);
    if (it == drafts_.end()) continue;
    if (it->second.length == r.tokens.size()) {
      const std::vector<int32_t>& d = it->second.tokens;
      r.draft.assign(d.begin(), d.begin() + std::min<ptrdiff_t>(ptrdiff_t(d.size()), std::max(r.max_tokens, 0)));
    }
    drafts_.erase(it);
  }
}

void Eagle3Drafter::after_target_step(std::span<const StepRows> rows) {
  const std::span<const backend::Tensor> aux = target_.model().rank(0).model->aux_states();
  int64_t total = 0;
  for (const StepRows& r : rows) total += r.rows;
  if (aux.empty() || aux[0].rows != total)
    throw Error("internal: the EAGLE-3 head was given a step of " + std::to_string(total) +
                " rows, and the target kept hidden states of " + std::to_string(aux.empty() ? 0 : aux[0].rows));
  if (total == 0) return;
  const int64_t vocab = target_.config().vocab_size;
  const int block_size = cache_->shape().block_size;
  const int64_t context = head_->config().layer.max_position_embeddings;

  // The first head step: every row of the target's step, row p with the token at p + 1.
  struct Chain {
    uint64_t id = 0;
    size_t length = 0;
    int64_t last = 0;  // the position of its last row whose next token is known: the head's row for the first draft
    int64_t row = 0;   // that row in the step
    int k = 0;
    std::vector<int64_t> table;  // the target's, and spare blocks for the chain's slots past it
    std::vector<int32_t> drafts;
  };
  std::vector<int32_t> next(static_cast<size_t>(total));
  std::vector<model::SequenceInput> batch;
  std::vector<Chain> chains;
  std::vector<std::vector<int64_t>> unread;  // stand-in tables into the unread blocks
  unread.reserve(rows.size());
  int64_t offset = 0, spare = 0, unread_used = 0;
  for (const StepRows& r : rows) {
    drafts_.erase(r.id);
    const auto len = int64_t(r.tokens.size());
    std::span<const int64_t> table = r.block_table;
    const int64_t blocks = blocks_for_tokens(r.start_position + r.rows, block_size);
    if (int64_t(table.size()) < blocks) {
      // Its step's positions in unread blocks of their own (the ones before, never written, any).
      const int64_t first = r.start_position / block_size;
      if (unread_used + blocks - first > unread_blocks_)
        throw Error("internal: a step of " + std::to_string(total) + " rows is beyond the EAGLE-3 head's " +
                    std::to_string(unread_blocks_) + " blocks for rows it does not keep");
      const int64_t base = target_blocks_ + spare_blocks_;
      std::vector<int64_t>& t = unread.emplace_back(size_t(blocks), base + unread_used);
      for (int64_t b = first; b < blocks; ++b) t[size_t(b)] = base + unread_used++;
      table = t;
    }
    for (int64_t i = 0; i < r.rows; ++i) {
      const int64_t p = r.start_position + i;
      const int32_t t = p + 1 < len ? r.tokens[size_t(p + 1)] : 0;  // past a rejected draft: rewritten next step
      next[size_t(offset + i)] = t >= 0 && t < vocab ? t : 0;
    }
    batch.push_back({std::span<const int32_t>(next).subspan(size_t(offset), size_t(r.rows)), r.start_position,
                     table, false});
    const int64_t last = len - 2;
    if (r.max_drafts > 0 && table.data() == r.block_table.data() && last >= r.start_position &&
        last < r.start_position + r.rows) {
      Chain c;
      c.id = r.id;
      c.length = size_t(len);
      c.last = last;
      c.row = offset + last - r.start_position;
      c.k = int(std::min<int64_t>({r.max_drafts, kMaxSpeculativeTokens, context - last - 1}));
      c.table.assign(r.block_table.begin(), r.block_table.end());
      // Slots last + 1 … last + k − 1 hold the chain's later rows.
      const int64_t needed = (last + c.k - 1) / block_size + 1 - int64_t(c.table.size());
      for (int64_t b = 0; b < needed && spare < spare_blocks_; ++b) c.table.push_back(target_blocks_ + spare++);
      c.k = int(std::min<int64_t>(c.k, int64_t(c.table.size()) * block_size - last));
      if (c.k > 0) chains.push_back(std::move(c));
    }
    offset += r.rows;
  }
  // Longest chains first: each later step's sequences are a prefix of the step before's rows.
  std::stable_sort(chains.begin(), chains.end(), [](const Chain& a, const Chain& b) { return a.k > b.k; });
  std::vector<int64_t> out_rows;
  for (const Chain& c : chains) out_rows.push_back(c.row);
  if (out_rows.empty()) out_rows.push_back(0);  // the cache's slots alone: one row's results, unread

  backend::Ops& ops = target_.ops();
  model::Eagle3Head::Output out = head_->step(batch, aux, true, *cache_, out_rows);
  if (chains.empty()) return;
  std::vector<int32_t> ids(out_rows.size());
  std::vector<int32_t> fed(chains.size());
  for (int step = 0;; ++step) {
    ids.resize(size_t(out.logits.rows));
    ops.argmax_rows(out.logits, ids);
    for (size_t i = 0; i < ids.size(); ++i) {
      Chain& c = chains[i];
      // A chain whose logits had no number ends there; its rows run on (the later chains' rows
      // follow them), unread.
      if (int(c.drafts.size()) != step || ids[i] < 0) continue;
      c.drafts.push_back(int32_t(head_->draft_to_target(ids[i])));
      fed[i] = c.drafts.back();
    }
    // The next step: one row a chain that wants more, fed its last draft and its hidden state.
    size_t n = 0;
    while (n < chains.size() && chains[n].k > step + 1) ++n;
    if (n == 0) break;
    batch.clear();
    for (size_t i = 0; i < n; ++i)
      batch.push_back({std::span<const int32_t>(&fed[i], 1), chains[i].last + step + 1, chains[i].table, false});
    const backend::Tensor hidden{out.hidden.data, int64_t(n), out.hidden.cols};
    out = head_->step(batch, {&hidden, 1}, false, *cache_);
  }
  for (Chain& c : chains)
    if (!c.drafts.empty()) drafts_[c.id] = {c.length, std::move(c.drafts)};
}

}  // namespace fp8lm::engine
