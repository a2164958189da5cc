// The CUDA paged KV cache stores and paged attention (src/backend/cuda/attention/paged_attention.h)
// against the CPU reference (src/backend/cpu/kv_cache.h + attention.h) on the same BF16-rounded
// inputs: head_dim 24 / 64 / 80 / 96 / 128 / 256, GQA ratios 1 / 3 / 4 / 5 / 6 / 8 / 16, block
// sizes 8 / 16 / 32, KV elements BF16 / F32 / E4M3 / E5M2 (scales ≠ 1), sliding windows
// (1, 37, 64, 200, 300, 700, 1000), batches mixing a prefill from position 0, a chunk starting
// mid-sequence (its context written by an earlier store_kv call), a 9-token chunk over a long
// context, a few multi-token decodes and single-token decodes at contexts up to ~3000 (split
// over partitions); shuffled sequence order and shuffled, non-contiguous block tables whose
// unused entries (past the context, and blocks wholly before a sliding window) are poisoned
// with an out-of-range id: a kernel that reads one faults (an illegal-address error).
// Also decode-only batches, loose host bounds, a CUDA graph replayed over different metadata,
// determinism (a second call gives the same bytes) and argument errors. Fresh random inputs
// every run (the seed is printed; FP8LM_TEST_SEED repeats one). Needs a Hopper GPU; SKIPPED
// elsewhere (the argument checks run anywhere: they throw before any launch).
//
// The cache: after store_kv, every element of the device cache, dequantized on the host
// (code × scale in float32, as the CPU's table), equals the CPU cache's bit for bit, unused
// blocks (zeros) included.
//
// Tolerance (derived, not tuned). For a row at position p, query head h, attended positions
// j ∈ [lo, p] (L of them), head_dim n, u = 2^-24, exact scores s_j = scale·q·k_j over the
// cached (dequantized) K, a_j = |scale|·Σ_i |q_i k_ji|, m = max s_j, exact weights p_j and exact
// output o_d = Σ_j p_j v_jd (all in double here):
//   * A relative error e_j of each weight moves the output by Σ_j p_j e_j (v_jd − o_d) (the
//     normalization divides a common factor out), so by ≤ Σ_j p_j e_j (|v_jd| + |o_d|).
//   * CPU (tests/cpp/test_cpu_attention.cpp): e_j ≤ (n + 2)·u·a_j + u·(m − s_j) + 2u;
//     the weighted sums add (L + 2)·u·(Σ_j p_j |v_jd| + |o_d|).
//   * GPU: the dot product is a float32 sum of n exact or once-rounded products (in any order,
//     or on the tensor cores, whose truncating float32 accumulation stays within ≤ 2u per
//     16-product step: inside the same bound), times the scale: ≤ (n + 1)·u·a_j. With an FP8
//     cache the GPU sums q·code and scales after, so it approximates Σ q·code·k_scale, which
//     differs from the reference's Σ q·fl(code·k_scale) by ≤ u·a_j: (n + 2)·u·a_j; the folded
//     constant scale·k_scale rounds once more, a relative u on every s_j: u·(m − s_j) on the
//     weights. Against a running maximum: the subtractions s_j − m_part and m_old − m_new of
//     all the rescalings add up to ≤ u·(m − s_j), expf ≤ 2 ulp, and each of the R rescalings
//     e^(m_old − m_new) adds ≤ 3u (expf 2u, the product u), R ≤ cdiv(L, 64) + 2 (the 64-key
//     tiles spanned, ≤ cdiv(L, 64) + 1, less the key's own, then the merge of a CTA's warps and
//     the merge of the context's chunks or partitions). So e_j ≤ (n + 3)·u·a_j + 2u·(m − s_j) +
//     (2 + 3R)·u (one u·a_j spare). On the tensor-core path P is rounded to BF16 before P·V and
//     the normalizer sums the rounded values: one more relative error ≤ 2^-8 (BF16's unit
//     roundoff) per weight (the path is known from the host rule: head_dim 64/128, non-F32
//     cache, a sequence with > kDecodeMaxNewTokens new tokens, or decode rows where
//     paged_attention_decode_uses_mma says so).
//   * The tensor-core kernels on an FP8 cache multiply in FP16 (attention_mma.cuh): Q times 2^e
//     (largest |q_i| of the row in [2^14, 2^15)) rounds only below FP16's normal range, by
//     ≤ 2^-25·2^-e ≤ 2^-39·max|q_i| per element: ≤ |scale|·max|q_i|·Σ_i |k_ji|·2^-39 on s_j. P is rounded to FP16 instead of BF16 (2^-11 ≤ 2^-8 relative,
//     but below 2^-14 to FP16's subnormal step: ≤ 2^-25 absolute per weight before the
//     normalizer l ≥ 1 divides it): ≤ 2^-25·Σ_j (|v_jd| + |o_d|) on the output.
//     The weighted sums: L products and additions (exact products on the tensor cores), R
//     rescales, × v_scale and / l, and (FP8) v_scale applied after the sum rather than to each
//     cached value: (L + R + 5)·u·(Σ_j p_j |v_jd| + |o_d|).
//   * The GPU output is its float32 value rounded to BF16: half a BF16 ulp at ≤ |o_d| + E_gpu.
// So |gpu − cpu| ≤ 1.01·(E_gpu + E_cpu) + half_ulp_bf16(|o_d| + E_gpu), the 1.01 covering the
// second-order terms (every e_j ≪ 1 here).
#include <gtest/gtest.h>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/kv_cache.h"
#include "backend/cuda/common/check.h"
#include "backend/cuda/attention/paged_attention.h"
#include "common/error.h"
#include "common/thread_pool.h"
#include "cuda/cuda_test_util.h"
#include "numerics/fp8_format.h"

namespace fp8lm {
namespace {

using backend::AttentionParams;
using backend::AttentionSequence;
using backend::KvCacheShape;
using backend::KvElement;
using backend::KvLayerFormat;

constexpr double kU = 0x1p-24;
constexpr int32_t kPoison = std::numeric_limits<int32_t>::max();  // a block id far out of range

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A device allocation; `bytes` may be 0.
struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) : bytes(n) {
    if (n) FP8LM_CUDA_CHECK(cudaMalloc(&ptr, n));
  }
  template <class T>
  explicit DeviceBuffer(const std::vector<T>& v) : DeviceBuffer(v.size() * sizeof(T)) {
    test::upload_bytes(ptr, v.data(), bytes);
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr(o.ptr), bytes(o.bytes) { o.ptr = nullptr, o.bytes = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr, o.ptr);
    std::swap(bytes, o.bytes);
    return *this;
  }
  // Copies v into the existing allocation (same size), keeping its address (graph replays).
  template <class T>
  void overwrite(const std::vector<T>& v) {
    ASSERT_EQ(v.size() * sizeof(T), bytes);
    test::upload_bytes(ptr, v.data(), bytes);
  }
  template <class T>
  T* as() const { return static_cast<T*>(ptr); }
};

template <class T>
std::vector<T> download(const DeviceBuffer& b) {
  std::vector<T> v(b.bytes / sizeof(T));
  if (b.bytes) FP8LM_CUDA_CHECK(cudaMemcpy(v.data(), b.ptr, b.bytes, cudaMemcpyDeviceToHost));
  return v;
}

uint64_t test_seed() {
  static const uint64_t seed = [] {
    if (const char* s = std::getenv("FP8LM_TEST_SEED")) return uint64_t(std::strtoull(s, nullptr, 10));
    return (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
  }();
  return seed;
}

std::string seed_note() {
  return " (seed " + std::to_string(test_seed()) + ", FP8LM_TEST_SEED=" + std::to_string(test_seed()) + " repeats it)";
}

// ---- Problems ------------------------------------------------------------------------------

struct SeqSpec {
  int64_t start = 0;  // tokens already cached
  int64_t n = 1;      // new tokens
};

struct Config {
  std::string name;
  int heads = 8, kv_heads = 2;
  int64_t head_dim = 128;
  KvLayerFormat fmt{KvElement::kBF16, 1.0f, 1.0f};
  std::optional<int64_t> window;
  int block_size = 16;
  int extra_new_tokens = 0;  // host bounds looser than the batch needs
  int extra_context = 0;
  bool decode_bound = true;  // the host bound on the decode rows' new tokens given (else −1: unknown)
};

std::string describe(const Config& c) {
  return c.name + " [heads " + std::to_string(c.heads) + "/" + std::to_string(c.kv_heads) + ", head_dim " +
         std::to_string(c.head_dim) + ", " + std::string(fp8lm::name(c.fmt.element)) + " k_scale " +
         std::to_string(c.fmt.k_scale) + " v_scale " + std::to_string(c.fmt.v_scale) + ", block " +
         std::to_string(c.block_size) + (c.window ? ", window " + std::to_string(*c.window) : "") + "]" + seed_note();
}

struct Problem {
  Config cfg;
  AttentionParams params;
  std::vector<SeqSpec> seqs;
  std::vector<int64_t> first_row;              // per sequence (sequences' rows are shuffled)
  int64_t rows = 0;
  int64_t num_blocks = 0;
  std::vector<std::vector<int64_t>> tables;    // per sequence: blocks of [0, start + n)
  std::vector<float> q;                        // [rows][heads·head_dim], BF16 values
  std::vector<std::vector<float>> kctx, vctx;  // per sequence: [start + n][kv_heads·head_dim], BF16 values
  int max_new_tokens = 0, max_context = 0;     // host bounds
  int64_t q_row() const { return int64_t(params.num_heads) * params.head_dim; }
  int64_t kv_row() const { return int64_t(params.num_kv_heads) * params.head_dim; }
};

float random_bf16(std::mt19937_64& rng, float sigma) {
  std::normal_distribution<float> d(0.0f, sigma);
  return round_to_bf16(d(rng));
}

Problem make_problem(const Config& cfg, std::vector<SeqSpec> seqs, std::mt19937_64& rng) {
  Problem p;
  p.cfg = cfg;
  p.params = {cfg.heads, cfg.kv_heads, cfg.head_dim, float(1.0 / std::sqrt(double(cfg.head_dim))), cfg.window};
  p.seqs = std::move(seqs);
  const size_t ns = p.seqs.size();
  // Rows: the sequences in a shuffled order.
  std::vector<size_t> order(ns);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  p.first_row.assign(ns, 0);
  for (size_t i : order) {
    p.first_row[i] = p.rows;
    p.rows += p.seqs[i].n;
  }
  // Blocks: a shuffled list of the cache's blocks, a few never used.
  int64_t needed = 0;
  for (const SeqSpec& s : p.seqs) needed += cdiv(s.start + s.n, cfg.block_size);
  p.num_blocks = needed + 5;
  std::vector<int64_t> ids(static_cast<size_t>(p.num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  size_t next = 0;
  p.tables.resize(ns);
  for (size_t i = 0; i < ns; ++i) {
    for (int64_t b = 0; b < cdiv(p.seqs[i].start + p.seqs[i].n, cfg.block_size); ++b) p.tables[i].push_back(ids[next++]);
  }
  // Values: q ~ N(0, 1), k ~ N(0, 2²), v ~ N(0, 1), rounded to BF16.
  p.q.resize(size_t(p.rows * p.q_row()));
  for (float& x : p.q) x = random_bf16(rng, 1.0f);
  p.kctx.resize(ns);
  p.vctx.resize(ns);
  for (size_t i = 0; i < ns; ++i) {
    const size_t count = size_t((p.seqs[i].start + p.seqs[i].n) * p.kv_row());
    p.kctx[i].resize(count);
    p.vctx[i].resize(count);
    for (float& x : p.kctx[i]) x = random_bf16(rng, 2.0f);
    for (float& x : p.vctx[i]) x = random_bf16(rng, 1.0f);
  }
  int64_t max_n = 0, max_ctx = 0;
  for (const SeqSpec& s : p.seqs) {
    max_n = std::max(max_n, s.n);
    max_ctx = std::max(max_ctx, s.start + s.n);
  }
  p.max_new_tokens = int(max_n) + cfg.extra_new_tokens;
  p.max_context = int(max_ctx) + cfg.extra_context;
  return p;
}

// A prefill from 0, a chunk mid-sequence, a 9-token chunk over a long context, a multi-token
// decode and single-token decodes up to max_ctx.
std::vector<SeqSpec> mixed_batch(std::mt19937_64& rng, int64_t max_ctx) {
  auto uni = [&](int64_t a, int64_t b) { return std::uniform_int_distribution<int64_t>(a, b)(rng); };
  return {
      {0, uni(100, 300)},                           // prefill
      {uni(40, 400), uni(20, 120)},                 // chunk, its start cached by an earlier step
      {uni(max_ctx / 3, max_ctx / 2), 9},           // just above the decode threshold
      {uni(max_ctx / 4, max_ctx / 2), uni(2, 8)},   // multi-token decode
      {uni(0, 40), 1},                              // decodes
      {uni(400, 700), 1},
      {uni(max_ctx / 2, max_ctx - 200), 1},
      {max_ctx - 1 - uni(0, 100), 1},
  };
}

// ---- The CPU reference ---------------------------------------------------------------------

struct CpuResult {
  std::unique_ptr<cpu::PagedKvCache> cache;
  std::vector<float> out;
};

CpuResult run_cpu(const Problem& p, ThreadPool& pool) {
  CpuResult r;
  const KvCacheShape shape{1, p.params.num_kv_heads, p.params.head_dim, p.cfg.block_size, p.num_blocks};
  r.cache = std::make_unique<cpu::PagedKvCache>(shape, std::vector<KvLayerFormat>{p.cfg.fmt});
  const int64_t kv_row = p.kv_row(), bs = p.cfg.block_size;
  std::vector<float> k_new(size_t(p.rows * kv_row)), v_new(k_new.size());
  std::vector<AttentionSequence> batch;
  for (size_t i = 0; i < p.seqs.size(); ++i) {
    const SeqSpec& s = p.seqs[i];
    for (int64_t pos = 0; pos < s.start; ++pos) {  // the earlier steps
      r.cache->store(0, p.tables[i][size_t(pos / bs)], int(pos % bs), &p.kctx[i][size_t(pos * kv_row)],
                     &p.vctx[i][size_t(pos * kv_row)]);
    }
    std::copy_n(p.kctx[i].begin() + s.start * kv_row, s.n * kv_row, k_new.begin() + p.first_row[i] * kv_row);
    std::copy_n(p.vctx[i].begin() + s.start * kv_row, s.n * kv_row, v_new.begin() + p.first_row[i] * kv_row);
    batch.push_back({p.first_row[i], s.n, s.start, p.tables[i]});
  }
  r.out.assign(size_t(p.rows * p.q_row()), 0.0f);
  cpu::paged_attention(p.q.data(), k_new.data(), v_new.data(), r.out.data(), batch, p.params, *r.cache, 0, &pool);
  return r;
}

// ---- The GPU side --------------------------------------------------------------------------

// One step's metadata on the host.
struct HostBatch {
  int num_seqs = 0;
  int64_t num_rows = 0;
  std::vector<int32_t> row_seq, row_position, seq_first_row, seq_num_tokens, seq_start, tables;
  int max_blocks_per_seq = 0, max_new_tokens = 0, max_context = 0;
  int max_decode_new_tokens = -1;
};

// The step being tested: block-table entries no kernel may read are poisoned (past each
// sequence's context, and with a sliding window the blocks wholly before its first new
// token's window — an engine may have freed them).
HostBatch current_batch(const Problem& p) {
  HostBatch b;
  const int64_t bs = p.cfg.block_size;
  b.num_seqs = int(p.seqs.size());
  b.num_rows = p.rows;
  b.max_new_tokens = p.max_new_tokens;
  b.max_context = p.max_context;
  b.max_blocks_per_seq = int(cdiv(p.max_context, bs)) + 1;
  if (p.cfg.decode_bound) {  // as cuda_ops computes it, loosened as the other bounds are
    int64_t dec = 0;
    for (const SeqSpec& s : p.seqs)
      if (s.n <= cuda::kDecodeMaxNewTokens) dec = std::max(dec, s.n);
    b.max_decode_new_tokens = int(std::min<int64_t>(dec + p.cfg.extra_new_tokens, cuda::kDecodeMaxNewTokens));
  }
  b.row_seq.assign(size_t(p.rows), -1);
  b.row_position.assign(size_t(p.rows), -1);
  b.tables.assign(size_t(b.num_seqs) * size_t(b.max_blocks_per_seq), kPoison);
  for (size_t i = 0; i < p.seqs.size(); ++i) {
    const SeqSpec& s = p.seqs[i];
    b.seq_first_row.push_back(int32_t(p.first_row[i]));
    b.seq_num_tokens.push_back(int32_t(s.n));
    b.seq_start.push_back(int32_t(s.start));
    for (int64_t t = 0; t < s.n; ++t) {
      b.row_seq[size_t(p.first_row[i] + t)] = int32_t(i);
      b.row_position[size_t(p.first_row[i] + t)] = int32_t(s.start + t);
    }
    const int64_t lo = p.cfg.window ? std::max<int64_t>(0, s.start - *p.cfg.window + 1) : 0;
    for (int64_t blk = lo / bs; blk < int64_t(p.tables[i].size()); ++blk)
      b.tables[i * size_t(b.max_blocks_per_seq) + size_t(blk)] = int32_t(p.tables[i][size_t(blk)]);
  }
  return b;
}

// The earlier steps that cached positions [0, start) of every sequence (one store_kv call).
HostBatch previous_batch(const Problem& p) {
  HostBatch b;
  b.num_seqs = int(p.seqs.size());
  b.max_blocks_per_seq = int(cdiv(p.max_context, p.cfg.block_size)) + 1;
  b.tables.assign(size_t(b.num_seqs) * size_t(b.max_blocks_per_seq), kPoison);
  for (size_t i = 0; i < p.seqs.size(); ++i) {
    for (int64_t pos = 0; pos < p.seqs[i].start; ++pos) {
      b.row_seq.push_back(int32_t(i));
      b.row_position.push_back(int32_t(pos));
    }
    for (size_t blk = 0; blk < p.tables[i].size(); ++blk)
      b.tables[i * size_t(b.max_blocks_per_seq) + blk] = int32_t(p.tables[i][blk]);
  }
  b.num_rows = int64_t(b.row_seq.size());
  return b;
}

// BF16 bits of new K or V rows (`previous`: the cached positions, in previous_batch's order).
std::vector<uint16_t> kv_rows_bf16(const Problem& p, bool value, bool previous) {
  std::vector<uint16_t> out;
  const int64_t kv_row = p.kv_row();
  if (!previous) out.resize(size_t(p.rows * kv_row));
  for (size_t i = 0; i < p.seqs.size(); ++i) {
    const std::vector<float>& src = value ? p.vctx[i] : p.kctx[i];
    const SeqSpec& s = p.seqs[i];
    if (previous) {
      for (int64_t x = 0; x < s.start * kv_row; ++x) out.push_back(float_to_bf16(src[size_t(x)]));
    } else {
      for (int64_t x = 0; x < s.n * kv_row; ++x)
        out[size_t(p.first_row[i] * kv_row + x)] = float_to_bf16(src[size_t(s.start * kv_row + x)]);
    }
  }
  return out;
}

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = float_to_bf16(v[i]);
  return out;
}

// A step's metadata on the device, at fixed addresses once allocated.
struct DeviceBatch {
  DeviceBuffer row_seq, row_position, seq_first_row, seq_num_tokens, seq_start, tables;
  cuda::DeviceAttentionBatch view;
  void set(const HostBatch& h) {
    if (view.num_seqs == 0) {
      row_seq = DeviceBuffer(h.row_seq);
      row_position = DeviceBuffer(h.row_position);
      seq_first_row = DeviceBuffer(h.seq_first_row);
      seq_num_tokens = DeviceBuffer(h.seq_num_tokens);
      seq_start = DeviceBuffer(h.seq_start);
      tables = DeviceBuffer(h.tables);
    } else {
      row_seq.overwrite(h.row_seq);
      row_position.overwrite(h.row_position);
      seq_first_row.overwrite(h.seq_first_row);
      seq_num_tokens.overwrite(h.seq_num_tokens);
      seq_start.overwrite(h.seq_start);
      tables.overwrite(h.tables);
    }
    view.num_seqs = h.num_seqs;
    view.num_rows = h.num_rows;
    view.row_seq = row_seq.as<int32_t>();
    view.row_position = row_position.as<int32_t>();
    view.seq_first_row = seq_first_row.as<int32_t>();
    view.seq_num_tokens = seq_num_tokens.as<int32_t>();
    view.seq_start_position = seq_start.as<int32_t>();
    view.block_tables = tables.as<int32_t>();
    view.max_blocks_per_seq = h.max_blocks_per_seq;
    view.max_new_tokens = h.max_new_tokens;
    view.max_context = h.max_context;
    view.max_decode_new_tokens = h.max_decode_new_tokens;
  }
};

// Everything one problem needs on the device.
struct DeviceProblem {
  DeviceBuffer k_cache, v_cache, q, k_new, v_new, k_prev, v_prev, out, workspace;
  DeviceBuffer counters{std::vector<unsigned>(size_t(cuda::kAttentionMergeCounters), 0u)};
  DeviceBatch prev, cur;
  cuda::DeviceKvLayer layer;

  explicit DeviceProblem(const Problem& p) {
    const size_t cache_bytes = size_t(p.num_blocks) * size_t(p.kv_row()) * size_t(p.cfg.block_size) *
                               element_bytes(p.cfg.fmt.element);
    k_cache = DeviceBuffer(cache_bytes);
    v_cache = DeviceBuffer(cache_bytes);
    out = DeviceBuffer(size_t(p.rows * p.q_row()) * 2);
    layer = {k_cache.ptr, v_cache.ptr, p.cfg.fmt.element, p.cfg.fmt.k_scale, p.cfg.fmt.v_scale};
    load(p);
  }
  // (Re)loads a problem of the same sizes into the same buffers.
  void load(const Problem& p) {
    FP8LM_CUDA_CHECK(cudaMemset(k_cache.ptr, 0, k_cache.bytes));
    FP8LM_CUDA_CHECK(cudaMemset(v_cache.ptr, 0, v_cache.bytes));
    FP8LM_CUDA_CHECK(cudaMemset(out.ptr, 0xFF, out.bytes));  // NaN: an unwritten output fails
    if (q.bytes == 0) {
      q = DeviceBuffer(to_bf16(p.q));
      k_new = DeviceBuffer(kv_rows_bf16(p, false, false));
      v_new = DeviceBuffer(kv_rows_bf16(p, true, false));
    } else {
      q.overwrite(to_bf16(p.q));
      k_new.overwrite(kv_rows_bf16(p, false, false));
      v_new.overwrite(kv_rows_bf16(p, true, false));
    }
    k_prev = DeviceBuffer(kv_rows_bf16(p, false, true));
    v_prev = DeviceBuffer(kv_rows_bf16(p, true, true));
    prev = DeviceBatch();
    prev.set(previous_batch(p));
    cur.set(current_batch(p));
    const size_t ws = cuda::paged_attention_workspace_bytes(cur.view, p.params);
    if (ws > workspace.bytes) workspace = DeviceBuffer(ws);
  }
  // The earlier steps' K/V (outside any graph).
  void store_previous(const Problem& p) {
    cuda::store_kv(k_prev.as<__nv_bfloat16>(), v_prev.as<__nv_bfloat16>(), prev.view, p.params.num_kv_heads,
                   p.params.head_dim, p.cfg.block_size, layer, nullptr);
  }
  void step(const Problem& p, cudaStream_t stream) {
    cuda::store_kv(k_new.as<__nv_bfloat16>(), v_new.as<__nv_bfloat16>(), cur.view, p.params.num_kv_heads,
                   p.params.head_dim, p.cfg.block_size, layer, stream);
    attend(p, stream);
  }
  // merge_counters: the decode kernel merges its partitions itself (the engine's way); without,
  // the separate reduce kernel does. decode_kernel: which kernel takes FP8 decode rows that fit
  // the pair kernel (the engine's measured choice, or either forced).
  void attend(const Problem& p, cudaStream_t stream, bool merge_counters = true,
              cuda::DecodeKernelChoice decode_kernel = cuda::DecodeKernelChoice::kMeasured) {
    cuda::paged_attention(q.as<__nv_bfloat16>(), out.as<__nv_bfloat16>(), cur.view, p.params, p.cfg.block_size, layer,
                          workspace.ptr, workspace.bytes, stream, merge_counters ? counters.as<unsigned>() : nullptr,
                          decode_kernel);
  }
};

// ---- Checks --------------------------------------------------------------------------------

// Every element of the device cache, dequantized as the CPU's table does, equals the CPU cache.
int64_t check_cache(const Problem& p, const cpu::PagedKvCache& ref, const DeviceProblem& d) {
  const KvLayerFormat f = p.cfg.fmt;
  const int bs = p.cfg.block_size;
  const int64_t hd = p.params.head_dim;
  int64_t bad = 0;
  for (int which = 0; which < 2; ++which) {
    const std::vector<uint8_t> raw = download<uint8_t>(which ? d.v_cache : d.k_cache);
    const float scale = which ? f.v_scale : f.k_scale;
    std::vector<float> want(size_t(bs * hd));
    for (int64_t b = 0; b < p.num_blocks; ++b) {
      for (int h = 0; h < p.params.num_kv_heads; ++h) {
        if (which) ref.dequantize_v(0, b, h, 0, bs, want.data());
        else ref.dequantize_k(0, b, h, 0, bs, want.data());
        const size_t base = size_t(((b * p.params.num_kv_heads + h) * bs) * hd);
        for (size_t i = 0; i < want.size(); ++i) {
          const size_t at = base + i;
          float got = 0.0f;
          switch (f.element) {
            case KvElement::kF32: std::memcpy(&got, &raw[at * 4], 4); break;
            case KvElement::kBF16: {
              uint16_t bits;
              std::memcpy(&bits, &raw[at * 2], 2);
              got = bf16_to_float(bits);
              break;
            }
            case KvElement::kE4M3: got = fp8_to_float(raw[at], Fp8Format::kE4M3) * scale; break;
            case KvElement::kE5M2: got = fp8_to_float(raw[at], Fp8Format::kE5M2) * scale; break;
            default:
              ADD_FAILURE() << describe(p.cfg) << ": no kv cache format " << fp8lm::name(f.element);
              return bad + 1;
          }
          if (std::bit_cast<uint32_t>(got) != std::bit_cast<uint32_t>(want[i]) && ++bad <= 3) {
            ADD_FAILURE() << describe(p.cfg) << ": " << (which ? "v" : "k") << " cache block " << b << " head " << h
                          << " slot " << i / size_t(hd) << " d " << i % size_t(hd) << " = " << got << ", CPU "
                          << want[i];
          }
        }
      }
    }
  }
  return bad;
}

double half_ulp_bf16(double v) {
  if (v < 0x1p-126) return 0x1p-134;
  int e = 0;
  std::frexp(v, &e);  // v = f · 2^e, f ∈ [0.5, 1)
  return std::ldexp(1.0, e - 1 - 8);
}

double g_worst = 0.0;  // largest |gpu − cpu| / bound seen

// Number of outputs outside the bound (the first few reported).
int64_t check_output(const Problem& p, const cpu::PagedKvCache& cache, const std::vector<float>& cpu_out,
                     const std::vector<uint16_t>& gpu_out, ThreadPool& pool) {
  const int heads = p.params.num_heads, kvh = p.params.num_kv_heads, group = heads / kvh;
  const int64_t hd = p.params.head_dim, bs = p.cfg.block_size;
  const double scale = p.params.scale;
  // Per sequence, every cached position's dequantized K and V: [pos][kv head][hd].
  std::vector<std::vector<float>> kd(p.seqs.size()), vd(p.seqs.size());
  for (size_t i = 0; i < p.seqs.size(); ++i) {
    const int64_t ctx = p.seqs[i].start + p.seqs[i].n;
    kd[i].resize(size_t(ctx * p.kv_row()));
    vd[i].resize(kd[i].size());
    for (int64_t pos = 0; pos < ctx; ++pos)
      for (int h = 0; h < kvh; ++h) {
        const size_t at = size_t(pos * p.kv_row() + h * hd);
        cache.load_k(0, p.tables[i][size_t(pos / bs)], int(pos % bs), h, &kd[i][at]);
        cache.load_v(0, p.tables[i][size_t(pos / bs)], int(pos % bs), h, &vd[i][at]);
      }
  }
  std::vector<std::pair<size_t, int64_t>> rows;  // (sequence, token)
  for (size_t i = 0; i < p.seqs.size(); ++i)
    for (int64_t t = 0; t < p.seqs[i].n; ++t) rows.emplace_back(i, t);
  // Which kernel takes the decode rows (the tensor-core one: its BF16 / FP16 P·V bound).
  cuda::DeviceAttentionBatch shape;
  shape.num_seqs = int(p.seqs.size());
  shape.num_rows = p.rows;
  shape.max_new_tokens = p.max_new_tokens;
  shape.max_context = p.max_context;
  const bool decode_mma = cuda::paged_attention_decode_uses_mma(shape, p.params, p.cfg.fmt.element);
  const bool fp8_cache = p.cfg.fmt.element == KvElement::kE4M3 || p.cfg.fmt.element == KvElement::kE5M2;
  std::vector<int64_t> bad_per_row(rows.size(), 0);
  std::vector<double> worst_per_row(rows.size(), 0.0);
  std::vector<std::string> first_msg(rows.size());
  pool.parallel_for(int64_t(rows.size()), [&](int64_t task, int) {
    const auto [i, t] = rows[size_t(task)];
    const SeqSpec& s = p.seqs[i];
    const int64_t row = p.first_row[i] + t, pos = s.start + t;
    const int64_t lo = p.cfg.window ? std::max<int64_t>(0, pos - *p.cfg.window + 1) : 0;
    const int64_t L = pos - lo + 1;
    const int64_t R = cdiv(L, 64) + 2;
    const bool decode_row = s.n <= cuda::kDecodeMaxNewTokens;
    const bool mma = decode_row ? decode_mma : cuda::paged_attention_prefill_uses_mma(hd, p.cfg.fmt.element);
    const bool fp16 = mma && fp8_cache;  // the FP16 terms above
    const size_t n_att = static_cast<size_t>(L), n_hd = static_cast<size_t>(hd);
    std::vector<double> sc(n_att), a(n_att), w(n_att), eg(n_att), ec(n_att);
    std::vector<double> o(n_hd), av(n_hd), bg(n_hd), bc(n_hd), sum_v(n_hd);
    for (int h = 0; h < heads; ++h) {
      const int kh = h / group;
      const float* qh = &p.q[size_t(row * p.q_row() + h * hd)];
      double q_max = 0;
      for (int64_t d = 0; d < hd; ++d) q_max = std::max(q_max, std::abs(double(qh[d])));
      std::vector<double> q_round(n_att, 0.0);  // the FP16 Q term of each s_j
      for (int64_t j = 0; j < L; ++j) {
        const float* kj = &kd[i][size_t((lo + j) * p.kv_row() + kh * hd)];
        double dot = 0, abs_dot = 0, abs_k = 0;
        for (int64_t d = 0; d < hd; ++d) {
          dot += double(qh[d]) * kj[d];
          abs_dot += std::abs(double(qh[d]) * kj[d]);
          abs_k += std::abs(double(kj[d]));
        }
        sc[size_t(j)] = dot * scale;
        a[size_t(j)] = abs_dot * std::abs(scale);
        if (fp16) q_round[size_t(j)] = std::abs(scale) * q_max * abs_k * 0x1p-39;
      }
      const double m = *std::max_element(sc.begin(), sc.end());
      double sum = 0;
      for (int64_t j = 0; j < L; ++j) sum += w[size_t(j)] = std::exp(sc[size_t(j)] - m);
      double pg = 0, pc = 0;
      for (int64_t j = 0; j < L; ++j) {
        const double pj = w[size_t(j)] / sum;
        w[size_t(j)] = pj;
        eg[size_t(j)] = double(hd + 3) * kU * a[size_t(j)] + 2 * kU * (m - sc[size_t(j)]) + double(2 + 3 * R) * kU +
                        (mma ? 0x1p-8 : 0.0) + q_round[size_t(j)];
        ec[size_t(j)] = double(hd + 2) * kU * a[size_t(j)] + kU * (m - sc[size_t(j)]) + 2 * kU;
        pg += pj * eg[size_t(j)];
        pc += pj * ec[size_t(j)];
      }
      std::fill(o.begin(), o.end(), 0.0);
      std::fill(av.begin(), av.end(), 0.0);
      std::fill(bg.begin(), bg.end(), 0.0);
      std::fill(bc.begin(), bc.end(), 0.0);
      std::fill(sum_v.begin(), sum_v.end(), 0.0);
      for (int64_t j = 0; j < L; ++j) {
        const float* vj = &vd[i][size_t((lo + j) * p.kv_row() + kh * hd)];
        const double pj = w[size_t(j)];
        for (int64_t d = 0; d < hd; ++d) {
          const double v = vj[d];
          o[size_t(d)] += pj * v;
          av[size_t(d)] += pj * std::abs(v);
          sum_v[size_t(d)] += std::abs(v);
          bg[size_t(d)] += pj * eg[size_t(j)] * std::abs(v);
          bc[size_t(d)] += pj * ec[size_t(j)] * std::abs(v);
        }
      }
      for (int64_t d = 0; d < hd; ++d) {
        const double od = std::abs(o[size_t(d)]);
        const double e_gpu = bg[size_t(d)] + pg * od + double(L + R + 5) * kU * (av[size_t(d)] + od) +
                             (fp16 ? 0x1p-25 * (sum_v[size_t(d)] + double(L) * od) : 0.0);
        const double e_cpu = bc[size_t(d)] + pc * od + double(L + 2) * kU * (av[size_t(d)] + od);
        const double tol = 1.01 * (e_gpu + e_cpu) + half_ulp_bf16(od + e_gpu);
        const size_t at = size_t(row * p.q_row() + h * hd + d);
        const double got = bf16_to_float(gpu_out[at]), want = cpu_out[at];
        const double err = std::abs(got - want);
        if (std::isfinite(err)) worst_per_row[size_t(task)] = std::max(worst_per_row[size_t(task)], err / tol);
        if (!(err <= tol) && bad_per_row[size_t(task)]++ == 0) {
          first_msg[size_t(task)] = "row " + std::to_string(row) + " (sequence " + std::to_string(i) + " start " +
                                    std::to_string(s.start) + " n " + std::to_string(s.n) + ", position " +
                                    std::to_string(pos) + (mma ? ", tensor-core path" : ", SIMT path") + ") head " +
                                    std::to_string(h) + " d " + std::to_string(d) + ": gpu " + std::to_string(got) +
                                    ", cpu " + std::to_string(want) + ", |diff| " + std::to_string(err) +
                                    " > bound " + std::to_string(tol);
        }
      }
    }
  });
  int64_t bad = 0, reported = 0;
  double worst = 0.0;
  for (size_t r = 0; r < rows.size(); ++r) {
    worst = std::max(worst, worst_per_row[r]);
    bad += bad_per_row[r];
    if (bad_per_row[r] > 0 && reported++ < 4) ADD_FAILURE() << describe(p.cfg) << ": " << first_msg[r];
  }
  g_worst = std::max(g_worst, worst);
  std::cout << "  " << p.cfg.name << ": " << p.rows << " rows, worst |gpu - cpu| / bound " << worst
            << (bad ? ", " + std::to_string(bad) + " outputs out of bounds" : std::string()) << "\n";
  return bad;
}

ThreadPool& host_pool() {
  static ThreadPool pool(int(std::max(1u, std::min(32u, std::thread::hardware_concurrency()))));
  return pool;
}

// Runs one problem end to end and checks the cache, the output and determinism; where FP8
// decode rows fit the pair kernel, also the decode kernel the measured choice did not take
// (the pair kernel at small batches, the key-split CTAs at large ones) against the CPU.
void run_and_check(const Problem& p) {
  SCOPED_TRACE(describe(p.cfg));
  ThreadPool& pool = host_pool();
  const CpuResult ref = run_cpu(p, pool);
  DeviceProblem d(p);
  d.store_previous(p);
  d.step(p, nullptr);
  FP8LM_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint16_t> out = download<uint16_t>(d.out);
  EXPECT_EQ(check_cache(p, *ref.cache, d), 0);
  EXPECT_EQ(check_output(p, *ref.cache, ref.out, out, pool), 0);
  // Every merge counter is back at zero, ready for the next call.
  const std::vector<unsigned> counters = download<unsigned>(d.counters);
  EXPECT_EQ(std::count(counters.begin(), counters.end(), 0u), std::ptrdiff_t(counters.size()))
      << "the kernel's partition merge left counters set";
  // The same bytes again (attention only: the cache is unchanged), from the fused merge and from
  // the separate merge kernel.
  for (const bool fused : {true, false}) {
    FP8LM_CUDA_CHECK(cudaMemset(d.out.ptr, 0xFF, d.out.bytes));
    d.attend(p, nullptr, fused);
    FP8LM_CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_TRUE(download<uint16_t>(d.out) == out)
        << "a second call gave different bytes (" << (fused ? "fused" : "separate") << " merge)";
  }
  const KvElement e = p.cfg.fmt.element;
  const bool measured_pairs = cuda::paged_attention_decode_uses_pairs(d.cur.view, p.params, e);
  for (const auto forced : {cuda::DecodeKernelChoice::kPairs, cuda::DecodeKernelChoice::kKeySplit}) {
    if (cuda::paged_attention_decode_uses_pairs(d.cur.view, p.params, e, forced) == measured_pairs) continue;
    const bool pairs = forced == cuda::DecodeKernelChoice::kPairs;
    SCOPED_TRACE(pairs ? "the pair kernel forced" : "the key-split kernel forced");
    FP8LM_CUDA_CHECK(cudaMemset(d.out.ptr, 0xFF, d.out.bytes));
    d.attend(p, nullptr, true, forced);
    FP8LM_CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(check_output(p, *ref.cache, ref.out, download<uint16_t>(d.out), pool), 0);
    const std::vector<unsigned> left = download<unsigned>(d.counters);
    EXPECT_EQ(std::count(left.begin(), left.end(), 0u), std::ptrdiff_t(left.size()))
        << "the kernel's partition merge left counters set";
  }
}

const KvLayerFormat kBf16{KvElement::kBF16, 1.0f, 1.0f};
const KvLayerFormat kF32{KvElement::kF32, 1.0f, 1.0f};
const KvLayerFormat kE4M3{KvElement::kE4M3, 0.0173f, 0.021f};
const KvLayerFormat kE4M3b{KvElement::kE4M3, 0.02f, 0.03f};
const KvLayerFormat kE5M2{KvElement::kE5M2, 1.0f, 0.5f};
const KvLayerFormat kE5M2b{KvElement::kE5M2, 0.5f, 0.25f};

void report_worst() {
  std::cout << "worst |gpu - cpu| / bound " << g_worst << seed_note() << "\n";
  ::testing::Test::RecordProperty("worst_err_over_bound", std::to_string(g_worst));
}

// ---- Tests ---------------------------------------------------------------------------------

TEST(CudaPagedAttention, MixedBatchesMatchCpu) {
  REQUIRE_HOPPER();
  g_worst = 0.0;
  std::mt19937_64 rng(test_seed());
  struct Case {
    Config cfg;
    int64_t max_ctx;
  };
  const std::vector<Case> cases = {
      {{"bf16 hd128 gqa4", 8, 2, 128, kBf16, std::nullopt, 16}, 3000},
      {{"e4m3 hd64 gqa8", 16, 2, 64, kE4M3, std::nullopt, 16}, 3000},
      {{"e5m2 hd128 mha window200", 4, 4, 128, kE5M2, 200, 16}, 3000},
      {{"f32 hd64 gqa4 window37 (SIMT prefill)", 8, 2, 64, kF32, 37, 16}, 3000},
      {{"bf16 hd96 gqa8 (SIMT prefill)", 16, 2, 96, kBf16, std::nullopt, 16}, 3000},
      {{"e4m3 hd80 mha window300 (SIMT prefill)", 4, 4, 80, kE4M3b, 300, 16}, 3000},
      {{"e4m3 hd128 gqa8 window700", 16, 2, 128, kE4M3, 700, 16}, 3000},
      {{"bf16 hd128 gqa6", 12, 2, 128, kBf16, std::nullopt, 16}, 2500},
      {{"e5m2 hd64 gqa16", 32, 2, 64, kE5M2b, std::nullopt, 16}, 2000},
      {{"e4m3 hd64 gqa5", 10, 2, 64, kE4M3, std::nullopt, 16}, 2000},
      {{"bf16 hd256 gqa3 window64 (SIMT prefill)", 6, 2, 256, kBf16, 64, 16}, 1500},
      {{"bf16 hd24 gqa4 (SIMT prefill)", 8, 2, 24, kBf16, std::nullopt, 16}, 2000},
      {{"bf16 hd128 mha window1", 2, 2, 128, kBf16, 1, 16}, 3000},
      {{"e5m2 hd128 mqa8 block8", 8, 1, 128, kE5M2, std::nullopt, 8}, 2000},
      {{"bf16 hd64 gqa4 block32 window100", 8, 2, 64, kBf16, 100, 32}, 3000},
      {{"f32 hd128 gqa2 (SIMT prefill)", 4, 2, 128, kF32, std::nullopt, 16}, 2000},
  };
  for (const Case& c : cases) run_and_check(make_problem(c.cfg, mixed_batch(rng, c.max_ctx), rng));
  report_worst();
}

// Steps that mix prefills with many decodes (the engine's steps that admit new requests while
// others decode): the decode rows on the tensor-core decode kernel sized by the decodes' own
// bound — one-token decodes in one row tile (on an FP8 cache the pair kernel too: run_and_check
// forces it), multi-token ones in 16-row tiles —
// and the prefill kernel skipping them; without the bound (−1) as before.
TEST(CudaPagedAttention, LargeMixedBatchesMatchCpu) {
  REQUIRE_HOPPER();
  g_worst = 0.0;
  std::mt19937_64 rng(test_seed() + 4);
  auto uni = [&](int64_t a, int64_t b) { return std::uniform_int_distribution<int64_t>(a, b)(rng); };
  auto batch = [&](int decodes, int64_t max_new, int64_t max_ctx) {
    std::vector<SeqSpec> s = {{0, uni(100, 200)}, {uni(40, 300), uni(20, 90)}, {uni(0, 100), 9}};
    for (int i = 0; i < decodes; ++i) s.push_back({uni(0, max_ctx - 1), uni(1, max_new)});
    return s;
  };
  run_and_check(make_problem({"mixed e4m3 hd128 gqa4 one-token decodes", 8, 2, 128, kE4M3, std::nullopt, 16},
                             batch(300, 1, 1200), rng));
  run_and_check(make_problem({"mixed e5m2 hd64 gqa4 window200 one- and two-token decodes", 8, 2, 64, kE5M2, 200, 16},
                             batch(300, 2, 1200), rng));
  run_and_check(make_problem({"mixed e4m3 hd128 gqa8 one-token decodes", 16, 2, 128, kE4M3b, 500, 16},
                             batch(200, 1, 1500), rng));
  run_and_check(make_problem({"mixed e4m3 hd128 gqa4 few-token decodes", 8, 2, 128, kE4M3, std::nullopt, 16},
                             batch(300, cuda::kDecodeMaxNewTokens, 1200), rng));
  run_and_check(make_problem({"mixed bf16 hd128 gqa4 one-token decodes", 8, 2, 128, kBf16, std::nullopt, 16},
                             batch(300, 1, 1200), rng));
  Config unknown{"mixed e4m3 hd128 gqa4 one-token decodes, no decode bound", 8, 2, 128, kE4M3, std::nullopt, 16};
  unknown.decode_bound = false;
  run_and_check(make_problem(unknown, batch(300, 1, 1200), rng));
  report_worst();
}

// Only decodes (max_new_tokens = 1): split partitions and the reduce; a batch within one
// partition (no workspace at all); a window that leaves most partitions empty; batches
// large enough for the tensor-core kernel.
TEST(CudaPagedAttention, DecodeOnlyBatches) {
  REQUIRE_HOPPER();
  g_worst = 0.0;
  std::mt19937_64 rng(test_seed() + 1);
  auto decodes = [&](int count, int64_t max_ctx) {
    std::vector<SeqSpec> s;
    for (int i = 0; i < count; ++i) s.push_back({std::uniform_int_distribution<int64_t>(0, max_ctx - 1)(rng), 1});
    s.push_back({max_ctx - 1, 1});
    return s;
  };
  run_and_check(make_problem({"decode e4m3 hd128 gqa8", 16, 2, 128, kE4M3, std::nullopt, 16}, decodes(12, 3000), rng));
  run_and_check(make_problem({"decode e5m2 hd64 gqa4 window1000", 8, 2, 64, kE5M2, 1000, 16}, decodes(6, 3000), rng));
  {
    // Contexts within one partition: every row is finished by its one CTA, no partials.
    const Problem p = make_problem({"decode bf16 hd64 gqa4 one partition", 8, 2, 64, kBf16, std::nullopt, 16},
                                   decodes(8, cuda::kDecodePartition), rng);
    cuda::DeviceAttentionBatch b;
    b.num_seqs = int(p.seqs.size());
    b.num_rows = p.rows;
    b.max_new_tokens = p.max_new_tokens;
    b.max_context = p.max_context;
    EXPECT_EQ(cuda::paged_attention_workspace_bytes(b, p.params), 0u);
    run_and_check(p);
  }
  // Enough sequences × KV heads (≥ 2 × the SMs of any Hopper part) that the decode step
  // runs on the tensor-core kernel, one CTA per (sequence, KV head), instead of the split one.
  run_and_check(make_problem({"decode bf16 hd128 gqa4 large batch (tensor cores)", 8, 2, 128, kBf16, std::nullopt, 16},
                             decodes(300, 1500), rng));
  run_and_check(make_problem({"decode e4m3 hd128 gqa4 window300 large batch", 8, 2, 128, kE4M3, 300, 16},
                             decodes(300, 1500), rng));
  run_and_check(make_problem({"decode e5m2 hd64 gqa8 large batch", 16, 2, 64, kE5M2b, std::nullopt, 16},
                             decodes(300, 1200), rng));
  // Pure decode on an FP8 cache at a small batch: the key-split CTAs with the context split
  // into chunks, and (forced by run_and_check) the pair kernel's transposed tiles, one token × a
  // group of 4 in one MMA column block.
  run_and_check(make_problem({"decode e4m3 hd128 gqa4 small batch (split; pairs forced)", 8, 2, 128, kE4M3,
                              std::nullopt, 16},
                             decodes(40, 3000), rng));
  {
    // Two new tokens a sequence × a group of 4: 8 rows, which still fit the pair kernel (forced
    // by run_and_check): rows of one warp at two positions (the causal mask inside the last
    // step) and a sliding window.
    std::vector<SeqSpec> two;
    for (int i = 0; i < 200; ++i) two.push_back({std::uniform_int_distribution<int64_t>(0, 1499)(rng), 2});
    run_and_check(make_problem({"two new tokens e5m2 hd64 gqa4 window200 (pairs forced)", 8, 2, 64, kE5M2, 200, 16},
                               two, rng));
  }
  // Up to kDecodeMaxNewTokens new tokens a sequence at a large batch: the tensor-core decode
  // kernel with several 16-row tiles per (sequence, KV head), and rows of one CTA at different
  // positions (the causal mask inside the last tile).
  auto few_new = [&](int count, int64_t max_ctx) {
    std::vector<SeqSpec> s;
    for (int i = 0; i < count; ++i)
      s.push_back({std::uniform_int_distribution<int64_t>(0, max_ctx - 1)(rng),
                   std::uniform_int_distribution<int64_t>(1, cuda::kDecodeMaxNewTokens)(rng)});
    return s;
  };
  run_and_check(make_problem({"few new tokens bf16 hd128 gqa4 large batch", 8, 2, 128, kBf16, std::nullopt, 16},
                             few_new(300, 1200), rng));
  run_and_check(make_problem({"few new tokens e4m3 hd128 gqa8 window500 large batch", 16, 2, 128, kE4M3, 500, 16},
                             few_new(300, 1200), rng));
  // The same at small batches (40 sequences × 2 KV heads: at least the 64 pairs the tensor-core
  // kernel needs, under 2 × the SMs): the context split into chunks (rows of one CTA whose keys
  // end in different chunks; rows within one chunk written whole, the others merged).
  run_and_check(make_problem({"few new tokens bf16 hd128 gqa4 small batch", 8, 2, 128, kBf16, std::nullopt, 16},
                             few_new(40, 3000), rng));
  run_and_check(make_problem({"few new tokens e4m3 hd64 gqa4 window700 small batch", 8, 2, 64, kE4M3, 700, 16},
                             few_new(40, 3000), rng));
  run_and_check(make_problem({"few new tokens e5m2 hd128 gqa8 small batch", 16, 2, 128, kE5M2, std::nullopt, 16},
                             few_new(40, 2000), rng));
  report_worst();
}

// A batch whose partials would exceed kAttentionWorkspaceCap runs its sequences in groups
// that share the capped workspace: the same results as the CPU, with the workspace bounded.
TEST(CudaPagedAttention, WorkspaceCapSplitsTheBatchIntoGroups) {
  REQUIRE_HOPPER();
  g_worst = 0.0;
  std::mt19937_64 rng(test_seed() + 5);
  // Fewer sequences × KV heads than 2 × SMs, so the split kernel (the one with partials) runs;
  // multi-token decodes (8 slots per sequence) over contexts up to 4096 (64 partitions).
  std::vector<SeqSpec> seqs;
  for (int i = 0; i < 200; ++i)
    seqs.push_back({std::uniform_int_distribution<int64_t>(0, 4088)(rng), std::uniform_int_distribution<int64_t>(1, 8)(rng)});
  seqs.push_back({4088, 8});
  const Problem p = make_problem({"grouped decode bf16 hd128 gqa8", 8, 1, 128, kBf16, std::nullopt, 16}, seqs, rng);
  cuda::DeviceAttentionBatch b;
  b.num_seqs = int(p.seqs.size());
  b.num_rows = p.rows;
  b.max_new_tokens = p.max_new_tokens;
  b.max_context = p.max_context;
  const size_t uncapped = size_t(b.num_seqs) * size_t(cuda::kDecodeMaxNewTokens) * size_t(p.params.num_heads) *
                          size_t(cdiv(p.max_context, cuda::kDecodePartition)) * size_t(p.params.head_dim + 2) * 4;
  ASSERT_GT(uncapped, cuda::kAttentionWorkspaceCap) << "the batch must need more than the cap to test the groups";
  EXPECT_LE(cuda::paged_attention_workspace_bytes(b, p.params), cuda::kAttentionWorkspaceCap);
  run_and_check(p);
  report_worst();
}

// Host bounds far above what the metadata hold (as a captured graph's would be): the extra
// grid blocks must exit without writing.
TEST(CudaPagedAttention, LooseHostBounds) {
  REQUIRE_HOPPER();
  g_worst = 0.0;
  std::mt19937_64 rng(test_seed() + 2);
  Config bf16{"loose bounds bf16 hd128 gqa4", 8, 2, 128, kBf16, std::nullopt, 16};
  bf16.extra_new_tokens = 200;
  bf16.extra_context = 3000;
  run_and_check(make_problem(bf16, mixed_batch(rng, 1500), rng));
  Config f32{"loose bounds f32 hd96 gqa4 window50", 8, 2, 96, kF32, 50, 16};
  f32.extra_new_tokens = 7;  // decode-only batch launched with max_new_tokens 8
  f32.extra_context = 1000;
  run_and_check(make_problem(f32, {{10, 1}, {700, 1}, {1500, 1}}, rng));
  report_worst();
}

// One captured graph (store_kv + paged_attention) replayed over three different batches of the
// same row and sequence counts within its host bounds.
TEST(CudaPagedAttention, GraphReplayReadsMetadata) {
  REQUIRE_HOPPER();
  g_worst = 0.0;
  std::mt19937_64 rng(test_seed() + 3);
  for (const KvLayerFormat& fmt : {kBf16, kE4M3}) {
    Config cfg{std::string("graph ") + std::string(fp8lm::name(fmt.element)) + " hd128 gqa4", 8, 2, 128, fmt,
               std::nullopt, 16};
    // Three steps of 3 sequences, 48 rows; bounds: 40 new tokens, 1600 positions.
    const std::vector<std::vector<SeqSpec>> steps = {
        {{0, 40}, {700, 1}, {1000, 7}},
        {{40, 20}, {701, 1}, {300, 27}},
        {{1200, 1}, {0, 39}, {1590, 8}},
    };
    std::vector<Problem> problems;
    for (const auto& s : steps) {
      Problem p = make_problem(cfg, s, rng);
      p.max_new_tokens = 40;
      p.max_context = 1600;
      // The same cache size for all three (blocks beyond a problem's own stay unused).
      p.num_blocks = 2 + 3 * cdiv(1600, 16);
      problems.push_back(std::move(p));
    }
    DeviceProblem d(problems[0]);
    cudaStream_t stream;
    FP8LM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    FP8LM_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    d.step(problems[0], stream);
    FP8LM_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    FP8LM_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (const Problem& p : problems) {
      SCOPED_TRACE(describe(p.cfg));
      const CpuResult ref = run_cpu(p, host_pool());
      d.load(p);
      d.store_previous(p);
      FP8LM_CUDA_CHECK(cudaDeviceSynchronize());
      FP8LM_CUDA_CHECK(cudaGraphLaunch(exec, stream));
      FP8LM_CUDA_CHECK(cudaStreamSynchronize(stream));
      EXPECT_EQ(check_cache(p, *ref.cache, d), 0);
      EXPECT_EQ(check_output(p, *ref.cache, ref.out, download<uint16_t>(d.out), host_pool()), 0);
    }
    FP8LM_CUDA_CHECK(cudaGraphExecDestroy(exec));
    FP8LM_CUDA_CHECK(cudaGraphDestroy(graph));
    FP8LM_CUDA_CHECK(cudaStreamDestroy(stream));
  }
  report_worst();
}

void expect_error(const std::function<void()>& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// Every check runs on the host before anything is launched, so this needs no GPU: the
// pointers are never dereferenced (aligned placeholders).
TEST(CudaPagedAttention, BadArgumentsAreNamedErrors) {
  auto* fake = reinterpret_cast<void*>(uintptr_t(1) << 20);
  const auto* q = static_cast<const __nv_bfloat16*>(fake);
  auto* out = static_cast<__nv_bfloat16*>(fake);
  const auto* i32 = static_cast<const int32_t*>(fake);
  cuda::DeviceAttentionBatch b;
  b.num_seqs = 2;
  b.num_rows = 10;
  b.row_seq = b.row_position = b.seq_first_row = b.seq_num_tokens = b.seq_start_position = b.block_tables = i32;
  b.max_blocks_per_seq = 64;
  b.max_new_tokens = 9;
  b.max_context = 1024;
  const AttentionParams p{8, 2, 128, 0.088f, std::nullopt};
  const cuda::DeviceKvLayer layer{fake, fake, KvElement::kE4M3, 0.5f, 0.5f};
  const size_t ws = cuda::paged_attention_workspace_bytes(b, p);
  EXPECT_GT(ws, 0u);
  auto attend = [&](const __nv_bfloat16* qq, const cuda::DeviceAttentionBatch& bb, const AttentionParams& pp,
                    int block_size, const cuda::DeviceKvLayer& l, void* w, size_t wb) {
    return [=] { cuda::paged_attention(qq, out, bb, pp, block_size, l, w, wb, nullptr); };
  };
  auto with = [](auto base, auto fn) {
    fn(base);
    return base;
  };
  expect_error(attend(q, b, with(p, [](AttentionParams& x) { x.num_heads = 7; }), 16, layer, fake, ws),
               "num_heads 7 is not a multiple of num_kv_heads 2");
  expect_error(attend(q, b, with(p, [](AttentionParams& x) { x.num_kv_heads = 0; }), 16, layer, fake, ws),
               "num_heads and num_kv_heads must be > 0");
  expect_error(attend(q, b, with(p, [](AttentionParams& x) { x.head_dim = 100; }), 16, layer, fake, ws),
               "head_dim must be a multiple of 8 in [8, 256], got 100");
  expect_error(attend(q, b, with(p, [](AttentionParams& x) { x.head_dim = 264; }), 16, layer, fake, ws),
               "got 264");
  expect_error(attend(q, b, with(p, [](AttentionParams& x) { x.sliding_window = 0; }), 16, layer, fake, ws),
               "sliding_window must be >= 1");
  expect_error(attend(q, b, with(p, [](AttentionParams& x) { x.scale = INFINITY; }), 16, layer, fake, ws),
               "scale must be finite");
  expect_error(attend(q, b, p, 0, layer, fake, ws), "block_size must be > 0");
  expect_error(attend(q, b, p, 16, with(layer, [](cuda::DeviceKvLayer& l) { l.k_scale = 0.0f; }), fake, ws),
               "k_scale must be finite and > 0");
  expect_error(attend(q, b, p, 16, with(layer, [](cuda::DeviceKvLayer& l) { l.v_scale = NAN; }), fake, ws),
               "v_scale must be finite and > 0");
  expect_error(attend(q, b, p, 16, with(layer, [](cuda::DeviceKvLayer& l) { l.v = nullptr; }), fake, ws),
               "null kv cache k or v");
  expect_error(attend(q, b, p, 16, with(layer, [](cuda::DeviceKvLayer& l) { l.element = KvElement(9); }), fake, ws),
               "unknown kv element type");
  expect_error(attend(q + 1, b, p, 16, layer, fake, ws), "q and out must be 16-byte aligned");
  expect_error(attend(nullptr, b, p, 16, layer, fake, ws), "null q or out");
  expect_error(attend(q, b, p, 16, layer, fake, ws - 1), "workspace of");
  expect_error(attend(q, b, p, 16, layer, nullptr, ws), "workspace must be non-null");
  expect_error(attend(q, with(b, [](cuda::DeviceAttentionBatch& x) { x.max_blocks_per_seq = 63; }), p, 16, layer,
                      fake, ws),
               "max_blocks_per_seq 63 cannot hold max_context 1024");
  expect_error(attend(q, with(b, [](cuda::DeviceAttentionBatch& x) { x.max_new_tokens = 0; }), p, 16, layer, fake, ws),
               "max_new_tokens must be >= 1");
  expect_error(attend(q, with(b, [](cuda::DeviceAttentionBatch& x) { x.num_seqs = 0; }), p, 16, layer, fake, ws),
               "10 rows but no sequences");
  expect_error(attend(q, with(b, [](cuda::DeviceAttentionBatch& x) { x.seq_num_tokens = nullptr; }), p, 16, layer,
                      fake, ws),
               "null batch metadata");
  expect_error(attend(q, with(b, [](cuda::DeviceAttentionBatch& x) { x.num_rows = -1; }), p, 16, layer, fake, ws),
               "num_rows and num_seqs must be >= 0");

  auto store = [&](const __nv_bfloat16* k, const cuda::DeviceAttentionBatch& bb, int kvh, int64_t hd, int block_size,
                   const cuda::DeviceKvLayer& l) {
    return [=] { cuda::store_kv(k, k, bb, kvh, hd, block_size, l, nullptr); };
  };
  expect_error(store(q, b, 0, 128, 16, layer), "store_kv: num_kv_heads must be > 0");
  expect_error(store(q, b, 2, 12, 16, layer), "store_kv: head_dim must be a multiple of 8");
  expect_error(store(q, b, 2, 128, -16, layer), "store_kv: block_size must be > 0");
  expect_error(store(nullptr, b, 2, 128, 16, layer), "store_kv: null k or v");
  expect_error(store(q + 4, b, 2, 128, 16, layer), "store_kv: k and v must be 16-byte aligned");
  expect_error(store(q, with(b, [](cuda::DeviceAttentionBatch& x) { x.row_position = nullptr; }), 2, 128, 16, layer),
               "store_kv: null batch metadata");
  expect_error(store(q, with(b, [](cuda::DeviceAttentionBatch& x) { x.max_blocks_per_seq = 0; }), 2, 128, 16, layer),
               "store_kv: max_blocks_per_seq must be > 0");
  expect_error(store(q, b, 2, 128, 16, with(layer, [](cuda::DeviceKvLayer& l) { l.k = static_cast<char*>(l.k) + 8; })),
               "store_kv: kv cache k and v must be 16-byte aligned");
  // Nothing to do is not an error (and launches nothing).
  EXPECT_NO_THROW(cuda::paged_attention(q, out, with(b, [](cuda::DeviceAttentionBatch& x) { x.num_rows = 0; }), p, 16,
                                        layer, nullptr, 0, nullptr));
  EXPECT_NO_THROW(store(q, with(b, [](cuda::DeviceAttentionBatch& x) { x.num_rows = 0; }), 2, 128, 16, layer)());
}

}  // namespace
}  // namespace fp8lm
