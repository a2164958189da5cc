// Backends own their memory (src/backend/ops.cpp, src/backend/factory): the
// KV-cache budget a backend with a device memory gives for the runtime's flags,
// the messages when it cannot hold the cache, and the factory's backends. The
// budget arithmetic is pinned with hand-computed numbers, so a change to how
// many tokens the same flags give fails here before it shows on a GPU.
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>

#include "backend/factory/make_ops.h"
#include "backend/ops.h"
#include "common/error.h"
#include "cpp/test_util.h"

namespace fp8lm::backend {
namespace {

using test::error_of;

constexpr uint64_t kGiB = uint64_t(1) << 30;

// A backend whose device memory is fixed numbers: only memory_info() is real,
// so the defaults of default_kv_cache_tokens / check_kv_cache_fits are what runs.
class FixedMemoryOps final : public Ops {
 public:
  explicit FixedMemoryOps(MemoryInfo info) : info_(info) {}
  std::string name() const override { return "fixed-memory"; }
  std::optional<MemoryInfo> memory_info() const override { return info_; }

  std::unique_ptr<Weight> upload_linear(const weights::LinearWeight&) override { unused(); }
  std::unique_ptr<Weight> upload_vector(std::vector<float>) override { unused(); }
  std::unique_ptr<Weight> upload_embedding(const weights::LinearWeight&) override { unused(); }
  std::unique_ptr<KvCache> make_kv_cache(const KvCacheShape&, std::vector<KvLayerFormat>) override { unused(); }
  Tensor alloc(int64_t, int64_t) override { unused(); }
  void reset_scratch() override { unused(); }
  void begin_step(const StepInputs&) override { unused(); }
  void embedding(const Weight&, Tensor) override { unused(); }
  void rms_norm(Tensor, const Weight&, float, Tensor, const Weight*) override { unused(); }
  void add_rms_norm(Tensor, Tensor, const Weight&, float, Tensor, const Weight*) override { unused(); }
  void head_rms_norm(Tensor, int64_t, const Weight&, float) override { unused(); }
  void add(Tensor, Tensor) override { unused(); }
  void linear(Tensor, const Weight&, Tensor) override { unused(); }
  void rope_qk(Tensor, Tensor, int64_t, const RopeTable&) override { unused(); }
  void silu_mul(Tensor, Tensor, Tensor) override { unused(); }
  void attention(Tensor, Tensor, Tensor, Tensor, const AttentionParams&, KvCache&, int) override {
    unused();
  }
  void gather_rows(Tensor, Tensor) override { unused(); }
  void to_host(Tensor, std::span<float>) override { unused(); }
  void argmax_rows(Tensor, std::span<int32_t>) override { unused(); }

 private:
  [[noreturn]] static void unused() { throw Error("FixedMemoryOps: only its memory is modelled"); }
  MemoryInfo info_;
};

TEST(BackendMemory, DefaultKvTokensFromDeviceMemory) {
  // 80 GiB device, 20 GiB in use: 0.9 · 80 − 20 − 1 (margin) = 51 GiB for the
  // cache; 51 · 2^30 / 100000 bytes per token = 547608.3 → 547608 tokens →
  // 547600, the multiple of the block size 16 below it.
  const FixedMemoryOps ops({60 * kGiB, 80 * kGiB, 0});
  EXPECT_EQ(ops.default_kv_cache_tokens(100000, {0.9, 16, 3u << 20}), std::optional<int64_t>(547600));
  // A lower share of the device gives fewer tokens: 0.5 · 80 − 21 = 19 GiB → 204010.5 → 204000 (block 32).
  EXPECT_EQ(ops.default_kv_cache_tokens(100000, {0.5, 32, 0}), std::optional<int64_t>(204000));
}

TEST(BackendMemory, NoRoomForOneBlockIsNamed) {
  const FixedMemoryOps ops({60 * kGiB, 80 * kGiB, 0});
  // 0.25 · 80 GiB is less than the 20 GiB in use plus the margin.
  EXPECT_EQ(error_of([&] { (void)ops.default_kv_cache_tokens(100000, {0.25, 16, 3u << 20}); }),
            "no device memory left for the KV cache: 20480 MiB in use of 81920 MiB (3 MiB of it for the largest "
            "step) and 1024 MiB kept free; raise --gpu-memory-utilization or lower --max-num-batched-tokens / "
            "--max-num-seqs");
}

TEST(BackendMemory, GivenSizeMustFitFreeMemory) {
  const FixedMemoryOps ops({2 * kGiB, 80 * kGiB, 0});
  const KvBudget budget{0.9, 16, 5u << 20};
  EXPECT_NO_THROW(ops.check_kv_cache_fits(16384, 131072, budget, false));  // exactly the 2 GiB free
  EXPECT_EQ(error_of([&] { ops.check_kv_cache_fits(16400, 131072, budget, false); }),
            "--kv-cache-tokens: the KV cache would take 2050 MiB, but the device has 2048 MiB free after the "
            "weights and the largest step's 5 MiB of scratch (out of memory)");
  EXPECT_EQ(error_of([&] { ops.check_kv_cache_fits(16400, 131072, budget, true); }).substr(0, 18),
            "--kv-cache-memory:");
}

TEST(BackendMemory, CpuHasNoDeviceMemoryBudget) {
  const std::unique_ptr<Ops> ops = make_ops({.device = Device::kCpu, .threads = 2});
  EXPECT_EQ(ops->name(), "cpu (2 threads)");
  EXPECT_FALSE(ops->memory_info().has_value());
  // Host memory: its own budget (tests/cpp/test_kv_budget.cpp), bounded by what the sequences use.
  EXPECT_EQ(ops->default_kv_cache_tokens(100000, {0.9, 16, 0, 4096}), std::optional<int64_t>(4096));
  EXPECT_EQ(error_of([&] { ops->check_kv_cache_fits(int64_t(1) << 40, 1 << 20, {}, false); }).substr(0, 18),
            "--kv-cache-tokens:");
}

TEST(BackendMemory, CudaWithoutTheCudaBackendIsRefused) {
#ifdef FP8LM_WITH_CUDA
  GTEST_SKIP() << "this build has the CUDA backend";
#else
  EXPECT_EQ(error_of([] { (void)make_ops({.device = Device::kCuda}); }),
            "--device cuda: this fp8lm was built without the CUDA backend (configure with -DFP8LM_CUDA=ON)");
#endif
}

}  // namespace
}  // namespace fp8lm::backend
