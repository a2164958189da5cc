#include "backend/cpu/host_memory.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include "common/error.h"

namespace fp8lm::cpu {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The number at the start of `text` (after blanks); nullopt when there is none.
std::optional<uint64_t> leading_number(std::string_view text) {
  const size_t from = text.find_first_not_of(" \t");
  if (from == std::string_view::npos || text[from] < '0' || text[from] > '9') return std::nullopt;
  uint64_t v = 0;
  for (size_t i = from; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    const auto digit = uint64_t(text[i] - '0');
    if (v > (std::numeric_limits<uint64_t>::max() - digit) / 10) return std::numeric_limits<uint64_t>::max();
    v = v * 10 + digit;
  }
  return v;
}

// The rest of the line of `text` that starts with `key` followed by `sep`.
std::optional<std::string_view> line_value(std::string_view text, std::string_view key, char sep) {
  while (!text.empty()) {
    const size_t end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    if (line.size() > key.size() && line.starts_with(key) && line[key.size()] == sep) return line.substr(key.size() + 1);
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return std::nullopt;
}

uint64_t saturating_mul(uint64_t a, uint64_t b) {
  return b != 0 && a > std::numeric_limits<uint64_t>::max() / b ? std::numeric_limits<uint64_t>::max() : a * b;
}

// The cgroup files of this process: the folder /proc/self/cgroup names under the hierarchy's
// mount, else the mount itself (a container sees its own cgroup there).
std::string cgroup_file(const std::string& mount, const std::string& own, const std::string& name) {
  if (!own.empty() && own != "/") {
    const std::string path = mount + own + "/" + name;
    if (std::ifstream(path)) return path;
  }
  return mount + "/" + name;
}

// What a cgroup's limit leaves: limit − (usage − inactive file pages, which the kernel reclaims
// before it fails an allocation). nullopt when there is no limit (or no cgroup file).
struct CgroupRoom {
  uint64_t limit = 0;
  uint64_t left = 0;
  std::string source;
};
std::optional<CgroupRoom> cgroup_room() {
  std::string v1_path, v2_path;  // this process's cgroup in each hierarchy, from /proc/self/cgroup
  std::istringstream lines(read_text("/proc/self/cgroup"));
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with("0::")) v2_path = line.substr(3);
    const size_t at = line.find(":memory:");
    if (at != std::string::npos) v1_path = line.substr(at + 8);
  }
  struct Hierarchy {
    std::string mount, own, limit, usage, inactive, source;
  };
  const Hierarchy hierarchies[] = {
      {"/sys/fs/cgroup", v2_path, "memory.max", "memory.current", "inactive_file", "the cgroup's memory.max"},
      {"/sys/fs/cgroup/memory", v1_path, "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file",
       "the cgroup's memory.limit_in_bytes"}};
  for (const Hierarchy& h : hierarchies) {
    const std::optional<uint64_t> limit = leading_number(read_text(cgroup_file(h.mount, h.own, h.limit)));
    const std::optional<uint64_t> usage = leading_number(read_text(cgroup_file(h.mount, h.own, h.usage)));
    if (!limit || !usage || *limit >= (uint64_t(1) << 60)) continue;  // "max", or v1's "unlimited" (2^63 - a page)
    const uint64_t inactive = stat_field(read_text(cgroup_file(h.mount, h.own, "memory.stat")), h.inactive).value_or(0);
    const uint64_t held = *usage - std::min(*usage, inactive);
    return CgroupRoom{*limit, *limit - std::min(*limit, held), h.source};
  }
  return std::nullopt;
}

std::string mib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.0f", bytes / 1048576.0);
  return text;
}

}  // namespace

std::optional<uint64_t> kib_field(std::string_view text, std::string_view key) {
  const std::optional<std::string_view> value = line_value(text, key, ':');
  if (!value) return std::nullopt;
  const std::optional<uint64_t> n = leading_number(*value);
  if (!n) return std::nullopt;
  return value->find("kB") != std::string_view::npos ? saturating_mul(*n, 1024) : *n;
}

std::optional<uint64_t> stat_field(std::string_view text, std::string_view key) {
  const std::optional<std::string_view> value = line_value(text, key, ' ');
  return value ? leading_number(*value) : std::nullopt;
}

HostMemory read_host_memory() {
  HostMemory m;
  const std::string meminfo = read_text("/proc/meminfo");
  const std::optional<uint64_t> available = kib_field(meminfo, "MemAvailable");
  const std::optional<uint64_t> total = kib_field(meminfo, "MemTotal");
  if (available && total) {
    m = {*available, *total, "MemAvailable in /proc/meminfo"};
  } else {
    const long page = sysconf(_SC_PAGESIZE);
    const long free_pages = sysconf(_SC_AVPHYS_PAGES);
    const long pages = sysconf(_SC_PHYS_PAGES);
    m = {saturating_mul(uint64_t(std::max(0L, free_pages)), uint64_t(std::max(0L, page))),
         saturating_mul(uint64_t(std::max(0L, pages)), uint64_t(std::max(0L, page))), "free memory (sysconf)"};
  }
  // Strict overcommit (vm.overcommit_memory = 2) refuses what the commit limit does not cover,
  // touched or not.
  if (read_text("/proc/sys/vm/overcommit_memory").starts_with("2")) {
    const std::optional<uint64_t> limit = kib_field(meminfo, "CommitLimit");
    const std::optional<uint64_t> committed = kib_field(meminfo, "Committed_AS");
    if (limit && committed) {
      const uint64_t left = *limit - std::min(*limit, *committed);
      if (left < m.available_bytes) m = {left, m.total_bytes, "CommitLimit - Committed_AS in /proc/meminfo"};
    }
  }
  if (const std::optional<CgroupRoom> cg = cgroup_room()) {
    m.total_bytes = std::min(m.total_bytes, cg->limit);
    if (cg->left < m.available_bytes) m = {cg->left, m.total_bytes, cg->source};
  }
  // An address-space or data limit (ulimit -v, ulimit -d) refuses the allocation itself.
  const std::string status = read_text("/proc/self/status");
  const struct {
    int resource;
    const char* used;
    const char* source;
  } limits[] = {{RLIMIT_AS, "VmSize", "ulimit -v (RLIMIT_AS)"}, {RLIMIT_DATA, "VmData", "ulimit -d (RLIMIT_DATA)"}};
  for (const auto& l : limits) {
    rlimit r{};
    if (getrlimit(l.resource, &r) != 0 || r.rlim_cur == RLIM_INFINITY) continue;
    const uint64_t used = kib_field(status, l.used).value_or(0);
    const uint64_t left = uint64_t(r.rlim_cur) - std::min<uint64_t>(uint64_t(r.rlim_cur), used);
    if (left < m.available_bytes) m = {left, m.total_bytes, l.source};
  }
  return m;
}

int64_t host_kv_cache_tokens(uint64_t bytes_per_token, const backend::KvBudget& budget, int ranks,
                             const HostMemory& mem) {
  if (bytes_per_token == 0 || budget.block_size <= 0 || ranks < 1)
    throw Error("host KV budget: bytes per token, block size and ranks must be positive");
  const double room = kHostKvShare * double(mem.available_bytes);
  const double fit = room / (double(bytes_per_token) * double(ranks));
  int64_t tokens = fit >= 9.0e18 ? std::numeric_limits<int64_t>::max() : int64_t(fit);
  if (budget.useful_tokens > 0) tokens = std::min(tokens, budget.useful_tokens);
  tokens = tokens / budget.block_size * budget.block_size;
  if (tokens < budget.block_size)
    throw Error("no host memory left for the KV cache: a cache given no size takes at most half of the " +
                mib(double(mem.available_bytes)) + " MiB available (" + mem.source + "), and one block of " +
                std::to_string(budget.block_size) + " tokens needs " +
                std::to_string(saturating_mul(bytes_per_token, uint64_t(budget.block_size))) + " bytes" +
                (ranks > 1 ? " on each of " + std::to_string(ranks) + " ranks" : std::string()) +
                "; free memory, or give the cache's size with --kv-cache-tokens / --kv-cache-memory");
  return tokens;
}

void check_host_kv_cache_fits(int64_t tokens, uint64_t bytes_per_token, int ranks, bool given_in_bytes,
                              const HostMemory& mem) {
  const double need = double(tokens) * double(bytes_per_token) * double(std::max(1, ranks));
  if (need <= double(mem.available_bytes)) return;
  throw Error(std::string(given_in_bytes ? "--kv-cache-memory" : "--kv-cache-tokens") + ": the KV cache would take " +
              mib(need) + " MiB" + (ranks > 1 ? " on " + std::to_string(ranks) + " ranks" : std::string()) +
              ", but the host has " + mib(double(mem.available_bytes)) + " MiB available (" + mem.source +
              ") (out of memory)");
}

}  // namespace fp8lm::cpu
