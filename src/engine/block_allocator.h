// The paged KV cache's block bookkeeping (backend/cpu/kv_cache.h): which of the
// cache's blocks are free. A free list; allocation is all or nothing, and
// freeing a block that is not allocated is an error, never silently ignored.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace fp8lm::engine {

// Blocks needed to hold `tokens` positions, block_size each: ceil(tokens / block_size).
// tokens ≥ 0 and block_size > 0, fp8lm::Error otherwise.
int64_t blocks_for_tokens(int64_t tokens, int block_size);

class BlockAllocator {
 public:
  // Blocks 0 .. num_blocks − 1, all free. num_blocks ≥ 0 (fp8lm::Error otherwise).
  explicit BlockAllocator(int64_t num_blocks);

  int64_t num_free() const { return int64_t(free_list_.size()); }
  int64_t num_total() const { return int64_t(allocated_.size()); }

  // n distinct free block ids, or nullopt (and nothing taken) when fewer than n
  // are free. A fresh allocator hands out 0, 1, 2, … in order; freed blocks are
  // reused last-freed first. n < 0 → fp8lm::Error.
  std::optional<std::vector<int64_t>> allocate(int64_t n);

  // Returns blocks to the free list. An id out of range, one that is not
  // allocated, or one listed twice → fp8lm::Error, and nothing is freed.
  void free(std::span<const int64_t> blocks);

 private:
  std::vector<int64_t> free_list_;  // a stack: back() is handed out next
  std::vector<uint8_t> allocated_;  // per block: 1 while allocated
};

}  // namespace fp8lm::engine
