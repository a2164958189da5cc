// The sampling kernel (sampling_kernels.h). One CTA of kThreads per row; every
// pass walks the row in tiles of kTile ids, each thread kPer consecutive ids of
// a tile, in the same order every time, so that the block-wide sums (fixed
// trees) and prefix sums are deterministic. The processed logit of an id is
// recomputed from the BF16 logit in each pass (RowView): cheaper than storing
// a vocab-sized row anywhere.
#include "backend/cuda/sampling/sampling_kernels.h"

#include <math_constants.h>

#include <cfloat>
#include <climits>
#include <cstdint>
#include <string>

#include "backend/cuda/common/check.h"
#include "backend/sampling.h"
#include "common/error.h"

namespace fp8lm::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kPer = 8;
constexpr int kTile = kThreads * kPer;
constexpr unsigned kFull = 0xFFFFFFFFu;
// Probabilities (≤ 1, their sum ≈ 1) as integers of 2^-60: exact, order-free
// shared-memory sums; 2^-61 truncation per id is far below float rounding.
constexpr double kFixed = 0x1p60;
constexpr double kFixedInv = 0x1p-60;

using u64 = unsigned long long;

struct Shared {
  uint32_t count[256];
  u64 mass[256];
  double red_d[kWarps + 1];
  float red_f[kWarps + 1];
  int red_i[kWarps + 1];
  int red_j[kWarps + 1];
  // A histogram step's choice, for every thread.
  uint32_t bin;
  uint32_t bin_count;
  u64 bin_above;  // count or mass in the bins above the chosen one
  u64 total;
  int found;
};

// Order-preserving bits: a larger float has a larger key; -0 is +0 first, as
// the host compares them equal.
__device__ __forceinline__ uint32_t key_of(float v) {
  if (v == 0.0f) v = 0.0f;
  const uint32_t b = __float_as_uint(v);
  return (b & 0x80000000u) != 0u ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float value_of_key(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) != 0u ? (k & 0x7FFFFFFFu) : ~k);
}

// The processed logit of id i: the host's penalties (backend/sampling.cpp,
// the same float operations in the same order), then the temperature. Masked: the row may carry
// a structured-output mask (allowed), and an id it removes is -inf before anything else, as the
// host's apply_mask; the kernels without masks do not test for one.
template <bool Masked>
struct RowView {
  const uint16_t* x = nullptr;
  const uint32_t* allowed = nullptr;   // Masked: null, or the row's bitmask of allowed ids
  const uint32_t* rep_bits = nullptr;  // null: no repetition penalty
  const uint32_t* out_bits = nullptr;  // null: no frequency / presence penalty
  const int32_t* out_ids = nullptr;
  const int32_t* out_counts = nullptr;
  int out_n = 0;
  float rep = 1.0f, freq = 0.0f, pres = 0.0f, temp = 1.0f;
  bool scale = false;

  __device__ int count_of(int id) const {
    int lo = 0, hi = out_n;
    while (lo < hi) {
      const int mid = (lo + hi) >> 1;
      if (out_ids[mid] < id) lo = mid + 1;
      else hi = mid;
    }
    return out_counts[lo];
  }
  // A finite logit stays finite (backend::saturate_logit): beyond the float
  // range it is the largest float of its sign; -inf, +inf and NaN pass as they are.
  __device__ static float saturate(float v) { return fminf(fmaxf(v, -FLT_MAX), FLT_MAX); }
  __device__ float operator()(int i) const {
    if constexpr (Masked)
      if (allowed != nullptr && ((allowed[i >> 5] >> (i & 31)) & 1u) == 0u) return -CUDART_INF_F;
    float v = __uint_as_float(uint32_t(x[i]) << 16);
    if (!isfinite(v)) return v;
    if (rep_bits != nullptr && ((rep_bits[i >> 5] >> (i & 31)) & 1u) != 0u)
      v = saturate(v > 0.0f ? __fdiv_rn(v, rep) : __fmul_rn(v, rep));
    if (out_bits != nullptr && ((out_bits[i >> 5] >> (i & 31)) & 1u) != 0u) {
      v = __fsub_rn(v, __fmul_rn(freq, float(count_of(i))));
      v = saturate(__fsub_rn(v, pres));
    }
    if (scale) v = saturate(__fdiv_rn(v, temp));
    return v;
  }
};

// ---- block-wide reductions and scans (fixed trees: deterministic) -----------------------------

template <typename T, typename Op>
__device__ T block_reduce(T v, Op op, T* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(kFull, v, o));
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  if (lane == 0) red[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    T t = red[0];
    for (int w = 1; w < kWarps; ++w) t = op(t, red[w]);
    red[kWarps] = t;
  }
  __syncthreads();
  const T r = red[kWarps];
  __syncthreads();
  return r;
}

__device__ double block_sum(double v, Shared& sh) {
  return block_reduce(v, [](double a, double b) { return __dadd_rn(a, b); }, sh.red_d);
}
__device__ int block_sum(int v, Shared& sh) {
  return block_reduce(v, [](int a, int b) { return a + b; }, sh.red_i);
}
__device__ int block_max(int v, Shared& sh) {
  return block_reduce(v, [](int a, int b) { return a > b ? a : b; }, sh.red_i);
}
__device__ int block_min(int v, Shared& sh) {
  return block_reduce(v, [](int a, int b) { return a < b ? a : b; }, sh.red_j);
}
__device__ float block_max(float v, Shared& sh) {
  return block_reduce(v, [](float a, float b) { return a > b ? a : b; }, sh.red_f);
}

// Exclusive prefix sum over the threads in order; `total` gets the block's sum.
template <typename T>
__device__ T block_exclusive_scan(T v, T* red, T& total) {
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  T inc = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const T n = __shfl_up_sync(kFull, inc, o);
    if (lane >= o) inc = inc + n;
  }
  T exc = __shfl_up_sync(kFull, inc, 1);
  if (lane == 0) exc = T(0);
  if (lane == 31) red[warp] = inc;
  __syncthreads();
  if (threadIdx.x == 0) {
    T t = T(0);
    for (int w = 0; w < kWarps; ++w) {
      const T s = red[w];
      red[w] = t;
      t = t + s;
    }
    red[kWarps] = t;
  }
  __syncthreads();
  const T r = red[warp] + exc;
  total = red[kWarps];
  __syncthreads();
  return r;
}

// Calls f(i, valid) for every id of the row, tile by tile, each thread its kPer
// consecutive ids; every thread makes the same calls (warp collectives inside f are safe).
template <typename F>
__device__ void for_each_id(int vocab, F f) {
  for (int base = 0; base < vocab; base += kTile) {
    const int first = base + int(threadIdx.x) * kPer;
#pragma unroll
    for (int j = 0; j < kPer; ++j) f(first + j, first + j < vocab);
  }
}

// Adds this lane's id (bin ≥ 0; -1: none) to the shared histograms, one atomic
// per distinct bin of the warp (ids of a row crowd into few bins).
__device__ void histogram_add(int bin, u64 weight, bool with_mass, Shared& sh) {
  const int lane = int(threadIdx.x) & 31;
  unsigned todo = __ballot_sync(kFull, bin >= 0);
  while (todo != 0u) {
    const int leader = __ffs(int(todo)) - 1;
    const int b = __shfl_sync(kFull, bin, leader);
    const bool mine = bin == b;
    const unsigned group = __ballot_sync(kFull, mine);
    if (with_mass) {
      u64 s = mine ? weight : 0ull;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(kFull, s, o);
      if (lane == leader) atomicAdd(&sh.mass[b], s);
    }
    if (lane == leader) atomicAdd(&sh.count[b], uint32_t(__popc(int(group))));
    todo &= ~group;
  }
}

__device__ void clear_histograms(Shared& sh) {
  for (int b = int(threadIdx.x); b < 256; b += kThreads) sh.count[b] = 0, sh.mass[b] = 0;
  __syncthreads();
}

// Warp 0, after a histogram pass: the bin (from the top) where the count from
// the top first reaches `rank` (1-based). Lane l holds bins 255 - 8l … 248 - 8l.
__device__ void choose_bin_by_count(uint32_t rank, Shared& sh) {
  const int lane = int(threadIdx.x) & 31;
  uint32_t c[8];
  uint32_t sum = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) sum += c[j] = sh.count[255 - 8 * lane - j];
  uint32_t inc = sum;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t n = __shfl_up_sync(kFull, inc, o);
    if (lane >= o) inc += n;
  }
  const unsigned reach = __ballot_sync(kFull, inc >= rank);
  if (reach != 0u && lane == __ffs(int(reach)) - 1) {
    uint32_t cum = inc - sum;
    for (int j = 0; j < 8; ++j) {
      if (cum + c[j] >= rank) {
        sh.bin = uint32_t(255 - 8 * lane - j);
        sh.bin_above = cum;
        sh.bin_count = c[j];
        break;
      }
      cum += c[j];
    }
  }
}

// Warp 0, after a mass histogram pass: the first bin (from the top) whose
// inclusive mass from the top, `above` + the mass of the bins before, fails
// keep(); none failing: the lowest non-empty bin (all of this range is kept).
template <typename Keep>
__device__ void choose_bin_by_mass(u64 above, Keep keep, Shared& sh) {
  const int lane = int(threadIdx.x) & 31;
  u64 m[8];
  u64 sum = 0;
  int lowest = -1;  // this lane's lowest non-empty bin
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    sum += m[j] = sh.mass[255 - 8 * lane - j];
    if (sh.count[255 - 8 * lane - j] != 0u) lowest = j;
  }
  u64 inc = sum;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const u64 n = __shfl_up_sync(kFull, inc, o);
    if (lane >= o) inc += n;
  }
  int cross = -1;
  u64 cum = inc - sum;
  for (int j = 0; j < 8; ++j) {
    if (sh.count[255 - 8 * lane - j] != 0u && !keep(above + cum + m[j])) {
      cross = j;
      break;
    }
    cum += m[j];
  }
  const unsigned crossing = __ballot_sync(kFull, cross >= 0);
  const unsigned nonempty = __ballot_sync(kFull, lowest >= 0);
  const int winner = crossing != 0u ? __ffs(int(crossing)) - 1 : 31 - __clz(int(nonempty));
  if (lane == winner) {
    const int j = crossing != 0u ? cross : lowest;
    u64 before = inc - sum;
    for (int t = 0; t < j; ++t) before += m[t];
    sh.bin = uint32_t(255 - 8 * lane - j);
    sh.bin_above = before;
    sh.bin_count = sh.count[sh.bin];
  }
}

// The id of ascending rank `rank` (0-based) among the ids for which pred(i, v) holds.
template <typename Row, typename Pred>
__device__ int id_at_rank(const Row& row, int vocab, int rank, Pred pred, Shared& sh) {
  if (threadIdx.x == 0) sh.found = -1;
  __syncthreads();
  int carry = 0;
  for (int base = 0; base < vocab; base += kTile) {
    const int first = base + int(threadIdx.x) * kPer;
    uint32_t flags = 0;
    int n = 0;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int i = first + j;
      if (i < vocab && pred(i, row(i))) flags |= 1u << j, ++n;
    }
    int total = 0;
    const int before = carry + block_exclusive_scan(n, sh.red_i, total);
    if (rank >= before && rank < before + n) {
      int k = rank - before;
      for (int j = 0; j < kPer; ++j)
        if (((flags >> j) & 1u) != 0u && k-- == 0) sh.found = first + j;
    }
    __syncthreads();
    if (sh.found >= 0) break;
    carry += total;
  }
  return sh.found;
}

template <bool Masked>
__global__ void __launch_bounds__(kThreads) sample_kernel(const uint16_t* logits, int vocab,
                                                          const DeviceRowSampling* params, const int32_t* ids,
                                                          const int32_t* counts, const uint32_t* masks,
                                                          int32_t* tokens, float* probs) {
  extern __shared__ uint32_t bitmaps[];
  __shared__ Shared sh;
  const DeviceRowSampling p = params[blockIdx.x];
  const int tid = int(threadIdx.x);
  const float inf = CUDART_INF_F;
  const bool greedy = p.temperature < backend::kGreedyTemperature;

  RowView<Masked> row;
  row.x = logits + int64_t(blockIdx.x) * vocab;
  if constexpr (Masked) row.allowed = p.mask_begin >= 0 ? masks + p.mask_begin : nullptr;
  row.out_ids = ids + p.output_begin;
  row.out_counts = counts + p.output_begin;
  row.out_n = p.output_count;
  row.rep = p.repetition_penalty, row.freq = p.frequency_penalty, row.pres = p.presence_penalty;
  row.temp = p.temperature;
  row.scale = !greedy && p.temperature != 1.0f;
  const bool rep_on = p.repetition_penalty != 1.0f;
  const bool freq_on = p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f;
  if (rep_on || freq_on) {
    const int words = (vocab + 31) / 32;
    uint32_t* rep_bits = bitmaps;
    uint32_t* out_bits = bitmaps + words;
    for (int w = tid; w < 2 * words; w += kThreads) bitmaps[w] = 0u;
    __syncthreads();
    auto set = [](uint32_t* bits, int t) { atomicOr(&bits[t >> 5], 1u << (t & 31)); };
    if (rep_on)
      for (int j = tid; j < p.prompt_count; j += kThreads) set(rep_bits, ids[p.prompt_begin + j]);
    for (int j = tid; j < p.output_count; j += kThreads) {
      if (rep_on) set(rep_bits, ids[p.output_begin + j]);
      if (freq_on) set(out_bits, ids[p.output_begin + j]);
    }
    __syncthreads();
    row.rep_bits = rep_on ? rep_bits : nullptr;
    row.out_bits = freq_on ? out_bits : nullptr;
  }

  // ---- greedy: the argmax after the penalties (the lowest id on ties; NaN refuses the row)
  if (greedy) {
    float bv = -inf;
    int bi = INT_MAX, nan = 0;
    for_each_id(vocab, [&](int i, bool valid) {
      if (!valid) return;
      const float v = row(i);
      if (v != v) nan = 1;
      else if (v > -inf && (v > bv || (v == bv && i < bi))) bv = v, bi = i;
    });
    const float best = block_max(bv, sh);
    const int at = block_min(bv == best && best > -inf ? bi : INT_MAX, sh);
    nan = block_max(nan, sh);
    if (tid == 0) tokens[blockIdx.x] = (nan != 0 || at == INT_MAX) ? -1 : at;
    if (probs != nullptr && nan == 0 && at != INT_MAX)
      for_each_id(vocab, [&](int i, bool valid) {
        if (valid) probs[int64_t(blockIdx.x) * vocab + i] = i == at ? 1.0f : 0.0f;
      });
    return;
  }

  // ---- the candidates: every id whose processed logit is not -inf; NaN or +inf refuses the row
  float m = -inf;
  int n = 0, bad = 0;
  for_each_id(vocab, [&](int i, bool valid) {
    if (!valid) return;
    const float v = row(i);
    if (v != v || v == inf) bad = 1;
    else if (v > -inf) {
      m = v > m ? v : m;
      ++n;
    }
  });
  m = block_max(m, sh);
  n = block_sum(n, sh);
  bad = block_max(bad, sh);
  if (bad != 0 || n == 0) {
    if (tid == 0) tokens[blockIdx.x] = -1;
    return;
  }
  auto e_of = [&](float v) { return expf(__fsub_rn(v, m)); };

  // ---- top-k: keep v ≥ the k-th largest (ties at it all stay)
  float kth = -inf;
  if (p.top_k > 0 && p.top_k < n) {
    uint32_t prefix = 0, mask = 0, rank = uint32_t(p.top_k);
    for (int shift = 24; shift >= 0; shift -= 8) {
      clear_histograms(sh);
      for_each_id(vocab, [&](int i, bool valid) {
        int bin = -1;
        if (valid) {
          const float v = row(i);
          const uint32_t key = key_of(v);
          if (v > -inf && (key & mask) == prefix) bin = int((key >> shift) & 255u);
        }
        histogram_add(bin, 0, false, sh);
      });
      __syncthreads();
      if (tid < 32) choose_bin_by_count(rank, sh);
      __syncthreads();
      prefix |= sh.bin << shift;
      mask |= 255u << shift;
      rank -= uint32_t(sh.bin_above);
    }
    kth = value_of_key(prefix);
  }
  auto top_k_keeps = [&](float v) { return v > -inf && v >= kth; };

  // ---- top-p: the head of the descending order (equal logits: higher id first)
  // whose mass above each member leaves more than 1 - top_p; at least the first.
  uint32_t cut_key = 0;
  int cut_id = 0;
  if (p.top_p < 1.0f) {
    double e = 0.0;
    for_each_id(vocab, [&](int i, bool valid) {
      if (!valid) return;
      const float v = row(i);
      if (top_k_keeps(v)) e = __dadd_rn(e, double(e_of(v)));
    });
    const auto inv = float(1.0 / block_sum(e, sh));
    const auto threshold = float(1.0 - double(p.top_p));
    auto prob = [&](float v) { return __fmul_rn(e_of(v), inv); };
    u64 total = 0, above = 0;
    // The host keeps a token when float(total - mass above it) > threshold.
    auto keep = [&](u64 a) {
      return float(__dsub_rn(__dmul_rn(double(total), kFixedInv), __dmul_rn(double(a), kFixedInv))) > threshold;
    };
    uint32_t prefix = 0, mask = 0, group = 0;
    bool only_first = false;
    for (int shift = 24; shift >= 0; shift -= 8) {
      clear_histograms(sh);
      for_each_id(vocab, [&](int i, bool valid) {
        int bin = -1;
        u64 w = 0;
        if (valid) {
          const float v = row(i);
          const uint32_t key = key_of(v);
          if (top_k_keeps(v) && (key & mask) == prefix) {
            bin = int((key >> shift) & 255u);
            w = __double2ull_rn(__dmul_rn(double(prob(v)), kFixed));
          }
        }
        histogram_add(bin, w, true, sh);
      });
      __syncthreads();
      if (shift == 24) {
        if (tid == 0) {
          u64 t = 0;
          for (int b = 0; b < 256; ++b) t += sh.mass[b];
          sh.total = t;
        }
        __syncthreads();
        total = sh.total;
        if (!keep(0)) {  // rounding leaves nothing: the host keeps its first token only
          only_first = true;
          break;
        }
      }
      if (tid < 32) choose_bin_by_mass(above, keep, sh);
      __syncthreads();
      prefix |= sh.bin << shift;
      mask |= 255u << shift;
      above += sh.bin_above;
      group = sh.bin_count;
    }
    if (only_first) {
      cut_key = key_of(m);
      int last = -1;
      for_each_id(vocab, [&](int i, bool valid) {
        if (valid && row(i) == m) last = i > last ? i : last;
      });
      cut_id = block_max(last, sh);
    } else {
      // The tie group at the cut: its j-th member (descending id) has the
      // group's first j members above it too.
      cut_key = prefix;
      const float cut_value = value_of_key(prefix);
      const double pj = double(prob(cut_value));
      const double base = __dsub_rn(__dmul_rn(double(total), kFixedInv), __dmul_rn(double(above), kFixedInv));
      int kept = 0;
      for (int j = tid; j < int(group); j += kThreads)
        kept += float(__dsub_rn(base, __dmul_rn(double(j), pj))) > threshold ? 1 : 0;
      kept = block_sum(kept, sh);
      if (kept < 1) kept = 1;
      cut_id = kept >= int(group) ? 0
                                  : id_at_rank(row, vocab, int(group) - kept,
                                               [&](int, float v) { return top_k_keeps(v) && key_of(v) == cut_key; },
                                               sh);
    }
  }
  auto top_p_keeps = [&](int i, float v) {
    if (!top_k_keeps(v)) return false;
    const uint32_t key = key_of(v);
    return key > cut_key || (key == cut_key && i >= cut_id);
  };

  // ---- min-p: drop probabilities below min_p × the largest (which is inv: e = 1 there)
  float floor = 0.0f, inv_min = 0.0f;
  const bool min_on = p.min_p > 0.0f;
  if (min_on) {
    double e = 0.0;
    for_each_id(vocab, [&](int i, bool valid) {
      if (!valid) return;
      const float v = row(i);
      if (top_p_keeps(i, v)) e = __dadd_rn(e, double(e_of(v)));
    });
    inv_min = float(1.0 / block_sum(e, sh));
    floor = __fmul_rn(p.min_p, inv_min);
  }
  auto kept = [&](int i, float v) {
    return top_p_keeps(i, v) && (!min_on || !(__fmul_rn(e_of(v), inv_min) < floor));
  };

  // ---- the draw: softmax over the survivors, inverse CDF in id order at u × total
  double e = 0.0;
  for_each_id(vocab, [&](int i, bool valid) {
    if (!valid) return;
    const float v = row(i);
    if (kept(i, v)) e = __dadd_rn(e, double(e_of(v)));
  });
  const auto inv = float(1.0 / block_sum(e, sh));
  double total = 0.0;
  for_each_id(vocab, [&](int i, bool valid) {
    if (!valid) return;
    const float v = row(i);
    if (kept(i, v)) total = __dadd_rn(total, double(__fmul_rn(e_of(v), inv)));
  });
  total = block_sum(total, sh);
  const double target = __dmul_rn(p.uniform, total);
  double carry = 0.0;
  int chosen = INT_MAX, last_nonzero = -1;
  for (int base = 0; base < vocab; base += kTile) {
    const int first = base + tid * kPer;
    float q[kPer];
    double local = 0.0;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int i = first + j;
      q[j] = 0.0f;
      if (i < vocab) {
        const float v = row(i);
        if (kept(i, v)) q[j] = __fmul_rn(e_of(v), inv);
      }
      local = __dadd_rn(local, double(q[j]));
      if (probs != nullptr && i < vocab) probs[int64_t(blockIdx.x) * vocab + i] = q[j];
    }
    double tile = 0.0;
    double acc = __dadd_rn(carry, block_exclusive_scan(local, sh.red_d, tile));
    int mine = INT_MAX, last = -1;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      if (q[j] <= 0.0f) continue;
      acc = __dadd_rn(acc, double(q[j]));
      last = first + j;
      if (mine == INT_MAX && acc > target) mine = first + j;
    }
    mine = block_min(mine, sh);
    last = block_max(last, sh);
    if (last >= 0) last_nonzero = last;
    if (mine != INT_MAX && chosen == INT_MAX) {
      chosen = mine;
      if (probs == nullptr) break;  // the rest of the row only for the test's distribution
    }
    carry = __dadd_rn(carry, tile);
  }
  if (tid == 0) tokens[blockIdx.x] = chosen != INT_MAX ? chosen : last_nonzero;
}

}  // namespace

void sample_rows(const __nv_bfloat16* logits, int64_t rows, int64_t vocab, const DeviceRowSampling* params,
                 const int32_t* ids, const int32_t* counts, int32_t* tokens, cudaStream_t stream, float* probs,
                 const uint32_t* masks) {
  if (rows <= 0) return;
  if (vocab < 1 || vocab > int64_t(INT_MAX) - kTile)
    throw Error("sample_rows: a vocabulary of " + std::to_string(vocab) + " tokens is outside [1, 2^31 - " +
                std::to_string(kTile) + ")");
  if (rows > int64_t(INT_MAX)) throw Error("sample_rows: " + std::to_string(rows) + " rows is too many for one launch");
  const size_t bitmap_bytes = size_t((vocab + 31) / 32) * 2 * sizeof(uint32_t);
  // Above 48 KiB of dynamic shared memory (vocabularies beyond 196608) the kernel must opt in.
  auto* kernel = masks != nullptr ? sample_kernel<true> : sample_kernel<false>;
  if (bitmap_bytes > 48 * 1024)
    FP8LM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bitmap_bytes)));
  kernel<<<unsigned(rows), kThreads, bitmap_bytes, stream>>>(reinterpret_cast<const uint16_t*>(logits), int(vocab),
                                                             params, ids, counts, masks, tokens, probs);
  FP8LM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace fp8lm::cuda
