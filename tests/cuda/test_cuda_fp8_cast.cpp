// The CUDA casts against the CPU reference (which matches PyTorch): all 2^32
// float32 patterns and all 65,536 bfloat16 patterns, both formats, both
// saturation modes, and the decode of every code. Needs a Hopper GPU; reports
// SKIPPED elsewhere (CI has none).
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstring>
#include <thread>

#include "backend/cuda/common/check.h"
#include "backend/cuda/device_info.h"
#include "cuda/cuda_test_util.h"
#include "backend/cuda/quant/fp8_cast.h"
#include "numerics/cast.h"

namespace fp8lm {
namespace {


template <typename T>
struct DeviceBuffer {
  T* ptr = nullptr;
  explicit DeviceBuffer(size_t n) { FP8LM_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr), n * sizeof(T))); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// CPU reference for patterns [first, first + n), split over the host's cores.
void cpu_reference(uint32_t first, size_t n, Fp8Format f, Saturation s, std::vector<float>& scratch,
                   std::vector<uint8_t>& out) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t b = first + uint32_t(i);
    std::memcpy(&scratch[i], &b, 4);
  }
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  const size_t per = (n + threads - 1) / threads;
  for (unsigned t = 0; t < threads; ++t) {
    const size_t lo = std::min(n, t * per), hi = std::min(n, lo + per);
    pool.emplace_back([&, lo, hi] {
      cast_to_fp8(std::span<const float>(scratch.data() + lo, hi - lo),
                  std::span<uint8_t>(out.data() + lo, hi - lo), f, s);
    });
  }
  for (auto& t : pool) t.join();
}

TEST(CudaFp8Cast, AllFloat32PatternsMatchCpu) {
  REQUIRE_HOPPER();
  constexpr size_t kChunk = size_t(1) << 28;
  DeviceBuffer<uint8_t> d_out(kChunk);
  std::vector<uint8_t> got(kChunk), want(kChunk);
  std::vector<float> scratch(kChunk);
  for (Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2})
    for (Saturation s : {Saturation::kSatFinite, Saturation::kTorchCast}) {
      uint64_t mismatches = 0;
      for (uint64_t first = 0; first < (uint64_t(1) << 32); first += kChunk) {
        cuda::cast_f32_bit_range_to_fp8(uint32_t(first), kChunk, d_out.ptr, f, s);
        FP8LM_CUDA_CHECK(cudaMemcpy(got.data(), d_out.ptr, kChunk, cudaMemcpyDeviceToHost));
        cpu_reference(uint32_t(first), kChunk, f, s, scratch, want);
        for (size_t i = 0; i < kChunk; ++i)
          if (got[i] != want[i] && ++mismatches <= 5)
            ADD_FAILURE() << name(f) << " sat " << int(s) << " pattern 0x" << std::hex << first + i
                          << ": cuda 0x" << int(got[i]) << " cpu 0x" << int(want[i]);
      }
      EXPECT_EQ(mismatches, 0u) << name(f) << " saturation " << int(s);
    }
}

TEST(CudaFp8Cast, AllBf16PatternsMatchCpu) {
  REQUIRE_HOPPER();
  std::vector<uint16_t> in(65536);
  for (size_t i = 0; i < in.size(); ++i) in[i] = uint16_t(i);
  DeviceBuffer<uint16_t> d_in(in.size());
  DeviceBuffer<uint8_t> d_out(in.size());
  FP8LM_CUDA_CHECK(cudaMemcpy(d_in.ptr, in.data(), in.size() * 2, cudaMemcpyHostToDevice));
  for (Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2})
    for (Saturation s : {Saturation::kSatFinite, Saturation::kTorchCast}) {
      std::vector<uint8_t> got(in.size()), want(in.size());
      cuda::cast_bf16_to_fp8(d_in.ptr, in.size(), d_out.ptr, f, s);
      FP8LM_CUDA_CHECK(cudaMemcpy(got.data(), d_out.ptr, got.size(), cudaMemcpyDeviceToHost));
      cast_to_fp8(in, want, f, s);
      EXPECT_EQ(got, want) << name(f) << " saturation " << int(s);
    }
}

TEST(CudaFp8Cast, DecodeEveryCode) {
  REQUIRE_HOPPER();
  std::vector<uint8_t> codes(256);
  for (int i = 0; i < 256; ++i) codes[size_t(i)] = uint8_t(i);
  DeviceBuffer<uint8_t> d_in(256);
  DeviceBuffer<float> d_out(256);
  FP8LM_CUDA_CHECK(cudaMemcpy(d_in.ptr, codes.data(), 256, cudaMemcpyHostToDevice));
  for (Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    std::vector<float> got(256), want(256);
    cuda::cast_fp8_to_f32(d_in.ptr, 256, d_out.ptr, f);
    FP8LM_CUDA_CHECK(cudaMemcpy(got.data(), d_out.ptr, 256 * 4, cudaMemcpyDeviceToHost));
    cast_from_fp8(codes, want, f);
    for (size_t i = 0; i < 256; ++i) {
      if (std::isnan(want[i])) {
        EXPECT_TRUE(std::isnan(got[i])) << name(f) << " code " << i;
      } else {
        EXPECT_EQ(got[i], want[i]) << name(f) << " code " << i;
        EXPECT_EQ(std::signbit(got[i]), std::signbit(want[i])) << name(f) << " code " << i;
      }
    }
  }
}

TEST(CudaErrors, FailuresNameTheCall) {
  REQUIRE_HOPPER();
  try {
    FP8LM_CUDA_CHECK(cudaMemcpy(nullptr, reinterpret_cast<void*>(16), 1 << 20, cudaMemcpyDeviceToHost));
    FAIL() << "invalid copy succeeded";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("cudaMemcpy"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fp8lm
