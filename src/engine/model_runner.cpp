#include "engine/model_runner.h"

#include "common/error.h"

namespace fp8lm::engine {

ModelRunner::ModelRunner(int size, std::unique_ptr<backend::RankGroup> group) : group_(std::move(group)) {
  if (size < 1) throw Error("model runner: " + std::to_string(size) + " ranks");
  if (size > 1 && (group_ == nullptr || group_->size() != size))
    throw Error("model runner: " + std::to_string(size) + " ranks need a group of as many");
  ranks_.resize(size_t(size));
  for (int r = 1; r < size; ++r) {
    workers_.push_back(std::make_unique<Worker>());
    workers_.back()->thread = std::thread([this, r] { worker_loop(r); });
  }
}

ModelRunner::~ModelRunner() {
  // Each rank's model, cache and backend released on its own thread, all at once: a GPU rank's
  // memory and streams belong to its device, and NCCL's communicators are torn down together.
  try {
    dispatch([](Rank& k, int) {
      k.cache.reset();
      k.model.reset();
      k.ops.reset();
    });
  } catch (...) {  // a destructor does not throw; what is left goes below
  }
  for (auto& w : workers_) {
    {
      const std::lock_guard lock(w->mutex);
      w->stop = true;
    }
    w->wake.notify_one();
  }
  for (auto& w : workers_) w->thread.join();
  // Each rank's model and cache before its backend, as their owners would destroy them.
  for (Rank& k : ranks_) {
    k.cache.reset();
    k.model.reset();
  }
}

void ModelRunner::worker_loop(int r) {
  Worker& w = *workers_[size_t(r - 1)];
  std::unique_lock lock(w.mutex);
  for (;;) {
    w.wake.wait(lock, [&] { return w.stop || w.job != nullptr; });
    if (w.stop) return;
    const std::function<void(Rank&, int)>* job = w.job;
    lock.unlock();
    run_rank(*job, r);
    lock.lock();
    w.job = nullptr;
    w.finished = true;
    w.done.notify_one();
  }
}

void ModelRunner::run_rank(const std::function<void(Rank&, int)>& fn, int r) {
  try {
    fn(ranks_[size_t(r)], r);
  } catch (...) {
    const std::lock_guard lock(failure_mutex_);
    if (failure_ != nullptr) return;  // a consequence of the first failure (the group stopped)
    failure_ = std::current_exception();
    if (group_ == nullptr) return;
    std::string what = "unknown error";
    try {
      throw;
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    stopped_ = "rank " + std::to_string(r) + " failed: " + what;
    group_->abort("tensor-parallel group stopped: " + stopped_);
  }
}

void ModelRunner::on_every_rank(const std::function<void(Rank&, int)>& fn) {
  if (!stopped_.empty()) throw Error("tensor-parallel group stopped earlier: " + stopped_);
  dispatch(fn);
}

void ModelRunner::dispatch(const std::function<void(Rank&, int)>& fn) {
  for (auto& w : workers_) {
    {
      const std::lock_guard lock(w->mutex);
      w->job = &fn;
      w->finished = false;
    }
    w->wake.notify_one();
  }
  run_rank(fn, 0);
  for (auto& w : workers_) {
    std::unique_lock lock(w->mutex);
    w->done.wait(lock, [&] { return w->finished; });
  }
  std::exception_ptr failure;
  {
    const std::lock_guard lock(failure_mutex_);
    failure = std::exchange(failure_, nullptr);
  }
  if (failure != nullptr) std::rethrow_exception(failure);
}

// What LlamaModel would refuse, refused before any rank starts: a refusal on some ranks only
// would leave the others in a collective.
void ModelRunner::check_step(std::span<const model::SequenceInput> batch) {
  ranks_[0].model->check_batch(batch, *ranks_[0].cache);
}

void ModelRunner::forward(std::span<const model::SequenceInput> batch, std::vector<float>& logits) {
  if (size() == 1) return ranks_[0].model->forward(batch, *ranks_[0].cache, logits);
  check_step(batch);
  std::vector<float> ignored;
  on_every_rank([&](Rank& k, int r) { k.model->forward(batch, *k.cache, r == 0 ? logits : ignored); });
}

void ModelRunner::forward_greedy(std::span<const model::SequenceInput> batch, std::vector<int32_t>& tokens) {
  start_greedy(batch);
  wait_tokens(tokens);
}

void ModelRunner::forward_sample(std::span<const model::SequenceInput> batch,
                                 std::span<const backend::RowSampling> rows, std::vector<int32_t>& tokens) {
  start_sample(batch, rows);
  wait_tokens(tokens);
}

void ModelRunner::start_greedy(std::span<const model::SequenceInput> batch) {
  if (size() == 1) return ranks_[0].model->start_greedy(batch, *ranks_[0].cache);
  check_step(batch);
  on_every_rank([&](Rank& k, int) { k.model->start_greedy(batch, *k.cache); });
}

// Every rank samples the same logits with the same seeds and draws the same tokens; rank 0's
// are the group's.
void ModelRunner::start_sample(std::span<const model::SequenceInput> batch,
                               std::span<const backend::RowSampling> rows, const std::function<void()>& before_sampling) {
  if (size() == 1) return ranks_[0].model->start_sample(batch, *ranks_[0].cache, rows, before_sampling);
  check_step(batch);
  model::LlamaModel::check_sampling(batch, rows);
  if (before_sampling) before_sampling();
  on_every_rank([&](Rank& k, int) { k.model->start_sample(batch, *k.cache, rows); });
}

void ModelRunner::wait_tokens(std::vector<int32_t>& tokens) {
  if (size() == 1) return ranks_[0].model->wait_tokens(tokens);
  std::vector<std::vector<int32_t>> ignored(ranks_.size());
  on_every_rank([&](Rank& k, int r) { k.model->wait_tokens(r == 0 ? tokens : ignored[size_t(r)]); });
}

}  // namespace fp8lm::engine
