// The engine's driver of tensor-parallel ranks (engine/model_runner.h), on CPU ranks:
// * every rank runs each call on its own thread (rank 0 on the caller's), and the call returns
//   when all are done;
// * a rank that fails while the others wait for it in a collective stops the group: the waiting
//   ranks are woken (no hang), the call throws the failing rank's error, and every later call
//   throws saying the group stopped and why.
#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/cpu_rank_group.h"
#include "common/error.h"
#include "engine/model_runner.h"

namespace fp8lm::engine {
namespace {

TEST(ModelRunner, EveryRankRunsOnItsOwnThread) {
  ModelRunner runner(3, cpu::make_thread_rank_group(3, 1, KernelChoice::kAuto, false));
  std::vector<std::thread::id> ids(3);
  for (int call = 0; call < 3; ++call) {
    runner.on_every_rank([&](ModelRunner::Rank&, int r) { ids[size_t(r)] = std::this_thread::get_id(); });
    EXPECT_EQ(ids[0], std::this_thread::get_id());
    EXPECT_EQ(std::set<std::thread::id>(ids.begin(), ids.end()).size(), 3u);
  }
}

TEST(ModelRunner, AFailingRankStopsTheGroupInsteadOfHangingIt) {
  ModelRunner runner(2, cpu::make_thread_rank_group(2, 1, KernelChoice::kAuto, false));
  runner.on_every_rank([&](ModelRunner::Rank& k, int r) { k.ops = runner.group()->make_rank(r); });
  // Both ranks reduce once; then rank 1 fails while rank 0 waits in the second all-reduce.
  std::atomic<int> reduced{0};
  try {
    runner.on_every_rank([&](ModelRunner::Rank& k, int r) {
      k.ops->reset_scratch();
      backend::Tensor x = k.ops->alloc(1, 4);
      k.ops->all_reduce_sum(x);
      ++reduced;
      if (r == 1) throw Error("rank 1: out of memory");
      k.ops->all_reduce_sum(x);
    });
    ADD_FAILURE() << "the call returned";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "rank 1: out of memory");
  }
  EXPECT_EQ(reduced.load(), 2);
  try {
    runner.on_every_rank([](ModelRunner::Rank&, int) {});
    ADD_FAILURE() << "a stopped group ran a call";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("stopped earlier: rank 1 failed: rank 1: out of memory"), std::string::npos)
        << e.what();
  }
}

TEST(ModelRunner, RefusesRankCountsWithoutAGroup) {
  EXPECT_THROW(ModelRunner(0, nullptr), Error);
  EXPECT_THROW(ModelRunner(2, nullptr), Error);
  EXPECT_THROW(ModelRunner(3, cpu::make_thread_rank_group(2, 1, KernelChoice::kAuto, false)), Error);
  ModelRunner one(1, nullptr);
  EXPECT_EQ(one.size(), 1);
}

}  // namespace
}  // namespace fp8lm::engine
