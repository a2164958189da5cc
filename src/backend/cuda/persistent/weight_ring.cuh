// The persistent decode kernel's weight ring (decode_kernel.cu), on its own so that
// bench_cuda_weight_stream times the same pages and products without the rest of the kernel: how
// fast the ring streams weights, and what the phase barriers between them cost.
//
// A tile's 16 weight rows (MMA rows 0-7 from `ra`, 8-15 from `rb`: rb = ra + 8, or for gate/up the
// 8 up rows of the 8 gate rows at ra) go through shared memory in pages: a page is a K-range of
// all 16 rows, two 2-D tensor-map copies (cp.async.bulk.tensor, 8 rows each) completing on the
// slot's `full` mbarrier. A tile has tile_pages pages of page_steps 64-byte steps
// (decode_program.h); the ring's page q goes to consumer warp q mod 7, which frees its slot with
// one arrival on the slot's `empty` mbarrier. The loader warp walks the CTA's queue ahead of the
// consumers, as far as the free slots let it — weights are constants, so it loads the next
// phase's tiles while the consumers wait for that phase's input — with no barrier between it and
// the consumers but the slots' mbarriers. A page's rows lie page_steps · 64 bytes apart, as the
// copy writes them (an odd number of steps: no bank conflicts between rows g and g + 1).
#pragma once

#include <cstdint>

#include "backend/cuda/gemv/mma_fragments.cuh"
#include "backend/cuda/persistent/decode_program.h"

namespace fp8lm::cuda::persistent {

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}


inline constexpr int kSlotBytes = kTileRows * kMaxPageSteps * 64;  // 15 KB, 128-byte aligned slots

__device__ __forceinline__ uint32_t smem_addr(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
// Until the phase of parity `parity` of `bar` has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, unsigned parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
}
// Box {x, y} (8-byte elements of a row, rows) of `map` into shared memory at `dst` (128-byte
// aligned), completing on `bar`.
__device__ __forceinline__ void tensor_copy(void* dst, const void* map, int x, int y, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
          smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(smem_addr(bar))
      : "memory");
}

// The ring: `slots` slots of kSlotBytes from `base`, each with its full / empty mbarriers and the
// number of the page the loader last put in it (`page`). A consumer of page k (slot k % slots,
// round r = k / slots) waits for the full barrier's phase r by its parity, which names that phase
// only while the slot's previous phase (page k − slots) has completed: with more pages a tile than
// the ring holds (Llama-3.1-8B's down projection: 14 pages, 10 slots), a warp may ask for its
// second page while another warp's first page in the same slot has not landed, and the parity
// alone would then pass at once (wrong data, and an extra arrival that breaks the barrier: v5's
// hang). The consumer first waits until `page` of the slot says k — the loader writes it only
// after page k − slots was consumed, so landed — and then for the parity.
struct Ring {
  unsigned char* base;
  uint64_t* full;
  uint64_t* empty;
  volatile uint32_t* page;
  int slots;
};

// The loader, page `seq` (slot seq mod slots) of a tile: waits until the slot is free (its page
// seq − slots consumed), and from lane 0 copies steps s0 … s0 + ps of the tile's two 8-row boxes
// (rows ra … ra + 7 and rb … rb + 7 of `map`, `steps` 64-byte steps a row: the bytes past K zeros,
// and counted; a page wholly past K is an arrival alone). Returns the loader's wait in ns
// (kTimed), else 0.
template <bool kTimed>
__device__ __forceinline__ uint64_t issue_page(const Ring& ring, uint32_t seq, const void* map, int ra, int rb, int s0,
                                               int ps, int steps) {
  const int lane = threadIdx.x & 31;
  const int slot = int(seq % unsigned(ring.slots));
  const unsigned round = seq / unsigned(ring.slots);
  uint64_t waited = 0;
  if (round > 0) {
    const uint64_t t0 = kTimed ? global_ns() : 0;
    mbar_wait(ring.empty + slot, (round - 1) & 1);
    if constexpr (kTimed) waited = global_ns() - t0;
  }
  if (lane == 0) {
    ring.page[slot] = seq;
    unsigned char* dst = ring.base + slot * kSlotBytes;
    if (s0 < steps) {
      mbar_arrive_expect_tx(ring.full + slot, uint32_t(kTileRows * ps * 64));
      tensor_copy(dst, map, s0 * 8, ra, ring.full + slot);
      tensor_copy(dst + 8 * ps * 64, map, s0 * 8, rb, ring.full + slot);
    } else {
      mbar_arrive(ring.full + slot);
    }
  }
  __syncwarp();
  return waited;
}

// A consumer, page `sq`: until it has landed (see Ring); returns its slot's bytes.
__device__ __forceinline__ const unsigned char* wait_page(const Ring& ring, uint32_t sq) {
  const int slot = int(sq % unsigned(ring.slots));
  while (ring.page[slot] != sq) __nanosleep(32);
  mbar_wait(ring.full + slot, (sq / unsigned(ring.slots)) & 1);
  return ring.base + slot * kSlotBytes;
}

// A consumer done with page `sq`: the whole warp's reads of it first, then lane 0 frees the slot.
__device__ __forceinline__ void release_page(const Ring& ring, uint32_t sq) {
  __syncwarp();
  if ((threadIdx.x & 31) == 0) mbar_arrive(ring.empty + int(sq % unsigned(ring.slots)));
}

// acc += the page's 16 rows (steps s0 … s1 of K, from the slot) times the staged activations.
// kFp8: E4M3 weights and codes (FP16 MMA on exact values); else BF16 both.
template <bool kFp8>
__device__ __forceinline__ void page_products(const unsigned char* slot, int stride, int s0, int s1,
                                              const unsigned char* xr, bool has_x, float (&acc)[4]) {
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const unsigned char* pa = slot + g * stride + 16 * t;
  const unsigned char* pb = pa + 8 * stride;
#pragma unroll 4
  for (int s = s0; s < s1; ++s) {
    const uint4 wa = *reinterpret_cast<const uint4*>(pa + (s - s0) * 64);
    const uint4 wb = *reinterpret_cast<const uint4*>(pb + (s - s0) * 64);
    const uint4 xv = has_x ? *reinterpret_cast<const uint4*>(xr + s * 64) : make_uint4(0, 0, 0, 0);
    const uint32_t xw[4] = {xv.x, xv.y, xv.z, xv.w};
    const uint32_t qa[4] = {wa.x, wa.y, wa.z, wa.w};
    const uint32_t qb[4] = {wb.x, wb.y, wb.z, wb.w};
    if constexpr (kFp8) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        uint32_t a0, a1, a2, a3;
        expand<true>(qa[q], a0, a2);
        expand<true>(qb[q], a1, a3);
        const uint32_t b0 = codes_to_f16x2(__byte_perm(xw[q], 0, 0x4420));
        const uint32_t b1 = codes_to_f16x2(__byte_perm(xw[q], 0, 0x4431));
        mma<true>(acc, a0, a1, a2, a3, b0, b1);
      }
    } else {
#pragma unroll
      for (int j = 0; j < 2; ++j) mma<false>(acc, qa[2 * j], qb[2 * j], qa[2 * j + 1], qb[2 * j + 1], xw[2 * j], xw[2 * j + 1]);
    }
  }
}

}  // namespace fp8lm::cuda::persistent
