#include "engine/block_allocator.h"

#include <string>

#include "common/error.h"

namespace fp8lm::engine {

int64_t blocks_for_tokens(int64_t tokens, int block_size) {
  if (tokens < 0) throw Error("blocks_for_tokens: tokens must be >= 0, got " + std::to_string(tokens));
  if (block_size <= 0) throw Error("blocks_for_tokens: block_size must be > 0, got " + std::to_string(block_size));
  return tokens / block_size + (tokens % block_size != 0 ? 1 : 0);
}

BlockAllocator::BlockAllocator(int64_t num_blocks) {
  if (num_blocks < 0) throw Error("block allocator: num_blocks must be >= 0, got " + std::to_string(num_blocks));
  allocated_.assign(size_t(num_blocks), 0);
  free_list_.reserve(size_t(num_blocks));
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_list_.push_back(b);
}

std::optional<std::vector<int64_t>> BlockAllocator::allocate(int64_t n) {
  if (n < 0) throw Error("block allocator: cannot allocate " + std::to_string(n) + " blocks");
  if (n > num_free()) return std::nullopt;
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int64_t& b : out) {
    b = free_list_.back();
    free_list_.pop_back();
    allocated_[size_t(b)] = 1;
  }
  return out;
}

void BlockAllocator::free(std::span<const int64_t> blocks) {
  // Check everything first: all or nothing. allocated_ marks 2 for "seen in this call".
  size_t checked = 0;
  auto undo = [&] {
    for (size_t i = 0; i < checked; ++i) allocated_[size_t(blocks[i])] = 1;
  };
  for (; checked < blocks.size(); ++checked) {
    const int64_t b = blocks[checked];
    std::string problem;
    if (b < 0 || b >= num_total()) {
      problem = "block " + std::to_string(b) + " out of range [0, " + std::to_string(num_total()) + ")";
    } else if (allocated_[size_t(b)] == 2) {
      problem = "block " + std::to_string(b) + " listed twice";
    } else if (allocated_[size_t(b)] == 0) {
      problem = "double free of block " + std::to_string(b) + " (not allocated)";
    }
    if (!problem.empty()) {
      undo();
      throw Error("block allocator: " + problem);
    }
    allocated_[size_t(b)] = 2;
  }
  for (const int64_t b : blocks) {
    allocated_[size_t(b)] = 0;
    free_list_.push_back(b);
  }
}

}  // namespace fp8lm::engine
