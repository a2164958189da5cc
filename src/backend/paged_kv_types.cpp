#include "backend/paged_kv_types.h"

#include <cmath>
#include <string>
#include <utility>

#include "common/error.h"

namespace fp8lm::backend {
namespace {

void check_shape(const KvCacheShape& s) {
  auto positive = [](const char* name, int64_t value) {
    if (value <= 0) throw Error(std::string("kv cache: ") + name + " must be > 0, got " + std::to_string(value));
  };
  positive("num_layers", s.num_layers);
  positive("num_kv_heads", s.num_kv_heads);
  positive("head_dim", s.head_dim);
  positive("block_size", s.block_size);
  positive("num_blocks", s.num_blocks);
  if (s.latent && s.num_kv_heads != 1)
    throw Error("kv cache: a latent (MLA) cache holds one entry a token, num_kv_heads must be 1, got " +
                std::to_string(s.num_kv_heads));
  if (s.padding_blocks < 0 || s.padding_blocks >= s.num_blocks)
    throw Error("kv cache: padding_blocks must be in [0, num_blocks = " + std::to_string(s.num_blocks) + "), got " +
                std::to_string(s.padding_blocks));
}

void check_formats(const KvCacheShape& s, const std::vector<KvLayerFormat>& layers) {
  if (layers.size() != size_t(s.num_layers)) {
    throw Error("kv cache: " + std::to_string(layers.size()) + " layer formats for num_layers = " +
                std::to_string(s.num_layers));
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    const KvLayerFormat& f = layers[i];
    // F16 is an ElementType (weights use it) but no backend's cache or
    // attention kernels store it: refused by name rather than stored as BF16.
    if (f.element == KvElement::kF16) {
      throw Error("kv cache: layer " + std::to_string(i) + " has element type f16, which a kv cache does not store "
                  "(f32, bf16, e4m3, e5m2)");
    }
    if (f.element != KvElement::kF32 && f.element != KvElement::kBF16 && !is_fp8(f.element)) {
      throw Error("kv cache: layer " + std::to_string(i) + " has an unknown element type");
    }
    if (!is_fp8(f.element)) continue;
    for (const auto& [name, scale] : {std::pair{"k_scale", f.k_scale}, std::pair{"v_scale", f.v_scale}}) {
      if (!std::isfinite(scale) || !(scale > 0.0f)) {
        throw Error("kv cache: layer " + std::to_string(i) + " " + name + " must be finite and > 0, got " +
                    std::to_string(scale));
      }
    }
  }
}

}  // namespace

void validate_kv(const KvCacheShape& shape, const std::vector<KvLayerFormat>& layers) {
  check_shape(shape);
  check_formats(shape, layers);
}

uint64_t kv_bytes_per_token(const KvCacheShape& shape, const std::vector<KvLayerFormat>& layers) {
  validate_kv(shape, layers);
  uint64_t total = 0;
  for (const KvLayerFormat& f : layers) {
    const uint64_t arrays = shape.latent ? 1 : 2;  // K and V, or the latent entry alone
    total += arrays * uint64_t(shape.num_kv_heads) * uint64_t(shape.head_dim) * element_bytes(f.element);
  }
  return total;
}

}  // namespace fp8lm::backend
