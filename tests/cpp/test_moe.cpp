// The sparse MoE block on the CPU backend, below the whole-model logits test
// (test_model_logits: Qwen3-MoE and Mixtral against transformers): the routing
// rule on hand-made router logits, the block against a row-at-a-time
// reference written from the definition, and what is refused by name (FP8
// MoE, MoE on CUDA: issue 20).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/linear.h"
#include "backend/cpu/moe.h"
#include "common/error.h"
#include "cpp/checkpoint_fixtures.h"
#include "cpp/model_fixtures.h"
#include "engine/runtime.h"
#include "numerics/silu.h"

namespace fp8lm::test {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(MoeRouting, SoftmaxTopKAndRenormalisation) {
  // Probabilities ∝ e^0, e^2, e^2, e^1: experts 1 and 2 tie at the top (the lower id first).
  const float logits[] = {0.0f, 2.0f, 2.0f, 1.0f};
  int32_t ids[3];
  float w[3];
  cpu::route_row(logits, 4, {3, false}, ids, w);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 2);
  EXPECT_EQ(ids[2], 3);
  const double z = 1.0 + 2.0 * std::exp(2.0) + std::exp(1.0);
  EXPECT_NEAR(w[0], std::exp(2.0) / z, 1e-7);
  EXPECT_EQ(w[0], w[1]);
  EXPECT_NEAR(w[2], std::exp(1.0) / z, 1e-7);
  // Renormalised over the top 3: they sum to 1, in the same ratios.
  cpu::route_row(logits, 4, {3, true}, ids, w);
  const double top = 2.0 * std::exp(2.0) + std::exp(1.0);
  EXPECT_NEAR(w[0], std::exp(2.0) / top, 1e-7);
  EXPECT_NEAR(w[2], std::exp(1.0) / top, 1e-7);
  // top-1 renormalised is weight 1 exactly.
  cpu::route_row(logits, 4, {1, true}, ids, w);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(w[0], 1.0f);
}

// Random BF16 expert weights in storage that outlives the test.
struct RandomExperts {
  std::vector<std::vector<uint16_t>> storage;
  std::vector<weights::LinearWeight> gate, up, down;
  RandomExperts(int experts, int64_t h, int64_t width, std::mt19937& rng) {
    std::normal_distribution<float> dist(0.0f, 0.2f);
    auto make = [&](int64_t n, int64_t k) {
      std::vector<uint16_t>& s = storage.emplace_back(size_t(n * k));
      for (uint16_t& b : s) {
        const float f = dist(rng);
        uint32_t u;
        std::memcpy(&u, &f, 4);
        b = uint16_t(u >> 16);  // truncation is fine: any BF16 values will do
      }
      return weights::high_precision(ElementType::kBF16, s.data(), n, k);
    };
    storage.reserve(size_t(3 * experts));
    for (int e = 0; e < experts; ++e) {
      gate.push_back(make(width, h));
      up.push_back(make(width, h));
      down.push_back(make(h, width));
    }
  }
};

// The block from its definition, one row at a time: every expert of the row's
// top-k, its weighted output added in increasing expert order from zero.
TEST(MoeBlock, EqualsRowByRowDefinition) {
  constexpr int kExperts = 6, kTopK = 2;
  constexpr int64_t kHidden = 40, kWidth = 24, kRows = 13;
  std::mt19937 rng(7);
  RandomExperts ex(kExperts, kHidden, kWidth, rng);
  const cpu::MoeExperts planned = cpu::plan_moe_experts(ex.gate, ex.up, ex.down);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(size_t(kRows * kHidden)), logits(size_t(kRows * kExperts));
  for (float& v : x) v = dist(rng);
  for (float& v : logits) v = 2.0f * dist(rng);

  for (const bool renormalize : {false, true}) {
    SCOPED_TRACE(renormalize ? "renormalised" : "plain");
    const backend::MoeRouting routing{kTopK, renormalize};
    ThreadPool pool(2);
    cpu::MoeScratch scratch;
    std::vector<float> got(x.size());
    cpu::moe(x, kRows, logits, planned, routing, got, &pool, KernelChoice::kAuto, scratch);

    for (int64_t r = 0; r < kRows; ++r) {
      int32_t ids[kTopK];
      float w[kTopK];
      cpu::route_row(logits.data() + r * kExperts, kExperts, routing, ids, w);
      std::vector<float> want(size_t(kHidden), 0.0f);
      for (int32_t e = 0; e < kExperts; ++e) {
        int j = 0;
        while (j < kTopK && ids[j] != e) ++j;
        if (j == kTopK) continue;
        const std::span<const float> row(x.data() + r * kHidden, size_t(kHidden));
        std::vector<float> g(static_cast<size_t>(kWidth)), u(static_cast<size_t>(kWidth));
        std::vector<float> a(static_cast<size_t>(kWidth)), y(static_cast<size_t>(kHidden));
        cpu::linear(row, 1, ex.gate[size_t(e)], g);
        cpu::linear(row, 1, ex.up[size_t(e)], u);
        for (int64_t i = 0; i < kWidth; ++i) a[size_t(i)] = silu_mul_f32(g[size_t(i)], u[size_t(i)]);
        cpu::linear(a, 1, ex.down[size_t(e)], y);
        for (int64_t c = 0; c < kHidden; ++c) {
          const float term = y[size_t(c)] * w[j];
          want[size_t(c)] += term;
        }
      }
      EXPECT_EQ(std::memcmp(want.data(), got.data() + r * kHidden, size_t(kHidden) * sizeof(float)), 0)
          << "row " << r;
    }
  }
}

TEST(MoeBlock, RefusesMismatchedExperts) {
  std::mt19937 rng(1);
  RandomExperts a(2, 16, 8, rng), b(2, 16, 12, rng);
  std::vector<weights::LinearWeight> up = a.up;
  up[1] = b.up[1];  // [12, 16] among [8, 16]
  EXPECT_NE(error_of([&] { cpu::plan_moe_experts(a.gate, up, a.down); }).find("expert 1 up"), std::string::npos);
  EXPECT_THROW(cpu::plan_moe_experts(a.gate, a.up, std::span(a.down).first(1)), Error);
}

// FP8 MoE is issue 20's next step: refused by name, never run untested.
TEST(MoeRefusals, Fp8MoeIsNamed) {
  const auto moe = model_fixture_dir("moe/qwen3_moe");
  io::LoadOverrides o;
  o.quantization = io::parse_online_quant("fp8:channel");
  const std::string online = error_of([&] { loader::load_host_weights(io::read_model_spec(moe, o)); });
  EXPECT_NE(online.find("Qwen3MoeForCausalLM"), std::string::npos) << online;
  EXPECT_NE(online.find("issue 20"), std::string::npos) << online;
  const std::string stored =
      error_of([&] { loader::load_host_weights(io::read_model_spec(checkpoint_fixture("ct_fp8_block_qwen3_moe"))); });
  EXPECT_NE(stored.find("compressed-tensors"), std::string::npos) << stored;
  EXPECT_NE(stored.find("issue 20"), std::string::npos) << stored;
}

TEST(MoeRefusals, CudaIsNamedBeforeLoading) {
  engine::RuntimeOptions o;
  o.device = backend::Device::kCuda;
  const std::string e = error_of([&] { engine::Runtime::load(model_fixture_dir("moe/mixtral"), {}, o); });
  EXPECT_NE(e.find("MixtralForCausalLM: MoE on CUDA is not implemented yet (issue 20)"), std::string::npos) << e;
}

}  // namespace
}  // namespace fp8lm::test
