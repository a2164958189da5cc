// The sparse MoE block on the CPU backend, below the whole-model logits test
// (test_model_logits: Qwen3-MoE and Mixtral against transformers, and in each
// online FP8 scheme against a PyTorch emulation): the routing rule on
// hand-made router logits, the block in every expert scheme against a
// row-at-a-time reference written from the definition, FP8 experts loaded
// online, and what is refused by name (experts of one layer with different
// schemes, MoE on CUDA: issue 20).
#include <gtest/gtest.h>

#include <algorithm>
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
#include "cpp/test_util.h"
#include "engine/runtime.h"
#include "io/load_overrides.h"
#include "numerics/silu.h"
#include "weights/quantize_weight.h"

namespace fp8lm::test {
namespace {

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

// Each expert projection quantized with `scheme` (quantize_weight, as the
// loader's --quantization fp8 does); static input scales differ per expert.
struct QuantizedExperts {
  std::vector<weights::LinearWeight> gate, up, down;
  QuantizedExperts(const RandomExperts& ex, const LinearQuantScheme& scheme) {
    float input_scale = 0.01f;
    auto q = [&](const weights::LinearWeight& w) {
      if (!scheme.quantized) return w;
      const MatrixView v = MatrixView::bf16(static_cast<const uint16_t*>(w.data), w.n, w.k);
      input_scale *= 1.25f;
      const bool is_static = scheme.activation == ActivationQuant::kStaticTensor;
      return weights::from_quantized(weights::quantize_weight(v, scheme), scheme, is_static ? input_scale : 0.0f);
    };
    for (size_t e = 0; e < ex.gate.size(); ++e) {
      gate.push_back(q(ex.gate[e]));
      up.push_back(q(ex.up[e]));
      down.push_back(q(ex.down[e]));
    }
  }
};

struct NamedScheme {
  const char* name;
  LinearQuantScheme scheme;
};

// Every scheme the CPU linear plans whose activations are quantized row by row
// (or not at all), so a row's result is its own whatever the batch.
std::vector<NamedScheme> row_wise_schemes() {
  std::vector<NamedScheme> out = {{"bf16", LinearQuantScheme{}},
                                  {"channel_token", io::online_scheme(io::OnlineQuant::kChannelToken)},
                                  {"block_group", io::online_scheme(io::OnlineQuant::kBlock)},
                                  {"weight_only", io::online_scheme(io::OnlineQuant::kWeightOnly)}};
  LinearQuantScheme e5m2 = io::online_scheme(io::OnlineQuant::kChannelToken);
  e5m2.weight_format = Fp8Format::kE5M2;
  out.push_back({"e5m2_channel_token", e5m2});
  LinearQuantScheme e5m2_only = io::online_scheme(io::OnlineQuant::kWeightOnly);
  e5m2_only.weight_format = Fp8Format::kE5M2;
  out.push_back({"e5m2_weight_only", e5m2_only});
  LinearQuantScheme stat = io::online_scheme(io::OnlineQuant::kPerTensor);
  stat.activation = ActivationQuant::kStaticTensor;
  out.push_back({"tensor_static", stat});
  return out;
}

// The block from its definition, one row at a time: every expert of the row's
// top-k, its weighted output added in increasing expert order from zero. A
// static input scale is the largest of the block's experts (gate and up
// together, down apart), as vLLM loads one per layer.
TEST(MoeBlock, EqualsRowByRowDefinition) {
  constexpr int kExperts = 6, kTopK = 2;
  constexpr int64_t kHidden = 40, kWidth = 24, kRows = 13;
  std::mt19937 rng(7);
  RandomExperts ex(kExperts, kHidden, kWidth, rng);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(size_t(kRows * kHidden)), logits(size_t(kRows * kExperts));
  for (float& v : x) v = dist(rng);
  for (float& v : logits) v = 2.0f * dist(rng);

  for (const NamedScheme& named : row_wise_schemes()) {
    SCOPED_TRACE(named.name);
    QuantizedExperts qx(ex, named.scheme);
    const cpu::MoeExperts planned = cpu::plan_moe_experts(qx.gate, qx.up, qx.down);
    if (named.scheme.activation == ActivationQuant::kStaticTensor) {
      float up_max = 0.0f, down_max = 0.0f;
      for (size_t e = 0; e < size_t(kExperts); ++e) {
        up_max = std::max({up_max, qx.gate[e].input_scale, qx.up[e].input_scale});
        down_max = std::max(down_max, qx.down[e].input_scale);
      }
      ASSERT_LT(qx.gate[0].input_scale, up_max);  // the experts' scales do differ
      for (size_t e = 0; e < size_t(kExperts); ++e) {
        qx.gate[e].input_scale = qx.up[e].input_scale = up_max;
        qx.down[e].input_scale = down_max;
      }
    }
    for (const bool renormalize : {false, true}) {
      SCOPED_TRACE(renormalize ? "renormalised" : "plain");
      const backend::MoeRouting routing{kTopK, renormalize};
      ThreadPool pool(2);
      cpu::MoeScratch scratch;
      std::vector<float> got(x.size());
      cpu::moe(x, kRows, logits, planned, routing, {}, got, &pool, KernelChoice::kAuto, scratch);

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
          cpu::linear(row, 1, qx.gate[size_t(e)], g);
          cpu::linear(row, 1, qx.up[size_t(e)], u);
          for (int64_t i = 0; i < kWidth; ++i) a[size_t(i)] = silu_mul_f32(g[size_t(i)], u[size_t(i)]);
          cpu::linear(a, 1, qx.down[size_t(e)], y);
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
}

// A dynamic per-tensor activation scale spans the whole call (vLLM's fused
// MoE): a row's result changes when a row of larger amax joins the call, and
// not when one of the same amax does. That the scales are the ones over every
// row (gate/up) and every routed row (down) the model fixtures check against
// the PyTorch emulation (test_model_logits, the MoE fp8_tensor cases).
TEST(MoeBlock, DynamicTensorScaleSpansTheCall) {
  constexpr int kExperts = 4, kTopK = 2;
  constexpr int64_t kHidden = 32, kWidth = 16, kRows = 5;
  std::mt19937 rng(3);
  RandomExperts ex(kExperts, kHidden, kWidth, rng);
  const QuantizedExperts qx(ex, io::online_scheme(io::OnlineQuant::kPerTensor));
  const cpu::MoeExperts planned = cpu::plan_moe_experts(qx.gate, qx.up, qx.down);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(size_t(kRows * kHidden)), logits(size_t(kRows * kExperts));
  for (float& v : x) v = dist(rng);
  for (float& v : logits) v = 2.0f * dist(rng);
  x[size_t(4 * kHidden)] = 40.0f;  // row 4 holds the call's amax
  const backend::MoeRouting routing{kTopK, true};
  ThreadPool pool(1);
  cpu::MoeScratch scratch;
  std::vector<float> all(x.size());
  std::vector<float> first(static_cast<size_t>(kHidden));
  cpu::moe(x, kRows, logits, planned, routing, {}, all, &pool, KernelChoice::kAuto, scratch);
  cpu::moe(std::span(x).first(size_t(kHidden)), 1, std::span(logits).first(size_t(kExperts)), planned, routing, {}, first,
           &pool, KernelChoice::kAuto, scratch);
  EXPECT_NE(std::memcmp(all.data(), first.data(), first.size() * sizeof(float)), 0);
  // Without the large row the call's scale is row 0's own again: rows 0-3 as
  // one call equal row 0 alone only if row 0 holds their amax, so compare with
  // a call of row 0 twice (same amax, same scales).
  std::vector<float> twice_x(x.begin(), x.begin() + 2 * kHidden), twice_l(logits.begin(), logits.begin() + 2 * kExperts);
  std::copy_n(x.begin(), kHidden, twice_x.begin() + kHidden);
  std::copy_n(logits.begin(), kExperts, twice_l.begin() + kExperts);
  std::vector<float> twice(twice_x.size());
  cpu::moe(twice_x, 2, twice_l, planned, routing, {}, twice, &pool, KernelChoice::kAuto, scratch);
  EXPECT_EQ(std::memcmp(twice.data(), first.data(), first.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(twice.data() + kHidden, first.data(), first.size() * sizeof(float)), 0);
}

TEST(MoeBlock, RefusesMismatchedExperts) {
  std::mt19937 rng(1);
  RandomExperts a(2, 16, 8, rng), b(2, 16, 12, rng);
  std::vector<weights::LinearWeight> up = a.up;
  up[1] = b.up[1];  // [12, 16] among [8, 16]
  EXPECT_NE(error_of([&] { cpu::plan_moe_experts(a.gate, up, a.down); }).find("expert 1 up"), std::string::npos);
  EXPECT_THROW(cpu::plan_moe_experts(a.gate, a.up, std::span(a.down).first(1)), Error);
}

TEST(MoeBlock, RefusesMixedExpertSchemes) {
  std::mt19937 rng(2);
  RandomExperts ex(3, 16, 8, rng);
  QuantizedExperts block(ex, io::online_scheme(io::OnlineQuant::kBlock));
  const QuantizedExperts channel(ex, io::online_scheme(io::OnlineQuant::kChannelToken));
  block.down[2] = channel.down[2];
  const std::string e = error_of([&] { cpu::plan_moe_experts(block.gate, block.up, block.down); });
  EXPECT_NE(e.find("expert 2 down"), std::string::npos) << e;
  EXPECT_NE(e.find("one quantization scheme"), std::string::npos) << e;
  block.down[2] = ex.down[2];  // BF16 among FP8
  EXPECT_THROW(cpu::plan_moe_experts(block.gate, block.up, block.down), Error);
}

// --quantization fp8 of a BF16 MoE checkpoint: every expert (and nothing of
// the router) quantized while loading, each expert's FP8 codes its own copy,
// none pointing into the checkpoint's mapping (whose BF16 pages are dropped
// after each tensor is quantized: loader::load_host_weights).
TEST(MoeOnlineFp8, ExpertsQuantizedAtLoadRouterKept) {
  for (const char* dir : {"moe/qwen3_moe", "moe/mixtral"}) {
    SCOPED_TRACE(dir);
    io::LoadOverrides o;
    o.quantization = io::OnlineQuant::kBlock;
    const io::ModelSpec spec = io::read_model_spec(model_fixture_dir(dir), o);
    const loader::HostModelWeights w = loader::load_host_weights(spec);
    int moe_layers = 0;
    for (const loader::HostLayer& l : w.layers) {
      if (!l.moe) continue;
      ++moe_layers;
      EXPECT_EQ(l.moe->router.element, ElementType::kBF16);
      EXPECT_EQ(l.moe->router.activation, ActivationQuant::kNone);
      for (const auto* experts : {&l.moe->gate, &l.moe->up, &l.moe->down})
        for (const weights::LinearWeight& x : *experts) {
          EXPECT_EQ(x.element, ElementType::kE4M3);
          EXPECT_EQ(x.scale_layout.granularity, Granularity::kBlock);
          EXPECT_EQ(x.activation, ActivationQuant::kDynamicGroup);
          EXPECT_NE(x.owner, nullptr);
          for (const io::LinearLayerSpec& ls : spec.linears) {
            const std::span<const std::byte> b = spec.files->bytes(ls.weight_name);
            const auto* p = static_cast<const std::byte*>(x.data);
            EXPECT_FALSE(p >= b.data() && p < b.data() + b.size()) << "expert codes inside " << ls.weight_name;
          }
        }
    }
    EXPECT_GT(moe_layers, 0);
  }
}

// A layer's experts run as one block with one scheme: a split is named at load.
TEST(MoeRefusals, ExpertsOfOneLayerWithTwoSchemes) {
  io::LoadOverrides o;
  o.quantization = io::OnlineQuant::kChannelToken;
  o.keep_bf16 = {"model.layers.0.mlp.experts.3.up_proj"};
  const std::string e = error_of([&] {
    loader::load_host_weights(io::read_model_spec(model_fixture_dir("moe/qwen3_moe"), o));
  });
  EXPECT_NE(e.find("the experts of layer 0 do not share one quantization scheme"), std::string::npos) << e;
  EXPECT_NE(e.find("model.layers.0.mlp.experts.3.up_proj"), std::string::npos) << e;
  // Keeping a whole expert block in BF16 is fine.
  o.keep_bf16 = {"model.layers.0.mlp.experts"};
  const loader::HostModelWeights w = loader::load_host_weights(io::read_model_spec(model_fixture_dir("moe/qwen3_moe"), o));
  EXPECT_EQ(w.layers[0].moe->up[3].element, ElementType::kBF16);
  EXPECT_EQ(w.layers[2].moe->up[3].element, ElementType::kE4M3);
}

}  // namespace
}  // namespace fp8lm::test
