// The model as the engine runs it: one LlamaModel on one backend, or a model split over the ranks
// of a tensor-parallel group (issue 22) — each rank a backend, a LlamaModel over its shard of the
// weights and a KV cache of its KV heads, the ranks meeting in their backends' collectives.
//
// One process, a thread per rank (docs/architecture.md argues it): rank 0 runs on the calling
// thread, every other rank on a thread of its own that waits for the next call. A call gives
// every rank the same step and returns once each has done its part; rank 0's result is the
// group's (every rank ends a step with the same logits). The step API is LlamaModel's, the
// cache each rank's own.
//
// Bad input (a too-long sequence, an id outside the vocabulary) is refused by rank 0 before any
// rank starts. A rank that fails mid-step stops the group (RankGroup::abort, so that no rank
// waits for it in a collective for ever); every later call then throws saying why.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "backend/ops.h"
#include "backend/rank_group.h"
#include "model/llama_model.h"

namespace fp8lm::engine {

class ModelRunner {
 public:
  struct Rank {
    std::unique_ptr<backend::Ops> ops;
    std::unique_ptr<model::LlamaModel> model;
    std::unique_ptr<backend::KvCache> cache;
  };

  // `size` ranks (1: no tensor parallelism, no threads); `group` their transport (null for one
  // rank). The ranks are empty until filled through on_every_rank.
  ModelRunner(int size, std::unique_ptr<backend::RankGroup> group);
  ~ModelRunner();
  ModelRunner(const ModelRunner&) = delete;
  ModelRunner& operator=(const ModelRunner&) = delete;

  int size() const { return int(ranks_.size()); }
  Rank& rank(int r) { return ranks_[size_t(r)]; }
  backend::RankGroup* group() { return group_.get(); }

  // Runs fn(rank, r) on every rank at once, rank 0 on this thread, and returns when all are
  // done; rethrows the first failure (after stopping the group, see above).
  void on_every_rank(const std::function<void(Rank&, int)>& fn);

  int64_t vocab_size() const { return ranks_[0].model->vocab_size(); }
  // LlamaModel's step calls on every rank, each with its own cache.
  void forward(std::span<const model::SequenceInput> batch, std::vector<float>& logits);
  void forward_greedy(std::span<const model::SequenceInput> batch, std::vector<int32_t>& tokens);
  void forward_sample(std::span<const model::SequenceInput> batch, std::span<const backend::RowSampling> rows,
                      std::vector<int32_t>& tokens);
  void start_greedy(std::span<const model::SequenceInput> batch);
  // `before_sampling`: as LlamaModel::start_sample's; with several ranks it runs first, once.
  void start_sample(std::span<const model::SequenceInput> batch, std::span<const backend::RowSampling> rows,
                    const std::function<void()>& before_sampling = {});
  void wait_tokens(std::vector<int32_t>& tokens);

 private:
  struct Worker {
    std::thread thread;
    std::mutex mutex;
    std::condition_variable wake, done;
    const std::function<void(Rank&, int)>* job = nullptr;  // the call to run, null when idle
    bool finished = false, stop = false;
  };
  void worker_loop(int r);
  // on_every_rank without the stopped group's refusal (the destructor's).
  void dispatch(const std::function<void(Rank&, int)>& fn);
  // Runs fn on rank r, recording the first failure (and stopping the group at it).
  void run_rank(const std::function<void(Rank&, int)>& fn, int r);
  void check_step(std::span<const model::SequenceInput> batch);

  std::vector<Rank> ranks_;
  std::unique_ptr<backend::RankGroup> group_;
  std::vector<std::unique_ptr<Worker>> workers_;  // ranks 1..size-1
  std::mutex failure_mutex_;
  std::exception_ptr failure_;  // this call's first, taken by on_every_rank
  std::string stopped_;         // why the group was stopped, once it was
};

}  // namespace fp8lm::engine
