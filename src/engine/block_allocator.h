// The paged KV cache's block bookkeeping (backend/cpu/kv_cache.h): which of the
// cache's blocks are in use, by how many sequences, and — for automatic prefix
// caching — which full blocks hold a known token prefix.
//
// Every block is in one of three states:
//   in use     reference count > 0 (a sequence's block table holds it);
//   free       count 0, content unknown: handed out first;
//   cached     count 0 but registered as holding the KV of a known prefix, so a
//              later sequence with that prefix can share it instead of
//              recomputing it. Cached blocks are evicted least recently used
//              first when no free block is left, and count as free.
// Without cache()/share() calls (prefix caching off) no block is ever cached
// and the allocator is a plain free list: allocation is all or nothing, freed
// blocks are reused last-freed first, and freeing a block that is not in use is
// an error, never silently ignored.
//
// A cached block's content is identified exactly, never by its hash alone: by
// the identity of the prefix before it (its parent's ContentId, unique and
// never reused, so an evicted parent can never be confused with whatever later
// occupies its block) and its own token ids. By induction from the first block
// (parent kRoot), a match means the whole token prefix is equal, so a hash
// collision can cost a cache hit but never return another prefix's KV.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace fp8lm::engine {

// Blocks needed to hold `tokens` positions, block_size each: ceil(tokens / block_size).
// tokens ≥ 0 and block_size > 0, fp8lm::Error otherwise.
int64_t blocks_for_tokens(int64_t tokens, int block_size);

// A full block's content hash: `parent` (the previous block's hash, or
// kRootHash for a sequence's first block) chained with the block's token ids.
using BlockHash = uint64_t;
inline constexpr BlockHash kRootHash = 0x6670386c6d2d6b76ULL;
BlockHash hash_block(BlockHash parent, std::span<const int32_t> tokens);

// One registration of a block as holding a prefix; never reused.
using ContentId = uint64_t;
inline constexpr ContentId kRootContent = 0;  // the empty prefix, parent of every first block

// A cached prefix block: which block holds it, under which registration.
struct CachedBlock {
  int64_t block = -1;
  ContentId content = kRootContent;
  bool operator==(const CachedBlock&) const = default;
};
inline constexpr CachedBlock kRoot{};  // the empty prefix before a sequence's first block

class BlockAllocator {
 public:
  // Blocks 0 .. num_blocks − 1, all free. num_blocks ≥ 0 (fp8lm::Error otherwise).
  explicit BlockAllocator(int64_t num_blocks);

  // Free and cached (evictable) blocks: what allocate() can hand out.
  int64_t num_free() const { return int64_t(free_list_.size() + lru_.size()); }
  int64_t num_total() const { return int64_t(blocks_.size()); }
  // Blocks registered as holding a prefix (in use or not).
  int64_t num_cached() const { return int64_t(by_hash_.size()); }
  int64_t ref_count(int64_t block) const;

  // n distinct blocks, each with one reference, or nullopt (and nothing taken)
  // when fewer than n are free or cached. Free blocks go first, last-freed
  // first (a fresh allocator hands out 0, 1, 2, … in order); then cached ones,
  // least recently used first, each forgetting its prefix. n < 0 → fp8lm::Error.
  std::optional<std::vector<int64_t>> allocate(int64_t n);

  // Drops one reference to each block, in order; a block whose count reaches 0
  // becomes free, or, when cached, the most recently used evictable block (so
  // of blocks freed together the first listed is evicted first). An id out of
  // range, one not in use, or one listed twice → fp8lm::Error, nothing freed.
  void free(std::span<const int64_t> blocks);

  // ---- prefix caching --------------------------------------------------------

  // The cached block holding exactly `tokens` after the prefix `parent`
  // (kRoot: at the start of a sequence), looked up by `hash`; nullopt when
  // none (or when the block found under `hash` holds something else).
  std::optional<CachedBlock> find(BlockHash hash, const CachedBlock& parent, std::span<const int32_t> tokens) const;

  // One more reference to a cached block (one find() returned); a block with
  // none leaves the evictable set. fp8lm::Error when `b` is not cached as
  // b.content (evicted or re-registered since): nothing taken.
  void share(const CachedBlock& b);

  // Registers `block` (in use, not cached) as holding `tokens` after `parent`,
  // under `hash`; its new registration, or nullopt when another block is
  // cached under `hash` (the same content or a collision: one block per hash).
  // A block cached there after a parent that is gone since (no lookup can
  // reach it) gives way. fp8lm::Error for a block out of range, not in use or
  // cached.
  std::optional<CachedBlock> cache(int64_t block, BlockHash hash, const CachedBlock& parent,
                                   std::span<const int32_t> tokens);

  // Forgets the prefix of `block` (in use, cached): fp8lm::Error otherwise.
  void uncache(int64_t block);

  // Whether b.block is still cached under registration b.content.
  bool holds(const CachedBlock& b) const;

  // Forgets every cached prefix; blocks not in use become free.
  void reset_cache();

 private:
  struct Block {
    int64_t refs = 0;
    ContentId content = kRootContent;  // kRootContent: not cached
    CachedBlock parent;
    BlockHash hash = 0;
    std::vector<int32_t> tokens;        // while cached
    std::list<int64_t>::iterator lru;   // while cached with refs == 0
  };

  std::vector<Block> blocks_;
  std::vector<int64_t> free_list_;                   // a stack: back() is handed out next
  std::list<int64_t> lru_;                           // cached, unused: front() is evicted next
  std::unordered_map<BlockHash, int64_t> by_hash_;   // every cached block
  ContentId next_content_ = kRootContent + 1;

  void check_range(int64_t block, const char* what) const;
  void drop_cache_entry(int64_t block);
  void forget(int64_t block);
};

}  // namespace fp8lm::engine
