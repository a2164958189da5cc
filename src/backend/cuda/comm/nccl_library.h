// NCCL, opened when a tensor-parallel group on GPUs first needs it (dlopen), so that fp8lm runs on
// one GPU where NCCL is not installed. The library PyPI's nvidia-nccl-cu13 ships (libnccl.so.2)
// is looked for as FP8LM_NCCL_LIBRARY names it, else by the dynamic loader's search
// (LD_LIBRARY_PATH). The header comes from the same pinned wheel (scripts/build.sh).
#pragma once

#include <nccl.h>

#include <string>

namespace fp8lm::cuda {

struct NcclLibrary {
  decltype(&ncclGetVersion) get_version = nullptr;
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclCommAbort) comm_abort = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclAllGather) all_gather = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
  std::string path;  // what was opened
  int version = 0;   // NCCL_VERSION_CODE of the library opened

  // Opened once; throws fp8lm::Error saying where it looked, or which symbol it lacks.
  static const NcclLibrary& get();
};

// Throws fp8lm::Error "NCCL: <what>: <NCCL's message>" unless r is ncclSuccess.
void nccl_check(ncclResult_t r, const char* what);

}  // namespace fp8lm::cuda
