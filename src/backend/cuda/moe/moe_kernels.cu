#include "backend/cuda/moe/moe_kernels.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "backend/cuda/common/check.h"
#include "backend/cuda/common/device_helpers.cuh"
#include "common/error.h"

namespace fp8lm::cuda {
namespace {

constexpr int kRouteWarps = 4;
constexpr size_t kGroupSmemLimit = 200 * 1024;

// One row by one warp: the probabilities in `p` (shared, [experts]), then top_k rounds of a
// warp argmax; lane 0 writes the row's ids and weights.
__device__ void route_row_warp(const __nv_bfloat16* l, int experts, int top_k, bool renormalize, float* p,
                               int32_t* row_ids, float* row_w) {
  const int lane = int(threadIdx.x) & 31;
  float mx = -INFINITY;
  for (int e = lane; e < experts; e += 32) {
    p[e] = __bfloat162float(l[e]);
    mx = fmaxf(mx, p[e]);
  }
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, o));
  float sum = 0.0f;
  for (int e = lane; e < experts; e += 32) {
    p[e] = expf(p[e] - mx);
    sum += p[e];
  }
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, o);
  for (int e = lane; e < experts; e += 32) p[e] /= sum;
  __syncwarp();
  for (int k = 0; k < top_k; ++k) {
    // This lane's best among its experts not yet taken (taken ones are −1), the lower id on ties.
    float best = -2.0f;
    int best_e = experts;
    for (int e = lane; e < experts; e += 32)
      if (p[e] > best) best = p[e], best_e = e;
    for (int o = 16; o > 0; o >>= 1) {
      const float b = __shfl_xor_sync(0xFFFFFFFFu, best, o);
      const int be = __shfl_xor_sync(0xFFFFFFFFu, best_e, o);
      if (b > best || (b == best && be < best_e)) best = b, best_e = be;
    }
    if (lane == 0) {
      // Only NaNs left (NaN logits): the lowest id not taken, as cpu::route_row's comparisons give.
      if (best_e == experts)
        for (int e = 0; e < experts && best_e == experts; ++e)
          if (!(p[e] == -1.0f)) best_e = e, best = p[e];
      row_ids[k] = best_e;
      row_w[k] = best;
      p[best_e] = -1.0f;
    }
    __syncwarp();
  }
  if (renormalize && lane == 0) {
    float t = 0.0f;
    for (int k = 0; k < top_k; ++k) t += row_w[k];  // in order, as cpu::route_row
    for (int k = 0; k < top_k; ++k) row_w[k] /= t;
  }
}

__global__ void __launch_bounds__(kRouteWarps * 32)
    moe_route_kernel(const __nv_bfloat16* logits, int64_t rows, int experts, int top_k, bool renormalize,
                     int32_t* ids, float* weights) {
  extern __shared__ float probs[];  // [kRouteWarps][experts]
  const int warp = int(threadIdx.x) >> 5;
  const int64_t row = int64_t(blockIdx.x) * kRouteWarps + warp;
  if (row >= rows) return;
  route_row_warp(logits + row * experts, experts, top_k, renormalize, probs + int64_t(warp) * experts,
                 ids + row * top_k, weights + row * top_k);
}

constexpr int kGroupWarps = 32;

// A row's pairs (ids with their weights) in increasing expert id, the combine's order: an
// insertion sort, top_k being small.
__device__ void sort_row_pairs(int32_t* ids, float* w, int top_k) {
  for (int i = 1; i < top_k; ++i)
    for (int j = i; j > 0 && ids[j - 1] > ids[j]; --j) {
      const int32_t t = ids[j];
      ids[j] = ids[j - 1], ids[j - 1] = t;
      const float f = w[j];
      w[j] = w[j - 1], w[j - 1] = f;
    }
}

// The grouped form (moe_route_group): one block. Every warp routes rows (their pairs then
// sorted by expert id, lane 0), the block counts the pairs per expert, warp 0 scans the counts
// into each expert's first grouped position and first slot, and the pairs are placed: each
// expert's slots written, each pair's position taken from its expert's cursor. Within an
// expert the pairs' order is the atomics' (rows are independent in every consumer: the GEMV
// computes each row alone, the combine reads by position).
__global__ void __launch_bounds__(kGroupWarps * 32)
    moe_route_group_kernel(const __nv_bfloat16* logits, int rows, int experts, int top_k, bool renormalize,
                           int slot_rows, MoeGroups out) {
  extern __shared__ float smem[];
  float* probs = smem;                                                               // [warps][experts]
  float* s_w = probs + kGroupWarps * experts;                                        // [pairs]
  auto* s_ids = reinterpret_cast<int32_t*>(s_w + rows * top_k);                      // [pairs]
  int32_t* count = s_ids + rows * top_k;                                             // [experts]
  int32_t* start = count + experts;                                                  // [experts]
  int32_t* slot0 = start + experts;                                                  // [experts]
  int32_t* cursor = slot0 + experts;                                                 // [experts]
  // As many warps as rows, up to kGroupWarps (fewer threads: cheaper barriers at decode sizes).
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5, threads = int(blockDim.x), warps = threads / 32;
  const int pairs = rows * top_k;
  for (int e = tid; e < experts; e += threads) count[e] = 0, cursor[e] = 0;
  for (int r = warp; r < rows; r += warps) {
    int32_t* ids = s_ids + r * top_k;
    float* w = s_w + r * top_k;  // shared: the sort and renormalization read back what they wrote
    route_row_warp(logits + int64_t(r) * experts, experts, top_k, renormalize, probs + warp * experts, ids, w);
    __syncwarp();
    if (lane == 0) sort_row_pairs(ids, w, top_k);
    __syncwarp();
  }
  __syncthreads();
  for (int i = tid; i < pairs; i += threads) atomicAdd(count + s_ids[i], 1);
  __syncthreads();
  if (warp == 0) {
    int pos_carry = 0, slot_carry = 0;
    for (int base = 0; base < experts; base += 32) {
      const int e = base + lane;
      const int c = e < experts ? count[e] : 0, ns = (c + slot_rows - 1) / slot_rows;
      int ic = c, is = ns;
      for (int o = 1; o < 32; o <<= 1) {
        const int a = __shfl_up_sync(0xFFFFFFFFu, ic, o), b = __shfl_up_sync(0xFFFFFFFFu, is, o);
        if (lane >= o) ic += a, is += b;
      }
      if (e < experts) start[e] = pos_carry + ic - c, slot0[e] = slot_carry + is - ns;
      if (e < experts && out.expert_start != nullptr) out.expert_start[e] = pos_carry + ic - c;
      pos_carry += __shfl_sync(0xFFFFFFFFu, ic, 31);
      slot_carry += __shfl_sync(0xFFFFFFFFu, is, 31);
    }
    if (lane == 0) out.slots[0] = slot_carry;
    if (lane == 0 && out.expert_start != nullptr) out.expert_start[experts] = pos_carry;
  }
  __syncthreads();
  const int ms = out.max_slots;
  for (int e = tid; e < experts; e += threads)
    for (int s = 0, c = count[e]; s * slot_rows < c; ++s) {
      const int at = slot0[e] + s;
      out.slots[1 + at] = e;
      out.slots[1 + ms + at] = start[e] + s * slot_rows;
      out.slots[1 + 2 * ms + at] = min(slot_rows, c - s * slot_rows);
    }
  for (int i = tid; i < pairs; i += threads) {
    const int e = s_ids[i];
    const int at = start[e] + atomicAdd(cursor + e, 1);
    out.perm[at] = i / top_k;
    out.pos[i] = at;
    out.weights[i] = s_w[i];
  }
}

// moe_route_sort's steps after moe_route. One thread per row: its pairs sorted by expert id (the
// combine's order), each counted for its expert.
__global__ void moe_sort_count_kernel(int32_t* ids, float* weights, int64_t rows, int top_k, int32_t* count) {
  const int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  int32_t* id = ids + row * top_k;
  sort_row_pairs(id, weights + row * top_k, top_k);
  for (int i = 0; i < top_k; ++i) atomicAdd(count + id[i], 1);
}

// One warp: each expert's first grouped position (start, and the placing cursor), start[experts]
// = every pair.
__global__ void moe_scan_kernel(const int32_t* count, int experts, int32_t* start, int32_t* cursor) {
  const int lane = int(threadIdx.x);
  int carry = 0;
  for (int base = 0; base < experts; base += 32) {
    const int e = base + lane;
    const int c = e < experts ? count[e] : 0;
    int inc = c;
    for (int o = 1; o < 32; o <<= 1) {
      const int a = __shfl_up_sync(0xFFFFFFFFu, inc, o);
      if (lane >= o) inc += a;
    }
    if (e < experts) start[e] = cursor[e] = carry + inc - c;
    carry += __shfl_sync(0xFFFFFFFFu, inc, 31);
  }
  if (lane == 0) start[experts] = carry;
}

// One thread per pair: its grouped position from its expert's cursor (within an expert the
// atomics' order: every consumer reads rows by position).
__global__ void moe_place_kernel(const int32_t* ids, int64_t pairs, int top_k, int32_t* cursor, int32_t* perm,
                                 int32_t* pos) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= pairs) return;
  const int32_t at = atomicAdd(cursor + ids[i], 1);
  perm[at] = int32_t(i / top_k);
  pos[i] = at;
}

// One block per row; with cols % 8 == 0 and 16-byte aligned rows each thread sums 8 columns
// (16-byte loads of every pair's row, all in flight at once), else one column at a time. The
// same arithmetic either way: per column, the pairs in order, each product rounded then added.
template <bool kVec>
__global__ void moe_combine_kernel(const __nv_bfloat16* y, int64_t cols, const int32_t* pos, const float* weights,
                                   int top_k, __nv_bfloat16* out) {
  const int64_t row = blockIdx.x;
  const int32_t* rp = pos + row * top_k;
  const float* rw = weights + row * top_k;
  if constexpr (kVec) {
    for (int64_t c = int64_t(threadIdx.x) * 8; c < cols; c += int64_t(blockDim.x) * 8) {
      float acc[8] = {};
      for (int j = 0; j < top_k; ++j) {
        float v[8];
        load8<true>(y + int64_t(rp[j]) * cols + c, 8, v);
        const float wj = rw[j];
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[i] = __fadd_rn(acc[i], __fmul_rn(v[i], wj));
      }
      store8<true>(out + row * cols + c, 8, acc);
    }
  } else {
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      float acc = 0.0f;
      for (int j = 0; j < top_k; ++j) {
        const float term = __fmul_rn(__bfloat162float(y[int64_t(rp[j]) * cols + c]), rw[j]);
        acc = __fadd_rn(acc, term);
      }
      out[row * cols + c] = __float2bfloat16_rn(acc);
    }
  }
}

[[noreturn]] void fail(const char* op, const std::string& what) { throw Error(std::string("cuda ") + op + ": " + what); }

void check_routing(const char* op, int experts, int top_k) {
  if (experts < 1 || experts > kMoeMaxExperts)
    fail(op, std::to_string(experts) + " experts, not in [1, " + std::to_string(kMoeMaxExperts) + "]");
  if (top_k < 1 || top_k > experts) fail(op, "top_k " + std::to_string(top_k) + " is not in [1, " + std::to_string(experts) + "]");
}

}  // namespace

void moe_route(const __nv_bfloat16* logits, int64_t rows, int experts, int top_k, bool renormalize, int32_t* ids,
               float* weights, cudaStream_t stream) {
  check_routing("moe_route", experts, top_k);
  if (rows < 0) fail("moe_route", "negative row count");
  if (rows == 0) return;
  if (logits == nullptr || ids == nullptr || weights == nullptr) fail("moe_route", "null pointer");
  const int64_t blocks = (rows + kRouteWarps - 1) / kRouteWarps;
  const size_t smem = size_t(kRouteWarps) * size_t(experts) * sizeof(float);
  moe_route_kernel<<<unsigned(blocks), kRouteWarps * 32, smem, stream>>>(logits, rows, experts, top_k, renormalize,
                                                                          ids, weights);
  FP8LM_CUDA_CHECK(cudaGetLastError());
}

int moe_group_max_slots(int64_t pairs, int experts, int slot_rows) {
  return int(std::min<int64_t>(pairs, experts) + pairs / slot_rows);
}

size_t moe_group_smem_bytes(int64_t rows, int experts, int top_k) {
  return (size_t(kGroupWarps) * size_t(experts) + 2 * size_t(rows) * size_t(top_k) + 4 * size_t(experts)) * 4;
}

void moe_route_group(const __nv_bfloat16* logits, int64_t rows, int experts, int top_k, bool renormalize,
                     int slot_rows, const MoeGroups& out, cudaStream_t stream) {
  check_routing("moe_route_group", experts, top_k);
  if (rows < 1 || rows * top_k > kMoeGroupMaxPairs)
    fail("moe_route_group", std::to_string(rows) + " rows of " + std::to_string(top_k) + " pairs: 1 to " +
                                std::to_string(kMoeGroupMaxPairs) + " pairs");
  if (slot_rows < 1) fail("moe_route_group", "slot_rows must be positive");
  if (out.max_slots < moe_group_max_slots(rows * top_k, experts, slot_rows))
    fail("moe_route_group", "the slot table holds " + std::to_string(out.max_slots) + " slots, " +
                                std::to_string(moe_group_max_slots(rows * top_k, experts, slot_rows)) + " may be needed");
  if (logits == nullptr || out.slots == nullptr || out.perm == nullptr || out.pos == nullptr || out.weights == nullptr)
    fail("moe_route_group", "null pointer");
  const size_t smem = moe_group_smem_bytes(rows, experts, top_k);
  if (smem > kGroupSmemLimit)
    fail("moe_route_group", std::to_string(experts) + " experts need " + std::to_string(smem) +
                                " bytes of shared memory, more than " + std::to_string(kGroupSmemLimit));
  // Above 48 KiB of dynamic shared memory (many experts, many rows) the kernel must opt in.
  if (smem > 48 * 1024)
    FP8LM_CUDA_CHECK(cudaFuncSetAttribute(moe_route_group_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const int warps = int(std::clamp<int64_t>(rows, 4, kGroupWarps));
  moe_route_group_kernel<<<1, unsigned(warps * 32), smem, stream>>>(logits, int(rows), experts, top_k, renormalize,
                                                                 slot_rows, out);
  FP8LM_CUDA_CHECK(cudaGetLastError());
}

size_t moe_route_sort_scratch_bytes(int64_t pairs, int experts) {
  return (size_t(pairs) + 2 * size_t(experts)) * sizeof(int32_t);
}

void moe_route_sort(const __nv_bfloat16* logits, int64_t rows, int experts, int top_k, bool renormalize,
                    const MoeGroups& out, void* scratch, cudaStream_t stream) {
  check_routing("moe_route_sort", experts, top_k);
  if (rows < 1 || rows * top_k > 0x7FFFFFFF) fail("moe_route_sort", "1 to 2^31 - 1 pairs");
  if (logits == nullptr || out.perm == nullptr || out.pos == nullptr || out.weights == nullptr ||
      out.expert_start == nullptr || scratch == nullptr)
    fail("moe_route_sort", "null pointer");
  const int64_t pairs = rows * top_k;
  auto* ids = static_cast<int32_t*>(scratch);
  int32_t* count = ids + pairs;
  int32_t* cursor = count + experts;
  moe_route(logits, rows, experts, top_k, renormalize, ids, out.weights, stream);
  FP8LM_CUDA_CHECK(cudaMemsetAsync(count, 0, size_t(experts) * sizeof(int32_t), stream));
  moe_sort_count_kernel<<<unsigned((rows + 255) / 256), 256, 0, stream>>>(ids, out.weights, rows, top_k, count);
  moe_scan_kernel<<<1, 32, 0, stream>>>(count, experts, out.expert_start, cursor);
  moe_place_kernel<<<unsigned((pairs + 255) / 256), 256, 0, stream>>>(ids, pairs, top_k, cursor, out.perm, out.pos);
  FP8LM_CUDA_CHECK(cudaGetLastError());
}

void moe_combine(const __nv_bfloat16* y, int64_t cols, const int32_t* pos, const float* weights, int64_t rows,
                 int top_k, __nv_bfloat16* out, cudaStream_t stream) {
  if (rows < 0 || cols < 0 || top_k < 1) fail("moe_combine", "bad shape");
  if (rows == 0 || cols == 0) return;
  if (y == nullptr || pos == nullptr || weights == nullptr || out == nullptr) fail("moe_combine", "null pointer");
  if (rows > 0x7FFFFFFF) fail("moe_combine", "at most 2^31 - 1 rows");
  const bool vec = cols % 8 == 0 && aligned16(y) && aligned16(out);
  const unsigned threads = unsigned(std::clamp<int64_t>((cols / 8 + 31) / 32 * 32, 32, 256));
  if (vec) moe_combine_kernel<true><<<unsigned(rows), threads, 0, stream>>>(y, cols, pos, weights, top_k, out);
  else moe_combine_kernel<false><<<unsigned(rows), 256, 0, stream>>>(y, cols, pos, weights, top_k, out);
  FP8LM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace fp8lm::cuda
