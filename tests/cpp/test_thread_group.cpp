// The CPU ranks' collectives (src/backend/cpu/thread_group.h), each rank a thread:
// * all_reduce_sum gives every rank the rank-ordered float32 sum, computed here serially, byte for
//   byte the same on every rank, call after call (a group is reused as a model reuses it);
// * all_gather_cols lays the ranks' column blocks side by side, blocks of different widths too;
// * a rank whose part does not match the others' makes every rank throw, naming it (no hang).
#include <gtest/gtest.h>

#include <cstring>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/thread_group.h"
#include "common/error.h"

namespace fp8lm::cpu {
namespace {

template <typename Body>
void run_ranks(int size, Body body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) threads.emplace_back([&, r] { body(r); });
  for (std::thread& t : threads) t.join();
}

TEST(ThreadGroup, AllReduceIsTheRankOrderedSumOnEveryRank) {
  for (const int size : {1, 2, 3, 4, 8}) {
    SCOPED_TRACE(size);
    ThreadGroup g(size);
    for (int call = 0; call < 5; ++call) {
      const size_t n = size_t(1 + call * 1000);
      std::vector<std::vector<float>> data(static_cast<size_t>(size), std::vector<float>(n));
      std::mt19937 rng(uint32_t(call * 17 + size));
      std::normal_distribution<float> normal(0.0f, 1e3f);
      for (auto& d : data)
        for (float& v : d) v = normal(rng);
      std::vector<float> want(n);
      for (size_t i = 0; i < n; ++i) {
        float s = data[0][i];
        for (int r = 1; r < size; ++r) s += data[size_t(r)][i];
        want[i] = s;
      }
      run_ranks(size, [&](int r) { g.all_reduce_sum(r, data[size_t(r)]); });
      for (int r = 0; r < size; ++r) EXPECT_EQ(std::memcmp(data[size_t(r)].data(), want.data(), n * 4), 0) << r;
    }
  }
}

TEST(ThreadGroup, AllGatherPutsColumnBlocksSideBySide) {
  const int size = 3;
  const int64_t rows = 5, cols[size] = {4, 4, 2};
  ThreadGroup g(size);
  std::vector<std::vector<float>> local(size), out(size, std::vector<float>(size_t(rows * 10)));
  for (int r = 0; r < size; ++r)
    for (int64_t i = 0; i < rows * cols[r]; ++i) local[size_t(r)].push_back(float(r * 1000 + i));
  run_ranks(size, [&](int r) { g.all_gather_cols(r, local[size_t(r)], rows, cols[r], out[size_t(r)]); });
  for (int r = 0; r < size; ++r)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t c = 0; c < 10; ++c) {
        const int src = c < 4 ? 0 : c < 8 ? 1 : 2;
        const int64_t at = c - (src == 0 ? 0 : src == 1 ? 4 : 8);
        EXPECT_EQ(out[size_t(r)][size_t(i * 10 + c)], float(src * 1000 + i * cols[src] + at));
      }
}

TEST(ThreadGroup, MismatchesThrowOnEveryRank) {
  ThreadGroup g(2);
  std::vector<std::string> errors(2);
  std::vector<std::vector<float>> data = {std::vector<float>(3), std::vector<float>(4)};
  run_ranks(2, [&](int r) {
    try {
      g.all_reduce_sum(r, data[size_t(r)]);
    } catch (const Error& e) {
      errors[size_t(r)] = e.what();
    }
  });
  EXPECT_NE(errors[0].find("all_reduce_sum of 3 values on rank 0, 3 on rank 0"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("all_reduce_sum of 4 values on rank 1, 3 on rank 0"), std::string::npos) << errors[1];
  EXPECT_THROW(g.all_reduce_sum(2, data[0]), Error);
  EXPECT_THROW(ThreadGroup(0), Error);
}

// A rank that never comes (it failed): abort() from elsewhere wakes the ranks that wait for it,
// and every later collective throws at once, with the reason given.
TEST(ThreadGroup, AbortWakesTheWaitingRanks) {
  ThreadGroup g(3);
  std::vector<std::string> errors(2);
  std::vector<std::vector<float>> data(2, std::vector<float>(8, 1.0f));
  std::vector<std::thread> waiting;
  for (int r = 0; r < 2; ++r)
    waiting.emplace_back([&, r] {
      try {
        g.all_reduce_sum(r, data[size_t(r)]);
      } catch (const Error& e) {
        errors[size_t(r)] = e.what();
      }
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // both are waiting for rank 2 by now
  g.abort("rank 2 failed: out of memory");
  for (std::thread& t : waiting) t.join();
  for (const std::string& e : errors) EXPECT_NE(e.find("rank 2 failed: out of memory"), std::string::npos) << e;
  std::vector<float> more(8);
  EXPECT_THROW(g.all_reduce_sum(2, more), Error);
  EXPECT_THROW(g.all_gather_cols(0, more, 1, 8, more), Error);
}

}  // namespace
}  // namespace fp8lm::cpu
