// What every GPU test needs: whether this machine has a GPU this build runs on
// (sm_90a: a Hopper GPU), a skip that says why not, and device memory that frees itself.
#pragma once

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "backend/cuda/common/check.h"
#include "backend/cuda/device_info.h"

namespace fp8lm::test {

inline bool have_hopper() {
  const cuda::DeviceList list = cuda::list_devices();
  return !list.devices.empty() && list.devices[0].runs_this_build();
}

// cudaMemcpy from the host, finished before any stream uses dst. A pageable H2D cudaMemcpy
// may return while its last DMA still runs on the legacy stream, which the backend's
// non-blocking streams do not wait for: a kernel launched next on such a stream can read
// the old bytes (seen at 786 KB on the H200).
inline void upload_bytes(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  FP8LM_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  FP8LM_CUDA_CHECK(cudaDeviceSynchronize());
}

// n elements of device memory (cudaMalloc: 256-byte aligned), freed when it goes out of scope.
template <typename T>
struct DeviceVector {
  T* ptr = nullptr;
  size_t n = 0;
  explicit DeviceVector(size_t count) : n(count) {
    FP8LM_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr), std::max<size_t>(count, 1) * sizeof(T)));
  }
  explicit DeviceVector(const std::vector<T>& v) : DeviceVector(v.size()) { upload(v); }
  ~DeviceVector() { cudaFree(ptr); }
  DeviceVector(const DeviceVector&) = delete;
  DeviceVector& operator=(const DeviceVector&) = delete;
  // The first v.size() (≤ n) elements.
  void upload(const std::vector<T>& v) {
    upload_bytes(ptr, v.data(), v.size() * sizeof(T));
  }
  std::vector<T> download() const {
    std::vector<T> out(n);
    if (n > 0) FP8LM_CUDA_CHECK(cudaMemcpy(out.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost));
    return out;
  }
  void fill_bytes(uint8_t byte) { FP8LM_CUDA_CHECK(cudaMemset(ptr, byte, std::max<size_t>(n, 1) * sizeof(T))); }
};

// n positive weight / activation scales in [0.001, 0.02): the magnitudes E4M3 codes' scales have.
template <class Rng>
std::vector<float> random_scales(size_t n, Rng& rng) {
  std::uniform_real_distribution<float> u(0.001f, 0.02f);
  std::vector<float> s(n);
  for (float& v : s) v = u(rng);
  return s;
}

// The accumulation error of a Hopper FP8 tensor-core GEMM before its output rounding, as a share
// of S = Σ|scaled products| (test_cuda_gemm.cpp's header derives it): each wgmma step of 32
// products is added into an accumulator of about 13 fraction bits (≤ 2^-12·S a step), then
// promoted to float32 with a few float32 roundings (block promotion, scale products, bias,
// split-K). The GEMM tests' bound is |gpu − ref| ≤ 2^-8·(|ref| + E) + E with E = this · S.
inline double fp8_gemm_error_coeff(int64_t k) {
  const int64_t steps = (k + 31) / 32, blocks = (k + 127) / 128;
  return double(steps) * 0x1p-12 + double(blocks + 4) * 0x1p-23;
}

}  // namespace fp8lm::test

// Skips the current test (reporting SKIPPED with the reason) without a Hopper GPU.
#define REQUIRE_HOPPER()           \
  if (!::fp8lm::test::have_hopper()) \
  GTEST_SKIP() << "no Hopper GPU: " << ::fp8lm::cuda::list_devices().unavailable_reason
