// The persistent decode kernel's schedule (src/backend/cuda/persistent/decode_schedule.cpp):
// the instruction list holds every tile and attention split of the step once, in phase order;
// each CTA's queue is in that order (what makes the counters' waits deadlock-free when every CTA
// is resident); the phases' counts are what the waits expect; the CTAs' loads are balanced.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "backend/cuda/persistent/decode_program.h"
#include "common/error.h"

namespace fp8lm::cuda::persistent {
namespace {

// Llama-3.1-8B's shape and the shipped model's.
const ModelShape kLlama8B{32, 4096, 14336, 128256, 32, 8, 128};
const ModelShape kShipped{10, 384, 1024, 16384, 6, 2, 64};

// Phase order of an instruction: layer, then qkv < attention < o < gate/up < down; lm_head last.
int phase_of(const Instruction& i) {
  return Op(i.op) == Op::kLmHead ? 1 << 30 : i.layer * kPhasesPerLayer + i.op;
}

TEST(PersistentSchedule, EveryInstructionOnceInPhaseOrderOnEveryQueue) {
  for (const ModelShape& s : {kLlama8B, kShipped})
    for (int rows : {1, 3, 8})
      for (int ctas : {1, 7, 132}) {
        const Schedule sc = build_schedule(s, rows, ctas);
        ASSERT_EQ(sc.queue_start.size(), size_t(ctas) + 1);
        ASSERT_EQ(sc.queue.size(), sc.instructions.size());
        std::vector<int> seen(sc.instructions.size(), 0);
        for (int c = 0; c < ctas; ++c) {
          int last = -1;
          for (int q = sc.queue_start[size_t(c)]; q < sc.queue_start[size_t(c) + 1]; ++q) {
            const Instruction& i = sc.instructions[size_t(sc.queue[size_t(q)])];
            ++seen[size_t(sc.queue[size_t(q)])];
            EXPECT_GE(phase_of(i), last) << "CTA " << c << " runs a phase before one it already ran";
            last = phase_of(i);
          }
        }
        for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << "instruction " << i;
      }
}

TEST(PersistentSchedule, PhaseCountsCoverTheModel) {
  const int rows = 2, ctas = 132;
  const Schedule sc = build_schedule(kLlama8B, rows, ctas);
  EXPECT_EQ(sc.phase_count[0], (32 + 2 * 8) * 128 / 16);  // q, k, v rows
  EXPECT_EQ(sc.attention_splits, 8);                       // 132 / (2 rows · 8 KV heads)
  EXPECT_EQ(sc.phase_count[1], rows * 8 * 8);
  EXPECT_EQ(sc.phase_count[2], 4096 / 16);
  EXPECT_EQ(sc.phase_count[3], 14336 / 8);  // a tile: 8 gate rows and their 8 up rows
  EXPECT_EQ(sc.phase_count[4], 4096 / 16);
  EXPECT_EQ(sc.lm_head_tiles, 128256 / 16);
  // Each phase of each layer holds its count; every (row, KV head, split) once.
  std::map<std::pair<int, int>, int> per_phase;
  std::set<std::tuple<int, int, int, int>> splits;
  for (const Instruction& i : sc.instructions) {
    if (Op(i.op) == Op::kLmHead) continue;
    ++per_phase[{i.layer, i.op}];
    if (Op(i.op) == Op::kAttention) {
      EXPECT_TRUE(splits.insert({i.layer, i.a, i.b, i.c}).second);
    }
  }
  for (const auto& [key, n] : per_phase) EXPECT_EQ(n, sc.phase_count[key.second]) << "layer " << key.first;
}

TEST(PersistentSchedule, LoadsStayWithinATileOfEachOther) {
  const Schedule sc = build_schedule(kLlama8B, 1, 132);
  int lo = 1 << 30, hi = 0;
  for (int c = 0; c < sc.ctas; ++c) {
    const int n = sc.queue_start[size_t(c) + 1] - sc.queue_start[size_t(c)];
    lo = std::min(lo, n), hi = std::max(hi, n);
  }
  EXPECT_LE(hi - lo, 1);
}

TEST(PersistentSchedule, RefusesWhatTheKernelDoesNotRun) {
  EXPECT_THROW(build_schedule(kLlama8B, 9, 132), Error);
  EXPECT_THROW(build_schedule(kLlama8B, 0, 132), Error);
  ModelShape odd = kShipped;
  odd.head_dim = 96;
  EXPECT_NE(unsupported_shape(odd, 1).find("head_dim 96"), std::string::npos);
  odd = kShipped;
  odd.vocab = 16385;
  EXPECT_NE(unsupported_shape(odd, 1).find("vocabulary 16385"), std::string::npos);
  DeviceLinear l;
  l.n = 64, l.k = 100, l.fp8 = true;
  EXPECT_NE(unsupported_linear(l, "o_proj").find("o_proj of 64 x 100"), std::string::npos);
  l.k = 128;
  EXPECT_EQ(unsupported_linear(l, "o_proj"), "");
}

}  // namespace
}  // namespace fp8lm::cuda::persistent
