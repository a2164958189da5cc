// Sampling on the GPU (backend/cuda/sampling/sampling_kernels.h, CudaOps::sample_rows)
// against the host row math (backend/sampling.h, itself checked against
// transformers' logits processors in tests/cpp/test_sampler.cpp), on the same
// BF16 logits: vocabularies of 128256 (Llama 3) and 1009 (small, odd), three
// shapes of logits (spread, peaked with masked ids, coarse with many ties),
// and a grid of parameters (each filter alone, all together, penalties with
// repeated output tokens, greedy rows mixed in).
//
// What must agree, and the tolerance derived for it. The processed logits
// (penalties, temperature) are the same float operations on both sides, so
// greedy tokens and the top-k threshold are exact. Probabilities are
// e = exp(v - m) times inv = 1 / Σ e: CUDA's expf is within 2 ulp and
// glibc's within 1, so e differs by ≤ 2.5 ulp (relative ≤ 2.5 × 2^-23), Σ e
// by the same relative amount (double sums of ≤ 2^17 terms add ~2^-36), inv
// and the product by ½ ulp each on each side: |Δp| / p ≤ 7 × 2^-23 (kProbRel).
// Top-p compares float(total - mass above) with 1 - top_p: a token may fall on
// either side where that difference is within kProbRel (the masses) + 2^-24
// (the float rounding) of the threshold; min-p compares e with min_p (the inv
// of both sides cancels): within kProbRel relative. Where kept sets differ by
// such tokens of mass δ, every other probability moves by ≤ 2δ relative and
// the CDF by ≤ δ. The token must equal the host's unless u lies within the
// CDF's tolerance of a boundary of the host's interval; those draws are
// counted and must stay rare. A factor of 2 (kSafety) covers the
// approximations in this reasoning.
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/common/check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/sampling/sampling_kernels.h"
#include "backend/sampling.h"
#include "common/error.h"
#include "cuda/cuda_test_util.h"
#include "numerics/fp8_format.h"

namespace fp8lm::test {
namespace {

constexpr double kUlp = 0x1p-23;
constexpr double kProbRel = 7 * kUlp;
constexpr double kSafety = 2.0;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

template <typename T>
using Device = DeviceVector<T>;

// Logits exactly representable in BF16 (what the GPU holds), as floats for the host.
std::vector<float> make_logits(std::mt19937_64& rng, int64_t vocab, int shape) {
  std::vector<float> x(static_cast<size_t>(vocab));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int64_t> any(0, vocab - 1);
  for (float& v : x) {
    if (shape == 0) v = 3.0f * normal(rng);                   // spread: top-p cuts deep into the tail
    else if (shape == 1) v = normal(rng);                     // peaked, below
    else v = 0.5f * std::round(2.0f * 2.0f * normal(rng));    // coarse: multiples of 0.5, many ties
  }
  if (shape == 1) {
    for (int i = 0; i < 12; ++i) x[size_t(any(rng))] = 6.0f + float(i) * 0.5f;
    for (int64_t i = 0; i < vocab / 100; ++i) x[size_t(any(rng))] = kNegInf;  // masked ids
  }
  for (float& v : x) v = round_to_bf16(v);
  return x;
}

// A request's penalty inputs: distinct prompt ids; distinct output ids with
// counts of 1..5 (repeated tokens), some of them also in the prompt.
struct Penalty {
  std::vector<int32_t> prompt, output, counts;
};

Penalty make_penalty(std::mt19937_64& rng, int64_t vocab) {
  std::uniform_int_distribution<int32_t> any(0, int32_t(vocab) - 1);
  std::uniform_int_distribution<int32_t> count(1, 5);
  Penalty p;
  for (int i = 0; i < 300; ++i) p.prompt.push_back(any(rng));
  for (int i = 0; i < 60; ++i) p.output.push_back(i % 4 == 0 ? p.prompt[size_t(i)] : any(rng));
  std::sort(p.prompt.begin(), p.prompt.end());
  p.prompt.erase(std::unique(p.prompt.begin(), p.prompt.end()), p.prompt.end());
  std::sort(p.output.begin(), p.output.end());
  p.output.erase(std::unique(p.output.begin(), p.output.end()), p.output.end());
  for (size_t i = 0; i < p.output.size(); ++i) p.counts.push_back(count(rng));
  return p;
}

struct Config {
  const char* name;
  float temperature, top_p, min_p, rep, pres, freq;
  int32_t top_k;
  bool penalized;
};

const Config kGrid[] = {
    {"plain", 1.0f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0, false},
    {"temperature 0.6", 0.6f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0, false},
    {"temperature 1.4", 1.4f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0, false},
    {"top_k 1", 1.0f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 1, false},
    {"top_k 40", 1.0f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 40, false},
    {"top_k 5000", 0.9f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 5000, false},
    {"top_p 0.9", 1.0f, 0.9f, 0.0f, 1.0f, 0.0f, 0.0f, 0, false},
    {"top_p 0.3", 1.0f, 0.3f, 0.0f, 1.0f, 0.0f, 0.0f, 0, false},
    {"top_p 0.999", 1.0f, 0.999f, 0.0f, 1.0f, 0.0f, 0.0f, 0, false},
    {"top_p 1e-6", 1.0f, 1e-6f, 0.0f, 1.0f, 0.0f, 0.0f, 0, false},
    {"min_p 0.05", 1.0f, 1.0f, 0.05f, 1.0f, 0.0f, 0.0f, 0, false},
    {"min_p 0.5", 1.0f, 1.0f, 0.5f, 1.0f, 0.0f, 0.0f, 0, false},
    {"all filters", 0.8f, 0.92f, 0.01f, 1.0f, 0.0f, 0.0f, 300, false},
    {"penalties", 0.9f, 0.95f, 0.0f, 1.3f, 0.4f, 0.25f, 0, true},
    {"penalties and all filters", 1.1f, 0.8f, 0.02f, 0.8f, 0.2f, -0.5f, 100, true},
    {"greedy", 0.0f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0, false},
    {"greedy with penalties", 0.0f, 0.9f, 0.1f, 2.0f, 0.5f, 1.0f, 20, true},
    {"temperature below 1e-5", 1e-6f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0, false},
};

// The rows of one batch: logits, descriptions, and the storage their spans point into.
struct Batch {
  int64_t vocab = 0;
  std::vector<float> logits;  // [rows, vocab]
  std::vector<backend::RowSampling> rows;
  std::vector<std::string> names;
  std::deque<Penalty> penalties;
  std::deque<std::vector<uint32_t>> masks;  // structured outputs' allowed-id bitmasks
};

// A structured-output mask: each id allowed with probability `density`, and the row's argmax
// removed (so that the mask always changes the answer), one id at least kept.
std::vector<uint32_t> make_mask(std::mt19937_64& rng, std::span<const float> logits, double density) {
  std::vector<uint32_t> m((logits.size() + 31) / 32, 0u);
  std::bernoulli_distribution keep(density);
  for (size_t i = 0; i < logits.size(); ++i)
    if (keep(rng)) m[i / 32] |= 1u << (i % 32);
  const size_t best = size_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  m[best / 32] &= ~(1u << (best % 32));
  const size_t any = (best + 1) % logits.size();
  m[any / 32] |= 1u << (any % 32);
  return m;
}

// masked: every row but one in three gets a mask, dense (half the ids) or sparse (~40 ids).
Batch make_batch(int64_t vocab, uint64_t seed, bool masked = false) {
  std::mt19937_64 rng(seed);
  Batch b;
  b.vocab = vocab;
  uint64_t draw = 0;
  for (int shape = 0; shape < 3; ++shape)
    for (const Config& c : kGrid)
      for (int u = 0; u < 2; ++u) {
        const std::vector<float> x = make_logits(rng, vocab, shape);
        b.logits.insert(b.logits.end(), x.begin(), x.end());
        backend::RowSampling r;
        r.temperature = c.temperature, r.top_k = c.top_k, r.top_p = c.top_p, r.min_p = c.min_p;
        r.repetition_penalty = c.rep, r.presence_penalty = c.pres, r.frequency_penalty = c.freq;
        if (c.penalized) {
          const Penalty& p = b.penalties.emplace_back(make_penalty(rng, vocab));
          r.prompt_tokens = p.prompt, r.output_tokens = p.output, r.output_counts = p.counts;
        }
        r.uniform = backend::sampling_uniform(seed, draw++);
        if (masked && draw % 3 != 0)
          r.allowed = b.masks.emplace_back(make_mask(rng, x, draw % 3 == 1 ? 0.5 : 40.0 / double(vocab)));
        b.rows.push_back(r);
        b.names.push_back(std::string(c.name) + ", shape " + std::to_string(shape) + ", u " +
                          std::to_string(r.uniform));
      }
  return b;
}

std::span<const float> row_of(const Batch& b, size_t r) {
  return std::span<const float>(b.logits).subspan(r * size_t(b.vocab), size_t(b.vocab));
}

// The host's distribution and token, and each id's distance from the top-p
// and min-p thresholds (NaN where that filter is off or never saw the id).
struct Reference {
  std::vector<float> probs;
  int32_t token = -1;
  std::vector<double> top_p_margin, min_p_margin;
};

Reference reference(const Batch& b, size_t r) {
  const backend::RowSampling& row = b.rows[r];
  backend::RowSampler sampler;
  Reference ref;
  std::vector<float> x(row_of(b, r).begin(), row_of(b, r).end());
  ref.probs = sampler.probabilities(x, row);
  x.assign(row_of(b, r).begin(), row_of(b, r).end());
  ref.token = sampler.sample(x, row);
  const size_t vocab = size_t(b.vocab);
  ref.top_p_margin.assign(vocab, std::nan(""));
  ref.min_p_margin.assign(vocab, std::nan(""));
  if (row.greedy()) return ref;
  if (row.top_p < 1.0f) {
    // The distribution top-p sees (after top-k), walked as the host does.
    backend::RowSampling before = row;
    before.top_p = 1.0f, before.min_p = 0.0f;
    x.assign(row_of(b, r).begin(), row_of(b, r).end());
    const std::vector<float> p = sampler.probabilities(x, before);
    std::vector<int32_t> order(sampler.candidates().begin(), sampler.candidates().end());
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t c) {
      return x[size_t(a)] != x[size_t(c)] ? x[size_t(a)] > x[size_t(c)] : a > c;
    });
    double total = 0.0, above = 0.0;
    for (const int32_t t : order) total += p[size_t(t)];
    const double threshold = double(float(1.0 - double(row.top_p)));
    for (const int32_t t : order) {
      ref.top_p_margin[size_t(t)] = (total - above) - threshold;
      above += p[size_t(t)];
    }
  }
  if (row.min_p > 0.0f) {
    backend::RowSampling before = row;
    before.min_p = 0.0f;
    x.assign(row_of(b, r).begin(), row_of(b, r).end());
    sampler.process(x, before);
    float m = kNegInf;
    for (const int32_t t : sampler.candidates()) m = std::max(m, x[size_t(t)]);
    for (const int32_t t : sampler.candidates())
      ref.min_p_margin[size_t(t)] =
          (std::exp(double(x[size_t(t)]) - double(m)) - double(row.min_p)) / double(row.min_p);
  }
  return ref;
}

std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = float_to_bf16(x[i]);
  return out;
}

// The kernel straight, with the distribution written out (the op packs the same way).
struct KernelResult {
  std::vector<int32_t> tokens;
  std::vector<float> probs;
};

KernelResult run_kernel(const Batch& b) {
  std::vector<cuda::DeviceRowSampling> params;
  std::vector<int32_t> ids, counts;
  std::vector<uint32_t> masks;
  for (const backend::RowSampling& r : b.rows) {
    cuda::DeviceRowSampling d;
    d.uniform = r.uniform, d.temperature = r.temperature, d.top_k = r.top_k, d.top_p = r.top_p, d.min_p = r.min_p;
    d.repetition_penalty = r.repetition_penalty, d.presence_penalty = r.presence_penalty;
    d.frequency_penalty = r.frequency_penalty;
    d.prompt_begin = int32_t(ids.size()), d.prompt_count = int32_t(r.prompt_tokens.size());
    ids.insert(ids.end(), r.prompt_tokens.begin(), r.prompt_tokens.end());
    counts.insert(counts.end(), r.prompt_tokens.size(), 0);
    d.output_begin = int32_t(ids.size()), d.output_count = int32_t(r.output_tokens.size());
    ids.insert(ids.end(), r.output_tokens.begin(), r.output_tokens.end());
    counts.insert(counts.end(), r.output_counts.begin(), r.output_counts.end());
    if (!r.allowed.empty()) {
      d.mask_begin = int64_t(masks.size());
      masks.insert(masks.end(), r.allowed.begin(), r.allowed.end());
    }
    params.push_back(d);
  }
  const size_t rows = b.rows.size();
  Device<uint16_t> d_logits(b.logits.size());
  d_logits.upload(to_bf16(b.logits));
  Device<cuda::DeviceRowSampling> d_params(rows);
  d_params.upload(params);
  Device<int32_t> d_ids(ids.size()), d_counts(counts.size()), d_tokens(rows);
  d_ids.upload(ids);
  d_counts.upload(counts);
  Device<uint32_t> d_masks(std::max<size_t>(masks.size(), 1));
  if (!masks.empty()) d_masks.upload(masks);
  Device<float> d_probs(b.logits.size());
  FP8LM_CUDA_CHECK(cudaMemset(d_probs.ptr, 0xFF, b.logits.size() * sizeof(float)));  // NaN: unwritten
  cuda::sample_rows(reinterpret_cast<const __nv_bfloat16*>(d_logits.ptr), int64_t(rows), b.vocab, d_params.ptr,
                    d_ids.ptr, d_counts.ptr, d_tokens.ptr, nullptr, d_probs.ptr, masks.empty() ? nullptr : d_masks.ptr);
  FP8LM_CUDA_CHECK(cudaDeviceSynchronize());
  return {d_tokens.download(), d_probs.download()};
}

// Tokens through the op, as the engine gets them.
std::vector<int32_t> run_op(cuda::CudaOps& ops, const Batch& b, std::span<const size_t> which) {
  ops.reset_scratch();
  const backend::Tensor t = ops.alloc(int64_t(which.size()), b.vocab);
  std::vector<uint16_t> host;
  std::vector<backend::RowSampling> rows;
  for (const size_t r : which) {
    const std::vector<float> x(row_of(b, r).begin(), row_of(b, r).end());
    const std::vector<uint16_t> h = to_bf16(x);
    host.insert(host.end(), h.begin(), h.end());
    rows.push_back(b.rows[r]);
  }
  upload_bytes(t.data, host.data(), host.size() * 2);
  std::vector<int32_t> tokens(which.size(), -7);
  ops.sample_rows(t, rows, tokens);
  return tokens;
}

class CudaSampling : public testing::TestWithParam<int64_t> {};

void expect_host_row_math(const Batch& b) {
  const int64_t vocab = b.vocab;
  const KernelResult gpu = run_kernel(b);
  cuda::CudaOps ops;
  std::vector<size_t> all(b.rows.size());
  std::iota(all.begin(), all.end(), size_t(0));
  const std::vector<int32_t> op_tokens = run_op(ops, b, all);
  EXPECT_EQ(op_tokens, gpu.tokens) << "the op and the kernel disagree";

  const double tol_p = kSafety * (kProbRel + 0x1p-24);
  const double tol_min = kSafety * kProbRel;
  int skipped = 0, checked = 0;
  for (size_t r = 0; r < b.rows.size(); ++r) {
    SCOPED_TRACE(b.names[r]);
    const backend::RowSampling& row = b.rows[r];
    const Reference ref = reference(b, r);
    const std::span<const float> q(gpu.probs.data() + r * size_t(vocab), size_t(vocab));
    if (row.greedy()) {  // exact: the processed logits are the same floats
      EXPECT_EQ(gpu.tokens[r], ref.token);
      for (size_t i = 0; i < size_t(vocab); ++i) ASSERT_EQ(q[i], ref.probs[i]) << "id " << i;
      continue;
    }
    // Kept sets: equal but for ids within the tolerance of a threshold.
    double delta = 0.0;
    for (size_t i = 0; i < size_t(vocab); ++i) {
      ASSERT_FALSE(std::isnan(q[i])) << "id " << i << " not written";
      const bool cpu = ref.probs[i] > 0.0f, dev = q[i] > 0.0f;
      if (cpu == dev) continue;
      const bool near_top_p = std::abs(ref.top_p_margin[i]) <= tol_p;
      const bool near_min_p = std::abs(ref.min_p_margin[i]) <= tol_min;
      EXPECT_TRUE(near_top_p || near_min_p)
          << "id " << i << " kept on the " << (cpu ? "host" : "GPU") << " only: top-p margin "
          << ref.top_p_margin[i] << ", min-p margin " << ref.min_p_margin[i];
      delta += std::max(ref.probs[i], q[i]);
    }
    const double rel = kSafety * (kProbRel + 2 * delta);
    for (size_t i = 0; i < size_t(vocab); ++i) {
      if (ref.probs[i] > 0.0f && q[i] > 0.0f) {
        ASSERT_NEAR(q[i], ref.probs[i], rel * ref.probs[i]) << "id " << i;
      }
    }
    // The token, unless u is within the CDF's tolerance of a boundary of the host's interval.
    double total = 0.0, lo = 0.0, hi = 0.0;
    for (size_t i = 0; i < size_t(vocab); ++i) {
      if (int32_t(i) == ref.token) lo = total;
      total += ref.probs[i];
      if (int32_t(i) == ref.token) hi = total;
    }
    lo /= total, hi /= total;
    // Both the cumulative sums and their total move by ≤ kProbRel relative; missing mass δ shifts both.
    const double tol_u = kSafety * (2 * kProbRel + 2 * delta);
    ++checked;
    if (gpu.tokens[r] != ref.token) {
      if (row.uniform - lo <= tol_u || hi - row.uniform <= tol_u) {
        ++skipped;
        continue;
      }
      ADD_FAILURE() << "GPU token " << gpu.tokens[r] << ", host " << ref.token << " with u = " << row.uniform
                    << " inside the host's interval [" << lo << ", " << hi << ")";
    }
  }
  // Draws near a boundary are rare (the tolerance is ~1e-6 of the unit interval).
  EXPECT_LE(skipped, 1) << "of " << checked << " draws";
}

TEST_P(CudaSampling, MatchesTheHostRowMath) {
  REQUIRE_HOPPER();
  expect_host_row_math(make_batch(GetParam(), 20260 + uint64_t(GetParam())));
}

// Structured outputs: rows with allowed-id masks (the kernel's masked instance), every
// parameter set of the grid, against the host's apply_mask.
TEST_P(CudaSampling, MaskedRowsMatchTheHostRowMath) {
  REQUIRE_HOPPER();
  expect_host_row_math(make_batch(GetParam(), 4300 + uint64_t(GetParam()), /*masked=*/true));
}

INSTANTIATE_TEST_SUITE_P(Vocab, CudaSampling, testing::Values(int64_t(128256), int64_t(1009)),
                         [](const testing::TestParamInfo<int64_t>& p) { return "vocab" + std::to_string(p.param); });

// A row's token does not depend on the rows beside it or on the run.
TEST(CudaSamplingOp, RowAloneEqualsRowInBatch) {
  REQUIRE_HOPPER();
  const Batch b = make_batch(32000, 7);
  cuda::CudaOps ops;
  std::vector<size_t> all(b.rows.size());
  std::iota(all.begin(), all.end(), size_t(0));
  const std::vector<int32_t> batch = run_op(ops, b, all);
  EXPECT_EQ(run_op(ops, b, all), batch);
  for (const size_t r : {size_t(0), size_t(13), size_t(27), all.size() - 1}) {
    const size_t one[] = {r};
    EXPECT_EQ(run_op(ops, b, one)[0], batch[r]) << b.names[r];
  }
}

// Many draws of one row: the tokens' frequencies follow the host's distribution
// (a χ²-style bound on the total variation; fixed seed, so deterministic).
TEST(CudaSamplingOp, FrequenciesFollowTheDistribution) {
  REQUIRE_HOPPER();
  constexpr int64_t kVocab = 64;
  constexpr size_t kDraws = 4096;
  std::mt19937_64 rng(99);
  std::vector<float> x = make_logits(rng, kVocab, 0);
  Batch b;
  b.vocab = kVocab;
  backend::RowSampling r;
  r.temperature = 0.7f, r.top_p = 0.9f, r.min_p = 0.01f;
  for (size_t i = 0; i < kDraws; ++i) {
    b.logits.insert(b.logits.end(), x.begin(), x.end());
    r.uniform = backend::sampling_uniform(5, i);
    b.rows.push_back(r);
  }
  cuda::CudaOps ops;
  std::vector<size_t> all(kDraws);
  std::iota(all.begin(), all.end(), size_t(0));
  const std::vector<int32_t> tokens = run_op(ops, b, all);
  backend::RowSampler sampler;
  const std::vector<float> p = sampler.probabilities(x, r);
  std::vector<double> seen(kVocab, 0.0);
  for (const int32_t t : tokens) {
    ASSERT_GE(t, 0);
    ASSERT_GT(p[size_t(t)], 0.0f) << "token " << t << " was filtered out on the host";
    seen[size_t(t)] += 1.0 / double(kDraws);
  }
  double tv = 0.0;
  for (size_t i = 0; i < size_t(kVocab); ++i) tv += std::abs(seen[i] - double(p[i])) / 2;
  EXPECT_LT(tv, 0.06);  // E[tv] ≈ sqrt(k / (2π n)) ≈ 0.02 for ~10 kept tokens and 4096 draws
}

// A row that cannot be sampled gets kNoToken, as the host's sample_or_none, and the other
// rows of the batch are sampled as ever; only bad arguments throw.
TEST(CudaSamplingOp, RefusesWhatTheHostRefusesRowByRow) {
  REQUIRE_HOPPER();
  cuda::CudaOps ops;
  Batch b = make_batch(1009, 3);
  std::vector<size_t> two = {0, 1};
  const std::vector<int32_t> fine = run_op(ops, b, two);
  b.logits[5] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(run_op(ops, b, two), (std::vector<int32_t>{backend::kNoToken, fine[1]}));
  b.logits[5] = kNegInf;
  const std::vector<int32_t> bad = {1009};
  const std::vector<int32_t> counts = {1};
  b.rows[0].output_tokens = bad, b.rows[0].output_counts = counts;
  b.rows[0].frequency_penalty = 0.5f;  // the list is read (and checked) where a penalty needs it
  EXPECT_THROW(run_op(ops, b, two), Error);
  b.rows[0].output_tokens = {}, b.rows[0].output_counts = {};
  std::fill(b.logits.begin(), b.logits.begin() + 1009, kNegInf);
  EXPECT_EQ(run_op(ops, b, two), (std::vector<int32_t>{backend::kNoToken, fine[1]}));
}

// Penalties and temperatures at the ends of their ranges keep finite logits finite
// (backend::saturate_logit), on the device as on the host: a repetition penalty of
// 1e-38 makes the seen tokens the likeliest, not +inf.
TEST(CudaSamplingOp, SaturatesAsTheHost) {
  REQUIRE_HOPPER();
  cuda::CudaOps ops;
  Batch b = make_batch(1009, 4);
  std::vector<size_t> all(b.rows.size());
  for (size_t r = 0; r < all.size(); ++r) {
    all[r] = r;
    b.rows[r].repetition_penalty = r % 2 == 0 ? 1e-38f : 1e38f;
    b.rows[r].temperature = r % 3 == 0 ? 0.0f : 1e-5f;
  }
  const std::vector<int32_t> tokens = run_op(ops, b, all);
  for (size_t r = 0; r < all.size(); ++r) {
    SCOPED_TRACE(b.names[r]);
    EXPECT_NE(tokens[r], backend::kNoToken);
    if (!b.rows[r].greedy()) continue;  // a draw may differ by rounding at a CDF boundary; the argmax may not
    std::vector<float> row(row_of(b, r).begin(), row_of(b, r).end());
    backend::RowSampler host;
    EXPECT_EQ(tokens[r], host.sample_or_none(row, b.rows[r]));
  }
}

}  // namespace
}  // namespace fp8lm::test
