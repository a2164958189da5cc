// CpuOps' KV-cache budget (backend/ops.h): host memory, as backend/cpu/host_memory reads it.
// Every rank of a tensor-parallel group holds its cache in the same host memory.
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/host_memory.h"

namespace fp8lm::cpu {

std::optional<int64_t> CpuOps::default_kv_cache_tokens(uint64_t bytes_per_token,
                                                       const backend::KvBudget& budget) const {
  return host_kv_cache_tokens(bytes_per_token, budget, group_ != nullptr ? group_->size() : 1, read_host_memory());
}

void CpuOps::check_kv_cache_fits(int64_t tokens, uint64_t bytes_per_token, const backend::KvBudget& budget,
                                 bool given_in_bytes) const {
  (void)budget;
  check_host_kv_cache_fits(tokens, bytes_per_token, group_ != nullptr ? group_->size() : 1, given_in_bytes,
                           read_host_memory());
}

}  // namespace fp8lm::cpu
