// Every one of the 2^32 float32 bit patterns, both formats, both saturation
// modes: each vectorized table against the scalar reference (which itself
// matches PyTorch on the committed fixtures). Split over two threads.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "fixtures.h"
#include "numerics/cpu/kernels.h"

namespace fp8lm {
namespace {

TEST(ExhaustiveCasts, VectorKernelsEqualScalarOnAllFloat32) {
  std::vector<const cpu::KernelTable*> tables;
  if (auto* t = cpu::avx2_kernels()) tables.push_back(t);
  if (auto* t = cpu::avx512_kernels()) tables.push_back(t);
  if (tables.empty()) GTEST_SKIP() << "no vector kernels on this CPU";

  constexpr uint64_t kChunk = 1u << 20;
  constexpr uint64_t kChunks = (uint64_t(1) << 32) / kChunk;
  std::atomic<uint64_t> next{0};
  std::atomic<uint64_t> mismatches{0};
  auto worker = [&] {
    std::vector<float> in(kChunk);
    std::vector<uint8_t> want(kChunk), got(kChunk);
    for (uint64_t c; (c = next.fetch_add(1)) < kChunks;) {
      for (uint64_t i = 0; i < kChunk; ++i) {
        const auto b = uint32_t(c * kChunk + i);
        std::memcpy(&in[i], &b, 4);
      }
      for (Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2})
        for (Saturation s : {Saturation::kSatFinite, Saturation::kTorchCast}) {
          const cpu::QuantizeArgs args{f, s, HighPrecision::kF32, false};
          cpu::scalar_kernels().quantize(in.data(), HighPrecision::kF32, kChunk, 1.0f, args, want.data());
          for (const cpu::KernelTable* t : tables) {
            t->quantize(in.data(), HighPrecision::kF32, kChunk, 1.0f, args, got.data());
            if (got != want) mismatches.fetch_add(1);
          }
        }
    }
  };
  std::thread a(worker), b(worker);
  a.join();
  b.join();
  EXPECT_EQ(mismatches.load(), 0u) << "chunks of 2^20 patterns with a differing byte";
}

}  // namespace
}  // namespace fp8lm
