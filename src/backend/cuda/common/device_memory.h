// Device memory for the CUDA backend: a caching allocator, so that the hot path
// (every layer of every forward pass) never calls cudaMalloc / cudaFree.
//
// Requests are rounded up to a size class (512 B granules below 4 KiB, then four
// classes per power of two: 2^k, 1.25·2^k, 1.5·2^k, 1.75·2^k, so at most 25 %
// of a block is padding; above 256 MiB — weights, the KV cache — 2 MiB pages). A freed block goes onto the free list of its
// (stream, class) and the next request of that class on that stream takes it
// back without touching the driver. Reuse is stream-ordered: a block freed while
// kernels on its stream may still read it is only handed out again on the same
// stream, behind that work (the rule PyTorch's caching allocator follows too).
// Blocks allocated for one stream and used on another need a synchronization by
// the caller before they are freed.
//
// cudaMalloc happens only on a miss; when it fails for lack of memory, every
// cached block is released and the allocation tried once more. Everything
// (cached and still handed out) is returned to the driver when the allocator
// is destroyed, so DeviceBuffers must not outlive their allocator.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

namespace fp8lm::cuda {

struct DeviceMemoryStats {
  size_t bytes_in_use = 0;     // size classes of the blocks handed out now
  size_t bytes_reserved = 0;   // in use + cached (what the driver has given us)
  size_t peak_bytes_in_use = 0;
  size_t peak_bytes_reserved = 0;
  uint64_t allocations = 0;    // allocate() calls
  uint64_t cache_hits = 0;     // ... served from a free list
  uint64_t device_mallocs = 0; // ... that needed cudaMalloc
  uint64_t device_frees = 0;   // cudaFree calls (release_cached, OOM retry, destruction)
};

class DeviceAllocator {
 public:
  // Allocates on the device that is current when each cudaMalloc happens.
  DeviceAllocator() = default;
  ~DeviceAllocator();
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  // At least `bytes` bytes, 256-byte aligned, for use on `stream`. bytes == 0
  // gives nullptr. Throws fp8lm::Error (naming the size and the CUDA error)
  // when the device has no memory left even after the cache is released.
  void* allocate(size_t bytes, cudaStream_t stream = nullptr);
  // Returns a block from allocate() to its free list (no cudaFree). nullptr is ignored;
  // a pointer this allocator did not hand out throws fp8lm::Error.
  void deallocate(void* ptr);
  // cudaFree every cached (free) block. Synchronizes the device first, since a
  // cached block's last kernels may still be running.
  void release_cached();

  DeviceMemoryStats stats() const;
  // The size class a request of `bytes` is rounded to.
  static size_t size_class(size_t bytes);

  // A process-wide allocator (never destroyed: CUDA may already be shut down
  // when static destructors run, so its memory goes back with the process).
  static DeviceAllocator& global();

 private:
  struct Block {
    size_t size = 0;
    cudaStream_t stream = nullptr;
  };
  void release_cached_locked();

  mutable std::mutex mutex_;
  std::unordered_map<void*, Block> live_;                             // handed out
  std::map<std::pair<cudaStream_t, size_t>, std::vector<void*>> free_;  // cached, by (stream, class)
  DeviceMemoryStats stats_;
};

// RAII handle to one block of an allocator. Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceAllocator& allocator, size_t bytes, cudaStream_t stream = nullptr)
      : allocator_(&allocator), ptr_(allocator.allocate(bytes, stream)), bytes_(bytes) {}
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : allocator_(std::exchange(o.allocator_, nullptr)), ptr_(std::exchange(o.ptr_, nullptr)),
        bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      allocator_ = std::exchange(o.allocator_, nullptr);
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void reset() noexcept {
    if (ptr_ != nullptr && allocator_ != nullptr) {
      try {
        allocator_->deallocate(ptr_);
      } catch (...) {  // cannot happen for a pointer the allocator gave out
      }
    }
    ptr_ = nullptr;
    bytes_ = 0;
  }

  void* get() const { return ptr_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }
  explicit operator bool() const { return ptr_ != nullptr; }

 private:
  DeviceAllocator* allocator_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace fp8lm::cuda
