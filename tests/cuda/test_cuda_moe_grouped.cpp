// The grouped MoE path's kernels (src/backend/cuda/moe/moe_kernels.h moe_route_group, moe_route_sort,
// fp8_gemv.h fp8_gemv_grouped) against the per-call forms they group:
//
// * moe_route_group routes every row as moe_route does (the same experts and weights, a row's
//   pairs sorted by expert id) and its grouping is consistent: positions a permutation, each
//   expert's pairs contiguous in increasing expert order, slots of at most 16 that cover them;
//   moe_route_sort (any number of pairs) the same, with each expert's range instead of slots.
// * fp8_gemv_grouped equals, byte for byte, fp8_gemv run slot by slot on the gathered rows with
//   the grouped plan (fp8_gemv_grouped_plan), for W8A16, W8A8 with given codes (per token,
//   1 × 128 groups, read through the permutation) and W8A8 quantized while staged — the
//   gather, the slot binding and the per-slot offsets are what differ, and any slip in them
//   moves whole rows. fp8_gemv itself is checked against the CPU in test_cuda_gemv.cpp.
// * bf16_gemv_grouped (BF16 experts) equals a float64 product on the host per slot row within
//   the output's BF16 rounding plus float32 summation (2^-8·|y| + 1e-4·Σ|w·x|): a wrong row,
//   expert or slot misses by the size of Σ|w·x|/√k.
//
// The whole MoE block on the fixtures, grouped and per expert, is test_cuda_moe.cpp's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/gemv/bf16_gemv_grouped.h"
#include "backend/cuda/common/check.h"
#include "backend/cuda/gemv/fp8_gemv.h"
#include "backend/cuda/moe/moe_kernels.h"
#include "common/error.h"
#include "cuda/cuda_test_util.h"
#include "numerics/fp8_format.h"

namespace fp8lm::test {
namespace {

struct Grouping {
  int64_t rows = 0;
  int top_k = 0, experts = 0, max_slots = 0;
  std::vector<int32_t> slots, perm, pos;
  std::vector<float> weights;
  DeviceVector<int32_t> d_slots, d_perm, d_pos;
  DeviceVector<float> d_weights;
  Grouping(int64_t r, int k, int e)
      : rows(r),
        top_k(k),
        experts(e),
        max_slots(cuda::moe_group_max_slots(r * k, e, 16)),
        d_slots(size_t(1 + 3 * max_slots)),
        d_perm(size_t(r * k)),
        d_pos(size_t(r * k)),
        d_weights(size_t(r * k)) {}
  cuda::MoeGroups device() const { return {d_slots.ptr, max_slots, d_perm.ptr, d_pos.ptr, d_weights.ptr}; }
  void download() {
    slots = d_slots.download();
    perm = d_perm.download();
    pos = d_pos.download();
    weights = d_weights.download();
  }
  int count() const { return slots[0]; }
  int expert(int s) const { return slots[size_t(1 + s)]; }
  int first(int s) const { return slots[size_t(1 + max_slots + s)]; }
  int slot_rows(int s) const { return slots[size_t(1 + 2 * max_slots + s)]; }
};

std::vector<uint16_t> random_logits(int64_t rows, int experts, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<uint16_t> l(size_t(rows * experts));
  for (uint16_t& v : l) v = float_to_bf16(normal(rng));
  return l;
}

std::unique_ptr<Grouping> route_group(const DeviceVector<uint16_t>& logits, int64_t rows, int experts, int top_k) {
  auto g = std::make_unique<Grouping>(rows, top_k, experts);
  cuda::moe_route_group(reinterpret_cast<const __nv_bfloat16*>(logits.ptr), rows, experts, top_k, true, 16,
                        g->device(), nullptr);
  FP8LM_CUDA_CHECK(cudaDeviceSynchronize());
  g->download();
  return g;
}

// Each row's pairs: moe_route's experts and weights (ids, w) sorted by expert id, at positions of
// their expert (expert_at) whose perm names the row; every position used once.
void check_pairs(int64_t rows, int top_k, const std::vector<int32_t>& ids, const std::vector<float>& w,
                 const std::vector<int32_t>& expert_at, const std::vector<int32_t>& perm,
                 const std::vector<int32_t>& pos, const std::vector<float>& weights) {
  const int64_t pairs = rows * top_k;
  std::vector<int> used(size_t(pairs), 0);
  int64_t bad = 0;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<std::pair<int32_t, float>> want;
    for (int j = 0; j < top_k; ++j) want.emplace_back(ids[size_t(r * top_k + j)], w[size_t(r * top_k + j)]);
    std::sort(want.begin(), want.end());
    for (int j = 0; j < top_k; ++j) {
      const size_t i = size_t(r * top_k + j);
      const int32_t at = pos[i];
      const bool ok = at >= 0 && at < pairs && expert_at[size_t(at)] == want[size_t(j)].first &&
                      perm[size_t(at)] == r && weights[i] == want[size_t(j)].second;
      if (ok) ++used[size_t(at)];
      if (!ok && bad++ < 3)
        ADD_FAILURE() << "row " << r << " pair " << j << ": position " << at << ", weight " << weights[i]
                      << "; moe_route: expert " << want[size_t(j)].first << " weight " << want[size_t(j)].second;
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_TRUE(std::all_of(used.begin(), used.end(), [](int u) { return u == 1; }));
}

TEST(CudaMoeGroup, RoutesAsMoeRouteAndGroupsConsistently) {
  REQUIRE_HOPPER();
  std::mt19937 rng(5);
  struct Shape {
    int64_t rows;
    int experts, top_k;
  };
  for (const Shape s : {Shape{1, 128, 8}, Shape{3, 8, 2}, Shape{64, 128, 8}, Shape{512, 128, 8}, Shape{40, 8, 2},
                        Shape{2048, 8, 2}, Shape{7, 1024, 1}}) {
    SCOPED_TRACE("rows " + std::to_string(s.rows) + " experts " + std::to_string(s.experts) + " top_k " +
                 std::to_string(s.top_k));
    const int64_t pairs = s.rows * s.top_k;
    DeviceVector<uint16_t> logits(random_logits(s.rows, s.experts, rng));
    DeviceVector<int32_t> d_ids{size_t(pairs)};
    DeviceVector<float> d_w{size_t(pairs)};
    cuda::moe_route(reinterpret_cast<const __nv_bfloat16*>(logits.ptr), s.rows, s.experts, s.top_k, true, d_ids.ptr,
                    d_w.ptr, nullptr);
    const auto gp = route_group(logits, s.rows, s.experts, s.top_k);
    const Grouping& g = *gp;
    const std::vector<int32_t> ids = d_ids.download();
    const std::vector<float> w = d_w.download();

    // Slots: within the table, each of at most 16 pairs, one expert, in increasing order,
    // contiguous from position 0; the expert of every position.
    ASSERT_GE(g.count(), 1);
    ASSERT_LE(g.count(), g.max_slots);
    std::vector<int32_t> expert_at(size_t(pairs), -1);
    int next = 0, last_expert = -1;
    for (int sl = 0; sl < g.count(); ++sl) {
      ASSERT_EQ(g.first(sl), next) << "slot " << sl;
      ASSERT_GE(g.slot_rows(sl), 1);
      ASSERT_LE(g.slot_rows(sl), 16);
      ASSERT_GE(g.expert(sl), last_expert);
      ASSERT_LT(g.expert(sl), s.experts);
      for (int i = 0; i < g.slot_rows(sl); ++i) expert_at[size_t(next + i)] = g.expert(sl);
      next += g.slot_rows(sl);
      last_expert = g.expert(sl);
    }
    ASSERT_EQ(next, pairs);
    check_pairs(s.rows, s.top_k, ids, w, expert_at, g.perm, g.pos, g.weights);
  }
}

// moe_route_sort (blocks of any size, for the grouped GEMM): the same pairs as moe_route, each
// expert's pairs at [expert_start[e], expert_start[e + 1]).
TEST(CudaMoeGroup, SortRoutesAsMoeRouteAndGroupsConsistently) {
  REQUIRE_HOPPER();
  std::mt19937 rng(9);
  struct Shape {
    int64_t rows;
    int experts, top_k;
  };
  for (const Shape s : {Shape{1, 128, 8}, Shape{700, 128, 8}, Shape{3000, 8, 2}, Shape{5, 1024, 4}}) {
    SCOPED_TRACE("rows " + std::to_string(s.rows) + " experts " + std::to_string(s.experts) + " top_k " +
                 std::to_string(s.top_k));
    const int64_t pairs = s.rows * s.top_k;
    DeviceVector<uint16_t> logits(random_logits(s.rows, s.experts, rng));
    DeviceVector<int32_t> d_ids{size_t(pairs)}, d_perm{size_t(pairs)}, d_pos{size_t(pairs)},
        d_start{size_t(s.experts) + 1};
    DeviceVector<float> d_w{size_t(pairs)}, d_weights{size_t(pairs)};
    DeviceVector<uint8_t> scratch{cuda::moe_route_sort_scratch_bytes(pairs, s.experts)};
    const auto* l = reinterpret_cast<const __nv_bfloat16*>(logits.ptr);
    cuda::moe_route(l, s.rows, s.experts, s.top_k, true, d_ids.ptr, d_w.ptr, nullptr);
    cuda::MoeGroups g;
    g.perm = d_perm.ptr, g.pos = d_pos.ptr, g.weights = d_weights.ptr, g.expert_start = d_start.ptr;
    cuda::moe_route_sort(l, s.rows, s.experts, s.top_k, true, g, scratch.ptr, nullptr);
    FP8LM_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<int32_t> start = d_start.download();
    ASSERT_EQ(start[0], 0);
    ASSERT_EQ(start.back(), pairs);
    std::vector<int32_t> expert_at(size_t(pairs), -1);
    for (int e = 0; e < s.experts; ++e) {
      ASSERT_LE(start[size_t(e)], start[size_t(e) + 1]);
      for (int32_t at = start[size_t(e)]; at < start[size_t(e) + 1]; ++at) expert_at[size_t(at)] = e;
    }
    check_pairs(s.rows, s.top_k, d_ids.download(), d_w.download(), expert_at, d_perm.download(), d_pos.download(),
                d_weights.download());
  }
}

TEST(CudaMoeGroup, BadArgumentsAreNamed) {
  REQUIRE_HOPPER();
  DeviceVector<uint16_t> logits(16);
  Grouping g(1, 2, 8);
  auto call = [&](int64_t rows, int experts, int k, int max_slots) {
    cuda::MoeGroups d = g.device();
    d.max_slots = max_slots;
    cuda::moe_route_group(reinterpret_cast<const __nv_bfloat16*>(logits.ptr), rows, experts, k, true, 16, d, nullptr);
  };
  auto message = [&](auto f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { call(1, 0, 1, g.max_slots); }).find("experts"), std::string::npos);
  EXPECT_NE(message([&] { call(1, 8, 9, g.max_slots); }).find("top_k"), std::string::npos);
  EXPECT_NE(message([&] { call(4097, 8, 1, 9999); }).find("pairs"), std::string::npos);
  EXPECT_NE(message([&] { call(1, 8, 2, 1); }).find("slot table"), std::string::npos);
}

// Random E4M3 codes (no NaN) and positive scales.
std::vector<uint8_t> random_codes(size_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<uint8_t> c(n);
  for (uint8_t& v : c) {
    v = uint8_t(byte(rng));
    if ((v & 0x7F) == 0x7F) v = 0x3C;
  }
  return c;
}

// `experts` random FP8 experts [n, k] with `nscales` scales each, and their device pointer table
// [codes[E] | scales[E]] as the grouped GEMV reads it.
struct RandomExperts {
  std::vector<std::unique_ptr<DeviceVector<uint8_t>>> w;
  std::vector<std::unique_ptr<DeviceVector<float>>> ws;
  std::unique_ptr<DeviceVector<const void*>> table;
  RandomExperts(int experts, int64_t n, int64_t k, size_t nscales, std::mt19937& rng) {
    std::vector<const void*> ptrs;
    for (int e = 0; e < experts; ++e) {
      w.push_back(std::make_unique<DeviceVector<uint8_t>>(random_codes(size_t(n * k), rng)));
      ws.push_back(std::make_unique<DeviceVector<float>>(random_scales(nscales, rng)));
    }
    for (const auto& v : w) ptrs.push_back(v->ptr);
    for (const auto& v : ws) ptrs.push_back(v->ptr);
    table = std::make_unique<DeviceVector<const void*>>(ptrs);
  }
};

enum class Act { kW8A16, kCodesToken, kCodesGroup, kQuantizeToken, kQuantizeGroup };

void check_grouped_gemv(int64_t rows, int experts, int top_k, int64_t n, int64_t k, cuda::WeightScaleLayout wl,
                        Act act, std::mt19937& rng) {
  SCOPED_TRACE("rows " + std::to_string(rows) + " n " + std::to_string(n) + " k " + std::to_string(k) + " act " +
               std::to_string(int(act)) + " weight scales " + std::to_string(int(wl)));
  DeviceVector<uint16_t> logits(random_logits(rows, experts, rng));
  const auto gp = route_group(logits, rows, experts, top_k);
  const Grouping& g = *gp;
  const int64_t pairs = rows * top_k, chunks = (k + 127) / 128;
  const size_t nscales = wl == cuda::WeightScaleLayout::kTensor    ? 1
                         : wl == cuda::WeightScaleLayout::kChannel ? size_t(n)
                                                                   : size_t(((n + 127) / 128) * chunks);
  const RandomExperts ex(experts, n, k, nscales, rng);
  const auto& w = ex.w;
  const auto& ws = ex.ws;
  const DeviceVector<const void*>& d_table = *ex.table;

  // x [rows, k] BF16, its codes and their token / group scales.
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> x(size_t(rows * k));
  for (uint16_t& v : x) v = float_to_bf16(normal(rng));
  DeviceVector<uint16_t> d_x(x);
  DeviceVector<uint8_t> d_codes(random_codes(size_t(rows * k), rng));
  const bool group = act == Act::kCodesGroup || act == Act::kQuantizeGroup;
  DeviceVector<float> d_xs(random_scales(size_t(rows * (group ? chunks : 1)), rng));

  cuda::Fp8GemvArgs a;
  a.m = std::min<int64_t>(rows, 16), a.n = n, a.k = k, a.w_layout = wl;
  switch (act) {
    case Act::kW8A16: a.x = reinterpret_cast<const __nv_bfloat16*>(d_x.ptr); break;
    case Act::kCodesToken:
    case Act::kCodesGroup:
      a.x_codes = d_codes.ptr;
      a.x_scale = d_xs.ptr;
      a.x_layout = group ? cuda::ActivationScaleLayout::kGroup128 : cuda::ActivationScaleLayout::kToken;
      break;
    case Act::kQuantizeToken:
    case Act::kQuantizeGroup:
      a.x = reinterpret_cast<const __nv_bfloat16*>(d_x.ptr);
      a.quantize_x = true;
      a.x_layout = group ? cuda::ActivationScaleLayout::kGroup128 : cuda::ActivationScaleLayout::kToken;
      a.x_rule = cuda::Fp8ScaleRule{};
      break;
  }
  DeviceVector<uint16_t> d_y{size_t(pairs * n)};
  a.y = reinterpret_cast<__nv_bfloat16*>(d_y.ptr);
  cuda::Fp8GemvGroups gr;
  gr.slots = g.d_slots.ptr;
  gr.max_slots = g.max_slots;
  gr.w = reinterpret_cast<const uint8_t* const*>(d_table.ptr);
  gr.w_scale = reinterpret_cast<const float* const*>(d_table.ptr + experts);
  gr.x_rows = g.d_perm.ptr;
  gr.rows = pairs;
  const cuda::Fp8GemvPlan plan = cuda::fp8_gemv_grouped_plan(a, gr);
  const size_t wsb = std::max(cuda::fp8_gemv_grouped_workspace_bytes(a, gr), size_t(1) << 20);
  DeviceVector<uint8_t> workspace(std::vector<uint8_t>(wsb, 0));
  a.workspace = workspace.ptr, a.workspace_bytes = wsb;
  cuda::fp8_gemv_grouped(a, gr, nullptr);
  FP8LM_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint16_t> got = d_y.download();

  // Slot by slot: the slot's rows gathered on the host, fp8_gemv with the grouped plan.
  const std::vector<uint8_t> codes = d_codes.download();
  const std::vector<float> xs = d_xs.download();
  int64_t bad_rows = 0;
  for (int s = 0; s < g.count(); ++s) {
    const int m = g.slot_rows(s), f = g.first(s);
    std::vector<uint16_t> sx;
    std::vector<uint8_t> sc;
    std::vector<float> ss;
    for (int i = 0; i < m; ++i) {
      const int64_t r = g.perm[size_t(f + i)];
      sx.insert(sx.end(), x.begin() + r * k, x.begin() + (r + 1) * k);
      sc.insert(sc.end(), codes.begin() + r * k, codes.begin() + (r + 1) * k);
      const int64_t per = group ? chunks : 1;
      ss.insert(ss.end(), xs.begin() + r * per, xs.begin() + (r + 1) * per);
    }
    DeviceVector<uint16_t> d_sx(sx);
    DeviceVector<uint8_t> d_sc(sc);
    DeviceVector<float> d_ss(ss);
    DeviceVector<uint16_t> d_sy{size_t(m * n)};
    cuda::Fp8GemvArgs b = a;
    b.m = m;
    b.w = w[size_t(g.expert(s))]->ptr;
    b.w_scale = ws[size_t(g.expert(s))]->ptr;
    if (b.x != nullptr) b.x = reinterpret_cast<const __nv_bfloat16*>(d_sx.ptr);
    if (b.x_codes != nullptr) b.x_codes = d_sc.ptr, b.x_scale = d_ss.ptr;
    b.y = reinterpret_cast<__nv_bfloat16*>(d_sy.ptr);
    cuda::fp8_gemv(b, nullptr, &plan);
    FP8LM_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint16_t> want = d_sy.download();
    for (int i = 0; i < m; ++i)
      if (!std::equal(want.begin() + i * n, want.begin() + (i + 1) * n, got.begin() + (f + i) * n) && bad_rows++ < 3)
        ADD_FAILURE() << "slot " << s << " (expert " << g.expert(s) << ") row " << i << " differs from fp8_gemv";
  }
  EXPECT_EQ(bad_rows, 0);
}

TEST(CudaMoeGroup, GroupedGemvEqualsTheGemvSlotBySlot) {
  REQUIRE_HOPPER();
  std::mt19937 rng(9);
  using WL = cuda::WeightScaleLayout;
  for (const int64_t rows : {1, 2, 5, 40})
    for (const Act act : {Act::kW8A16, Act::kCodesToken, Act::kCodesGroup, Act::kQuantizeToken, Act::kQuantizeGroup}) {
      const WL wl = act == Act::kCodesGroup || act == Act::kQuantizeGroup ? WL::kBlock128 : WL::kChannel;
      check_grouped_gemv(rows, 16, 4, 384, 512, wl, act, rng);  // gate/up-like: K over the warp columns
      check_grouped_gemv(rows, 16, 4, 256, 768, wl, act, rng);  // down-like
    }
  // K past what one block's shared memory stages for 16 rows: the grouped split-K (Mixtral's down).
  check_grouped_gemv(64, 8, 2, 256, 14336, WL::kChannel, Act::kCodesToken, rng);
  check_grouped_gemv(3, 8, 2, 128, 1024, WL::kTensor, Act::kW8A16, rng);
}

TEST(CudaMoeGroup, Bf16GroupedGemvMatchesTheHost) {
  REQUIRE_HOPPER();
  std::mt19937 rng(13);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  struct Shape {
    int64_t rows, n, k;
    int experts, top_k;
  };
  for (const Shape sh : {Shape{1, 384, 512, 16, 4}, Shape{3, 200, 768, 16, 4}, Shape{40, 256, 512, 8, 2},
                         Shape{64, 96, 2048, 16, 8}}) {
    SCOPED_TRACE("rows " + std::to_string(sh.rows) + " n " + std::to_string(sh.n) + " k " + std::to_string(sh.k));
    DeviceVector<uint16_t> logits(random_logits(sh.rows, sh.experts, rng));
    const auto gp = route_group(logits, sh.rows, sh.experts, sh.top_k);
    const Grouping& g = *gp;
    const int64_t pairs = sh.rows * sh.top_k, n = sh.n, k = sh.k;
    std::vector<std::vector<uint16_t>> w(size_t(sh.experts)), bias(size_t(sh.experts));
    std::vector<std::unique_ptr<DeviceVector<uint16_t>>> dw, db;
    std::vector<const void*> table;
    for (int e = 0; e < sh.experts; ++e) {
      for (int64_t i = 0; i < n * k; ++i) w[size_t(e)].push_back(float_to_bf16(0.05f * normal(rng)));
      for (int64_t i = 0; i < n; ++i) bias[size_t(e)].push_back(float_to_bf16(normal(rng)));
      dw.push_back(std::make_unique<DeviceVector<uint16_t>>(w[size_t(e)]));
      db.push_back(std::make_unique<DeviceVector<uint16_t>>(bias[size_t(e)]));
    }
    for (const auto& v : dw) table.push_back(v->ptr);
    for (const auto& v : db) table.push_back(v->ptr);
    DeviceVector<const void*> d_table(table);
    std::vector<uint16_t> x(size_t(sh.rows * k));
    for (uint16_t& v : x) v = float_to_bf16(normal(rng));
    DeviceVector<uint16_t> d_x(x);
    DeviceVector<uint16_t> d_y{size_t(pairs * n)};
    cuda::Bf16GemvGroupedArgs a;
    a.m = std::min<int64_t>(sh.rows, 16), a.n = n, a.k = k;
    a.slots = g.d_slots.ptr, a.max_slots = g.max_slots;
    a.w = reinterpret_cast<const __nv_bfloat16* const*>(d_table.ptr);
    a.bias = reinterpret_cast<const __nv_bfloat16* const*>(d_table.ptr + sh.experts);
    a.x = reinterpret_cast<const __nv_bfloat16*>(d_x.ptr);
    a.x_rows = g.d_perm.ptr;
    a.y = reinterpret_cast<__nv_bfloat16*>(d_y.ptr);
    cuda::bf16_gemv_grouped(a, nullptr);
    FP8LM_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint16_t> y = d_y.download();
    int64_t bad = 0;
    for (int s = 0; s < g.count(); ++s)
      for (int i = 0; i < g.slot_rows(s); ++i) {
        const int64_t at = g.first(s) + i, r = g.perm[size_t(at)];
        const std::vector<uint16_t>& we = w[size_t(g.expert(s))];
        for (int64_t o = 0; o < n; ++o) {
          double ref = bf16_to_float(bias[size_t(g.expert(s))][size_t(o)]), mag = std::abs(ref);
          for (int64_t c = 0; c < k; ++c) {
            const double t = double(bf16_to_float(we[size_t(o * k + c)])) * bf16_to_float(x[size_t(r * k + c)]);
            ref += t, mag += std::abs(t);
          }
          const double got = bf16_to_float(y[size_t(at * n + o)]);
          if (std::abs(got - ref) > std::ldexp(std::abs(ref), -8) + 1e-4 * mag && bad++ < 3)
            ADD_FAILURE() << "slot " << s << " row " << i << " output " << o << ": " << got << ", the host " << ref;
        }
      }
    EXPECT_EQ(bad, 0);
  }
}

}  // namespace
}  // namespace fp8lm::test
