// The CPU paged KV cache (src/backend/cpu/kv_cache.h) and paged attention
// (src/backend/cpu/attention.h) against PyTorch references
// (tools/make_attention_fixtures.py): the cache's stored K/V bit for bit
// (BF16 and FP8 rounding as PyTorch does it), the attention output within the
// float32 error bound, bit-identical results for any thread count and for any
// split of a sequence into steps, and named errors for bad input.
//
// Tolerance (derived, not tuned), for query row q, head_dim n, L attended
// positions, exact scores s_j = scale·q·k_j with a_j = |scale|·Σ_i|q_i k_ji|,
// m = max s_j, exact weights p_j = softmax(s)_j and output o_d = Σ_j p_j v_jd,
// u = 2^-24, to first order:
//   * a score is a float32 dot product (n terms) times the scale: error
//     ≤ (n + 1)·u·a_j; s_j − m rounds once (u·|s_j − m|) and expf is within
//     an ulp (≤ 2u relative). So each weight w_j = exp(s_j − m) carries a
//     relative error e_j ≤ (n + 2)·u·a_j + u·|s_j − m| + 2u. (The error of m
//     itself scales every weight alike and cancels in the normalization.)
//   * Relative errors e_j of the weights move o_d by Σ_j p_j e_j (v_jd − o_d).
//   * Σ_j w_j v_jd (L products and L − 1 additions) errs by ≤ L·u·Σ_j w_j|v_jd|,
//     S = Σ_j w_j by ≤ (L − 1)·u·S, and the division and the float32 output
//     round once more.
// So |out_d − o_d| ≤ Σ_j p_j e_j (|v_jd| + |o_d|) + (L + 2)·u·(Σ_j p_j|v_jd| + |o_d|),
// times 1.01 for the second-order terms (e_j ≪ 1 here).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/kv_cache.h"
#include "common/error.h"
#include "cpp/fixtures.h"
#include "numerics/fp8_format.h"
#include "numerics/quantize.h"

// A namespace of its own: the test program compiles as unity units.
namespace fp8lm::cpu::attention_test {
namespace {

using test::read_array;
constexpr const char* kDir = "attention";
constexpr double kU = 0x1p-24;

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

KvElement parse_element(const std::string& s) {
  if (s == "f32") return KvElement::kF32;
  if (s == "bf16") return KvElement::kBF16;
  if (s == "e4m3") return KvElement::kE4M3;
  if (s == "e5m2") return KvElement::kE5M2;
  throw std::runtime_error("unknown kv element in fixture: " + s);
}

// What the cache must give back for x: the format's rounding via fp8_format.h.
float expected_roundtrip(float x, KvElement e, float scale) {
  switch (e) {
    case KvElement::kF32: return x;
    case KvElement::kBF16: return round_to_bf16(x);
    case KvElement::kE4M3: return fp8_to_float(float_to_fp8(x / scale, Fp8Format::kE4M3), Fp8Format::kE4M3) * scale;
    case KvElement::kE5M2: return fp8_to_float(float_to_fp8(x / scale, Fp8Format::kE5M2), Fp8Format::kE5M2) * scale;
    default: throw std::runtime_error("no kv cache format " + std::string(fp8lm::name(e)));
  }
}

// A sequence of a batch: its cached context and new tokens, with its K/V rows
// for every position [0, start + n) and its query rows for the new tokens.
struct Seq {
  int64_t start = 0;
  int64_t n = 0;
  std::vector<int64_t> blocks;
};

// Block tables for `seqs` from a scrambled list of the cache's blocks, so that
// sequences' blocks are neither contiguous nor in order.
void assign_blocks(std::vector<Seq>& seqs, int block_size, int64_t num_blocks, unsigned seed) {
  std::vector<int64_t> ids(static_cast<size_t>(num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
  size_t next = 0;
  for (Seq& s : seqs) {
    s.blocks.clear();
    for (int64_t b = 0; b < cdiv(s.start + s.n, block_size); ++b) s.blocks.push_back(ids.at(next++));
  }
}

std::vector<AttentionSequence> batch_of(const std::vector<Seq>& seqs) {
  std::vector<AttentionSequence> out;
  int64_t row = 0;
  for (const Seq& s : seqs) {
    out.push_back({row, s.n, s.start, s.blocks});
    row += s.n;
  }
  return out;
}

// The fixture's per-sequence arrays: k/v rows of all positions (sequences one
// after another), q rows of the new tokens.
struct Problem {
  AttentionParams params;
  int block_size = 16;
  std::vector<Seq> seqs;
  std::vector<float> q, k, v;  // k, v: [Σ (start + n), kv_heads·head_dim]
  int64_t rows() const {
    int64_t r = 0;
    for (const Seq& s : seqs) r += s.n;
    return r;
  }
  int64_t ctx_offset(size_t i) const {
    int64_t o = 0;
    for (size_t j = 0; j < i; ++j) o += seqs[j].start + seqs[j].n;
    return o;
  }
};

// Runs one batch step on a fresh cache (layer 1; layer 0 is a differently
// formatted neighbour): stores each sequence's context, then paged_attention
// on the new tokens. Returns out; `cache_out` receives the cache.
std::vector<float> run_problem(const Problem& p, KvLayerFormat fmt, int threads,
                               std::unique_ptr<PagedKvCache>* cache_out = nullptr, bool fp8 = false) {
  const int64_t kv_row = p.params.num_kv_heads * p.params.head_dim;
  int64_t max_block = 0;
  for (const Seq& s : p.seqs) {
    for (int64_t b : s.blocks) max_block = std::max(max_block, b);
  }
  auto cache = std::make_unique<PagedKvCache>(
      KvCacheShape{2, p.params.num_kv_heads, p.params.head_dim, p.block_size, max_block + 1},
      std::vector<KvLayerFormat>{{KvElement::kE5M2, 0.5f, 2.0f}, fmt});
  std::vector<float> k_new, v_new;
  for (size_t i = 0; i < p.seqs.size(); ++i) {
    const Seq& s = p.seqs[i];
    const int64_t base = p.ctx_offset(i);
    for (int64_t pos = 0; pos < s.start; ++pos) {
      cache->store(1, s.blocks[size_t(pos / p.block_size)], int(pos % p.block_size),
                   &p.k[size_t((base + pos) * kv_row)], &p.v[size_t((base + pos) * kv_row)]);
    }
    k_new.insert(k_new.end(), p.k.begin() + (base + s.start) * kv_row, p.k.begin() + (base + s.start + s.n) * kv_row);
    v_new.insert(v_new.end(), p.v.begin() + (base + s.start) * kv_row, p.v.begin() + (base + s.start + s.n) * kv_row);
  }
  std::vector<float> out(size_t(p.rows() * p.params.num_heads * p.params.head_dim), -7.0f);
  const std::vector<AttentionSequence> batch = batch_of(p.seqs);
  std::optional<ThreadPool> pool;
  if (threads > 0) pool.emplace(threads);
  paged_attention(p.q.data(), k_new.data(), v_new.data(), out.data(), batch, p.params, *cache, 1,
                  pool ? &*pool : nullptr, fp8);
  if (cache_out != nullptr) *cache_out = std::move(cache);
  return out;
}

TEST(CpuAttention, FixturesMatchPyTorch) {
  const nlohmann::json manifest = test::read_manifest(kDir);
  int checked = 0;
  for (const nlohmann::json& c : manifest["cases"]) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    Problem p;
    p.params.num_heads = c["num_heads"];
    p.params.num_kv_heads = c["num_kv_heads"];
    p.params.head_dim = c["head_dim"];
    p.params.scale = c["scale"].get<float>();
    if (!c["sliding_window"].is_null()) p.params.sliding_window = c["sliding_window"].get<int64_t>();
    p.block_size = c["block_size"];
    for (const nlohmann::json& s : c["sequences"]) p.seqs.push_back({s["start_position"], s["num_tokens"], {}});
    const int64_t total_blocks = [&] {
      int64_t t = 0;
      for (const Seq& s : p.seqs) t += cdiv(s.start + s.n, p.block_size);
      return t + 3;  // a few never used
    }();
    assign_blocks(p.seqs, p.block_size, total_blocks, 5);
    p.q = read_array<float>(kDir, c["q"]);
    p.k = read_array<float>(kDir, c["k"]);
    p.v = read_array<float>(kDir, c["v"]);
    const int heads = p.params.num_heads, kvh = p.params.num_kv_heads;
    const int64_t hd = p.params.head_dim;
    const int64_t kv_row = kvh * hd;

    for (const nlohmann::json& f : c["formats"]) {
      const KvElement element = parse_element(f["element"]);
      const float kv_scale = f["kv_scale"].get<float>();
      SCOPED_TRACE(std::string(fp8lm::name(element)) + " scale " + std::to_string(kv_scale));
      const KvLayerFormat fmt{element, kv_scale, kv_scale};
      std::unique_ptr<PagedKvCache> cache;
      const std::vector<float> out = run_problem(p, fmt, 0, &cache);

      // The cache holds PyTorch's rounding of every position, bit for bit.
      std::vector<float> kd(p.k.size()), vd(p.v.size());
      auto decode = [&](const std::string& key, const std::vector<float>& raw, std::vector<float>& deq) {
        if (element == KvElement::kF32) {
          deq = raw;
        } else if (element == KvElement::kBF16) {
          const std::vector<uint16_t> codes = read_array<uint16_t>(kDir, f[key]);
          ASSERT_EQ(codes.size(), raw.size());
          for (size_t i = 0; i < raw.size(); ++i) deq[i] = bf16_to_float(codes[i]);
        } else {
          const Fp8Format ff = element == KvElement::kE4M3 ? Fp8Format::kE4M3 : Fp8Format::kE5M2;
          const std::vector<uint8_t> codes = read_array<uint8_t>(kDir, f[key]);
          ASSERT_EQ(codes.size(), raw.size());
          for (size_t i = 0; i < raw.size(); ++i) deq[i] = fp8_to_float(codes[i], ff) * kv_scale;
        }
      };
      decode("k_codes", p.k, kd);
      decode("v_codes", p.v, vd);
      std::vector<float> got(static_cast<size_t>(hd));
      for (size_t i = 0; i < p.seqs.size(); ++i) {
        const Seq& s = p.seqs[i];
        const int64_t base = p.ctx_offset(i);
        for (int64_t pos = 0; pos < s.start + s.n; ++pos) {
          for (int h = 0; h < kvh; ++h) {
            const size_t at = size_t((base + pos) * kv_row + h * hd);
            cache->load_k(1, s.blocks[size_t(pos / p.block_size)], int(pos % p.block_size), h, got.data());
            for (int64_t d = 0; d < hd; ++d) {
              ASSERT_EQ(test::bits(got[size_t(d)]), test::bits(kd[at + size_t(d)])) << "k seq " << i << " pos " << pos;
            }
            cache->load_v(1, s.blocks[size_t(pos / p.block_size)], int(pos % p.block_size), h, got.data());
            for (int64_t d = 0; d < hd; ++d) {
              ASSERT_EQ(test::bits(got[size_t(d)]), test::bits(vd[at + size_t(d)])) << "v seq " << i << " pos " << pos;
            }
          }
        }
      }

      // The output within the derived float32 bound of PyTorch's float64 attention.
      const std::vector<double> ref = read_array<double>(kDir, f["out"]);
      ASSERT_EQ(ref.size(), out.size());
      int64_t row = 0;
      for (size_t i = 0; i < p.seqs.size(); ++i) {
        const Seq& s = p.seqs[i];
        const int64_t base = p.ctx_offset(i);
        for (int64_t t = 0; t < s.n; ++t, ++row) {
          const int64_t pos = s.start + t;
          const int64_t lo = p.params.sliding_window ? std::max<int64_t>(0, pos - *p.params.sliding_window + 1) : 0;
          const int64_t count = pos - lo + 1;
          for (int h = 0; h < heads; ++h) {
            const int kh = h / (heads / kvh);
            const float* qh = &p.q[size_t(row * heads * hd + h * hd)];
            std::vector<double> sc(static_cast<size_t>(count)), a(static_cast<size_t>(count)), w(static_cast<size_t>(count));
            for (int64_t j = 0; j < count; ++j) {
              const float* kj = &kd[size_t((base + lo + j) * kv_row + kh * hd)];
              double dot = 0, abs_dot = 0;
              for (int64_t d = 0; d < hd; ++d) {
                dot += double(qh[d]) * kj[d];
                abs_dot += std::abs(double(qh[d]) * kj[d]);
              }
              sc[size_t(j)] = dot * p.params.scale;
              a[size_t(j)] = abs_dot * std::abs(p.params.scale);
            }
            const double m = *std::max_element(sc.begin(), sc.end());
            double sum = 0;
            for (int64_t j = 0; j < count; ++j) sum += w[size_t(j)] = std::exp(sc[size_t(j)] - m);
            for (int64_t d = 0; d < hd; ++d) {
              const size_t at = size_t(row * heads * hd + h * hd + d);
              const double o = ref[at];
              double weight_err = 0, abs_v = 0;
              for (int64_t j = 0; j < count; ++j) {
                const double pj = w[size_t(j)] / sum;
                const double vj = std::abs(double(vd[size_t((base + lo + j) * kv_row + kh * hd + d)]));
                const double ej = double(hd + 2) * kU * a[size_t(j)] + kU * (m - sc[size_t(j)]) + 2 * kU;
                weight_err += pj * ej * (vj + std::abs(o));
                abs_v += pj * vj;
              }
              const double tol = 1.01 * (weight_err + double(count + 2) * kU * (abs_v + std::abs(o)));
              ASSERT_NEAR(double(out[at]), o, tol) << "row " << row << " head " << h << " d " << d;
            }
          }
        }
      }
      // Any thread count gives the same bytes.
      for (int threads : {1, 3}) ASSERT_EQ(run_problem(p, fmt, threads), out) << threads << " threads";
      ++checked;
    }
  }
  EXPECT_EQ(checked, 16);
}

// Random problems for the structural tests below.
Problem random_problem(int heads, int kvh, int64_t hd, std::vector<std::pair<int64_t, int64_t>> seqs, unsigned seed) {
  Problem p;
  p.params = {heads, kvh, hd, float(1.0 / std::sqrt(double(hd))), std::nullopt};
  for (auto [start, n] : seqs) p.seqs.push_back({start, n, {}});
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  int64_t positions = 0;
  for (const Seq& s : p.seqs) positions += s.start + s.n;
  p.q.resize(size_t(p.rows() * heads * hd));
  p.k.resize(size_t(positions * kvh * hd));
  p.v.resize(p.k.size());
  for (float& x : p.q) x = dist(gen);
  for (float& x : p.k) x = 2.0f * dist(gen);
  for (float& x : p.v) x = dist(gen);
  int64_t blocks = 0;
  for (const Seq& s : p.seqs) blocks += cdiv(s.start + s.n, p.block_size);
  assign_blocks(p.seqs, p.block_size, blocks + 2, seed);
  return p;
}

const std::vector<KvLayerFormat> kFormats = {
    {KvElement::kF32, 1.0f, 1.0f},
    {KvElement::kBF16, 1.0f, 1.0f},
    {KvElement::kE4M3, 0.0173f, 0.021f},
    {KvElement::kE5M2, 1.0f, 0.5f},
};

// Enough work to wake the pool (a long prefill and decodes over long contexts).
TEST(CpuAttention, ThreadCountInvariant) {
  for (std::optional<int64_t> window : {std::optional<int64_t>(), std::optional<int64_t>(24)}) {
    Problem p = random_problem(8, 2, 64, {{0, 40}, {200, 1}, {17, 1}, {75, 9}}, 3);
    p.params.sliding_window = window;
    for (const KvLayerFormat& fmt : kFormats) {
      SCOPED_TRACE(std::string(fp8lm::name(fmt.element)));
      const std::vector<float> one = run_problem(p, fmt, 0);
      ASSERT_EQ(run_problem(p, fmt, 1), one);
      ASSERT_EQ(run_problem(p, fmt, 3), one);
      for (float x : one) ASSERT_TRUE(std::isfinite(x));
    }
  }
}

// FP8 attention (paged_attention's fp8, issue 44) against its definition evaluated here in float64
// on the cached K and V: each (row, head)'s query through numerics' dynamic E4M3 quantization (a
// 1 × head_dim tensor), the scores and weights w_j = exp(s_j − m) in float64, each weight rounded to
// the E4M3 code of w_j · 2^8, out = Σ_j code_j v_j / 2^8 / Σ_j w_j. The kernel's float32 scores can
// put a weight on the other side of a rounding boundary than float64 does: where w_j · 2^8 lies
// within 10^-5 of one, the bound takes either code (|Δ| ≤ one code step · |v_j| / 2^8 / S);
// elsewhere float32's own rounding (10^-5 of Σ_j w_j |v_j| / S). An E5M2 weight, a wrong scale or a
// skipped rounding fails it; so does float attention, checked below. Thread counts give the same bytes.
TEST(CpuAttention, Fp8AttentionIsItsDefinition) {
  Problem p = random_problem(8, 2, 64, {{0, 40}, {200, 1}, {75, 9}}, 21);
  const KvLayerFormat fmt{KvElement::kE4M3, 0.0173f, 0.021f};
  std::unique_ptr<PagedKvCache> cache;
  const std::vector<float> exact = run_problem(p, fmt, 0, &cache);
  const std::vector<float> fp8 = run_problem(p, fmt, 0, nullptr, true);
  ASSERT_EQ(fp8.size(), exact.size());
  for (int threads : {1, 3}) ASSERT_EQ(run_problem(p, fmt, threads, nullptr, true), fp8) << threads << " threads";
  const int heads = p.params.num_heads, kvh = p.params.num_kv_heads;
  const int64_t hd = p.params.head_dim;
  auto e4m3 = [](double x) { return double(fp8_to_float(float_to_fp8(float(x), Fp8Format::kE4M3), Fp8Format::kE4M3)); };
  int64_t row = 0, near = 0, unlike_float = 0;
  std::vector<float> kd(static_cast<size_t>(hd)), vd(static_cast<size_t>(hd));
  for (size_t i = 0; i < p.seqs.size(); ++i) {
    const Seq& s = p.seqs[i];
    for (int64_t t = 0; t < s.n; ++t, ++row) {
      const int64_t count = s.start + t + 1;
      for (int h = 0; h < heads; ++h) {
        const int kh = h / (heads / kvh);
        const QuantizedMatrix qq =
            quantize_dynamic(MatrixView::f32(&p.q[size_t(row * heads * hd + h * hd)], 1, hd), QuantSpec{});
        const std::vector<float> q8 = dequantize_f32(qq);
        std::vector<double> sc(static_cast<size_t>(count));
        std::vector<std::vector<float>> vs(static_cast<size_t>(count));
        for (int64_t j = 0; j < count; ++j) {
          cache->load_k(1, s.blocks[size_t(j / p.block_size)], int(j % p.block_size), kh, kd.data());
          cache->load_v(1, s.blocks[size_t(j / p.block_size)], int(j % p.block_size), kh, vd.data());
          double dot = 0;
          for (int64_t d = 0; d < hd; ++d) dot += double(q8[size_t(d)]) * kd[size_t(d)];
          sc[size_t(j)] = dot * p.params.scale;
          vs[size_t(j)] = vd;
        }
        const double m = *std::max_element(sc.begin(), sc.end());
        double sum = 0;
        std::vector<double> w(static_cast<size_t>(count)), code(static_cast<size_t>(count)), flip(static_cast<size_t>(count));
        for (int64_t j = 0; j < count; ++j) {
          const double x = std::exp(sc[size_t(j)] - m) * 256.0;
          sum += w[size_t(j)] = x / 256.0;
          code[size_t(j)] = e4m3(x);
          // Either side of a boundary within 10^-5: the larger of the two codes' distance.
          const double lo = e4m3(x * (1 - 1e-5)), hi = e4m3(x * (1 + 1e-5));
          flip[size_t(j)] = std::max(std::abs(hi - code[size_t(j)]), std::abs(code[size_t(j)] - lo));
          if (flip[size_t(j)] > 0) ++near;
        }
        for (int64_t d = 0; d < hd; ++d) {
          const size_t at = size_t(row * heads * hd + h * hd + d);
          double want = 0, slack = 0, scale_abs = 0;
          for (int64_t j = 0; j < count; ++j) {
            const double vj = vs[size_t(j)][size_t(d)];
            want += code[size_t(j)] * vj;
            slack += flip[size_t(j)] * std::abs(vj);
            scale_abs += w[size_t(j)] * std::abs(vj);
          }
          want = want / 256.0 / sum;
          const double tol = slack / 256.0 / sum + 1e-5 * scale_abs / sum + 1e-30;
          ASSERT_NEAR(double(fp8[at]), want, tol) << "row " << row << " head " << h << " d " << d;
          if (std::abs(double(exact[at]) - want) > tol) ++unlike_float;
        }
      }
    }
  }
  std::printf("FP8 attention: %lld weights within 1e-5 of an E4M3 rounding boundary; float attention outside the "
              "bound at %lld outputs\n", static_cast<long long>(near), static_cast<long long>(unlike_float));
  EXPECT_GT(unlike_float, 0) << "float attention meets FP8 attention's definition: the test cannot tell them apart";
}

// One sequence's rows, for a sequence prefilled in steps: out rows are
// bit-identical whether it came in one step, in two chunks, token by token, or
// batched with other sequences (in other rows, with other block tables).
TEST(CpuAttention, ChunkingInvariant) {
  const int heads = 4, kvh = 2;
  const int64_t hd = 32, total = 45;  // crosses two block boundaries
  const int64_t kv_row = kvh * hd, q_row = heads * hd;
  const Problem src = random_problem(heads, kvh, hd, {{0, total}}, 9);
  for (std::optional<int64_t> window : {std::optional<int64_t>(), std::optional<int64_t>(8)}) {
    for (const KvLayerFormat& fmt : kFormats) {
      SCOPED_TRACE(std::string(fp8lm::name(fmt.element)) + (window ? " window" : ""));
      AttentionParams params = src.params;
      params.sliding_window = window;
      // Runs the sequence in steps of the given sizes; with `batched`, each step
      // also carries a decode of another sequence placed before it in the rows.
      auto run_steps = [&](const std::vector<int64_t>& steps, bool batched, unsigned seed) {
        PagedKvCache cache({1, kvh, hd, 16, 16}, {fmt});
        std::vector<int64_t> ids(16);
        std::iota(ids.begin(), ids.end(), 0);
        std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
        const std::vector<int64_t> table(ids.begin(), ids.begin() + 3);
        const std::vector<int64_t> other_table(ids.begin() + 3, ids.begin() + 8);
        std::vector<float> out(static_cast<size_t>(total * q_row));
        int64_t done = 0, other_pos = 30;
        for (int64_t n : steps) {
          const int64_t first = batched ? 1 : 0;
          std::vector<float> q(static_cast<size_t>((n + first) * q_row)), k(static_cast<size_t>((n + first) * kv_row)), v(k.size());
          std::vector<float> o(q.size());
          std::vector<AttentionSequence> batch;
          if (batched) {  // row 0: another sequence's decode (arbitrary values)
            std::fill(q.begin(), q.begin() + q_row, 0.3f);
            std::fill(k.begin(), k.begin() + kv_row, -0.7f);
            std::fill(v.begin(), v.begin() + kv_row, 1.1f);
            batch.push_back({0, 1, other_pos++, other_table});
          }
          std::copy_n(src.q.begin() + done * q_row, n * q_row, q.begin() + first * q_row);
          std::copy_n(src.k.begin() + done * kv_row, n * kv_row, k.begin() + first * kv_row);
          std::copy_n(src.v.begin() + done * kv_row, n * kv_row, v.begin() + first * kv_row);
          batch.push_back({first, n, done, table});
          ThreadPool pool(2);
          paged_attention(q.data(), k.data(), v.data(), o.data(), batch, params, cache, 0, &pool);
          std::copy_n(o.begin() + first * q_row, n * q_row, out.begin() + done * q_row);
          done += n;
        }
        return out;
      };
      const std::vector<float> whole = run_steps({total}, false, 1);
      EXPECT_EQ(run_steps({20, 25}, false, 2), whole) << "two chunks";
      EXPECT_EQ(run_steps({16, 1, 27, 1}, true, 3), whole) << "chunks batched with a decode";
      EXPECT_EQ(run_steps(std::vector<int64_t>(size_t(total), 1), false, 4), whole) << "token by token";
      EXPECT_EQ(run_steps(std::vector<int64_t>(size_t(total), 1), true, 5), whole) << "token by token, batched";
    }
  }
}

// A single position: attention returns its own (rounded) V.
TEST(CpuAttention, SinglePositionReturnsItsValue) {
  for (const KvLayerFormat& fmt : kFormats) {
    PagedKvCache cache({1, 1, 8, 4, 2}, {fmt});
    std::vector<float> q(16, 0.5f), k(8, 1.0f), v(8), out(16);
    for (int i = 0; i < 8; ++i) v[size_t(i)] = 0.1f * float(i) - 0.3f;
    const std::vector<int64_t> table{1};
    const AttentionSequence seq{0, 1, 0, table};
    paged_attention(q.data(), k.data(), v.data(), out.data(), {&seq, 1}, {2, 1, 8, 0.35f, std::nullopt}, cache, 0,
                    nullptr);
    for (int h = 0; h < 2; ++h) {
      for (int i = 0; i < 8; ++i) {
        EXPECT_EQ(out[size_t(h * 8 + i)], expected_roundtrip(v[size_t(i)], fmt.element, fmt.v_scale));
      }
    }
  }
}

// Store then load equals fp8_format.h's conversions, for every slot of several
// blocks (neighbouring slots, heads, layers and K vs V do not overlap).
TEST(CpuKvCache, StoreLoadRoundTrip) {
  const KvCacheShape shape{4, 3, 40, 4, 5};
  PagedKvCache cache(shape, kFormats);
  std::mt19937 gen(17);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  const float specials[] = {0.0f, -0.0f, 1e-9f, -3e-5f, 1e6f, -1e6f, 448.0f, 7.75f, 0.0173f * 464.5f,
                            std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::denorm_min()};
  const int64_t row = shape.num_kv_heads * shape.head_dim;
  // values[layer][block][slot] = (k row, v row)
  std::vector<std::vector<float>> ks, vs;
  for (int layer = 0; layer < shape.num_layers; ++layer) {
    for (int64_t b = 0; b < shape.num_blocks; ++b) {
      for (int s = 0; s < shape.block_size; ++s) {
        std::vector<float> k(static_cast<size_t>(row)), v(static_cast<size_t>(row));
        for (float& x : k) x = dist(gen);
        for (float& x : v) x = dist(gen) * 0.01f;
        for (size_t i = 0; i < std::size(specials); ++i) {
          k[(size_t(s) * 7 + i * 3) % k.size()] = specials[i];
          v[(size_t(b) * 5 + i * 11) % v.size()] = specials[i];
        }
        cache.store(layer, b, s, k.data(), v.data());
        ks.push_back(std::move(k));
        vs.push_back(std::move(v));
      }
    }
  }
  std::vector<float> got(static_cast<size_t>(shape.head_dim));
  size_t idx = 0;
  for (int layer = 0; layer < shape.num_layers; ++layer) {
    const KvLayerFormat& f = cache.layer_format(layer);
    for (int64_t b = 0; b < shape.num_blocks; ++b) {
      for (int s = 0; s < shape.block_size; ++s, ++idx) {
        for (int h = 0; h < shape.num_kv_heads; ++h) {
          cache.load_k(layer, b, s, h, got.data());
          for (int64_t d = 0; d < shape.head_dim; ++d) {
            const float x = ks[idx][size_t(h * shape.head_dim + d)];
            ASSERT_EQ(test::bits(got[size_t(d)]), test::bits(expected_roundtrip(x, f.element, f.k_scale)))
                << fp8lm::name(f.element) << " k " << x;
          }
          cache.load_v(layer, b, s, h, got.data());
          for (int64_t d = 0; d < shape.head_dim; ++d) {
            const float x = vs[idx][size_t(h * shape.head_dim + d)];
            ASSERT_EQ(test::bits(got[size_t(d)]), test::bits(expected_roundtrip(x, f.element, f.v_scale)))
                << fp8lm::name(f.element) << " v " << x;
          }
        }
      }
    }
  }
  // A block of one head in one call equals slot by slot.
  std::vector<float> run(static_cast<size_t>(3 * shape.head_dim));
  cache.dequantize_v(2, 3, 1, 1, 3, run.data());
  for (int s = 1; s < 4; ++s) {
    cache.load_v(2, 3, s, 1, got.data());
    for (int64_t d = 0; d < shape.head_dim; ++d) ASSERT_EQ(run[size_t((s - 1) * shape.head_dim + d)], got[size_t(d)]);
  }
}

TEST(CpuKvCache, QuantizationDividesByTheScale) {
  // Values next to the midpoints between E4M3 codes (times the scale), where
  // x / s and x · (1/s) can round to different codes: the cache must divide.
  // (0.0173's float reciprocal is so accurate that the two almost never differ.)
  int differing = 0;
  for (const float s : {0.021f, 0.3f, 1.0f / 3.0f}) {
    const float inv = 1.0f / s;
    PagedKvCache cache({1, 1, 1, 1, 1}, {{KvElement::kE4M3, s, s}});
    for (int c = 1; c < 0x7E; ++c) {
      const float mid =
          0.5f * (fp8_to_float(uint8_t(c), Fp8Format::kE4M3) + fp8_to_float(uint8_t(c + 1), Fp8Format::kE4M3));
      float x = mid * s;
      for (int i = 0; i < 4; ++i) x = std::nextafter(x, 0.0f);
      for (int i = 0; i < 9; ++i, x = std::nextafter(x, 1e9f)) {
        for (const float sx : {x, -x}) {
          const uint8_t by_div = float_to_fp8(sx / s, Fp8Format::kE4M3);
          if (by_div == float_to_fp8(sx * inv, Fp8Format::kE4M3)) continue;
          ++differing;
          cache.store(0, 0, 0, &sx, &sx);
          float got;
          cache.load_k(0, 0, 0, 0, &got);
          EXPECT_EQ(got, fp8_to_float(by_div, Fp8Format::kE4M3) * s) << sx << " scale " << s;
        }
      }
    }
  }
  EXPECT_GE(differing, 4);
}

TEST(CpuKvCache, Sizes) {
  const KvCacheShape shape{4, 3, 40, 16, 10};
  EXPECT_EQ(backend::kv_bytes_per_token(shape, kFormats), uint64_t(2 * 3 * 40 * (4 + 2 + 1 + 1)));
  const PagedKvCache cache(shape, kFormats);
  const uint64_t data = 10 * 16 * backend::kv_bytes_per_token(shape, kFormats);
  EXPECT_GE(cache.bytes(), data);
  EXPECT_LE(cache.bytes(), data + 2 * 4 * 64);  // alignment padding only
  EXPECT_EQ(cache.layer_format(2).element, KvElement::kE4M3);
  EXPECT_EQ(cache.layer_format(2).v_scale, 0.021f);
  // FP8 stays one byte per element.
  const PagedKvCache fp8({1, 8, 128, 16, 100}, {{KvElement::kE4M3, 1.0f, 1.0f}});
  EXPECT_EQ(fp8.bytes(), uint64_t(2 * 100 * 16 * 8 * 128));
}

template <typename F>
void expect_error(F&& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(CpuKvCache, ErrorsNamed) {
  const KvLayerFormat bf16{};
  expect_error([&] { PagedKvCache({0, 1, 8, 16, 4}, {}); }, "num_layers");
  expect_error([&] { PagedKvCache({1, 0, 8, 16, 4}, {bf16}); }, "num_kv_heads");
  expect_error([&] { PagedKvCache({1, 1, 0, 16, 4}, {bf16}); }, "head_dim");
  expect_error([&] { PagedKvCache({1, 1, 8, 0, 4}, {bf16}); }, "block_size");
  expect_error([&] { PagedKvCache({1, 1, 8, 16, -1}, {bf16}); }, "num_blocks");
  expect_error([&] { PagedKvCache({2, 1, 8, 16, 4}, {bf16}); }, "1 layer formats for num_layers = 2");
  expect_error([&] { PagedKvCache({1, 1, 8, 16, 4}, {{KvElement::kE4M3, 0.0f, 1.0f}}); }, "layer 0 k_scale");
  expect_error([&] { PagedKvCache({1, 1, 8, 16, 4}, {{KvElement::kE5M2, 1.0f, -2.0f}}); }, "v_scale");
  expect_error([&] { PagedKvCache({1, 1, 8, 16, 4}, {{KvElement::kE4M3, std::nanf(""), 1.0f}}); }, "k_scale");
  expect_error([&] { PagedKvCache({1, 1, 8, 16, int64_t{1} << 62}, {bf16}); }, "overflow");
  // F16 is an ElementType but no cache format: refused by name, by the cache and by the sizing.
  expect_error([&] { PagedKvCache({1, 1, 8, 16, 4}, {{KvElement::kF16, 1.0f, 1.0f}}); },
               "layer 0 has element type f16, which a kv cache does not store");
  expect_error([&] { backend::kv_bytes_per_token({1, 1, 8, 16, 4}, {{KvElement::kF16, 1.0f, 1.0f}}); }, "f16");
  expect_error([&] { backend::kv_bytes_per_token({1, 1, 8, 16, 4}, {{KvElement(9), 1.0f, 1.0f}}); },
               "layer 0 has an unknown element type");
  // A BF16 layer ignores its scales.
  EXPECT_NO_THROW(PagedKvCache({1, 1, 8, 16, 4}, {{KvElement::kBF16, 0.0f, 0.0f}}));

  PagedKvCache cache({2, 2, 8, 4, 3}, {bf16, bf16});
  std::vector<float> x(16), out(8);
  expect_error([&] { cache.store(2, 0, 0, x.data(), x.data()); }, "layer 2 out of range");
  expect_error([&] { cache.store(0, 3, 0, x.data(), x.data()); }, "block 3 out of range");
  expect_error([&] { cache.store(0, 0, 4, x.data(), x.data()); }, "slot 4 out of range");
  expect_error([&] { cache.store(0, 0, 0, nullptr, x.data()); }, "null");
  expect_error([&] { cache.load_k(0, 0, -1, 0, out.data()); }, "slot -1 out of range");
  expect_error([&] { cache.load_v(0, 0, 0, 2, out.data()); }, "kv head 2 out of range");
  expect_error([&] { cache.dequantize_k(0, 0, 0, 2, 3, out.data()); }, "overrun");
  expect_error([&] { (void)cache.layer_format(-1); }, "layer -1");
}

TEST(CpuAttention, ErrorsNamed) {
  PagedKvCache cache({2, 2, 8, 4, 6}, {KvLayerFormat{}, KvLayerFormat{}});
  std::vector<float> q(64 * 4 * 8), k(64 * 2 * 8), v(k.size()), out(q.size(), 5.0f);
  const std::vector<int64_t> t3{0, 1, 2}, t2{3, 4}, bad_id{0, 6};
  const AttentionParams ok{4, 2, 8, 0.35f, std::nullopt};
  auto call = [&](std::vector<AttentionSequence> seqs, AttentionParams p = {4, 2, 8, 0.35f, std::nullopt},
                  int layer = 1) {
    paged_attention(q.data(), k.data(), v.data(), out.data(), seqs, p, cache, layer, nullptr);
  };
  const AttentionSequence good{0, 2, 3, t2};  // positions 3, 4: blocks 0 and 1 of t2
  expect_error([&] { call({good}, {3, 2, 8, 0.35f, std::nullopt}); }, "not a multiple of num_kv_heads");
  expect_error([&] { call({good}, {4, 4, 8, 0.35f, std::nullopt}); }, "num_kv_heads 4 but the cache has 2");
  expect_error([&] { call({good}, {4, 2, 16, 0.35f, std::nullopt}); }, "head_dim 16 but the cache has 8");
  expect_error([&] { call({good}, {0, 2, 8, 0.35f, std::nullopt}); }, "num_heads");
  expect_error([&] { call({good}, {4, 2, 8, std::nanf(""), std::nullopt}); }, "scale must be finite");
  expect_error([&] { call({good}, {4, 2, 8, 0.35f, 0}); }, "sliding_window must be >= 1");
  expect_error([&] { call({good}, ok, 2); }, "layer 2 out of range");
  expect_error([&] { call({{0, 1, 8, t2}}); }, "sequence 0: block table too short: 2 blocks for 9 positions need 3");
  expect_error([&] { call({good, {2, 3, 3, bad_id}}); }, "sequence 1: block table entry 1 = 6 out of range");
  expect_error([&] { call({good, {1, 1, 0, t3}}); }, "two sequences share row 1");
  expect_error([&] { call({{-1, 1, 0, t3}}); }, "sequence 0: rows out of range");
  expect_error([&] { call({{0, 0, 0, t3}}); }, "num_tokens must be >= 1");
  expect_error([&] { call({{0, 1, -2, t3}}); }, "start_position");
  // The same positions of the same blocks twice in one batch.
  expect_error([&] { call({good, {2, 2, 3, t2}}); }, "two new tokens map to one cache slot (block 3, slot 3)");
  // Nothing is stored when the call fails: block 5 stays zero.
  std::fill(k.begin(), k.end(), 1.0f);
  const std::vector<int64_t> t5{5};
  expect_error([&] { call({{0, 1, 0, t5}, {1, 1, 8, t2}}); }, "block table too short");
  std::vector<float> got(8);
  cache.load_k(1, 5, 0, 0, got.data());
  for (float x : got) EXPECT_EQ(x, 0.0f);
  // An empty batch does nothing.
  EXPECT_NO_THROW(call({}));
}

}  // namespace
}  // namespace fp8lm::cpu::attention_test
