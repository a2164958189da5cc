#include "engine/block_allocator.h"

#include <algorithm>
#include <string>

#include "common/error.h"

namespace fp8lm::engine {
namespace {

// splitmix64's finalizer: every input bit affects every output bit.
uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::string block_name(int64_t b) { return "block " + std::to_string(b); }

}  // namespace

int64_t blocks_for_tokens(int64_t tokens, int block_size) {
  if (tokens < 0) throw Error("blocks_for_tokens: tokens must be >= 0, got " + std::to_string(tokens));
  if (block_size <= 0) throw Error("blocks_for_tokens: block_size must be > 0, got " + std::to_string(block_size));
  return tokens / block_size + (tokens % block_size != 0 ? 1 : 0);
}

BlockHash hash_block(BlockHash parent, std::span<const int32_t> tokens) {
  // Mixing after every token makes the hash depend on the tokens' order; the
  // length is mixed in so that blocks of different sizes never chain alike.
  uint64_t h = mix(parent ^ uint64_t(tokens.size()));
  for (const int32_t t : tokens) h = mix(h ^ (uint64_t(uint32_t(t)) + 0x9e3779b97f4a7c15ULL));
  return h;
}

BlockAllocator::BlockAllocator(int64_t num_blocks) {
  if (num_blocks < 0) throw Error("block allocator: num_blocks must be >= 0, got " + std::to_string(num_blocks));
  blocks_.resize(size_t(num_blocks));
  free_list_.reserve(size_t(num_blocks));
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_list_.push_back(b);
}

void BlockAllocator::check_range(int64_t block, const char* what) const {
  if (block < 0 || block >= num_total())
    throw Error(std::string("block allocator: ") + what + ": " + block_name(block) + " out of range [0, " +
                std::to_string(num_total()) + ")");
}

int64_t BlockAllocator::ref_count(int64_t block) const {
  check_range(block, "ref_count");
  return blocks_[size_t(block)].refs;
}

void BlockAllocator::drop_cache_entry(int64_t block) {
  Block& b = blocks_[size_t(block)];
  by_hash_.erase(b.hash);
  b.content = kRootContent;
  b.parent = kRoot;
  b.hash = 0;
  b.tokens.clear();
}

std::optional<std::vector<int64_t>> BlockAllocator::allocate(int64_t n) {
  if (n < 0) throw Error("block allocator: cannot allocate " + std::to_string(n) + " blocks");
  if (n > num_free()) return std::nullopt;
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int64_t& b : out) {
    if (!free_list_.empty()) {
      b = free_list_.back();
      free_list_.pop_back();
    } else {  // evict the least recently used cached block: its KV will be overwritten
      b = lru_.front();
      lru_.pop_front();
      drop_cache_entry(b);
    }
    blocks_[size_t(b)].refs = 1;
  }
  return out;
}

void BlockAllocator::free(std::span<const int64_t> blocks) {
  // Check everything first: all or nothing. A block seen in this call has its
  // count negated until the checks are done.
  size_t checked = 0;
  auto unmark = [&] {
    for (size_t i = 0; i < checked; ++i) blocks_[size_t(blocks[i])].refs *= -1;
  };
  for (; checked < blocks.size(); ++checked) {
    const int64_t b = blocks[checked];
    std::string problem;
    if (b < 0 || b >= num_total()) problem = block_name(b) + " out of range [0, " + std::to_string(num_total()) + ")";
    else if (blocks_[size_t(b)].refs < 0) problem = block_name(b) + " listed twice";
    else if (blocks_[size_t(b)].refs == 0) problem = "double free of " + block_name(b) + " (not allocated)";
    if (!problem.empty()) {
      unmark();
      throw Error("block allocator: " + problem);
    }
    blocks_[size_t(b)].refs *= -1;
  }
  unmark();
  for (const int64_t b : blocks) {
    Block& blk = blocks_[size_t(b)];
    if (--blk.refs > 0) continue;
    if (blk.content != kRootContent) blk.lru = lru_.insert(lru_.end(), b);
    else free_list_.push_back(b);
  }
}

std::optional<CachedBlock> BlockAllocator::find(BlockHash hash, const CachedBlock& parent,
                                                std::span<const int32_t> tokens) const {
  const auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  const Block& b = blocks_[size_t(it->second)];
  // The exact check: the same prefix before it and the same tokens, whatever the hash says.
  if (b.parent.content != parent.content || !std::ranges::equal(b.tokens, tokens)) return std::nullopt;
  return CachedBlock{it->second, b.content};
}

bool BlockAllocator::holds(const CachedBlock& c) const {
  return c.block >= 0 && c.block < num_total() && c.content != kRootContent &&
         blocks_[size_t(c.block)].content == c.content;
}

void BlockAllocator::share(const CachedBlock& c) {
  if (!holds(c))
    throw Error("block allocator: " + block_name(c.block) + " is not cached as prefix " + std::to_string(c.content));
  Block& b = blocks_[size_t(c.block)];
  if (b.refs == 0) lru_.erase(b.lru);
  ++b.refs;
}

// A cached block whose parent is gone can never be found again (lookups walk
// from the first block), yet it would keep its hash from the same content
// cached again after a live parent — as when two equal prompts ran together,
// the first one's blocks were evicted, and the second one's continuation
// stayed. It is forgotten here.
std::optional<CachedBlock> BlockAllocator::cache(int64_t block, BlockHash hash, const CachedBlock& parent,
                                                 std::span<const int32_t> tokens) {
  check_range(block, "cache");
  Block& b = blocks_[size_t(block)];
  if (b.refs == 0) throw Error("block allocator: cannot cache " + block_name(block) + ": not allocated");
  if (b.content != kRootContent) throw Error("block allocator: " + block_name(block) + " is cached already");
  if (const auto it = by_hash_.find(hash); it != by_hash_.end()) {
    const CachedBlock& occupant_parent = blocks_[size_t(it->second)].parent;
    if (occupant_parent.content == kRootContent || holds(occupant_parent)) return std::nullopt;
    forget(it->second);
  }
  by_hash_.emplace(hash, block);
  b.content = next_content_++;
  b.parent = parent;
  b.hash = hash;
  b.tokens.assign(tokens.begin(), tokens.end());
  return CachedBlock{block, b.content};
}

void BlockAllocator::forget(int64_t block) {
  Block& b = blocks_[size_t(block)];
  if (b.refs == 0) {
    lru_.erase(b.lru);
    free_list_.push_back(block);
  }
  drop_cache_entry(block);
}

void BlockAllocator::uncache(int64_t block) {
  check_range(block, "uncache");
  const Block& b = blocks_[size_t(block)];
  if (b.refs == 0 || b.content == kRootContent)
    throw Error("block allocator: cannot uncache " + block_name(block) + ": not an allocated cached block");
  drop_cache_entry(block);
}

void BlockAllocator::reset_cache() {
  for (const int64_t b : lru_) {
    drop_cache_entry(b);
    free_list_.push_back(b);
  }
  lru_.clear();
  for (const auto& [hash, b] : std::unordered_map<BlockHash, int64_t>(by_hash_)) drop_cache_entry(b);
}

}  // namespace fp8lm::engine
