// The one place that knows which backends this fp8lm was built with: a
// front-end names a device, the factory makes its Ops. Nothing above this
// folder includes backend/cpu or backend/cuda.
#pragma once

#include <cstdint>
#include <memory>

#include "backend/ops.h"
#include "backend/rank_group.h"
#include "numerics/quantize.h"

namespace fp8lm::backend {

enum class Device : uint8_t { kCpu, kCuda };

struct BackendOptions {
  Device device = Device::kCpu;
  int threads = 1;                             // CPU: worker threads
  KernelChoice kernels = KernelChoice::kAuto;  // CPU: SIMD kernels (kAuto: the widest this CPU runs)
  int cuda_device = 0;                         // CUDA: device ordinal
  bool cuda_graphs = true;                     // CUDA: record decode steps as graphs
  DecodeKernel decode_kernel = DecodeKernel::kAuto;  // CUDA: layered or persistent decode (--decode-kernel)
  // CPU: pad decode steps to the graph ladder as CUDA does (Ops::pads_decode_batches): tests only.
  bool cpu_pad_decode_batches = false;
};

// Throws fp8lm::Error for --device cuda in a build without the CUDA backend.
std::unique_ptr<Ops> make_ops(const BackendOptions& options);

// The ranks of a tensor-parallel group (backend/rank_group.h): on the CPU, threads of this process
// (cpu::ThreadGroup); on CUDA, one GPU a rank, rank r on device r, with NCCL's collectives.
// Throws fp8lm::Error for a size below 2, or one the device cannot hold (more ranks than GPUs),
// or CUDA without NCCL (named with where fp8lm looked for it).
std::unique_ptr<RankGroup> make_rank_group(const BackendOptions& options, int size);

}  // namespace fp8lm::backend
