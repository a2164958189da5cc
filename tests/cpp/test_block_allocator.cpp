// The engine's KV block allocator (src/engine/block_allocator.h): a free list
// with all-or-nothing allocation and checked frees, against a simple model;
// and its prefix cache: reference counts, LRU eviction of cached blocks, and
// lookups that an equal hash alone can never satisfy.
#include <gtest/gtest.h>

#include <algorithm>
#include <initializer_list>
#include <optional>
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


// ---- prefix caching ---------------------------------------------------------------

std::vector<int32_t> toks(std::initializer_list<int32_t> t) { return t; }

TEST(BlockAllocatorPrefixCache, HashChainsParentAndTokens) {
  const BlockHash a = hash_block(kRootHash, toks({1, 2, 3, 4}));
  EXPECT_EQ(a, hash_block(kRootHash, toks({1, 2, 3, 4})));      // a function of its inputs only
  EXPECT_NE(a, hash_block(kRootHash, toks({2, 1, 3, 4})));      // order matters
  EXPECT_NE(a, hash_block(a, toks({1, 2, 3, 4})));              // the parent matters
  EXPECT_NE(a, hash_block(kRootHash, toks({1, 2, 3})));         // so does the length
  EXPECT_NE(hash_block(kRootHash, toks({-1})), hash_block(kRootHash, toks({0})));
}

TEST(BlockAllocatorPrefixCache, ReferenceCountsAndCachedBlocksCountAsFree) {
  BlockAllocator a(4);
  const auto got = a.allocate(2);  // 0 1
  ASSERT_TRUE(got);
  const auto first = a.cache(0, 11, kRoot, toks({5, 6}));
  ASSERT_TRUE(first);
  EXPECT_EQ(first->block, 0);
  EXPECT_EQ(a.num_cached(), 1);
  EXPECT_EQ(a.find(11, kRoot, toks({5, 6})), first);

  a.share(*first);  // a second sequence shares block 0
  EXPECT_EQ(a.ref_count(0), 2);
  a.free(std::vector<int64_t>{0, 1});
  EXPECT_EQ(a.ref_count(0), 1);
  EXPECT_EQ(a.ref_count(1), 0);
  EXPECT_EQ(a.num_free(), 3);
  a.free(std::vector<int64_t>{0});
  EXPECT_EQ(a.ref_count(0), 0);
  EXPECT_EQ(a.num_free(), 4);    // cached but unused: free for allocation
  EXPECT_EQ(a.num_cached(), 1);  // and still found
  EXPECT_EQ(a.find(11, kRoot, toks({5, 6})), first);
  expect_error([&] { a.free(std::vector<int64_t>{0}); }, "double free of block 0");

  a.share(*first);  // a hit on an unused cached block takes it out of the evictable set
  EXPECT_EQ(a.ref_count(0), 1);
  EXPECT_EQ(a.num_free(), 3);
  const auto rest = a.allocate(3);
  ASSERT_TRUE(rest);
  EXPECT_EQ(std::count(rest->begin(), rest->end(), 0), 0);
  EXPECT_FALSE(a.allocate(1));
  EXPECT_EQ(a.find(11, kRoot, toks({5, 6})), first);  // not evicted: in use
}

TEST(BlockAllocatorPrefixCache, FreeBlocksFirstThenLeastRecentlyUsed) {
  BlockAllocator a(5);
  ASSERT_TRUE(a.allocate(5));
  std::vector<CachedBlock> c;
  for (int64_t b = 0; b < 4; ++b) {
    c.push_back(*a.cache(b, BlockHash(100 + b), b == 0 ? kRoot : c.back(), toks({int32_t(b)})));
  }
  // A sequence frees its blocks tail first: 3 is evicted first, 0 last.
  a.free(std::vector<int64_t>{3, 2, 1, 0, 4});
  EXPECT_EQ(a.num_free(), 5);
  // Block 4 was never cached: it goes first, and every cached block stays cached.
  EXPECT_EQ(*a.allocate(1), std::vector<int64_t>{4});
  EXPECT_EQ(a.num_cached(), 4);
  // Block 1 is used again (a hit) and given back: now the most recently used.
  a.share(c[1]);
  a.free(std::vector<int64_t>{1});
  EXPECT_EQ(*a.allocate(1), std::vector<int64_t>{3});
  EXPECT_FALSE(a.find(103, c[2], toks({3})));  // evicted: its prefix is forgotten
  EXPECT_FALSE(a.holds(c[3]));
  EXPECT_TRUE(a.holds(c[2]));
  EXPECT_EQ(*a.allocate(2), (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(a.num_cached(), 1);
  EXPECT_EQ(*a.allocate(1), std::vector<int64_t>{1});
  EXPECT_EQ(a.num_cached(), 0);
  EXPECT_EQ(a.num_free(), 0);
  EXPECT_FALSE(a.allocate(1));
}

TEST(BlockAllocatorPrefixCache, AnEqualHashIsNeverEnough) {
  BlockAllocator a(4);
  ASSERT_TRUE(a.allocate(4));
  const CachedBlock x = *a.cache(0, 42, kRoot, toks({1, 2}));
  const CachedBlock y = *a.cache(1, 43, x, toks({3, 4}));
  a.free(std::vector<int64_t>{1, 0});
  // Same hash, other tokens or another prefix before them: not found.
  EXPECT_FALSE(a.find(42, kRoot, toks({1, 3})));
  EXPECT_FALSE(a.find(42, kRoot, toks({1, 2, 3})));
  EXPECT_FALSE(a.find(42, y, toks({1, 2})));
  EXPECT_FALSE(a.find(43, kRoot, toks({3, 4})));
  EXPECT_EQ(a.find(43, x, toks({3, 4})), y);
  // One block per hash: a colliding block (or a duplicate) stays uncached.
  EXPECT_FALSE(a.cache(2, 42, kRoot, toks({9, 9})));
  EXPECT_FALSE(a.cache(3, 42, kRoot, toks({1, 2})));
  EXPECT_EQ(a.num_cached(), 2);
  EXPECT_EQ(a.find(42, kRoot, toks({1, 2})), x);

  // Once evicted, the hash is free for the same tokens again, as a new prefix identity.
  a.free(std::vector<int64_t>{2, 3});
  EXPECT_EQ(*a.allocate(2), (std::vector<int64_t>{3, 2}));  // the uncached ones first
  EXPECT_EQ(*a.allocate(1), std::vector<int64_t>{1});       // then y: freed before x (tail first)
  EXPECT_EQ(*a.allocate(1), std::vector<int64_t>{0});
  EXPECT_EQ(a.num_cached(), 0);
  const CachedBlock x2 = *a.cache(0, 42, kRoot, toks({1, 2}));
  EXPECT_NE(x2.content, x.content);
  EXPECT_FALSE(a.holds(x));
  EXPECT_EQ(a.find(42, kRoot, toks({1, 2})), x2);
}

TEST(BlockAllocatorPrefixCache, AStaleParentNeverMatches) {
  BlockAllocator a(3);
  ASSERT_TRUE(a.allocate(3));
  const CachedBlock p = *a.cache(0, 1, kRoot, toks({7}));
  const CachedBlock child = *a.cache(1, 2, p, toks({8}));
  a.free(std::vector<int64_t>{0});  // the parent is given back before its child
  a.free(std::vector<int64_t>{1});
  EXPECT_EQ(*a.allocate(1), std::vector<int64_t>{0});  // the parent is evicted; the child stays cached
  const CachedBlock p2 = *a.cache(0, 1, kRoot, toks({7}));  // same tokens, same hash, same block id
  EXPECT_NE(p2.content, p.content);
  EXPECT_FALSE(a.find(2, p2, toks({8})));  // the child belongs to the old prefix only
  EXPECT_EQ(a.find(2, p, toks({8})), child);
  // Nothing can reach the old child any more: the same tokens after the new
  // parent take its hash, and its block becomes a plain free one.
  const CachedBlock child2 = *a.cache(2, 2, p2, toks({8}));
  EXPECT_FALSE(a.holds(child));
  EXPECT_EQ(a.find(2, p2, toks({8})), child2);
  EXPECT_EQ(a.num_cached(), 2);
  EXPECT_EQ(a.num_free(), 1);
  EXPECT_EQ(*a.allocate(1), std::vector<int64_t>{1});
  // While its parent lives, a block keeps its hash.
  a.free(std::vector<int64_t>{2});
  EXPECT_FALSE(a.cache(1, 2, p2, toks({9})));
}

TEST(BlockAllocatorPrefixCache, MisuseIsAnErrorAndChangesNothing) {
  BlockAllocator a(3);
  ASSERT_TRUE(a.allocate(2));  // 0 1
  const CachedBlock c = *a.cache(0, 5, kRoot, toks({1}));
  a.share(c);
  expect_error([&] { a.free(std::vector<int64_t>{0, 0}); }, "block 0 listed twice");
  expect_error([&] { a.free(std::vector<int64_t>{0, 2}); }, "double free of block 2");
  EXPECT_EQ(a.ref_count(0), 2);  // nothing freed
  expect_error([&] { (void)a.cache(2, 6, kRoot, toks({1})); }, "not allocated");
  expect_error([&] { (void)a.cache(0, 6, kRoot, toks({1})); }, "cached already");
  expect_error([&] { (void)a.cache(3, 6, kRoot, toks({1})); }, "block 3 out of range [0, 3)");
  expect_error([&] { a.share({1, c.content}); }, "block 1 is not cached");
  expect_error([&] { a.share({0, c.content + 1}); }, "not cached as prefix");
  expect_error([&] { a.share({-1, c.content}); }, "not cached");
  expect_error([&] { a.uncache(1); }, "cannot uncache block 1");
  expect_error([&] { (void)a.ref_count(7); }, "out of range");
  EXPECT_EQ(a.ref_count(0), 2);
  EXPECT_EQ(a.ref_count(1), 1);
  EXPECT_EQ(a.num_free(), 1);
  EXPECT_EQ(a.num_cached(), 1);

  a.uncache(0);  // held, no longer findable; freed, it is a plain free block
  EXPECT_FALSE(a.find(5, kRoot, toks({1})));
  a.free(std::vector<int64_t>{0});
  a.free(std::vector<int64_t>{0, 1});
  EXPECT_EQ(a.num_free(), 3);
  EXPECT_EQ(a.num_cached(), 0);
}

TEST(BlockAllocatorPrefixCache, ResetForgetsEveryPrefix) {
  BlockAllocator a(3);
  ASSERT_TRUE(a.allocate(3));
  const CachedBlock c0 = *a.cache(0, 1, kRoot, toks({1}));
  const CachedBlock c1 = *a.cache(1, 2, c0, toks({2}));
  a.free(std::vector<int64_t>{1});
  a.reset_cache();
  EXPECT_EQ(a.num_cached(), 0);
  EXPECT_FALSE(a.holds(c0));
  EXPECT_FALSE(a.holds(c1));
  EXPECT_EQ(a.ref_count(0), 1);  // still in use
  EXPECT_EQ(a.num_free(), 1);
  a.free(std::vector<int64_t>{0, 2});
  EXPECT_EQ(a.num_free(), 3);
  EXPECT_EQ(*a.allocate(3), (std::vector<int64_t>{2, 0, 1}));  // plain free blocks, last freed first
}

// Random allocate / share / free against a model of reference counts: a block
// is handed out only with no reference, cached content is found exactly while
// it is cached, and num_free() is the number of unreferenced blocks.
TEST(BlockAllocatorPrefixCache, RandomAgainstModel) {
  constexpr int64_t kBlocks = 24;
  BlockAllocator a(kBlocks);
  std::vector<int64_t> refs(kBlocks, 0);
  std::vector<std::optional<CachedBlock>> cached(kBlocks);  // what was cached in each block, as far as we know
  std::vector<int32_t> content_of(kBlocks, -1);              // its one token
  std::vector<std::vector<int64_t>> owners;
  std::mt19937 gen(7);
  for (int step = 0; step < 20000; ++step) {
    const auto op = gen() % 3;
    if (op == 0 || owners.empty()) {
      const int64_t n = int64_t(gen() % 4);
      int64_t available = 0;
      for (const int64_t r : refs) available += r == 0;
      const auto got = a.allocate(n);
      ASSERT_EQ(got.has_value(), n <= available);
      if (!got) continue;
      for (const int64_t b : *got) {
        ASSERT_EQ(refs[size_t(b)], 0) << "block " << b << " handed out while referenced";
        refs[size_t(b)] = 1;
        cached[size_t(b)].reset();  // its content is about to change
        // Cache it under a small hash space: collisions are frequent.
        const auto token = int32_t(gen() % 6);
        if (auto c = a.cache(b, BlockHash(token % 3), kRoot, toks({token}))) {
          cached[size_t(b)] = c;
          content_of[size_t(b)] = token;
        }
      }
      owners.push_back(*got);
    } else if (op == 1) {  // a hit: share whatever is cached for a random token
      const auto token = int32_t(gen() % 6);
      const auto hit = a.find(BlockHash(token % 3), kRoot, toks({token}));
      if (!hit) continue;
      ASSERT_TRUE(cached[size_t(hit->block)] == hit) << "found a block that was not cached so";
      ASSERT_EQ(content_of[size_t(hit->block)], token) << "found a block holding another token";
      a.share(*hit);
      ++refs[size_t(hit->block)];
      owners.push_back({hit->block});
    } else {
      const size_t i = gen() % owners.size();
      a.free(owners[i]);
      for (const int64_t b : owners[i]) --refs[size_t(b)];
      owners.erase(owners.begin() + std::ptrdiff_t(i));
    }
    int64_t unreferenced = 0;
    for (const int64_t r : refs) unreferenced += r == 0;
    ASSERT_EQ(a.num_free(), unreferenced);
    for (int64_t b = 0; b < kBlocks; ++b) ASSERT_EQ(a.ref_count(b), refs[size_t(b)]);
  }
}

}  // namespace
}  // namespace fp8lm::engine
