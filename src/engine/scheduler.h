// The continuous-batching scheduler (vLLM v1 style): which sequences run in the
// next forward call and how many of their tokens, under a token budget and a
// limit on running sequences, with KV-cache blocks allocated as positions grow
// and preemption by recomputation when they run out. It knows tokens and
// blocks only; sampling and text are the engine's (engine/engine.h).
//
// A sequence is its tokens (prompt, then every generated token) and how many
// of them are in the KV cache (num_computed). Each step schedules, per
// sequence, tokens [num_computed, num_computed + n): a prompt chunk, a whole
// prompt, or the one token of a decode. When a step brings num_computed to
// tokens.size(), the sequence's logits row is sampled and the engine appends
// the new token. Single-threaded: the engine calls it from step() only.
//
// With prefix caching (SchedulerConfig::enable_prefix_caching; vLLM v1's
// automatic prefix caching) every block that becomes full is registered in the
// allocator's cache under its content (engine/block_allocator.h), and a
// sequence admitted with nothing computed starts from the longest run of cached
// blocks equal to its first tokens: it shares them (no copy, no recompute) and
// computes only the rest. Blocks are freed tail first, and stay cached until
// their space is needed, so a preempted sequence finds its own blocks again.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "engine/block_allocator.h"

namespace fp8lm::engine {

using RequestId = uint64_t;

struct SchedulerConfig {
  int64_t max_num_batched_tokens = 2048;  // tokens per forward call; at least max_num_seqs
  int64_t max_num_seqs = 256;             // sequences running at once
  bool enable_prefix_caching = false;     // share cached full blocks of equal prefixes
  // The engine's (engine/engine.h): schedule step N+1 and handle step N's output while the
  // device runs, rather than in the gaps between steps (vLLM's async scheduling).
  bool async_scheduling = true;

  // Throws fp8lm::Error naming a bad value.
  void validate() const;
};

struct Sequence {
  RequestId id = 0;
  std::vector<int32_t> tokens;        // prompt, then the generated tokens
  int64_t num_computed = 0;           // tokens[0, num_computed) are in the KV cache
  std::vector<int64_t> block_table;   // blocks for positions [0, num_computed (+ scheduled))
  int64_t num_preemptions = 0;
  // Speculative decoding: the last num_draft tokens are drafts, not yet the sequence's own.
  int64_t num_draft = 0;

  // Prefix caching only (the scheduler's bookkeeping):
  std::vector<BlockHash> block_hashes;     // hash_block chain of each full block of tokens, grown as they fill
  std::vector<CachedBlock> cached_blocks;  // blocks 0, 1, …: the cache entry holding that prefix
  int64_t num_cached_tokens = 0;           // tokens found cached at its first admission
  bool admitted = false;                   // admitted at least once
};

struct ScheduledSequence {
  Sequence* seq = nullptr;
  int64_t num_tokens = 0;  // tokens[seq->num_computed, + num_tokens) run this step
  // The chunk reaches the end of the sequence's tokens: its logits are sampled (with drafts, the
  // logits of every position: the verify step's).
  bool samples() const { return seq->num_computed + num_tokens == int64_t(seq->tokens.size()); }
};

class Scheduler {
 public:
  Scheduler(BlockAllocator& blocks, int block_size, SchedulerConfig config);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  const SchedulerConfig& config() const { return config_; }

  // Queues `seq` (owned by the caller until remove()) at the back of the waiting queue.
  void add(Sequence* seq);

  // The next step's batch: running decodes first (one token each, oldest
  // first), then the running sequences' unfinished prompt chunks, then waiting
  // sequences admitted in order while the budget, max_num_seqs and free blocks
  // allow. Blocks for every scheduled token are allocated here; when the cache
  // is full the most recently admitted running sequence is preempted (its
  // blocks freed, num_computed reset to 0, back to the front of the waiting
  // queue), and no sequence is admitted in a step that preempted. With prefix
  // caching an admitted sequence first shares its cached prefix blocks, and
  // only its tokens after them are scheduled. Empty when nothing can run (no
  // sequences).
  std::vector<ScheduledSequence> schedule();

  // After the forward call: the scheduled tokens are in the cache; with
  // prefix caching, the blocks they filled are registered for sharing.
  void commit(const std::vector<ScheduledSequence>& batch);

  // After a verify step's commit: the first `accepted` of seq's drafts become its tokens, the
  // rest are dropped, and num_computed ends after the kept ones (their K/V is the step's).
  void accept_drafts(Sequence& seq, int64_t accepted);

  // Finished or cancelled: frees its blocks and forgets it (running or waiting).
  void remove(Sequence* seq);

  // The KV blocks `positions` positions need, and whether the whole cache could hold them.
  int64_t blocks_for(int64_t positions) const;
  bool fits_in_cache(int64_t positions) const;

  int64_t num_running() const { return int64_t(running_.size()); }
  int64_t num_waiting() const { return int64_t(waiting_.size()); }
  int64_t num_preemptions() const { return preemptions_; }
  int64_t peak_running() const { return peak_running_; }
  int64_t blocks_used() const { return blocks_.num_total() - blocks_.num_free(); }
  int64_t blocks_total() const { return blocks_.num_total(); }
  bool empty() const { return running_.empty() && waiting_.empty(); }
  // Prefix caching: tokens of admitted sequences looked up, and those found
  // cached (a re-admission after preemption counts again).
  int64_t prefix_cache_queries() const { return prefix_queries_; }
  int64_t prefix_cache_hits() const { return prefix_hits_; }

  // Tests only: a weaker hash, to force collisions.
  using BlockHasher = BlockHash (*)(BlockHash parent, std::span<const int32_t> tokens);
  void set_block_hasher_for_testing(BlockHasher h) { hasher_ = h; }

 private:
  BlockAllocator& blocks_;
  int block_size_;
  SchedulerConfig config_;
  std::vector<Sequence*> running_;  // in admission order: back() is the most recent
  std::deque<Sequence*> waiting_;   // front() is admitted next
  int64_t preemptions_ = 0;
  int64_t peak_running_ = 0;
  int64_t prefix_queries_ = 0, prefix_hits_ = 0;
  BlockHasher hasher_ = hash_block;

  // Grows seq's block table to hold `positions`; false (nothing taken) when the cache is full.
  bool grow(Sequence& seq, int64_t positions);
  // Frees seq's blocks (tail first with prefix caching) and its cache entries.
  void release(Sequence& seq);
  // Drops seq's last `n` drafts (of num_draft).
  static void drop_drafts(Sequence& seq, int64_t n);

  // Prefix caching.
  std::span<const int32_t> block_tokens(const Sequence& seq, size_t block) const;
  void hash_blocks(Sequence& seq, int64_t num_blocks) const;
  int64_t share_cached_prefix(Sequence& seq);
  void cache_full_blocks(Sequence& seq);
  void drop_lost_entries(Sequence& seq);
};

}  // namespace fp8lm::engine
