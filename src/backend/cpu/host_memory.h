// The CPU backend's KV-cache budget: host memory as this process may still take
// it, and the cache sizes that follow from it (CpuOps::default_kv_cache_tokens /
// check_kv_cache_fits, backend/ops.h). A GPU's cache takes what
// --gpu-memory-utilization leaves of a memory that is the engine's alone; host
// memory is shared with the system and every other process, so a default cache
// takes at most a share of what is available, and no more than the sequences
// can use (KvBudget::useful_tokens).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "backend/ops.h"

namespace fp8lm::cpu {

struct HostMemory {
  uint64_t available_bytes = 0;  // what this process may still take
  uint64_t total_bytes = 0;
  std::string source;  // what bounds available_bytes, for messages: "MemAvailable in /proc/meminfo", …
};

// The share of available host memory a cache sized by default may take.
inline constexpr double kHostKvShare = 0.5;

// /proc/meminfo's MemAvailable and MemTotal (sysconf's pages where there is no
// /proc), lowered to what the process's limits leave: the commit limit under
// strict overcommit (vm.overcommit_memory = 2), a cgroup's memory limit
// (v2 memory.max, v1 memory.limit_in_bytes) less what the cgroup holds beyond
// its inactive file pages, and RLIMIT_AS / RLIMIT_DATA less VmSize / VmData.
HostMemory read_host_memory();

// The parsing read_host_memory does, on given texts (for the tests).
// A "Key:   123 kB" field of /proc/meminfo or /proc/self/status, in bytes.
std::optional<uint64_t> kib_field(std::string_view text, std::string_view key);
// A "key 123" line of a cgroup's memory.stat.
std::optional<uint64_t> stat_field(std::string_view text, std::string_view key);

// KV-cache tokens a cache given no size holds on host memory: kHostKvShare of
// mem.available_bytes, shared by `ranks` ranks (tensor parallelism: every rank
// a cache of bytes_per_token a token in the same memory), at most
// budget.useful_tokens (0: no bound), a multiple of budget.block_size. Throws
// fp8lm::Error naming the flags when not one block fits.
int64_t host_kv_cache_tokens(uint64_t bytes_per_token, const backend::KvBudget& budget, int ranks,
                             const HostMemory& mem);

// Throws fp8lm::Error naming the flag (--kv-cache-memory when given_in_bytes,
// else --kv-cache-tokens) when `ranks` caches of `tokens` are beyond
// mem.available_bytes: a cache given a size may take all of it, never more.
void check_host_kv_cache_fits(int64_t tokens, uint64_t bytes_per_token, int ranks, bool given_in_bytes,
                              const HostMemory& mem);

}  // namespace fp8lm::cpu
