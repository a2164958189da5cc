// The model split over tensor-parallel CPU ranks (loader/tensor_parallel.h, backend/cpu/thread_group.h,
// LlamaModel's rank mode) against the same model whole, on the tiny fixtures (Llama, Qwen2 with
// biases, Qwen3 with q/k norms, Qwen3-MoE, Mixtral): two ranks, each a thread with its own CPU
// backend, KV cache and shard of the weights, run a prompt and fed decode steps.
//
// * Four ranks too (BF16): one query head each, the two KV heads replicated over two ranks each.
// * Every rank gets the same logits, byte for byte (the all-gather and the rank-ordered
//   all-reduce give every rank the same bytes).
// * Without activation quantization (BF16, FP8 weight-only) the split changes only the float32
//   order of o_proj's and down_proj's sums (two partial sums added) and of the embedding's
//   (zeros added): max |Δ| ≤ 1e-4 of the largest logit.
// * W8A8 (per-channel × per-token, 128 × 128 blocks × 1 × 128 groups): a row-parallel
//   projection's input is quantized per rank, on its half of K — its own per-token amax, its own
//   groups (160 of the fixtures' 320 MLP rows start inside a group, and inside a weight block:
//   those cells are re-scaled) — as vLLM quantizes a rank's input. The split's effect is then of
//   the order of FP8's own, E (mean |Δ| between the whole model's BF16 and FP8 logits): within
//   1.5 E, the bound the GPU is held to against the CPU (test_cuda_model).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/thread_group.h"
#include "cpp/model_fixtures.h"
#include "io/model_spec.h"
#include "loader/host_weights.h"
#include "loader/tensor_parallel.h"
#include "model/llama_model.h"

namespace fp8lm::test {
namespace {

constexpr int kBlock = 16;

struct Rank {
  std::unique_ptr<cpu::CpuOps> ops;
  std::unique_ptr<model::LlamaModel> model;
  std::unique_ptr<backend::KvCache> cache;
};

// The prompt's logits (every position) and then those of `fed` tokens one decode step each.
std::vector<float> run(model::LlamaModel& m, backend::KvCache& cache, const std::vector<int32_t>& prompt,
                       const std::vector<int32_t>& fed) {
  std::vector<int64_t> blocks;
  for (int64_t b = 0; b < int64_t(prompt.size() + fed.size() + kBlock) / kBlock; ++b) blocks.push_back(b);
  std::vector<float> all, logits;
  const model::SequenceInput in{prompt, 0, blocks, true};
  m.forward({&in, 1}, cache, logits);
  all = logits;
  for (size_t i = 0; i < fed.size(); ++i) {
    const std::vector<int32_t> one{fed[i]};
    const model::SequenceInput step{one, int64_t(prompt.size() + i), blocks, false};
    m.forward({&step, 1}, cache, logits);
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

std::vector<float> whole(const io::ModelSpec& spec, const loader::HostModelWeights& w,
                         const std::vector<int32_t>& prompt, const std::vector<int32_t>& fed) {
  cpu::CpuOps ops(2);
  model::LlamaModel m(spec.config, w, ops);
  auto cache = ops.make_kv_cache(m.kv_cache_shape(kBlock, 8),
                                 model::kv_layer_formats(spec.config, spec.kv_cache(), w.k_scales, w.v_scales));
  return run(m, *cache, prompt, fed);
}

std::vector<std::vector<float>> split(const io::ModelSpec& spec, const loader::HostModelWeights& w, int size,
                                      const std::vector<int32_t>& prompt, const std::vector<int32_t>& fed) {
  cpu::ThreadGroup group(size);
  std::vector<Rank> ranks(static_cast<size_t>(size));
  std::vector<loader::TensorParallelPlan> plans;
  for (int r = 0; r < size; ++r) {
    plans.push_back(loader::plan_tensor_parallel(spec.config, r, size));
    Rank& k = ranks[size_t(r)];
    k.ops = std::make_unique<cpu::CpuOps>(1);
    k.ops->join_group(group, r);
    const loader::HostModelWeights shard = loader::shard_host_weights(w, spec.config, plans.back());
    k.model = std::make_unique<model::LlamaModel>(spec.config, shard, *k.ops, &plans.back());
    k.cache = k.ops->make_kv_cache(k.model->kv_cache_shape(kBlock, 8),
                                   model::kv_layer_formats(spec.config, spec.kv_cache(), w.k_scales, w.v_scales));
  }
  std::vector<std::vector<float>> out(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] { out[size_t(r)] = run(*ranks[size_t(r)].model, *ranks[size_t(r)].cache, prompt, fed); });
  for (std::thread& t : threads) t.join();
  return out;
}

double mean_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += std::fabs(double(a[i]) - double(b[i]));
  return s / double(a.size());
}

struct Case {
  const char* dir;  // under models/
};

class TensorParallelModel : public ::testing::TestWithParam<Case> {};

TEST_P(TensorParallelModel, TwoRanksGiveTheWholeModelsLogits) {
  const std::filesystem::path dir = model_fixture_dir(GetParam().dir);
  const std::vector<int32_t> prompt = {1, 17, 200, 45, 99, 3, 250, 128, 7, 64, 31, 180, 5, 77, 140, 222, 9, 55};
  const std::vector<int32_t> fed = {12, 240, 33};
  auto load = [&](const char* quant) {
    io::LoadOverrides o;
    if (*quant) o.quantization = io::parse_online_quant(quant);
    io::ModelSpec spec = io::read_model_spec(dir, o);
    loader::HostModelWeights w = loader::load_host_weights(spec);
    return std::pair(std::move(spec), std::move(w));
  };
  const auto [bf16_spec, bf16_w] = load("");
  const std::vector<float> bf16 = whole(bf16_spec, bf16_w, prompt, fed);
  const auto [fp8_spec, fp8_w] = load("fp8:channel");
  const double effect = mean_abs_diff(bf16, whole(fp8_spec, fp8_w, prompt, fed));
  ASSERT_GT(effect, 0.0);
  for (const char* quant : {"", "fp8:weight-only", "fp8:channel", "fp8:block"}) {
    SCOPED_TRACE(*quant ? quant : "bf16");
    const auto [spec, w] = load(quant);
    const std::vector<float> want = whole(spec, w, prompt, fed);
    const std::vector<std::vector<float>> got = split(spec, w, 2, prompt, fed);
    ASSERT_EQ(got[0].size(), want.size());
    EXPECT_EQ(got[0], got[1]);
    const double mean = mean_abs_diff(got[0], want);
    const float worst = max_abs_diff(got[0], want);
    std::printf("[ %s %s ] TP=2 vs TP=1: mean|Δ| %.3g (%.3f of E %.4f), max|Δ| %.3g, max|logit| %.3g\n",
                GetParam().dir, *quant ? quant : "bf16", mean, mean / effect, effect, double(worst),
                double(max_abs(want)));
    const bool w8a8 = std::string(quant) == "fp8:channel" || std::string(quant) == "fp8:block";
    if (w8a8) EXPECT_LE(mean, 1.5 * effect);
    else EXPECT_LE(worst, 1e-4f * max_abs(want));
  }
  // Four ranks: one query head each, the two KV heads replicated over two ranks each.
  const std::vector<std::vector<float>> four = split(bf16_spec, bf16_w, 4, prompt, fed);
  for (int r = 1; r < 4; ++r) EXPECT_EQ(four[size_t(r)], four[0]);
  EXPECT_LE(max_abs_diff(four[0], bf16), 1e-4f * max_abs(bf16));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TensorParallelModel,
                         ::testing::Values(Case{"llama"}, Case{"qwen2"}, Case{"qwen3"}, Case{"moe/qwen3_moe"},
                                           Case{"moe/mixtral"}),
                         [](const auto& param_info) {
                           std::string n = param_info.param.dir;
                           for (char& c : n)
                             if (c == '/') c = '_';
                           return n;
                         });

}  // namespace
}  // namespace fp8lm::test
