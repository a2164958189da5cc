#include "backend/cuda/comm/nccl_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <memory>
#include <mutex>

#include "common/error.h"

namespace fp8lm::cuda {
namespace {

template <typename F>
void resolve(void* handle, const char* name, F& out, const std::string& path) {
  out = reinterpret_cast<F>(dlsym(handle, name));
  if (out == nullptr) throw Error("NCCL: " + path + " has no " + name);
}

NcclLibrary open_library() {
  NcclLibrary lib;
  const char* named = std::getenv("FP8LM_NCCL_LIBRARY");
  lib.path = named != nullptr && *named != '\0' ? named : "libnccl.so.2";
  // Never closed: NCCL's own threads live as long as the process.
  void* handle = dlopen(lib.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    throw Error("NCCL: cannot open " + lib.path + " (" + (why != nullptr ? why : "unknown error") +
                "): tensor parallelism on GPUs needs NCCL's library — PyPI's nvidia-nccl-cu13 ships it as "
                "nvidia/nccl/lib/libnccl.so.2; name it in FP8LM_NCCL_LIBRARY or put its folder on LD_LIBRARY_PATH");
  }
  resolve(handle, "ncclGetVersion", lib.get_version, lib.path);
  resolve(handle, "ncclGetUniqueId", lib.get_unique_id, lib.path);
  resolve(handle, "ncclCommInitRank", lib.comm_init_rank, lib.path);
  resolve(handle, "ncclCommDestroy", lib.comm_destroy, lib.path);
  resolve(handle, "ncclCommAbort", lib.comm_abort, lib.path);
  resolve(handle, "ncclAllReduce", lib.all_reduce, lib.path);
  resolve(handle, "ncclAllGather", lib.all_gather, lib.path);
  resolve(handle, "ncclGetErrorString", lib.error_string, lib.path);
  if (lib.get_version(&lib.version) != ncclSuccess) throw Error("NCCL: " + lib.path + ": ncclGetVersion failed");
  return lib;
}

}  // namespace

const NcclLibrary& NcclLibrary::get() {
  static std::mutex mutex;
  static std::unique_ptr<NcclLibrary> lib;
  const std::lock_guard lock(mutex);
  if (lib == nullptr) lib = std::make_unique<NcclLibrary>(open_library());  // a failure is retried next time
  return *lib;
}

void nccl_check(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return;
  const NcclLibrary& lib = NcclLibrary::get();
  throw Error(std::string("NCCL: ") + what + ": " + lib.error_string(r));
}

}  // namespace fp8lm::cuda
