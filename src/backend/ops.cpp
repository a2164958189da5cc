#include "backend/ops.h"

#include <string>

namespace fp8lm::backend {

int64_t decode_graph_rows(int64_t rows) {
  if (rows < 1) throw Error("decode_graph_rows: a decode step needs at least one row, got " + std::to_string(rows));
  if (rows <= 2) return rows;
  if (rows <= 4) return 4;
  if (rows <= 256) return (rows + 7) / 8 * 8;
  return (rows + 15) / 16 * 16;
}

std::optional<int64_t> Ops::default_kv_cache_tokens(uint64_t bytes_per_token, const KvBudget& budget) const {
  const std::optional<MemoryInfo> mem = memory_info();
  if (!mem) return std::nullopt;
  constexpr double kMargin = double(1ull << 30);
  const double used = double(mem->total_bytes - mem->free_bytes);
  const double room = budget.gpu_memory_utilization * double(mem->total_bytes) - used - kMargin;
  const auto tokens = room > 0 ? int64_t(room / double(bytes_per_token)) : 0;
  if (tokens < budget.block_size)
    throw Error("no device memory left for the KV cache: " + std::to_string(int64_t(used / 1048576.0)) + " MiB in use of " +
                std::to_string(mem->total_bytes / 1048576) + " MiB (" + std::to_string(budget.scratch_bytes / 1048576) +
                " MiB of it for the largest step) and " + std::to_string(int64_t(kMargin / 1048576.0)) +
                " MiB kept free; raise --gpu-memory-utilization or lower --max-num-batched-tokens / --max-num-seqs");
  return tokens / budget.block_size * budget.block_size;
}

void Ops::check_kv_cache_fits(int64_t tokens, uint64_t bytes_per_token, const KvBudget& budget,
                              bool given_in_bytes) const {
  const std::optional<MemoryInfo> mem = memory_info();
  if (!mem) return;
  const uint64_t need = uint64_t(tokens) * bytes_per_token;
  if (need > mem->free_bytes)
    throw Error(std::string(given_in_bytes ? "--kv-cache-memory" : "--kv-cache-tokens") +
                ": the KV cache would take " + std::to_string(need >> 20) + " MiB, but the device has " +
                std::to_string(mem->free_bytes >> 20) + " MiB free after the weights and the largest step's " +
                std::to_string(budget.scratch_bytes >> 20) + " MiB of scratch (out of memory)");
}

}  // namespace fp8lm::backend
