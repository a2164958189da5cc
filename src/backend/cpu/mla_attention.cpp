#include "backend/cpu/mla_attention.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

#include "backend/cpu/attention.h"
#include "common/error.h"
#include "numerics/quantize.h"
#include "weights/element_type.h"

namespace fp8lm::cpu {
namespace {

// Below this many multiply-adds, waking the pool costs more than it saves. Results do not depend on it.
constexpr int64_t kMlaMinParallelWork = int64_t{1} << 16;

// One new token: its row, its position, its sequence.
struct MlaRow {
  int64_t row;
  int64_t position;
  const backend::AttentionSequence* seq;
};

void check(const backend::MlaParams& p, const MlaUpProjections& up, const PagedKvCache& cache, int layer) {
  const KvCacheShape& shape = cache.shape();
  if (!shape.latent) throw Error("mla attention: the KV cache is not a latent cache (KvCacheShape::latent)");
  if (p.num_heads != up.heads || p.nope_dim != up.nope || p.v_dim != up.v || p.latent_dim != up.latent)
    throw Error("mla attention: the parameters (" + std::to_string(p.num_heads) + " heads, nope " +
                std::to_string(p.nope_dim) + ", v " + std::to_string(p.v_dim) + ", latent " +
                std::to_string(p.latent_dim) + ") are not those of the up-projections (" + std::to_string(up.heads) +
                ", " + std::to_string(up.nope) + ", " + std::to_string(up.v) + ", " + std::to_string(up.latent) + ")");
  if (p.rope_dim <= 0 || shape.head_dim != p.latent_dim + p.rope_dim)
    throw Error("mla attention: cache entries of " + std::to_string(shape.head_dim) + " values, the latent (" +
                std::to_string(p.latent_dim) + ") and rope part (" + std::to_string(p.rope_dim) + ") need their sum");
  if (!std::isfinite(p.scale)) throw Error("mla attention: scale must be finite");
  if (layer < 0 || layer >= shape.num_layers)
    throw Error("mla attention: layer " + std::to_string(layer) + " out of range [0, " +
                std::to_string(shape.num_layers) + ")");
}

// softmax weights (unnormalized, max subtracted) in place; returns their sum.
float softmax_weights(std::span<float> scores) {
  float m = scores[0];
  for (const float s : scores) m = std::max(m, s);
  float sum = 0.0f;
  for (float& s : scores) {
    s = std::exp(s - m);
    sum += s;
  }
  return sum;
}

// Per-thread buffers, sized on first use.
struct MlaScratch {
  std::vector<float> entries;  // every cached entry the row attends, [count][latent + rope]
  std::vector<float> scores;   // [count]
  std::vector<float> q_lat;    // [latent]
  std::vector<float> acc;      // [latent] (absorbed) or [v] (decompressed)
  std::vector<float> kv;       // decompressed: one position's k_nope then v
};

}  // namespace

MlaUpProjections make_mla_up_projections(const weights::LinearWeight& kv_b, int heads, int64_t nope, int64_t v) {
  if (heads <= 0 || nope <= 0 || v <= 0 || kv_b.n != int64_t(heads) * (nope + v) || kv_b.k <= 0)
    throw Error("mla up-projections: kv_b_proj is [" + std::to_string(kv_b.n) + ", " + std::to_string(kv_b.k) +
                "], expected [" + std::to_string(heads) + " heads × (" + std::to_string(nope) + " + " +
                std::to_string(v) + "), latent]");
  const std::vector<float> w = weights::dequantized(kv_b);
  MlaUpProjections up{heads, nope, v, kv_b.k, {}, {}};
  up.w_uk.reserve(size_t(heads * nope * up.latent));
  up.w_uv.reserve(size_t(heads * v * up.latent));
  for (int h = 0; h < heads; ++h) {
    const float* head = w.data() + int64_t(h) * (nope + v) * up.latent;
    up.w_uk.insert(up.w_uk.end(), head, head + nope * up.latent);
    up.w_uv.insert(up.w_uv.end(), head + nope * up.latent, head + (nope + v) * up.latent);
  }
  return up;
}

void rope_mla(float* q, int64_t q_cols, float* k_pe, int64_t rows, int64_t nope, std::span<const int64_t> positions,
              const RopeTable& rope, bool interleaved) {
  const int64_t dim = rope.rotary_dim(), half = dim / 2;
  if (nope < 0 || q_cols % (nope + dim) != 0 || int64_t(positions.size()) != rows)
    throw Error("rope_mla: rows of " + std::to_string(q_cols) + " are not heads of " + std::to_string(nope) +
                " + " + std::to_string(dim) + " values, or the positions are not one a row");
  std::vector<float> cos_t(static_cast<size_t>(half)), sin_t(static_cast<size_t>(half)), x(static_cast<size_t>(dim));
  // One rope part in place: halves (x_i, x_{i+half}) or interleaved pairs (x_2i, x_2i+1), the
  // result as transformers writes it: [x1·cos − x2·sin ‖ x2·cos + x1·sin].
  auto rotate = [&](float* p) {
    std::copy_n(p, dim, x.data());
    for (int64_t i = 0; i < half; ++i) {
      const float x1 = interleaved ? x[size_t(2 * i)] : x[size_t(i)];
      const float x2 = interleaved ? x[size_t(2 * i + 1)] : x[size_t(i + half)];
      p[i] = x1 * cos_t[size_t(i)] - x2 * sin_t[size_t(i)];
      p[i + half] = x2 * cos_t[size_t(i)] + x1 * sin_t[size_t(i)];
    }
  };
  const int64_t heads = q_cols / (nope + dim);
  for (int64_t r = 0; r < rows; ++r) {
    rope.cos_sin(positions[size_t(r)], cos_t.data(), sin_t.data());
    for (int64_t h = 0; h < heads; ++h) rotate(q + r * q_cols + h * (nope + dim) + nope);
    rotate(k_pe + r * dim);
  }
}

void mla_attention(const float* q, const float* latent, const float* k_pe, const MlaUpProjections& up, float* out,
                   std::span<const backend::AttentionSequence> sequences, const backend::MlaParams& p,
                   PagedKvCache& cache, int layer, ThreadPool* pool) {
  check(p, up, cache, layer);
  const KvCacheShape& shape = cache.shape();
  check_attention_sequences(sequences, shape, "mla attention");
  if (sequences.empty()) return;
  const int64_t bs = shape.block_size, lat = p.latent_dim, rd = p.rope_dim, entry = lat + rd;
  const int64_t qk = p.nope_dim + rd, heads = p.num_heads;

  std::vector<MlaRow> rows;
  int64_t max_attended = 0, work = 0;
  for (const backend::AttentionSequence& s : sequences)
    for (int64_t t = 0; t < s.num_tokens; ++t) {
      const int64_t pos = s.start_position + t;
      rows.push_back({s.first_row + t, pos, &s});
      max_attended = std::max(max_attended, pos + 1);
      work += pos + 1;
    }
  ThreadPool* const run_pool = work * heads * entry >= kMlaMinParallelWork ? pool : nullptr;
  auto for_each = [&](int64_t tasks, const std::function<void(int64_t, int)>& fn) {
    if (run_pool != nullptr) run_pool->parallel_for(tasks, fn);
    else
      for (int64_t t = 0; t < tasks; ++t) fn(t, 0);
  };

  // 1. Every new token's entry [latent ‖ k_pe] into its slot (distinct slots: validated).
  std::vector<float> staged(size_t(int64_t(rows.size()) * entry));
  for_each(int64_t(rows.size()), [&](int64_t task, int) {
    const MlaRow& r = rows[size_t(task)];
    float* e = staged.data() + task * entry;
    std::copy_n(latent + r.row * lat, lat, e);
    std::copy_n(k_pe + r.row * rd, rd, e + lat);
    cache.store(layer, r.seq->block_table[size_t(r.position / bs)], int(r.position % bs), e, nullptr);
  });

  // One head h of one row over its `count` cached entries (s.entries), into out.
  auto attend_head = [&](const MlaRow& r, int64_t h, int64_t count, MlaScratch& s) {
    const float* q_nope = q + r.row * heads * qk + h * qk;
    const float* q_pe = q_nope + p.nope_dim;
    const float* w_uk = up.w_uk.data() + h * p.nope_dim * lat;  // [nope][latent]
    const float* w_uv = up.w_uv.data() + h * p.v_dim * lat;     // [v][latent]
    float* o = out + r.row * heads * p.v_dim + h * p.v_dim;
    const std::span<float> scores(s.scores.data(), size_t(count));
    if (p.absorbed) {
      // q_lat[c] = Σ_n q_nope[n] · W_UK[n][c], n in increasing order.
      s.q_lat.assign(size_t(lat), 0.0f);
      for (int64_t n = 0; n < p.nope_dim; ++n) attention_axpy(s.q_lat.data(), w_uk + n * lat, q_nope[n], lat);
      for (int64_t j = 0; j < count; ++j) {
        const float* e = s.entries.data() + j * entry;
        scores[size_t(j)] = (attention_dot(s.q_lat.data(), e, lat) + attention_dot(q_pe, e + lat, rd)) * p.scale;
      }
      const float sum = softmax_weights(scores);
      s.acc.assign(size_t(lat), 0.0f);
      for (int64_t j = 0; j < count; ++j)
        attention_axpy(s.acc.data(), s.entries.data() + j * entry, scores[size_t(j)], lat);
      for (float& a : s.acc) a /= sum;
      for (int64_t d = 0; d < p.v_dim; ++d) o[d] = attention_dot(w_uv + d * lat, s.acc.data(), lat);
      return;
    }
    // Decompressed: each cached latent through this head's W_UK and W_UV.
    s.kv.resize(size_t(count * (p.nope_dim + p.v_dim)));
    for (int64_t j = 0; j < count; ++j) {
      const float* c = s.entries.data() + j * entry;
      float* kv = s.kv.data() + j * (p.nope_dim + p.v_dim);
      for (int64_t n = 0; n < p.nope_dim; ++n) kv[n] = attention_dot(w_uk + n * lat, c, lat);
      for (int64_t d = 0; d < p.v_dim; ++d) kv[p.nope_dim + d] = attention_dot(w_uv + d * lat, c, lat);
      scores[size_t(j)] =
          (attention_dot(q_nope, kv, p.nope_dim) + attention_dot(q_pe, c + lat, rd)) * p.scale;
    }
    const float sum = softmax_weights(scores);
    s.acc.assign(size_t(p.v_dim), 0.0f);
    for (int64_t j = 0; j < count; ++j)
      attention_axpy(s.acc.data(), s.kv.data() + j * (p.nope_dim + p.v_dim) + p.nope_dim, scores[size_t(j)], p.v_dim);
    for (int64_t d = 0; d < p.v_dim; ++d) o[d] = s.acc[size_t(d)] / sum;
  };

  // 2. Each new token's heads over the cached entries of positions 0 … its own. The heads share
  // the entries (MLA's point): a task dequantizes a token's entries once for a group of its
  // heads — as many groups as threads, so one decoding sequence still spreads over the pool.
  // Each head's arithmetic is its own, so results do not depend on the grouping.
  const int threads = pool != nullptr ? pool->size() : 1;
  const int64_t groups = std::max<int64_t>(1, std::min<int64_t>(heads, threads));
  const int64_t per_group = (heads + groups - 1) / groups;
  std::vector<MlaScratch> scratch(static_cast<size_t>(threads));
  for_each(int64_t(rows.size()) * groups, [&](int64_t task, int thread) {
    const MlaRow& r = rows[size_t(task / groups)];
    const int64_t h0 = (task % groups) * per_group, h1 = std::min(heads, h0 + per_group);
    if (h0 >= h1) return;
    MlaScratch& s = scratch[size_t(thread)];
    const int64_t count = r.position + 1;
    s.entries.resize(size_t(max_attended * entry));
    s.scores.resize(size_t(max_attended));
    for (int64_t b = 0; b <= r.position / bs; ++b) {
      const int64_t j0 = b * bs, n = std::min(bs, count - j0);
      cache.dequantize_k(layer, r.seq->block_table[size_t(b)], 0, 0, int(n), s.entries.data() + j0 * entry);
    }
    for (int64_t h = h0; h < h1; ++h) attend_head(r, h, count, s);
  });
}

}  // namespace fp8lm::cpu
