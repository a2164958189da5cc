// MoE blocks on the GPU (src/backend/cuda/cuda_ops_moe.cpp, moe_kernels.h) against the CPU
// backend (src/backend/cpu/moe.h), on the tiny random Qwen3-MoE and Mixtral fixtures
// (tools/make_model_fixtures.py; the CPU matches transformers on them: tests/cpp/test_moe.cpp).
//
// * The routing kernel picks the experts cpu::route_row picks, in the same order, with the same
//   weights to float32 rounding (the sum's order differs), on logits that are BF16 values.
// * Whole models: logits of a prompt and of fed decode steps, every scheme, GPU against CPU.
//   The tolerance is test_cuda_model.cpp's, on the same scale — E, the effect of FP8
//   (per-channel × per-token) quantization itself on these logits, measured on the CPU: the
//   GPU rounds activations to BF16 after every op (the router's logits too, as transformers
//   does for a BF16 model), the CPU keeps float32. Activations not quantized: mean |Δ| ≤ 0.25 E;
//   W8A8: ≤ 1.5 E. A wrong expert, weight or scale gives differences of the order of the logits.
// * Grouped == per expert: the grouped path (one launch per projection over device-side slots,
//   decode steps recorded as graphs) against the per-expert path (FP8LM_CUDA_MOE_GROUPED=0),
//   the same model's logits within batched == alone's bounds: the two paths run other GEMV
//   plans and GEMMs, so float32 sums round differently, and under W8A8 a BF16 activation that
//   rounds the other way can land on the next E4M3 code, as between the GPU and the CPU.
// * Batched == alone: a prompt's logits in a batch of three equal its logits alone within the
//   same bound (row-wise schemes: every step of the block is per row).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/moe.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/moe/moe_kernels.h"
#include "common/error.h"
#include "cuda/cuda_test_util.h"
#include "cuda/model_trace.h"
#include "io/load_overrides.h"
#include "io/model_spec.h"
#include "loader/host_weights.h"
#include "model/llama_model.h"
#include "numerics/fp8_format.h"

namespace fp8lm::test {
namespace {

std::filesystem::path moe_fixture(const std::string& name) {
  return std::filesystem::path(FP8LM_SOURCE_DIR) / "tests/fixtures/models/moe" / name;
}

// A fixture model on one backend with a KV cache of its own (the fixtures have no tokenizer,
// which engine::Runtime needs for real weights).
struct Loaded {
  io::ModelSpec spec;
  std::unique_ptr<backend::Ops> ops;
  std::unique_ptr<model::LlamaModel> model;
  std::unique_ptr<backend::KvCache> cache;
  static constexpr int kBlockSize = 16;
};

// options: the CUDA backend's (the CPU's ignore them).
std::unique_ptr<Loaded> load(backend::Device device, const std::string& fixture, const std::string& quant,
                             const cuda::CudaOpsOptions& options = {}) {
  io::LoadOverrides o;
  if (!quant.empty()) o.quantization = io::parse_online_quant(quant);
  auto l = std::make_unique<Loaded>();
  l->spec = io::read_model_spec(moe_fixture(fixture), o);
  const loader::HostModelWeights w = loader::load_host_weights(l->spec);
  if (device == backend::Device::kCpu)
    l->ops = std::make_unique<cpu::CpuOps>(4);
  else
    l->ops = std::make_unique<cuda::CudaOps>(options);
  l->model = std::make_unique<model::LlamaModel>(l->spec.config, w, *l->ops);
  l->cache = l->ops->make_kv_cache(l->model->kv_cache_shape(Loaded::kBlockSize, 64),
                                   model::kv_layer_formats(l->spec.config, l->spec.kv_cache(), w.k_scales, w.v_scales));
  return l;
}

Trace trace(Loaded& l, const std::vector<int32_t>& prompt, const std::vector<int32_t>& fed) {
  return run(*l.model, *l.cache, prompt, fed);
}

TEST(CudaMoeRoute, PicksTheCpuExperts) {
  REQUIRE_HOPPER();
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  struct Shape {
    int experts, top_k;
    bool renormalize;
  };
  for (const Shape s : {Shape{8, 2, true}, Shape{8, 2, false}, Shape{60, 4, true}, Shape{128, 8, true},
                        Shape{256, 8, false}, Shape{3, 3, true}, Shape{1024, 1, true}}) {
    SCOPED_TRACE("experts " + std::to_string(s.experts) + " top_k " + std::to_string(s.top_k));
    const int64_t rows = 333;
    std::vector<uint16_t> logits(size_t(rows * s.experts));
    std::vector<float> as_float(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) {
      logits[i] = float_to_bf16(normal(rng));
      as_float[i] = bf16_to_float(logits[i]);
    }
    DeviceVector<uint16_t> d_logits(logits);
    DeviceVector<int32_t> d_ids(size_t(rows * s.top_k));
    DeviceVector<float> d_w(size_t(rows * s.top_k));
    cuda::moe_route(reinterpret_cast<const __nv_bfloat16*>(d_logits.ptr), rows, s.experts, s.top_k, s.renormalize,
                    d_ids.ptr, d_w.ptr, nullptr);
    FP8LM_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<int32_t> ids = d_ids.download();
    const std::vector<float> w = d_w.download();
    std::vector<int32_t> want_ids(size_t(s.top_k));
    std::vector<float> want_w(size_t(s.top_k));
    int64_t bad = 0;
    for (int64_t r = 0; r < rows; ++r) {
      cpu::route_row(as_float.data() + r * s.experts, s.experts, {s.top_k, s.renormalize}, want_ids.data(),
                     want_w.data());
      for (int j = 0; j < s.top_k; ++j) {
        const size_t at = size_t(r * s.top_k + j);
        if (ids[at] != want_ids[size_t(j)] || std::abs(w[at] - want_w[size_t(j)]) > 1e-5f * want_w[size_t(j)] + 1e-9f) {
          if (bad++ < 3)
            ADD_FAILURE() << "row " << r << " pick " << j << ": expert " << ids[at] << " weight " << w[at]
                          << ", the CPU: expert " << want_ids[size_t(j)] << " weight " << want_w[size_t(j)];
        }
      }
    }
    EXPECT_EQ(bad, 0);
  }
}

TEST(CudaMoeRoute, BadArgumentsAreNamed) {
  REQUIRE_HOPPER();
  DeviceVector<uint16_t> logits(16);
  DeviceVector<int32_t> ids(16);
  DeviceVector<float> w(16);
  auto call = [&](int experts, int k) {
    cuda::moe_route(reinterpret_cast<const __nv_bfloat16*>(logits.ptr), 1, experts, k, true, ids.ptr, w.ptr, nullptr);
  };
  EXPECT_THROW(call(0, 1), Error);
  EXPECT_THROW(call(cuda::kMoeMaxExperts + 1, 1), Error);
  EXPECT_THROW(call(8, 9), Error);
  EXPECT_THROW(call(8, 0), Error);
}

std::vector<int32_t> tokens(const Loaded& l, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(3, int32_t(l.spec.config.vocab_size) - 1);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = id(rng);
  return t;
}

struct MoeReference {
  std::vector<int32_t> prompt, fed;
  double quant_effect = 0;
};

// The prompt, the CPU BF16 model's greedy continuation, and E on one fixture.
const MoeReference& reference(const std::string& fixture) {
  static std::map<std::string, MoeReference> cache;
  auto it = cache.find(fixture);
  if (it != cache.end()) return it->second;
  MoeReference r;
  auto cpu = load(backend::Device::kCpu, fixture, "");
  r.prompt = tokens(*cpu, 40, 11);
  for (int i = 0; i < 8; ++i) {
    auto fresh = load(backend::Device::kCpu, fixture, "");
    const Trace t = trace(*fresh, r.prompt, r.fed);
    r.fed.push_back(argmax(t.rows.back()));
  }
  auto bf16 = load(backend::Device::kCpu, fixture, "");
  auto fp8 = load(backend::Device::kCpu, fixture, "fp8:channel");
  r.quant_effect = mean_abs_diff(trace(*bf16, r.prompt, r.fed), trace(*fp8, r.prompt, r.fed));
  return cache.emplace(fixture, r).first->second;
}

struct Case {
  const char* fixture;
  const char* scale_fixture;  // the BF16 fixture whose E scales the bound
  const char* quant;          // online quantization, "" = as the checkpoint
  double share;               // of E
};

class CudaMoeModel : public ::testing::TestWithParam<Case> {};

TEST_P(CudaMoeModel, LogitsMatchTheCpuBackend) {
  REQUIRE_HOPPER();
  const Case c = GetParam();
  const MoeReference& ref = reference(c.scale_fixture);
  ASSERT_GT(ref.quant_effect, 0.0);
  auto cpu = load(backend::Device::kCpu, c.fixture, c.quant);
  auto gpu = load(backend::Device::kCuda, c.fixture, c.quant);
  const Trace want = trace(*cpu, ref.prompt, ref.fed);
  const Trace got = trace(*gpu, ref.prompt, ref.fed);
  ASSERT_EQ(want.rows.size(), got.rows.size());
  const double mean = mean_abs_diff(want, got), worst = max_abs_diff(want, got);
  std::printf("[ %s %s ] mean|Δ| %.5f (%.3f of E %.5f), max|Δ| %.4f\n", c.fixture, *c.quant ? c.quant : "as stored",
              mean, mean / ref.quant_effect, ref.quant_effect, worst);
  EXPECT_LE(mean, c.share * ref.quant_effect);
  expect_same_top1_and_finite(want, got, worst);
}

INSTANTIATE_TEST_SUITE_P(
    Schemes, CudaMoeModel,
    ::testing::Values(Case{"qwen3_moe", "qwen3_moe", "", 0.25}, Case{"qwen3_moe", "qwen3_moe", "fp8:tensor", 1.5},
                      Case{"qwen3_moe", "qwen3_moe", "fp8:channel", 1.5},
                      Case{"qwen3_moe", "qwen3_moe", "fp8:block", 1.5},
                      Case{"qwen3_moe", "qwen3_moe", "fp8:weight-only", 0.25},
                      Case{"qwen3_moe_nonorm", "qwen3_moe_nonorm", "", 0.25}, Case{"mixtral", "mixtral", "", 0.25},
                      Case{"mixtral", "mixtral", "fp8:tensor", 1.5}, Case{"mixtral", "mixtral", "fp8:block", 1.5},
                      Case{"ct_fp8_static_qwen3_moe", "qwen3_moe", "", 1.5},
                      Case{"ct_fp8_static_mixtral", "mixtral", "", 1.5}),
    [](const auto& param_info) {
      const Case& p = param_info.param;
      std::string n = std::string(p.fixture) + "_" + (*p.quant ? p.quant : "stored");
      std::replace(n.begin(), n.end(), ':', '_');
      std::replace(n.begin(), n.end(), '-', '_');
      return n;
    });

// The Hugging Face fp8 fixture's 16 × 16 weight blocks (a tiny model's): the CUDA backend runs
// 128 × 128 blocks only and says so by name (the CPU runs them: tests/cpp/test_moe.cpp).
TEST(CudaMoeModel, SmallWeightBlocksAreRefusedByName) {
  REQUIRE_HOPPER();
  try {
    load(backend::Device::kCuda, "hf_fp8_block_qwen3_moe", "");
    ADD_FAILURE() << "loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("FP8 weight blocks of 16x16 are not supported"), std::string::npos)
        << e.what();
  }
}

// A prompt in a batch of three (the experts' rows from all three: the GEMMs above 16 rows)
// gives its logits alone (the GEMVs), within the bound of its scheme.
TEST(CudaMoeBatch, BatchedEqualsAlone) {
  REQUIRE_HOPPER();
  for (const char* quant : {"", "fp8:channel", "fp8:block"}) {
    SCOPED_TRACE(*quant ? quant : "bf16");
    const MoeReference& ref = reference("qwen3_moe");
    auto gpu = load(backend::Device::kCuda, "qwen3_moe", quant);
    const int64_t vocab = gpu->spec.config.vocab_size;
    const Trace alone = trace(*gpu, ref.prompt, {});
    const std::vector<int32_t> other1 = tokens(*gpu, 25, 3), other2 = tokens(*gpu, 33, 4);
    const int bs = Loaded::kBlockSize;
    const int64_t per = (int64_t(ref.prompt.size()) + 40 + bs) / bs;
    std::vector<std::vector<int64_t>> tables(3);
    for (int s = 0; s < 3; ++s)
      for (int64_t b = 0; b < per; ++b) tables[size_t(s)].push_back(per + s * per + b);
    std::vector<model::SequenceInput> batch{{other1, 0, tables[0], false}, {ref.prompt, 0, tables[1], true},
                                            {other2, 0, tables[2], false}};
    std::vector<float> logits;
    gpu->model->forward(batch, *gpu->cache, logits);
    // Rows of logits: other1's last position, the prompt's every position, other2's last.
    ASSERT_EQ(logits.size(), (ref.prompt.size() + 2) * size_t(vocab));
    double sum = 0;
    for (size_t r = 0; r < ref.prompt.size(); ++r)
      for (int64_t i = 0; i < vocab; ++i)
        sum += std::abs(double(logits[size_t(int64_t(r + 1) * vocab + i)]) - double(alone.rows[r][size_t(i)]));
    const double mean = sum / double(ref.prompt.size() * size_t(vocab));
    std::printf("[ batched vs alone, %s ] mean|Δ| %.6f (%.3f of E)\n", *quant ? quant : "bf16", mean,
                mean / ref.quant_effect);
    EXPECT_LE(mean, (*quant && std::string(quant) != "fp8:weight-only" ? 1.5 : 0.25) * ref.quant_effect);
  }
}

TEST(CudaMoeModel, GroupedEqualsPerExpert) {
  REQUIRE_HOPPER();
  const MoeReference& ref = reference("qwen3_moe");
  for (const char* quant : {"", "fp8:tensor", "fp8:channel", "fp8:block", "fp8:weight-only"}) {
    SCOPED_TRACE(*quant ? quant : "bf16");
    ASSERT_EQ(unsetenv("FP8LM_CUDA_MOE_GROUPED"), 0);
    auto grouped = load(backend::Device::kCuda, "qwen3_moe", quant);
    ASSERT_EQ(setenv("FP8LM_CUDA_MOE_GROUPED", "0", 1), 0);
    auto per_expert = load(backend::Device::kCuda, "qwen3_moe", quant);
    ASSERT_EQ(unsetenv("FP8LM_CUDA_MOE_GROUPED"), 0);
    const Trace a = trace(*grouped, ref.prompt, ref.fed), b = trace(*per_expert, ref.prompt, ref.fed);
    const double mean = mean_abs_diff(a, b);
    std::printf("[ grouped vs per expert, %s ] mean|Δ| %.6f (%.3f of E)\n", *quant ? quant : "bf16", mean,
                mean / ref.quant_effect);
    const bool w8a8 = *quant && std::string(quant) != "fp8:weight-only";
    EXPECT_LE(mean, (w8a8 ? 1.5 : 0.25) * ref.quant_effect);
    expect_same_top1_and_finite(b, a, max_abs_diff(a, b));
  }
}

// The experts as grouped CUTLASS GEMMs (CudaOpsOptions::moe_gemm_min_rows = 0: every block,
// prefill and decode) against the grouped GEMV / per-expert forms (FP8LM_CUDA_MOE_GEMM=0) and
// the CPU, for the W8A8 schemes it takes on these shapes (per tensor, per channel,
// compressed-tensors' static scales; the fixtures are too narrow for 128 × 128 blocks:
// test_cuda_grouped_gemm.cpp).
TEST(CudaMoeModel, GemmEqualsPerExpert) {
  REQUIRE_HOPPER();
  struct GemmCase {
    const char *fixture, *scale_fixture, *quant;
  };
  for (const GemmCase c : {GemmCase{"qwen3_moe", "qwen3_moe", "fp8:tensor"}, GemmCase{"qwen3_moe", "qwen3_moe", "fp8:channel"},
                           GemmCase{"mixtral", "mixtral", "fp8:tensor"},
                           GemmCase{"ct_fp8_static_qwen3_moe", "qwen3_moe", ""},
                           GemmCase{"ct_fp8_static_mixtral", "mixtral", ""}}) {
    SCOPED_TRACE(std::string(c.fixture) + " " + c.quant);
    const MoeReference& ref = reference(c.scale_fixture);
    cuda::CudaOpsOptions every_block;
    every_block.moe_gemm_min_rows = 0;
    auto gemm = load(backend::Device::kCuda, c.fixture, c.quant, every_block);
    ASSERT_EQ(setenv("FP8LM_CUDA_MOE_GEMM", "0", 1), 0);
    auto without = load(backend::Device::kCuda, c.fixture, c.quant);
    ASSERT_EQ(unsetenv("FP8LM_CUDA_MOE_GEMM"), 0);
    auto cpu = load(backend::Device::kCpu, c.fixture, c.quant);
    const Trace a = trace(*gemm, ref.prompt, ref.fed), b = trace(*without, ref.prompt, ref.fed),
                want = trace(*cpu, ref.prompt, ref.fed);
    const double mean = mean_abs_diff(a, b), vs_cpu = mean_abs_diff(want, a);
    std::printf("[ grouped GEMM, %s %s ] vs without mean|Δ| %.6f (%.3f of E), vs CPU %.3f of E\n", c.fixture, c.quant,
                mean, mean / ref.quant_effect, vs_cpu / ref.quant_effect);
    EXPECT_GT(mean, 0.0);  // the GEMM ran: its rounding differs from the GEMV's somewhere
    EXPECT_LE(mean, 1.5 * ref.quant_effect);
    EXPECT_LE(vs_cpu, 1.5 * ref.quant_effect);
    expect_same_top1_and_finite(b, a, max_abs_diff(a, b));
  }
}

}  // namespace
}  // namespace fp8lm::test
