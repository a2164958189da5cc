#include "backend/cpu/kv_cache.h"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "common/error.h"
#include "numerics/fp8_format.h"

namespace fp8lm::cpu {
namespace {

constexpr size_t kAlign = 64;

// a × b, or an Error when it does not fit in size_t.
size_t checked_mul(size_t a, size_t b) {
  if (b != 0 && a > std::numeric_limits<size_t>::max() / b) throw Error("kv cache: size overflows memory addressing");
  return a * b;
}

size_t round_up(size_t x) {
  if (x > std::numeric_limits<size_t>::max() - kAlign) throw Error("kv cache: size overflows memory addressing");
  return (x + kAlign - 1) / kAlign * kAlign;
}

// Elements of one K (or V) array of a layer.
size_t elements_per_array(const KvCacheShape& s) {
  return checked_mul(checked_mul(checked_mul(size_t(s.num_blocks), size_t(s.num_kv_heads)), size_t(s.block_size)),
                     size_t(s.head_dim));
}

void encode(const float* x, int64_t n, const KvLayerFormat& f, float scale, std::byte* dst) {
  switch (f.element) {
    case KvElement::kF32:
      std::memcpy(dst, x, size_t(n) * sizeof(float));
      return;
    case KvElement::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t b = float_to_bf16(x[i]);
        std::memcpy(dst + 2 * i, &b, 2);
      }
      return;
    case KvElement::kE4M3:
    case KvElement::kE5M2: {
      const Fp8Format fmt = fp8_format(f.element);
      auto* codes = reinterpret_cast<uint8_t*>(dst);
      for (int64_t i = 0; i < n; ++i) codes[i] = float_to_fp8(x[i] / scale, fmt, Saturation::kSatFinite);
      return;
    }
    default:  // validate_kv refused every other type when the cache was made
      throw Error(std::string("kv cache store: element type ") + std::string(name(f.element)) + " is not stored");
  }
}

}  // namespace

PagedKvCache::PagedKvCache(KvCacheShape shape, std::vector<KvLayerFormat> layers) : shape_(shape) {
  backend::validate_kv(shape_, layers);
  const size_t elements = elements_per_array(shape_);
  size_t offset = 0;
  layers_.resize(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    Layer& l = layers_[i];
    l.format = layers[i];
    l.element_bytes = element_bytes(l.format.element);
    const size_t array_bytes = round_up(checked_mul(elements, l.element_bytes));
    const size_t v_bytes = shape_.latent ? 0 : array_bytes;  // a latent cache has no V array
    l.k_offset = offset;
    l.v_offset = l.k_offset + array_bytes;
    if (array_bytes > (std::numeric_limits<size_t>::max() - offset) / 2) {
      throw Error("kv cache: size overflows memory addressing");
    }
    offset = l.v_offset + v_bytes;
    if (is_fp8(l.format.element)) {
      const Fp8Format fmt = fp8_format(l.format.element);
      for (int c = 0; c < 256; ++c) {
        const float value = fp8_to_float(uint8_t(c), fmt);
        l.k_table[size_t(c)] = value * l.format.k_scale;
        l.v_table[size_t(c)] = value * l.format.v_scale;
      }
    }
  }
  bytes_ = offset;
  // Anonymous pages: zeros the kernel gives as positions are first written (a sanitizer's heap
  // would shadow the whole reservation at once).
  const size_t mapped = std::max<size_t>(offset, 1);
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    throw Error("kv cache: the system refused " + std::to_string(offset >> 20) +
                " MiB (out of host memory); give the KV cache less with --kv-cache-tokens / --kv-cache-memory / "
                "--max-model-len");
  storage_ = std::unique_ptr<std::byte[], Unmap>(static_cast<std::byte*>(p), Unmap{mapped});
}

void PagedKvCache::Unmap::operator()(std::byte* p) const { munmap(p, bytes); }

const KvLayerFormat& PagedKvCache::layer_format(int layer) const {
  if (layer < 0 || layer >= shape_.num_layers) {
    throw Error("kv cache: layer " + std::to_string(layer) + " out of range [0, " + std::to_string(shape_.num_layers) +
                ")");
  }
  return layers_[size_t(layer)].format;
}

void PagedKvCache::check_address(const char* what, int layer, int64_t block, int slot) const {
  if (layer < 0 || layer >= shape_.num_layers) {
    throw Error(std::string("kv cache ") + what + ": layer " + std::to_string(layer) + " out of range [0, " +
                std::to_string(shape_.num_layers) + ")");
  }
  if (block < 0 || block >= shape_.num_blocks) {
    throw Error(std::string("kv cache ") + what + ": block " + std::to_string(block) + " out of range [0, " +
                std::to_string(shape_.num_blocks) + ")");
  }
  if (slot < 0 || slot >= shape_.block_size) {
    throw Error(std::string("kv cache ") + what + ": slot " + std::to_string(slot) + " out of range [0, " +
                std::to_string(shape_.block_size) + ")");
  }
}

void PagedKvCache::check_run(const char* what, int layer, int64_t block, int kv_head, int first_slot,
                             int count) const {
  check_address(what, layer, block, first_slot);
  if (kv_head < 0 || kv_head >= shape_.num_kv_heads) {
    throw Error(std::string("kv cache ") + what + ": kv head " + std::to_string(kv_head) + " out of range [0, " +
                std::to_string(shape_.num_kv_heads) + ")");
  }
  if (count < 0 || count > shape_.block_size - first_slot) {
    throw Error(std::string("kv cache ") + what + ": " + std::to_string(count) + " slots from slot " +
                std::to_string(first_slot) + " overrun the block of " + std::to_string(shape_.block_size));
  }
}

void PagedKvCache::store(int layer, int64_t block, int slot, const float* k, const float* v) {
  check_address("store", layer, block, slot);
  if (k == nullptr || (v == nullptr) != shape_.latent)
    throw Error(shape_.latent ? "kv cache store: a latent cache stores one entry (k) and no v"
                              : "kv cache store: null k or v");
  const Layer& l = layers_[size_t(layer)];
  const int64_t hd = shape_.head_dim;
  for (int h = 0; h < shape_.num_kv_heads; ++h) {
    const size_t index = size_t(((block * shape_.num_kv_heads + h) * shape_.block_size + slot) * hd);
    const size_t at = index * l.element_bytes;
    encode(k + h * hd, hd, l.format, l.format.k_scale, storage_.get() + l.k_offset + at);
    if (!shape_.latent) encode(v + h * hd, hd, l.format, l.format.v_scale, storage_.get() + l.v_offset + at);
  }
}

void PagedKvCache::dequantize(const Layer& l, size_t base, const std::array<float, 256>& table, int64_t block,
                              int kv_head, int first_slot, int count, float* out) const {
  const int64_t hd = shape_.head_dim;
  const size_t n = size_t(count) * size_t(hd);
  const size_t index = size_t(((block * shape_.num_kv_heads + kv_head) * shape_.block_size + first_slot) * hd);
  const std::byte* src = storage_.get() + base + index * l.element_bytes;
  switch (l.format.element) {
    case KvElement::kF32:
      std::memcpy(out, src, n * sizeof(float));
      return;
    case KvElement::kBF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, src + 2 * i, 2);
        out[i] = bf16_to_float(b);
      }
      return;
    case KvElement::kE4M3:
    case KvElement::kE5M2: {
      const auto* codes = reinterpret_cast<const uint8_t*>(src);
      for (size_t i = 0; i < n; ++i) out[i] = table[codes[i]];
      return;
    }
    default:  // validate_kv refused every other type when the cache was made
      throw Error(std::string("kv cache load: element type ") + std::string(name(l.format.element)) +
                  " is not stored");
  }
}

void PagedKvCache::dequantize_k(int layer, int64_t block, int kv_head, int first_slot, int count, float* out) const {
  check_run("load k", layer, block, kv_head, first_slot, count);
  const Layer& l = layers_[size_t(layer)];
  dequantize(l, l.k_offset, l.k_table, block, kv_head, first_slot, count, out);
}

void PagedKvCache::dequantize_v(int layer, int64_t block, int kv_head, int first_slot, int count, float* out) const {
  check_run("load v", layer, block, kv_head, first_slot, count);
  if (shape_.latent) throw Error("kv cache load v: a latent cache holds no v");
  const Layer& l = layers_[size_t(layer)];
  dequantize(l, l.v_offset, l.v_table, block, kv_head, first_slot, count, out);
}

void PagedKvCache::load_k(int layer, int64_t block, int slot, int kv_head, float* out) const {
  dequantize_k(layer, block, kv_head, slot, 1, out);
}

void PagedKvCache::load_v(int layer, int64_t block, int slot, int kv_head, float* out) const {
  dequantize_v(layer, block, kv_head, slot, 1, out);
}

}  // namespace fp8lm::cpu
