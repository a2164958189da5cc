// The KV cache on host memory (issue 39): the CPU backend sizes a cache given no
// size from the memory available (backend/cpu/host_memory.h), the runtime keeps
// one sequence of max_model_len in it (vLLM's rule: the flag refused when it
// cannot, the model's context lowered to what it holds otherwise), and a size
// given beyond the host's memory is refused naming its flag — all before
// anything large is allocated. The shipped model, its config.json saying
// max_position_embeddings = 2^20 / 2^24 / 2^30, once took one full context
// (5 GiB, 80 GiB, 5 TiB: std::bad_alloc) to generate two tokens.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "backend/cpu/host_memory.h"
#include "backend/factory/make_ops.h"
#include "common/error.h"
#include "cpp/model_fixtures.h"
#include "cpp/peak_memory.h"
#include "cpp/test_util.h"
#include "engine/generate.h"
#include "engine/runtime.h"

namespace fp8lm::test {
namespace {

constexpr uint64_t kMiB = uint64_t(1) << 20;
constexpr uint64_t kGiB = uint64_t(1) << 30;
// The shipped model: 10 layers × 2 KV heads × 64 × (K, V) × 2 bytes (BF16 cache).
constexpr uint64_t kShippedBytesPerToken = 5120;

std::filesystem::path shipped_dir() {
  return std::filesystem::path(FP8LM_SOURCE_DIR) / model_manifest()["shipped"]["dir"].get<std::string>();
}

// The shipped model with its config.json's max_position_embeddings replaced (the other files linked).
class LongContextModel {
 public:
  explicit LongContextModel(int64_t context) : dir_("") {
    nlohmann::json config = nlohmann::json::parse(std::ifstream(shipped_dir() / "config.json"));
    config["max_position_embeddings"] = context;
    std::ofstream(dir_.path() / "config.json") << config.dump(2);
    for (const auto& entry : std::filesystem::directory_iterator(shipped_dir()))
      if (entry.path().filename() != "config.json")
        std::filesystem::create_symlink(entry.path(), dir_.path() / entry.path().filename());
  }
  const std::filesystem::path& path() const { return dir_.path(); }

 private:
  ConfigDir dir_;
};

// What generate and chat ask for: one sequence, a cache given no size.
engine::RuntimeOptions one_sequence() {
  engine::RuntimeOptions opt;
  opt.threads = 2;
  opt.max_num_seqs = 1;
  return opt;
}

TEST(HostMemory, ParsesMeminfoStatusAndCgroupStat) {
  const std::string meminfo =
      "MemTotal:       24683784 kB\nMemFree:        21917000 kB\nMemAvailable:   23605160 kB\nHugePages_Total:  0\n";
  EXPECT_EQ(cpu::kib_field(meminfo, "MemAvailable"), std::optional<uint64_t>(23605160ull * 1024));
  EXPECT_EQ(cpu::kib_field(meminfo, "MemTotal"), std::optional<uint64_t>(24683784ull * 1024));
  EXPECT_EQ(cpu::kib_field(meminfo, "HugePages_Total"), std::optional<uint64_t>(0));
  EXPECT_EQ(cpu::kib_field(meminfo, "Mem"), std::nullopt) << "a key is a whole name";
  EXPECT_EQ(cpu::kib_field("VmSize:\t  123456 kB\n", "VmSize"), std::optional<uint64_t>(123456ull * 1024));
  EXPECT_EQ(cpu::stat_field("anon 100\nfile 200\ninactive_file 4096\n", "inactive_file"), std::optional<uint64_t>(4096));
  EXPECT_EQ(cpu::stat_field("total_inactive_file 7\n", "inactive_file"), std::nullopt);

  const cpu::HostMemory m = cpu::read_host_memory();
  EXPECT_GT(m.available_bytes, 0u);
  EXPECT_LE(m.available_bytes, m.total_bytes);
  EXPECT_FALSE(m.source.empty());
}

TEST(HostMemory, DefaultCacheIsAShareOfWhatIsAvailable) {
  const cpu::HostMemory mem{10 * kGiB, 16 * kGiB, "MemAvailable in /proc/meminfo"};
  // Half of 10 GiB over 5120 bytes a token: 1048576 tokens.
  EXPECT_EQ(cpu::host_kv_cache_tokens(kShippedBytesPerToken, {0.9, 16, 0, 0}, 1, mem), 1048576);
  // No more than the sequences can use.
  EXPECT_EQ(cpu::host_kv_cache_tokens(kShippedBytesPerToken, {0.9, 16, 0, 4096}, 1, mem), 4096);
  // Two ranks hold their caches in the same memory: half each.
  EXPECT_EQ(cpu::host_kv_cache_tokens(kShippedBytesPerToken, {0.9, 16, 0, 0}, 2, mem), 524288);
  // A multiple of the block size: 0.5 · 10 GiB / 100000 = 53687.09 → 53680 (block 16), 53664 (block 32).
  EXPECT_EQ(cpu::host_kv_cache_tokens(100000, {0.9, 16, 0, 0}, 1, mem), 53680);
  EXPECT_EQ(cpu::host_kv_cache_tokens(100000, {0.9, 32, 0, 0}, 1, mem), 53664);
  EXPECT_EQ(error_of([&] {
              (void)cpu::host_kv_cache_tokens(kShippedBytesPerToken, {0.9, 16, 0, 0}, 2,
                                              {100000, 16 * kGiB, "MemAvailable in /proc/meminfo"});
            }),
            "no host memory left for the KV cache: a cache given no size takes at most half of the 0 MiB available "
            "(MemAvailable in /proc/meminfo), and one block of 16 tokens needs 81920 bytes on each of 2 ranks; free "
            "memory, or give the cache's size with --kv-cache-tokens / --kv-cache-memory");
}

TEST(HostMemory, GivenSizeMustFitWhatIsAvailable) {
  const cpu::HostMemory mem{2 * kGiB, 16 * kGiB, "the cgroup's memory.max"};
  EXPECT_NO_THROW(cpu::check_host_kv_cache_fits(16384, 131072, 1, false, mem));  // exactly the 2 GiB
  EXPECT_EQ(error_of([&] { cpu::check_host_kv_cache_fits(16400, 131072, 1, false, mem); }),
            "--kv-cache-tokens: the KV cache would take 2050 MiB, but the host has 2048 MiB available (the cgroup's "
            "memory.max) (out of memory)");
  EXPECT_EQ(error_of([&] { cpu::check_host_kv_cache_fits(16384, 131072, 2, true, mem); }),
            "--kv-cache-memory: the KV cache would take 4096 MiB on 2 ranks, but the host has 2048 MiB available "
            "(the cgroup's memory.max) (out of memory)");
  // Sizes beyond 2^64 bytes are compared, not wrapped.
  EXPECT_EQ(error_of([&] { cpu::check_host_kv_cache_fits(int64_t(1) << 62, 1 << 20, 1, false, mem); }).substr(0, 18),
            "--kv-cache-tokens:");
}

TEST(HostMemory, CpuBackendSizesFromHostMemory) {
  const std::unique_ptr<backend::Ops> ops = backend::make_ops({.device = backend::Device::kCpu, .threads = 2});
  EXPECT_FALSE(ops->memory_info().has_value()) << "host memory: no step to profile";
  const std::optional<int64_t> tokens = ops->default_kv_cache_tokens(kShippedBytesPerToken, {0.9, 16, 0, 0});
  ASSERT_TRUE(tokens.has_value());
  EXPECT_GT(*tokens, 0);
  EXPECT_EQ(*tokens % 16, 0);
  EXPECT_LE(uint64_t(*tokens) * kShippedBytesPerToken, cpu::read_host_memory().total_bytes / 2);
  EXPECT_EQ(ops->default_kv_cache_tokens(kShippedBytesPerToken, {0.9, 16, 0, 1024}), std::optional<int64_t>(1024));
  EXPECT_EQ(error_of([&] { ops->check_kv_cache_fits(int64_t(1) << 40, 1 << 20, {}, false); }).substr(0, 53),
            "--kv-cache-tokens: the KV cache would take 1099511627");
}

class HugeContext : public ::testing::TestWithParam<int> {};

// With no size given, a huge max_position_embeddings alone costs no more than
// the tokens written: the cache is a share of host memory at most, the context
// lowered to what it holds (a note says so), and two tokens are generated.
TEST_P(HugeContext, DefaultCacheGeneratesTwoTokensInBoundedMemory) {
  const int64_t context = int64_t(1) << GetParam();
  const LongContextModel model(context);
  const int64_t before = reset_peak_rss_kib();
  auto rt = engine::Runtime::load(model.path(), {}, one_sequence());
  const int64_t cache_tokens = rt->blocks().num_total() * rt->block_size();
  EXPECT_LE(rt->kv_cache_bytes(), cpu::read_host_memory().total_bytes / 2);
  EXPECT_LE(rt->max_model_len(), context);
  EXPECT_GE(cache_tokens, rt->max_model_len()) << "one sequence of max_model_len fits";
  if (rt->max_model_len() < context) {
    EXPECT_EQ(rt->max_model_len(), cache_tokens);
    bool noted = false;
    for (const std::string& n : rt->notes()) noted |= n.starts_with("max_model_len " + std::to_string(cache_tokens));
    EXPECT_TRUE(noted) << "a note says the context was lowered";
  }
  engine::SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 2;
  p.ignore_eos = true;
  const engine::GenerationResult r = engine::generate(*rt, std::vector<int32_t>{1, 2, 3, 4}, p);
  EXPECT_EQ(r.tokens.size(), 2u);
  const int64_t grew_mib = (peak_rss_kib() - before) / 1024;
  EXPECT_LT(grew_mib, 512) << "peak resident memory grew by " << grew_mib << " MiB for a "
                           << (rt->kv_cache_bytes() >> 20) << " MiB cache";
}

// --max-model-len that the memory cannot hold is refused naming the flags and
// the numbers, before the cache is allocated.
TEST_P(HugeContext, MaxModelLenBeyondMemoryIsRefusedBeforeAllocating) {
  const int64_t context = int64_t(1) << GetParam();
  const LongContextModel model(context);
  engine::RuntimeOptions opt = one_sequence();
  opt.max_model_len = context;
  const int64_t fit = int64_t(cpu::kHostKvShare * double(cpu::read_host_memory().available_bytes) /
                              double(kShippedBytesPerToken));
  if (fit >= context) GTEST_SKIP() << "this host holds a context of 2^" << GetParam();
  const int64_t before = reset_peak_rss_kib();
  const std::string e = error_of([&] { (void)engine::Runtime::load(model.path(), {}, opt); });
  const std::string need = std::to_string(uint64_t(context) * kShippedBytesPerToken / kMiB);
  EXPECT_TRUE(e.starts_with("--max-model-len: one sequence of " + std::to_string(context) +
                            " tokens needs a KV cache of " + need + " MiB (5120 bytes per token), but the cache sized "
                            "from the memory there is holds "))
      << e;
  EXPECT_NE(e.find("at most half of the host memory available); lower --max-model-len to at most "), std::string::npos)
      << e;
  EXPECT_TRUE(e.ends_with(", or give the cache's size with --kv-cache-memory / --kv-cache-tokens")) << e;
  EXPECT_LT((peak_rss_kib() - before) / 1024, 512);
}

INSTANTIATE_TEST_SUITE_P(KvBudget, HugeContext, ::testing::Values(20, 24, 30),
                         [](const auto& p) { return "pow2_" + std::to_string(p.param); });

TEST(KvBudget, MaxModelLenSizesTheDefaultCache) {
  const LongContextModel model(int64_t(1) << 24);
  engine::RuntimeOptions opt = one_sequence();
  opt.max_model_len = 100;
  auto rt = engine::Runtime::load(model.path(), {}, opt);
  EXPECT_EQ(rt->max_model_len(), 100);
  EXPECT_EQ(rt->blocks().num_total(), 7) << "one sequence of 100 tokens, in blocks of 16";
  EXPECT_EQ(rt->kv_cache_bytes(), 112 * kShippedBytesPerToken);
  opt.max_num_seqs = 3;
  EXPECT_EQ(engine::Runtime::load(model.path(), {}, opt)->blocks().num_total(), 21) << "three of them";
}

TEST(KvBudget, MaxModelLenIsCheckedAgainstTheContext) {
  engine::RuntimeOptions opt = one_sequence();
  opt.max_model_len = 1025;
  EXPECT_EQ(error_of([&] { (void)engine::Runtime::load(shipped_dir(), {}, opt); }),
            "--max-model-len: 1025 is beyond the model's context of 1024 tokens (max_position_embeddings in "
            "config.json)");
  opt.max_model_len = -1;
  EXPECT_EQ(error_of([&] { (void)engine::Runtime::load(shipped_dir(), {}, opt); }), "--max-model-len: -1 is negative");
  opt.max_model_len = 1024;
  EXPECT_EQ(engine::Runtime::load(shipped_dir(), {}, opt)->max_model_len(), 1024);
}

TEST(KvBudget, GivenSizeBeyondHostMemoryIsRefused) {
  engine::RuntimeOptions opt = one_sequence();
  opt.kv_cache_bytes = uint64_t(1) << 50;  // 1 PiB
  const int64_t before = reset_peak_rss_kib();
  const std::string e = error_of([&] { (void)engine::Runtime::load(shipped_dir(), {}, opt); });
  EXPECT_TRUE(e.starts_with("--kv-cache-memory: the KV cache would take 1073741824 MiB, but the host has ")) << e;
  EXPECT_TRUE(e.ends_with(" (out of memory)")) << e;
  opt.kv_cache_bytes = 0;
  opt.kv_cache_tokens = int64_t(1) << 40;
  EXPECT_TRUE(error_of([&] { (void)engine::Runtime::load(shipped_dir(), {}, opt); })
                  .starts_with("--kv-cache-tokens: the KV cache would take 5368709120 MiB, but the host has "));
  EXPECT_LT((peak_rss_kib() - before) / 1024, 512);
}

}  // namespace
}  // namespace fp8lm::test
