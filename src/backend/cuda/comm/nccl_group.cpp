#include "backend/cuda/comm/nccl_group.h"

#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "backend/cuda/common/check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/comm/nccl_library.h"
#include "common/error.h"

namespace fp8lm::cuda {

NcclLink::~NcclLink() {
  if (!aborted_) (void)NcclLibrary::get().comm_destroy(comm_);
}

void NcclLink::all_reduce_sum(__nv_bfloat16* data, int64_t n, cudaStream_t stream) {
  nccl_check(NcclLibrary::get().all_reduce(data, data, size_t(n), ncclBfloat16, ncclSum, comm_, stream),
             "all-reduce");
}

void NcclLink::all_gather(const void* local, void* out, int64_t bytes, cudaStream_t stream) {
  nccl_check(NcclLibrary::get().all_gather(local, out, size_t(bytes), ncclUint8, comm_, stream), "all-gather");
}

void NcclLink::abort() {
  if (aborted_) return;
  aborted_ = true;
  (void)NcclLibrary::get().comm_abort(comm_);
}

namespace {

class NcclRankGroup final : public backend::RankGroup {
 public:
  NcclRankGroup(int size, bool cuda_graphs) : size_(size), cuda_graphs_(cuda_graphs), links_(size_t(size)) {
    int devices = 0;
    FP8LM_CUDA_CHECK(cudaGetDeviceCount(&devices));
    if (devices < size)
      throw Error("--tensor-parallel-size " + std::to_string(size) + ": this machine has " + std::to_string(devices) +
                  " GPU" + (devices == 1 ? "" : "s") + " (one rank a GPU)");
    const NcclLibrary& lib = NcclLibrary::get();
    nccl_check(lib.get_unique_id(&id_), "ncclGetUniqueId");
  }
  int size() const override { return size_; }

  std::unique_ptr<backend::Ops> make_rank(int rank) override {
    // Every rank's backend first: NCCL's initialization waits for all ranks, so a rank whose
    // device failed must be known before any rank enters it.
    std::unique_ptr<CudaOps> ops;
    try {
      ops = std::make_unique<CudaOps>(CudaOpsOptions{.device = rank, .cuda_graphs = cuda_graphs_});  // sets this thread's device
    } catch (...) {
      arrive(false);
      throw;
    }
    if (!arrive(true))
      throw Error("tensor-parallel rank " + std::to_string(rank) + ": another rank's GPU failed to start");
    ncclComm_t comm = nullptr;
    nccl_check(NcclLibrary::get().comm_init_rank(&comm, size_, id_, rank), "ncclCommInitRank");
    auto link = std::make_unique<NcclLink>(comm, rank, size_);
    {
      const std::lock_guard lock(mutex_);
      links_[size_t(rank)] = link.get();
    }
    ops->join_group(std::move(link));
    return ops;
  }

  void abort(const std::string&) override {
    const std::lock_guard lock(mutex_);
    for (NcclLink* link : links_)
      if (link != nullptr) link->abort();
  }

 private:
  // Waits until every rank has arrived; false if any arrived with ok = false.
  bool arrive(bool ok) {
    std::unique_lock lock(mutex_);
    all_ok_ = all_ok_ && ok;
    if (++arrived_ == size_) started_.notify_all();
    started_.wait(lock, [&] { return arrived_ >= size_; });
    return all_ok_;
  }

  int size_;
  bool cuda_graphs_;
  std::condition_variable started_;
  int arrived_ = 0;
  bool all_ok_ = true;
  ncclUniqueId id_{};
  std::mutex mutex_;
  std::vector<NcclLink*> links_;  // owned by the ranks' CudaOps, which outlive no group call
};

}  // namespace

std::unique_ptr<backend::RankGroup> make_nccl_rank_group(int size, bool cuda_graphs) {
  return std::make_unique<NcclRankGroup>(size, cuda_graphs);
}

}  // namespace fp8lm::cuda
