#include "engine/scheduler.h"

#include <algorithm>
#include <optional>
#include <string>

#include "common/error.h"

namespace fp8lm::engine {

void SchedulerConfig::validate() const {
  if (max_num_seqs < 1) throw Error("max_num_seqs: " + std::to_string(max_num_seqs) + " must be at least 1");
  if (max_num_batched_tokens < max_num_seqs)
    throw Error("max_num_batched_tokens: " + std::to_string(max_num_batched_tokens) +
                " must be at least max_num_seqs (" + std::to_string(max_num_seqs) +
                "), so that every running sequence can decode in one step");
}

Scheduler::Scheduler(BlockAllocator& blocks, int block_size, SchedulerConfig config)
    : blocks_(blocks), block_size_(block_size), config_(config) {
  config_.validate();
  if (block_size_ <= 0) throw Error("KV cache block size must be positive");
}

Scheduler::~Scheduler() {
  // The KV memory stays the runtime's; what this scheduler cached is forgotten
  // with it, so that the next user of the allocator starts from free blocks.
  if (config_.enable_prefix_caching) blocks_.reset_cache();
}

void Scheduler::add(Sequence* seq) { waiting_.push_back(seq); }

int64_t Scheduler::blocks_for(int64_t positions) const { return blocks_for_tokens(positions, block_size_); }

bool Scheduler::fits_in_cache(int64_t positions) const { return blocks_for(positions) <= blocks_.num_total(); }

bool Scheduler::grow(Sequence& seq, int64_t positions) {
  const int64_t needed = blocks_for(positions) - int64_t(seq.block_table.size());
  if (needed <= 0) return true;
  std::optional<std::vector<int64_t>> got = blocks_.allocate(needed);
  if (!got) return false;
  seq.block_table.insert(seq.block_table.end(), got->begin(), got->end());
  return true;
}

void Scheduler::release(Sequence& seq) {
  if (config_.enable_prefix_caching) {
    // Tail first: of these blocks the last is evicted first, so a prefix
    // others may share outlives the end that is this sequence's own.
    const std::vector<int64_t> tail_first(seq.block_table.rbegin(), seq.block_table.rend());
    blocks_.free(tail_first);
  } else {
    blocks_.free(seq.block_table);
  }
  seq.block_table.clear();
  seq.cached_blocks.clear();
}

void Scheduler::drop_drafts(Sequence& seq, int64_t n) {
  n = std::min(n, seq.num_draft);
  seq.tokens.resize(seq.tokens.size() - size_t(n));
  seq.num_draft -= n;
}

// ---- prefix caching --------------------------------------------------------------

std::span<const int32_t> Scheduler::block_tokens(const Sequence& seq, size_t block) const {
  return std::span<const int32_t>(seq.tokens).subspan(block * size_t(block_size_), size_t(block_size_));
}

// Tokens only grow, so a full block's hash never changes: each is computed once.
void Scheduler::hash_blocks(Sequence& seq, int64_t num_blocks) const {
  while (int64_t(seq.block_hashes.size()) < num_blocks) {
    const size_t i = seq.block_hashes.size();
    const BlockHash parent = i == 0 ? kRootHash : seq.block_hashes.back();
    seq.block_hashes.push_back(hasher_(parent, block_tokens(seq, i)));
  }
}

// On admission with nothing computed: shares the longest run of cached blocks
// equal to the sequence's first tokens and marks their tokens computed.
// Returns the tokens found.
int64_t Scheduler::share_cached_prefix(Sequence& seq) {
  if (!config_.enable_prefix_caching || seq.num_computed != 0) return 0;
  if (!seq.block_table.empty()) throw Error("internal: waiting request " + std::to_string(seq.id) + " holds blocks");
  // At least one token is left to compute: its logits give the next token.
  const int64_t max_blocks = (int64_t(seq.tokens.size()) - 1) / block_size_;
  hash_blocks(seq, max_blocks);
  seq.cached_blocks.clear();
  for (size_t i = 0; int64_t(i) < max_blocks; ++i) {
    const CachedBlock parent = i == 0 ? kRoot : seq.cached_blocks.back();
    const std::optional<CachedBlock> hit = blocks_.find(seq.block_hashes[i], parent, block_tokens(seq, i));
    if (!hit) break;
    blocks_.share(*hit);
    seq.block_table.push_back(hit->block);
    seq.cached_blocks.push_back(*hit);
  }
  seq.num_computed = int64_t(seq.block_table.size()) * block_size_;
  return seq.num_computed;
}

// When a block duplicates one that was already cached (both computed at once),
// the sequence's chain goes through the other block, which it does not hold:
// once that is evicted, the blocks the sequence registered after it chain from
// a prefix no lookup can reach. From the first entry lost, the chain is cut,
// those registrations are withdrawn, and cache_full_blocks() redoes them with
// the sequence's own blocks. (No one else can hold a withdrawn block through
// the cache: sharing it means holding the lost entry too.)
void Scheduler::drop_lost_entries(Sequence& seq) {
  std::vector<CachedBlock>& chain = seq.cached_blocks;
  size_t cut = 0;
  while (cut < chain.size() && blocks_.holds(chain[cut])) ++cut;
  for (size_t j = cut; j < chain.size(); ++j)
    if (chain[j].block == seq.block_table[j] && blocks_.holds(chain[j])) blocks_.uncache(chain[j].block);
  chain.resize(cut);
}

// After a step: registers the blocks that became full of the sequence's own tokens (drafts are not). A block equal to one
// already cached stays uncached (the sequence's chain goes on through the
// cached one), as does one whose hash another prefix holds (a collision),
// which ends the chain for now.
void Scheduler::cache_full_blocks(Sequence& seq) {
  const int64_t own = int64_t(seq.tokens.size()) - seq.num_draft;
  const int64_t full = std::min(seq.num_computed, own) / block_size_;
  if (int64_t(seq.cached_blocks.size()) >= full) return;
  hash_blocks(seq, full);
  drop_lost_entries(seq);
  while (int64_t(seq.cached_blocks.size()) < full) {
    const size_t i = seq.cached_blocks.size();
    const CachedBlock parent = i == 0 ? kRoot : seq.cached_blocks.back();
    const std::span<const int32_t> tokens = block_tokens(seq, i);
    std::optional<CachedBlock> entry = blocks_.find(seq.block_hashes[i], parent, tokens);
    if (!entry) entry = blocks_.cache(seq.block_table[i], seq.block_hashes[i], parent, tokens);
    if (!entry) break;
    seq.cached_blocks.push_back(*entry);
  }
}

std::vector<ScheduledSequence> Scheduler::schedule() {
  std::vector<ScheduledSequence> batch;
  int64_t budget = config_.max_num_batched_tokens;
  bool preempted = false;

  // Recomputation: the victim's KV is dropped; its tokens (prompt + generated)
  // are prefilled again when it is re-admitted, ahead of every waiting request.
  auto preempt_last = [&] {
    Sequence* victim = running_.back();
    running_.pop_back();
    const auto it = std::find_if(batch.begin(), batch.end(), [&](const ScheduledSequence& s) { return s.seq == victim; });
    if (it != batch.end()) {
      budget += it->num_tokens;
      batch.erase(it);
    }
    release(*victim);
    drop_drafts(*victim, victim->num_draft);
    victim->num_computed = 0;
    ++victim->num_preemptions;
    ++preemptions_;
    waiting_.push_front(victim);
    preempted = true;
    return victim;
  };

  // Pass 1: decodes (one token left to compute, and any drafts after it); pass 2: unfinished
  // prompt chunks.
  for (const bool decodes : {true, false}) {
    for (size_t i = 0; i < running_.size() && budget > 0;) {
      Sequence* seq = running_[i];
      int64_t remaining = int64_t(seq->tokens.size()) - seq->num_computed;
      if (remaining == 0 || (remaining - seq->num_draft == 1) != decodes) {  // 0: its next token is not known yet
        ++i;
        continue;
      }
      if (remaining > budget && seq->num_draft > 0) {  // a verify step is never split: fewer drafts
        drop_drafts(*seq, remaining - budget);
        remaining = int64_t(seq->tokens.size()) - seq->num_computed;
      }
      int64_t n = std::min(remaining, budget);
      bool self_preempted = false;
      while (!grow(*seq, seq->num_computed + n)) {
        if (seq->num_draft > 0) {  // drafts go before anyone is preempted for them
          drop_drafts(*seq, seq->num_draft);
          n = int64_t(seq->tokens.size()) - seq->num_computed;
          continue;
        }
        if (preempt_last() == seq) {
          self_preempted = true;
          break;
        }
      }
      if (self_preempted) break;  // it was the last running sequence
      batch.push_back({seq, n});
      budget -= n;
      ++i;
    }
  }

  // A sequence the budget left out this step drafts again at its next.
  for (Sequence* seq : running_)
    if (seq->num_draft > 0 &&
        std::none_of(batch.begin(), batch.end(), [&](const ScheduledSequence& s) { return s.seq == seq; }))
      drop_drafts(*seq, seq->num_draft);

  // Admissions, oldest waiting first; none in a step that had to preempt.
  while (!preempted && budget > 0 && !waiting_.empty() && int64_t(running_.size()) < config_.max_num_seqs) {
    Sequence* seq = waiting_.front();
    const int64_t hit = share_cached_prefix(*seq);
    const int64_t n = std::min(int64_t(seq->tokens.size()) - seq->num_computed, budget);
    if (!grow(*seq, seq->num_computed + n)) {
      release(*seq);  // the shared blocks too: it may wait long
      seq->num_computed = 0;
      break;
    }
    if (config_.enable_prefix_caching) {
      prefix_queries_ += int64_t(seq->tokens.size());
      prefix_hits_ += hit;
    }
    if (!seq->admitted) seq->num_cached_tokens = hit;
    seq->admitted = true;
    waiting_.pop_front();
    running_.push_back(seq);
    batch.push_back({seq, n});
    budget -= n;
  }
  peak_running_ = std::max(peak_running_, int64_t(running_.size()));
  return batch;
}

void Scheduler::commit(const std::vector<ScheduledSequence>& batch) {
  for (const ScheduledSequence& s : batch) {
    s.seq->num_computed += s.num_tokens;
    if (config_.enable_prefix_caching) cache_full_blocks(*s.seq);
  }
}

void Scheduler::accept_drafts(Sequence& seq, int64_t accepted) {
  if (accepted < 0 || accepted > seq.num_draft || seq.num_computed != int64_t(seq.tokens.size()))
    throw Error("internal: request " + std::to_string(seq.id) + " keeps " + std::to_string(accepted) + " of " +
                std::to_string(seq.num_draft) + " drafts with " + std::to_string(seq.num_computed) + " of " +
                std::to_string(seq.tokens.size()) + " tokens computed");
  const int64_t rejected = seq.num_draft - accepted;
  seq.num_computed -= rejected;
  seq.num_draft = 0;
  seq.tokens.resize(seq.tokens.size() - size_t(rejected));
  if (config_.enable_prefix_caching) cache_full_blocks(seq);  // blocks the kept drafts filled
}

void Scheduler::remove(Sequence* seq) {
  if (auto it = std::find(running_.begin(), running_.end(), seq); it != running_.end()) running_.erase(it);
  else if (auto w = std::find(waiting_.begin(), waiting_.end(), seq); w != waiting_.end()) waiting_.erase(w);
  else throw Error("internal: the scheduler does not hold request " + std::to_string(seq->id));
  release(*seq);
}

}  // namespace fp8lm::engine
