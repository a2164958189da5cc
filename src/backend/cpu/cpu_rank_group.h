// Tensor-parallel ranks on the CPU: each rank a CpuOps of its own threads, the ranks threads of
// this process that meet in a cpu::ThreadGroup for their collectives.
#pragma once

#include <memory>

#include "backend/rank_group.h"
#include "numerics/kernel_choice.h"

namespace fp8lm::cpu {

// `threads` worker threads for each rank's CpuOps.
std::unique_ptr<backend::RankGroup> make_thread_rank_group(int size, int threads, KernelChoice kernels,
                                                           bool pad_decode_batches);

}  // namespace fp8lm::cpu
