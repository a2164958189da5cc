// What the GPU model tests share (test_cuda_model.cpp, test_cuda_moe.cpp, test_cuda_persistent.cpp):
// the shipped model and its prompt, a model's logits over a prompt and fed decode tokens, and the
// distances between two such traces.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <vector>

#include "engine/runtime.h"

namespace fp8lm::test {

// The shipped model's folder, and the prompt the GPU model tests run on it.
inline std::filesystem::path shipped_dir() {
  return std::filesystem::path(FP8LM_SOURCE_DIR) / "models/fp8lm-gutenberg-22m";
}
inline std::vector<int32_t> prompt_tokens(const engine::Runtime& rt) {
  const std::vector<uint32_t> ids = rt.tokenizer().encode(
      "It was a bright cold day in April, and the clocks were striking thirteen. The hall smelt of boiled cabbage "
      "and old rag mats. At one end of it a coloured poster, too large for indoor display, had been tacked to the "
      "wall.");
  return {ids.begin(), ids.end()};
}

// Logits of `prompt` (every position), then of `decode_steps` greedy decode steps
// (the CPU's choice of token fed to both, so both see the same sequence).
struct Trace {
  std::vector<std::vector<float>> rows;  // one per prompt position, then one per step
};

inline Trace run(model::LlamaModel& m, backend::KvCache& cache, const std::vector<int32_t>& prompt,
                 const std::vector<int32_t>& fed) {
  const int64_t vocab = m.config().vocab_size;
  const int bs = cache.shape().block_size;
  const int64_t total = int64_t(prompt.size() + fed.size());
  std::vector<int64_t> table;
  for (int64_t b = 0; b < (total + bs - 1) / bs; ++b) table.push_back(b);
  Trace t;
  std::vector<float> logits;
  model::SequenceInput in{prompt, 0, table, true};
  m.forward({&in, 1}, cache, logits);
  for (size_t r = 0; r < prompt.size(); ++r)
    t.rows.emplace_back(logits.begin() + int64_t(r) * vocab, logits.begin() + int64_t(r + 1) * vocab);
  for (size_t i = 0; i < fed.size(); ++i) {
    model::SequenceInput step{{&fed[i], 1}, int64_t(prompt.size() + i), table, false};
    m.forward({&step, 1}, cache, logits);
    t.rows.push_back(logits);
  }
  return t;
}

inline Trace run(engine::Runtime& rt, const std::vector<int32_t>& prompt, const std::vector<int32_t>& fed) {
  return run(*rt.model().rank(0).model, rt.kv_cache(), prompt, fed);
}

inline int32_t argmax(const std::vector<float>& v) { return int32_t(std::max_element(v.begin(), v.end()) - v.begin()); }

inline double mean_abs_diff(const Trace& a, const Trace& b) {
  double sum = 0;
  size_t n = 0;
  for (size_t r = 0; r < a.rows.size(); ++r)
    for (size_t i = 0; i < a.rows[r].size(); ++i, ++n) sum += std::abs(double(a.rows[r][i]) - double(b.rows[r][i]));
  return sum / double(n);
}

inline double max_abs_diff(const Trace& a, const Trace& b) {
  double m = 0;
  for (size_t r = 0; r < a.rows.size(); ++r)
    for (size_t i = 0; i < a.rows[r].size(); ++i) m = std::max(m, std::abs(double(a.rows[r][i]) - double(b.rows[r][i])));
  return m;
}

inline double top2_margin(const std::vector<float>& v) {
  std::vector<float> s = v;
  std::partial_sort(s.begin(), s.begin() + 2, s.end(), std::greater<>());
  return double(s[0]) - double(s[1]);
}

// Top-1 tokens agree except where the reference's own top-2 margin is below 4× the largest |Δ|
// (`worst`), and every logit of `got` is finite.
inline void expect_same_top1_and_finite(const Trace& want, const Trace& got, double worst) {
  for (size_t r = 0; r < want.rows.size(); ++r) {
    if (argmax(want.rows[r]) != argmax(got.rows[r])) {
      EXPECT_LT(top2_margin(want.rows[r]), 4 * worst) << "row " << r << ": top-1 differs without a near-tie";
    }
    for (float v : got.rows[r]) ASSERT_TRUE(std::isfinite(v)) << "row " << r;
  }
}

}  // namespace fp8lm::test
