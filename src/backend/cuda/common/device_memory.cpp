#include "backend/cuda/common/device_memory.h"

#include <algorithm>
#include <bit>
#include <string>

#include "backend/cuda/common/check.h"
#include "common/error.h"

namespace fp8lm::cuda {

size_t DeviceAllocator::size_class(size_t bytes) {
  constexpr size_t kSmall = 512;
  if (bytes <= 4096) return (bytes + kSmall - 1) / kSmall * kSmall;
  // Large blocks are weights and the KV cache, allocated once and never
  // recycled: a 25 % class would waste gigabytes (a 115 GB KV cache → 120 GB),
  // so they are rounded to 2 MiB (the driver's page) only.
  constexpr size_t kLarge = size_t(256) << 20, kPage = size_t(2) << 20;
  if (bytes > kLarge) return (bytes + kPage - 1) / kPage * kPage;
  // Four classes per power of two: round up to a quarter of the power of two
  // just below the request.
  const size_t k = size_t(std::bit_width(bytes - 1)) - 1;  // 2^k < bytes <= 2^(k+1)
  const size_t step = size_t(1) << (k - 2);                // 2^k / 4
  return (bytes + step - 1) / step * step;
}

void* DeviceAllocator::allocate(size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return nullptr;
  const size_t size = size_class(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.allocations;
  void* ptr = nullptr;
  auto it = free_.find({stream, size});
  if (it != free_.end() && !it->second.empty()) {
    ptr = it->second.back();
    it->second.pop_back();
    ++stats_.cache_hits;
  } else {
    cudaError_t status = cudaMalloc(&ptr, size);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // clear it, then give the cache back and try once more
      release_cached_locked();
      status = cudaMalloc(&ptr, size);
    }
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      const std::string what = "DeviceAllocator: cudaMalloc of " + std::to_string(size) + " bytes (request " +
                               std::to_string(bytes) + ") failed: " + cudaGetErrorName(status) + " (" +
                               cudaGetErrorString(status) + "); " + std::to_string(stats_.bytes_in_use) +
                               " bytes in use, " + std::to_string(stats_.bytes_reserved) + " reserved";
      if (status == cudaErrorMemoryAllocation) throw OutOfMemoryError(what);
      throw Error(what);
    }
    ++stats_.device_mallocs;
    stats_.bytes_reserved += size;
    stats_.peak_bytes_reserved = std::max(stats_.peak_bytes_reserved, stats_.bytes_reserved);
  }
  live_.emplace(ptr, Block{size, stream});
  stats_.bytes_in_use += size;
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  return ptr;
}

void DeviceAllocator::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(ptr);
  if (it == live_.end()) throw Error("DeviceAllocator: deallocate() of a pointer it did not allocate");
  const Block b = it->second;
  live_.erase(it);
  stats_.bytes_in_use -= b.size;
  free_[{b.stream, b.size}].push_back(ptr);
}

void DeviceAllocator::release_cached_locked() {
  bool any = false;
  for (auto& [key, ptrs] : free_) any = any || !ptrs.empty();
  if (!any) return;
  // A cached block's last kernels may still be in flight on its stream.
  (void)cudaDeviceSynchronize();
  for (auto& [key, ptrs] : free_) {
    for (void* p : ptrs) {
      (void)cudaFree(p);
      ++stats_.device_frees;
      stats_.bytes_reserved -= key.second;
    }
  }
  free_.clear();
}

void DeviceAllocator::release_cached() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_locked();
}

DeviceMemoryStats DeviceAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

DeviceAllocator::~DeviceAllocator() {
  // Errors are ignored here: at process exit the CUDA runtime may be gone.
  (void)cudaDeviceSynchronize();
  for (auto& [key, ptrs] : free_)
    for (void* p : ptrs) (void)cudaFree(p);
  for (auto& [p, b] : live_) (void)cudaFree(p);
}

DeviceAllocator& DeviceAllocator::global() {
  static DeviceAllocator* instance = new DeviceAllocator();  // deliberately never destroyed
  return *instance;
}

}  // namespace fp8lm::cuda
