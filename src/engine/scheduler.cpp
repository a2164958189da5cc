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
  blocks_.free(seq.block_table);
  seq.block_table.clear();
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
    victim->num_computed = 0;
    ++victim->num_preemptions;
    ++preemptions_;
    waiting_.push_front(victim);
    preempted = true;
    return victim;
  };

  // Pass 1: decodes (one token left to compute); pass 2: unfinished prompt chunks.
  for (const bool decodes : {true, false}) {
    for (size_t i = 0; i < running_.size() && budget > 0;) {
      Sequence* seq = running_[i];
      const int64_t remaining = int64_t(seq->tokens.size()) - seq->num_computed;
      if ((remaining == 1) != decodes) {
        ++i;
        continue;
      }
      const int64_t n = std::min(remaining, budget);
      bool self_preempted = false;
      while (!grow(*seq, seq->num_computed + n))
        if (preempt_last() == seq) {
          self_preempted = true;
          break;
        }
      if (self_preempted) break;  // it was the last running sequence
      batch.push_back({seq, n});
      budget -= n;
      ++i;
    }
  }

  // Admissions, oldest waiting first; none in a step that had to preempt.
  while (!preempted && budget > 0 && !waiting_.empty() && int64_t(running_.size()) < config_.max_num_seqs) {
    Sequence* seq = waiting_.front();
    const int64_t n = std::min(int64_t(seq->tokens.size()) - seq->num_computed, budget);
    if (!grow(*seq, seq->num_computed + n)) break;
    waiting_.pop_front();
    running_.push_back(seq);
    batch.push_back({seq, n});
    budget -= n;
  }
  peak_running_ = std::max(peak_running_, int64_t(running_.size()));
  return batch;
}

void Scheduler::commit(const std::vector<ScheduledSequence>& batch) {
  for (const ScheduledSequence& s : batch) s.seq->num_computed += s.num_tokens;
}

void Scheduler::remove(Sequence* seq) {
  if (auto it = std::find(running_.begin(), running_.end(), seq); it != running_.end()) running_.erase(it);
  else if (auto w = std::find(waiting_.begin(), waiting_.end(), seq); w != waiting_.end()) waiting_.erase(w);
  else throw Error("internal: the scheduler does not hold request " + std::to_string(seq->id));
  release(*seq);
}

}  // namespace fp8lm::engine
