#include "backend/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "numerics/fp8_format.h"
#include "numerics/quantize.h"

namespace fp8lm::cpu {
namespace {

// Below this many multiply-adds (scores and weighted sums together), waking
// the pool costs more than it saves. Results do not depend on it.
constexpr int64_t kMinParallelWork = int64_t{1} << 16;

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::string seq_name(const char* who, size_t i) { return std::string(who) + ": sequence " + std::to_string(i); }

// One new token: its row in q / k / v / out, its position, its sequence.
struct Row {
  int64_t row;
  int64_t position;
  const AttentionSequence* seq;
};

// Per-thread buffers, sized on first use.
struct Scratch {
  std::vector<float> q8;      // FP8 attention: the group's queries as E4M3 values × their scales
  std::vector<float> scores;  // [group][attended positions]
  std::vector<float> kv;      // one block of one kv head: block_size × head_dim
  std::vector<float> acc;     // [group][head_dim]
  std::vector<float> sums;    // [group]
};

// FP8 attention (paged_attention's fp8): the softmax weights' E4M3 scale, a power of two.
constexpr float kFp8WeightScale = 256.0f;

// One query head's values as E4M3 codes × their scale: numerics' dynamic per-tensor quantization
// of the head (fp8lm's runtime rule: amax / 448, floored at 1 / (448 · 512); x / scale rounded to
// nearest even, saturated), dequantized.
void quantize_query(const float* x, int64_t n, float* out) {
  const std::vector<float> v = dequantize_f32(quantize_dynamic(MatrixView::f32(x, 1, n), QuantSpec{}));
  std::copy(v.begin(), v.end(), out);
}

// A softmax weight w ∈ [0, 1] as the E4M3 code of w · 2^8 (its value, still scaled).
float round_weight(float w) { return fp8_to_float(float_to_fp8(w * kFp8WeightScale, Fp8Format::kE4M3), Fp8Format::kE4M3); }

void validate(const float* q, const float* k, const float* v, const float* out,
              std::span<const AttentionSequence> sequences, const AttentionParams& p, const PagedKvCache& cache,
              int layer) {
  const KvCacheShape& shape = cache.shape();
  if (p.num_heads <= 0 || p.num_kv_heads <= 0) {
    throw Error("paged attention: num_heads and num_kv_heads must be > 0, got " + std::to_string(p.num_heads) +
                " and " + std::to_string(p.num_kv_heads));
  }
  if (p.num_heads % p.num_kv_heads != 0) {
    throw Error("paged attention: num_heads " + std::to_string(p.num_heads) + " is not a multiple of num_kv_heads " +
                std::to_string(p.num_kv_heads));
  }
  if (p.num_kv_heads != shape.num_kv_heads) {
    throw Error("paged attention: num_kv_heads " + std::to_string(p.num_kv_heads) + " but the cache has " +
                std::to_string(shape.num_kv_heads));
  }
  if (p.head_dim != shape.head_dim) {
    throw Error("paged attention: head_dim " + std::to_string(p.head_dim) + " but the cache has " +
                std::to_string(shape.head_dim));
  }
  if (!std::isfinite(p.scale)) throw Error("paged attention: scale must be finite, got " + std::to_string(p.scale));
  if (p.sliding_window && *p.sliding_window < 1) {
    throw Error("paged attention: sliding_window must be >= 1, got " + std::to_string(*p.sliding_window));
  }
  if (layer < 0 || layer >= shape.num_layers) {
    throw Error("paged attention: layer " + std::to_string(layer) + " out of range [0, " +
                std::to_string(shape.num_layers) + ")");
  }
  if (sequences.empty()) return;
  if (q == nullptr || k == nullptr || v == nullptr || out == nullptr) {
    throw Error("paged attention: null q, k, v or out");
  }
  check_attention_sequences(sequences, shape, "paged attention");
}

}  // namespace

// Σ a_i b_i in float32 in a fixed order: 8 partial sums (lane l takes i ≡ l
// mod 8), then added pairwise. The partial sums vectorize without reassociation.
float attention_dot(const float* __restrict a, const float* __restrict b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  }
  for (int l = 0; i < n; ++i, ++l) acc[l] += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

// y += a · x, each product rounded, then the sum (no fused multiply-add).
void attention_axpy(float* __restrict y, const float* __restrict x, float a, int64_t n) {
  for (int64_t d = 0; d < n; ++d) y[d] += a * x[d];
}

void check_attention_sequences(std::span<const AttentionSequence> sequences, const KvCacheShape& shape,
                               const char* who) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const int64_t bs = shape.block_size;
  std::vector<std::pair<int64_t, int64_t>> ranges;  // row ranges [first, end)
  std::vector<int64_t> slots;                       // global slots the new tokens write
  for (size_t i = 0; i < sequences.size(); ++i) {
    const AttentionSequence& s = sequences[i];
    if (s.num_tokens < 1) throw Error(seq_name(who, i) + ": num_tokens must be >= 1, got " + std::to_string(s.num_tokens));
    if (s.first_row < 0 || s.first_row > kMax - s.num_tokens) {
      throw Error(seq_name(who, i) + ": rows out of range (first_row " + std::to_string(s.first_row) + ")");
    }
    if (s.start_position < 0 || s.start_position > kMax - s.num_tokens - bs) {
      throw Error(seq_name(who, i) + ": start_position out of range (" + std::to_string(s.start_position) + ")");
    }
    const int64_t end = s.start_position + s.num_tokens;
    const int64_t needed = cdiv(end, bs);
    if (int64_t(s.block_table.size()) < needed) {
      throw Error(seq_name(who, i) + ": block table too short: " + std::to_string(s.block_table.size()) +
                  " blocks for " + std::to_string(end) + " positions need " + std::to_string(needed));
    }
    for (int64_t b = 0; b < needed; ++b) {
      const int64_t id = s.block_table[size_t(b)];
      if (id < 0 || id >= shape.num_blocks) {
        throw Error(seq_name(who, i) + ": block table entry " + std::to_string(b) + " = " + std::to_string(id) +
                    " out of range [0, " + std::to_string(shape.num_blocks) + ")");
      }
    }
    ranges.emplace_back(s.first_row, s.first_row + s.num_tokens);
    for (int64_t pos = s.start_position; pos < end; ++pos) {
      slots.push_back(s.block_table[size_t(pos / bs)] * bs + pos % bs);
    }
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) {
      throw Error(std::string(who) + ": rows out of range: two sequences share row " + std::to_string(ranges[i].first));
    }
  }
  std::sort(slots.begin(), slots.end());
  const auto dup = std::adjacent_find(slots.begin(), slots.end());
  if (dup != slots.end()) {
    throw Error(std::string(who) + ": two new tokens map to one cache slot (block " + std::to_string(*dup / bs) +
                ", slot " + std::to_string(*dup % bs) + ")");
  }
}


void paged_attention(const float* q, const float* k, const float* v, float* out,
                     std::span<const AttentionSequence> sequences, const AttentionParams& params,
                     PagedKvCache& cache, int layer, ThreadPool* pool, bool fp8) {
  validate(q, k, v, out, sequences, params, cache, layer);
  const int64_t hd = params.head_dim;
  const int heads = params.num_heads;
  const int kv_heads = params.num_kv_heads;
  const int group = heads / kv_heads;
  const int64_t bs = cache.shape().block_size;
  const int64_t window = params.sliding_window.value_or(std::numeric_limits<int64_t>::max());

  std::vector<Row> rows;
  int64_t max_attended = 0;
  int64_t work = 0;
  for (const AttentionSequence& s : sequences) {
    for (int64_t t = 0; t < s.num_tokens; ++t) {
      const int64_t pos = s.start_position + t;
      rows.push_back({s.first_row + t, pos, &s});
      const int64_t attended = std::min(pos + 1, window);
      max_attended = std::max(max_attended, attended);
      work += attended;
    }
  }
  if (rows.empty()) return;
  const int threads = pool != nullptr ? pool->size() : 1;
  ThreadPool* const run_pool = work * 2 * heads * hd >= kMinParallelWork ? pool : nullptr;
  auto for_each = [&](int64_t tasks, const std::function<void(int64_t, int)>& fn) {
    if (run_pool != nullptr) {
      run_pool->parallel_for(tasks, fn);
    } else {
      for (int64_t t = 0; t < tasks; ++t) fn(t, 0);
    }
  };

  // 1. Every new token's K and V into its slot (distinct slots: validated).
  const int64_t kv_row = int64_t(kv_heads) * hd;
  for_each(int64_t(rows.size()), [&](int64_t task, int) {
    const Row& r = rows[size_t(task)];
    const int64_t block = r.seq->block_table[size_t(r.position / bs)];
    cache.store(layer, block, int(r.position % bs), k + r.row * kv_row, v + r.row * kv_row);
  });

  // 2. Attention of each (new token, kv head) over the cached positions.
  std::vector<Scratch> scratch(static_cast<size_t>(threads));
  const int64_t q_row = int64_t(heads) * hd;
  const float scale = params.scale;
  for_each(int64_t(rows.size()) * kv_heads, [&](int64_t task, int thread) {
    const Row& r = rows[size_t(task / kv_heads)];
    const int kh = int(task % kv_heads);
    Scratch& s = scratch[size_t(thread)];
    if (s.kv.empty()) {
      s.scores.resize(size_t(group * max_attended));
      s.kv.resize(size_t(bs * hd));
      s.acc.resize(size_t(group * hd));
      s.sums.resize(size_t(group));
    }
    const int64_t p = r.position;
    const int64_t lo = p - std::min(p + 1, window) + 1;
    const int64_t count = p - lo + 1;
    const std::span<const int64_t> table = r.seq->block_table;
    const float* q0 = q + r.row * q_row + int64_t(kh) * group * hd;
    if (fp8) {
      s.q8.resize(size_t(group * hd));
      for (int g = 0; g < group; ++g) quantize_query(q0 + g * hd, hd, s.q8.data() + g * hd);
      q0 = s.q8.data();
    }

    // Scores, one block of K at a time.
    for (int64_t b = lo / bs; b <= p / bs; ++b) {
      const int64_t j0 = std::max(lo, b * bs), j1 = std::min(p, b * bs + bs - 1);
      const int n = int(j1 - j0 + 1);
      cache.dequantize_k(layer, table[size_t(b)], kh, int(j0 - b * bs), n, s.kv.data());
      for (int g = 0; g < group; ++g) {
        float* sg = s.scores.data() + g * count + (j0 - lo);
        for (int t = 0; t < n; ++t) sg[t] = attention_dot(q0 + g * hd, s.kv.data() + t * hd, hd) * scale;
      }
    }
    // Softmax weights (unnormalized) and their sums.
    for (int g = 0; g < group; ++g) {
      float* sg = s.scores.data() + g * count;
      float m = sg[0];
      for (int64_t j = 1; j < count; ++j) m = std::max(m, sg[j]);
      float sum = 0.0f;
      for (int64_t j = 0; j < count; ++j) {
        sg[j] = std::exp(sg[j] - m);
        sum += sg[j];
      }
      s.sums[size_t(g)] = sum;
      if (fp8)
        for (int64_t j = 0; j < count; ++j) sg[j] = round_weight(sg[j]);
    }
    // Weighted sums of V, one block at a time.
    std::fill(s.acc.begin(), s.acc.end(), 0.0f);
    for (int64_t b = lo / bs; b <= p / bs; ++b) {
      const int64_t j0 = std::max(lo, b * bs), j1 = std::min(p, b * bs + bs - 1);
      const int n = int(j1 - j0 + 1);
      cache.dequantize_v(layer, table[size_t(b)], kh, int(j0 - b * bs), n, s.kv.data());
      for (int g = 0; g < group; ++g) {
        const float* wg = s.scores.data() + g * count + (j0 - lo);
        float* ag = s.acc.data() + g * hd;
        for (int t = 0; t < n; ++t) attention_axpy(ag, s.kv.data() + t * hd, wg[t], hd);
      }
    }
    float* o0 = out + r.row * q_row + int64_t(kh) * group * hd;
    for (int g = 0; g < group; ++g) {
      const float sum = s.sums[size_t(g)];
      const float* ag = s.acc.data() + g * hd;
      if (fp8)
        for (int64_t d = 0; d < hd; ++d) o0[g * hd + d] = ag[d] / kFp8WeightScale / sum;
      else
        for (int64_t d = 0; d < hd; ++d) o0[g * hd + d] = ag[d] / sum;
    }
  });
}

}  // namespace fp8lm::cpu
