// The CPU backend's paged KV cache: fixed-size blocks of token positions, each
// layer in its own element format (F32, BF16 or FP8 with per-tensor k/v scales),
// addressed by (layer, block, slot). Which blocks a sequence owns is the
// engine's business (engine/block_allocator.h); attention reads them through a
// block table (backend/cpu/attention.h).
//
// Rounding on store (docs/numerics.md):
//   * F32: stored as is.
//   * BF16: round to nearest even (float_to_bf16, NaN -> canonical 0x7FC0).
//   * FP8 (E4M3 / E5M2): code = float_to_fp8(x / scale, kSatFinite) — one
//     float32 division by the scale, never a multiply by its reciprocal.
// Loading dequantizes: F32 as is, BF16 exactly, FP8 float(code) × scale in
// float32 (one multiplication), i.e. what PyTorch's `codes.float() * scale` gives.
//
// Memory layout: one zero-initialized allocation (anonymous pages, which the
// kernel gives as positions are first written: a cache costs its reservation
// only as sequences fill it). Each layer owns a region
// (64-byte aligned) holding its K array then its V array, each
//     [num_blocks][num_kv_heads][block_size][head_dim]
// elements. Attention walks one kv head over consecutive positions, so one
// (block, kv head) is a contiguous block_size × head_dim run: a whole block of
// one head dequantizes with one sequential read.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/paged_kv_types.h"

namespace fp8lm::cpu {

// fp8lm::ElementType: element_bytes() and name() give its size and name.
using backend::KvElement;

using backend::KvCacheShape;
// Scales apply to FP8 layers only; F32 and BF16 layers ignore them.
using backend::KvLayerFormat;

class PagedKvCache {
 public:
  // One format per layer. Throws fp8lm::Error naming the problem: what
  // backend::validate_kv refuses, a total size that does not fit in memory
  // addressing, an allocation the system refuses.
  PagedKvCache(KvCacheShape shape, std::vector<KvLayerFormat> layers);

  const KvCacheShape& shape() const { return shape_; }
  const KvLayerFormat& layer_format(int layer) const;

  // Bytes of storage held (the one allocation, alignment padding included).
  uint64_t bytes() const { return bytes_; }

  // Stores one token's K and V (num_kv_heads × head_dim floats each, head-major)
  // into `slot` of `block`, rounded as the layer's format says. A latent cache
  // (KvCacheShape::latent) stores k alone: v must be null, and there is no V to load.
  void store(int layer, int64_t block, int slot, const float* k, const float* v);

  // One kv head of one token, dequantized: head_dim floats.
  void load_k(int layer, int64_t block, int slot, int kv_head, float* out) const;
  void load_v(int layer, int64_t block, int slot, int kv_head, float* out) const;

  // `count` consecutive slots [first_slot, first_slot + count) of one kv head
  // of one block, dequantized into out (count × head_dim floats, slot-major).
  // What attention uses; load_k / load_v are the one-slot case.
  void dequantize_k(int layer, int64_t block, int kv_head, int first_slot, int count, float* out) const;
  void dequantize_v(int layer, int64_t block, int kv_head, int first_slot, int count, float* out) const;

 private:
  struct Layer {
    KvLayerFormat format;
    size_t element_bytes = 0;
    size_t k_offset = 0;  // byte offsets into storage_
    size_t v_offset = 0;
    // FP8 only: code -> float(code) × scale, the exact dequantized values.
    std::array<float, 256> k_table{};
    std::array<float, 256> v_table{};
  };

  void check_address(const char* what, int layer, int64_t block, int slot) const;
  void check_run(const char* what, int layer, int64_t block, int kv_head, int first_slot, int count) const;
  void dequantize(const Layer& l, size_t base, const std::array<float, 256>& table, int64_t block, int kv_head,
                  int first_slot, int count, float* out) const;

  KvCacheShape shape_;
  std::vector<Layer> layers_;
  uint64_t bytes_ = 0;
  struct Unmap {
    size_t bytes;  // no initializer: a deleter must be default-constructible inside this class
    void operator()(std::byte* p) const;
  };
  std::unique_ptr<std::byte[], Unmap> storage_;
};

}  // namespace fp8lm::cpu
