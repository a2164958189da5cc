// The engine's KV block allocator (src/engine/block_allocator.h): a free list
// with all-or-nothing allocation and checked frees, against a simple model.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "engine/block_allocator.h"

namespace fp8lm::engine {
namespace {

template <typename F>
void expect_error(F&& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(BlockAllocator, BlocksForTokens) {
  EXPECT_EQ(blocks_for_tokens(0, 16), 0);
  EXPECT_EQ(blocks_for_tokens(1, 16), 1);
  EXPECT_EQ(blocks_for_tokens(16, 16), 1);
  EXPECT_EQ(blocks_for_tokens(17, 16), 2);
  EXPECT_EQ(blocks_for_tokens(4096, 16), 256);
  EXPECT_EQ(blocks_for_tokens(int64_t{1} << 62, 1), int64_t{1} << 62);
  expect_error([] { blocks_for_tokens(-1, 16); }, "tokens must be >= 0");
  expect_error([] { blocks_for_tokens(5, 0); }, "block_size must be > 0");
}

TEST(BlockAllocator, AllocateAllOrNothing) {
  BlockAllocator a(10);
  EXPECT_EQ(a.num_total(), 10);
  EXPECT_EQ(a.num_free(), 10);
  const auto first = a.allocate(4);
  ASSERT_TRUE(first);
  EXPECT_EQ(*first, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(a.num_free(), 6);
  EXPECT_FALSE(a.allocate(7));
  EXPECT_EQ(a.num_free(), 6);  // nothing taken
  const auto empty = a.allocate(0);
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->empty());
  const auto rest = a.allocate(6);
  ASSERT_TRUE(rest);
  EXPECT_EQ(a.num_free(), 0);
  EXPECT_FALSE(a.allocate(1));
  expect_error([&] { (void)a.allocate(-1); }, "cannot allocate -1 blocks");

  a.free(std::vector<int64_t>{2, 0});
  EXPECT_EQ(a.num_free(), 2);
  const auto again = a.allocate(2);
  ASSERT_TRUE(again);
  EXPECT_EQ(*again, (std::vector<int64_t>{0, 2}));  // last freed first

  BlockAllocator none(0);
  EXPECT_EQ(none.num_free(), 0);
  EXPECT_FALSE(none.allocate(1));
  expect_error([] { BlockAllocator(-3); }, "num_blocks must be >= 0");
}

TEST(BlockAllocator, BadFreesAreErrorsAndFreeNothing) {
  BlockAllocator a(6);
  const auto blocks = a.allocate(3);  // 0 1 2
  ASSERT_TRUE(blocks);
  expect_error([&] { a.free(std::vector<int64_t>{4}); }, "double free of block 4");
  expect_error([&] { a.free(std::vector<int64_t>{6}); }, "block 6 out of range [0, 6)");
  expect_error([&] { a.free(std::vector<int64_t>{-1}); }, "block -1 out of range");
  expect_error([&] { a.free(std::vector<int64_t>{1, 1}); }, "block 1 listed twice");
  expect_error([&] { a.free(std::vector<int64_t>{0, 1, 5}); }, "double free of block 5");
  EXPECT_EQ(a.num_free(), 3);  // none of those calls freed anything
  a.free(*blocks);
  EXPECT_EQ(a.num_free(), 6);
  expect_error([&] { a.free(std::vector<int64_t>{0}); }, "double free of block 0");
  EXPECT_EQ(a.num_free(), 6);
}

TEST(BlockAllocator, RandomAgainstModel) {
  constexpr int64_t kBlocks = 50;
  BlockAllocator a(kBlocks);
  std::set<int64_t> used;
  std::vector<std::vector<int64_t>> owners;
  std::mt19937 gen(1);
  for (int step = 0; step < 5000; ++step) {
    if (gen() % 2 == 0 || owners.empty()) {
      const int64_t n = int64_t(gen() % 8);
      const auto got = a.allocate(n);
      ASSERT_EQ(got.has_value(), n <= kBlocks - int64_t(used.size()));
      if (!got) continue;
      ASSERT_EQ(int64_t(got->size()), n);
      for (int64_t b : *got) {
        ASSERT_TRUE(b >= 0 && b < kBlocks);
        ASSERT_TRUE(used.insert(b).second) << "block " << b << " handed out twice";
      }
      owners.push_back(*got);
    } else {
      const size_t i = gen() % owners.size();
      a.free(owners[i]);
      for (int64_t b : owners[i]) used.erase(b);
      owners.erase(owners.begin() + std::ptrdiff_t(i));
    }
    ASSERT_EQ(a.num_free(), kBlocks - int64_t(used.size()));
  }
}

}  // namespace
}  // namespace fp8lm::engine
