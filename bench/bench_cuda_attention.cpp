// Decode attention alone on the GPU (issue 19): one decode step of B sequences over a paged KV
// cache of C cached positions each, Llama-3.1-8B's attention shape by default (32 query heads,
// 8 KV heads, head_dim 128, blocks of 16 positions), for a BF16 and an FP8 (E4M3) cache, timed
// against the bandwidth roofline of the K/V bytes it must read.
//
//   bench_cuda_attention [--batch 1,8,32,64,256] [--context 1024] [--kv bf16,e4m3]
//                        [--heads 32] [--kv-heads 8] [--head-dim 128] [--iters 50] [--json PATH]
//
// The kernel is the one fp8lm's engine runs for that step (paged_attention's choice: the
// tensor-core decode kernel, split over the context at small batches, or with
// FP8LM_CUDA_DECODE_SPLIT=0 the split SIMT kernel below 2 × the SMs (sequence, KV head) pairs),
// under the CUDA backend's environment switches (FP8LM_CUDA_DECODE_SPLIT, FP8LM_CUDA_DECODE_CTAS,
// FP8LM_CUDA_FUSED_MERGE, FP8LM_CUDA_KV_PREFETCH), which the output names: run the program once
// per setting to compare forms. Blocks are scattered over the cache (a random permutation), as a
// long-running server's are. The cache is replicated into as many layer copies as it takes for
// them to exceed 256 MB, and successive calls rotate over them, so the K/V come from HBM as in a
// forward pass (the 50 MB L2 never holds the next call's). Each sample times one call between
// two events; the median of --iters samples after 5 warm-up calls is reported.
//
// Roofline: K + V bytes of every attended position (B × (C + 1) × KV heads × head_dim × element
// bytes × 2) at 4.29 TB/s (../shared/docs/gpu.md, the measured device-to-device copy rate).
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cuda/check.h"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/paged_attention.h"

namespace {

using fp8lm::backend::AttentionParams;
using fp8lm::backend::KvElement;

constexpr double kCopyTBps = 4.29;
constexpr int kBlockSize = 16;
constexpr size_t kRotateBytes = size_t(256) << 20;

using fp8lm::cuda::DeviceAllocator;
using fp8lm::cuda::DeviceBuffer;

std::vector<std::string> parse_words(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t comma = std::min(s.find(',', at), s.size());
    out.push_back(s.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

std::vector<int> parse_ints(const std::string& s) {
  std::vector<int> out;
  for (const std::string& w : parse_words(s)) out.push_back(std::atoi(w.c_str()));
  return out;
}

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

// Random bytes for a cache: BF16 values in about [-2, 2] (sign, exponent 126..128, any
// mantissa), or E4M3 codes with |x| ≤ 448 and no NaN (0x7F / 0xFF).
void fill_cache(std::vector<uint8_t>& bytes, KvElement e, std::mt19937_64& rng) {
  if (e == KvElement::kBF16) {
    for (size_t i = 0; i + 1 < bytes.size(); i += 2) {
      const uint64_t r = rng();
      const uint16_t v = uint16_t(((r & 1) << 15) | ((126 + (r >> 1) % 3) << 7) | ((r >> 8) & 0x7F));
      std::memcpy(&bytes[i], &v, 2);
    }
  } else {
    for (uint8_t& b : bytes) {
      b = uint8_t(rng());
      if ((b & 0x7F) == 0x7F) b &= 0xFE;
    }
  }
}

struct Result {
  int batch = 0;
  std::string kv;
  std::string kernel;
  double median_us = 0, min_us = 0, max_us = 0, kv_bytes = 0, gbs = 0, roofline_pct = 0;
};

Result run(int batch, int context, KvElement element, const std::string& kv_name, const AttentionParams& p,
           int iters) {
  const int ctx = context + 1;  // the cached positions and the new token's own
  const int blocks_per_seq = (ctx + kBlockSize - 1) / kBlockSize;
  const int64_t num_blocks = int64_t(batch) * blocks_per_seq;
  const size_t elem = element == KvElement::kBF16 ? 2 : 1;
  const size_t layer_bytes = size_t(num_blocks) * size_t(p.num_kv_heads) * kBlockSize * size_t(p.head_dim) * elem;
  const int copies = int(std::max<size_t>(2, (kRotateBytes + 2 * layer_bytes - 1) / (2 * layer_bytes)));

  std::mt19937_64 rng(0x6174746eULL + uint64_t(batch));
  // Every buffer of this run, given back to the driver at its end (not cached for the next).
  DeviceAllocator& alloc = DeviceAllocator::global();
  struct Release {
    DeviceAllocator& a;
    ~Release() { a.release_cached(); }
  } release{alloc};
  std::vector<uint8_t> host(layer_bytes);
  std::vector<DeviceBuffer> ks, vs;
  for (int c = 0; c < copies; ++c) {
    for (auto* list : {&ks, &vs}) {
      fill_cache(host, element, rng);
      list->emplace_back(alloc, layer_bytes);
      FP8LM_CUDA_CHECK(cudaMemcpy(list->back().get(), host.data(), layer_bytes, cudaMemcpyHostToDevice));
    }
  }

  // One decode row per sequence at position `context`; blocks scattered over the cache.
  std::vector<int32_t> perm(static_cast<size_t>(num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  const auto n = static_cast<size_t>(batch);
  std::vector<int32_t> row_seq(n), row_pos(n, context), first(n), ntok(n, 1), start(n, context);
  std::iota(row_seq.begin(), row_seq.end(), 0);
  std::iota(first.begin(), first.end(), 0);
  std::vector<int32_t> meta;
  for (const auto* v : {&row_seq, &row_pos, &first, &ntok, &start, &perm})
    meta.insert(meta.end(), v->begin(), v->end());
  DeviceBuffer meta_dev(alloc, meta.size() * 4);
  FP8LM_CUDA_CHECK(cudaMemcpy(meta_dev.get(), meta.data(), meta.size() * 4, cudaMemcpyHostToDevice));
  const int32_t* m = meta_dev.as<int32_t>();
  fp8lm::cuda::DeviceAttentionBatch b;
  b.num_seqs = batch;
  b.num_rows = batch;
  b.row_seq = m;
  b.row_position = m + batch;
  b.seq_first_row = m + 2 * batch;
  b.seq_num_tokens = m + 3 * batch;
  b.seq_start_position = m + 4 * batch;
  b.block_tables = m + 5 * batch;
  b.max_blocks_per_seq = blocks_per_seq;
  b.max_new_tokens = 1;
  b.max_context = ctx;

  const size_t q_elems = size_t(batch) * size_t(p.num_heads) * size_t(p.head_dim);
  std::vector<uint8_t> q_host(q_elems * 2);
  fill_cache(q_host, KvElement::kBF16, rng);
  DeviceBuffer q(alloc, q_elems * 2), out(alloc, q_elems * 2);
  FP8LM_CUDA_CHECK(cudaMemcpy(q.get(), q_host.data(), q_host.size(), cudaMemcpyHostToDevice));
  const size_t ws_bytes = fp8lm::cuda::paged_attention_workspace_bytes(b, p);
  DeviceBuffer ws(alloc, ws_bytes);  // null when 0: paged_attention takes that
  DeviceBuffer counters(alloc, size_t(fp8lm::cuda::kAttentionMergeCounters) * 4);
  FP8LM_CUDA_CHECK(cudaMemset(counters.get(), 0, counters.bytes()));

  cudaStream_t stream = nullptr;
  FP8LM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  FP8LM_CUDA_CHECK(cudaEventCreate(&e0));
  FP8LM_CUDA_CHECK(cudaEventCreate(&e1));
  int next = 0;
  auto call = [&] {
    fp8lm::cuda::DeviceKvLayer layer;
    layer.k = ks[size_t(next)].get();
    layer.v = vs[size_t(next)].get();
    layer.element = element;
    layer.k_scale = layer.v_scale = element == KvElement::kBF16 ? 1.0f : 0.01f;
    next = (next + 1) % copies;
    fp8lm::cuda::paged_attention(q.as<__nv_bfloat16>(), out.as<__nv_bfloat16>(), b, p, kBlockSize, layer, ws.get(),
                                 ws_bytes, stream, counters.as<unsigned>());
  };
  for (int i = 0; i < 5; ++i) call();
  std::vector<double> us;
  for (int i = 0; i < iters; ++i) {
    FP8LM_CUDA_CHECK(cudaEventRecord(e0, stream));
    call();
    FP8LM_CUDA_CHECK(cudaEventRecord(e1, stream));
    FP8LM_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    FP8LM_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    us.push_back(double(ms) * 1e3);
  }
  FP8LM_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaStreamDestroy(stream);
  std::sort(us.begin(), us.end());

  Result r;
  r.batch = batch;
  r.kv = kv_name;
  r.kernel = fp8lm::cuda::paged_attention_decode_uses_mma(b, p, element) ? "tensor-core decode" : "split SIMT";
  r.median_us = us[us.size() / 2];
  r.min_us = us.front();
  r.max_us = us.back();
  r.kv_bytes = double(batch) * ctx * p.num_kv_heads * double(p.head_dim) * double(elem) * 2;
  r.gbs = r.kv_bytes / (r.median_us * 1e3);
  r.roofline_pct = 100.0 * (r.kv_bytes / (kCopyTBps * 1e12)) / (r.median_us * 1e-6);
  return r;
}

int run_main(int argc, char** argv) {
  std::vector<int> batches = {1, 8, 32, 64, 256};
  std::vector<std::string> kvs = {"bf16", "e4m3"};
  int context = 1024, iters = 50;
  AttentionParams p;
  p.num_heads = 32;
  p.num_kv_heads = 8;
  p.head_dim = 128;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has = i + 1 < argc;
    if (a == "--batch" && has) batches = parse_ints(argv[++i]);
    else if (a == "--context" && has) context = std::atoi(argv[++i]);
    else if (a == "--kv" && has) kvs = parse_words(argv[++i]);
    else if (a == "--heads" && has) p.num_heads = std::atoi(argv[++i]);
    else if (a == "--kv-heads" && has) p.num_kv_heads = std::atoi(argv[++i]);
    else if (a == "--head-dim" && has) p.head_dim = std::atoi(argv[++i]);
    else if (a == "--iters" && has) iters = std::atoi(argv[++i]);
    else if (a == "--json" && has) json_path = argv[++i];
    else {
      std::fprintf(stderr,
                   "usage: %s [--batch 1,8,...] [--context N] [--kv bf16,e4m3] [--heads N] [--kv-heads N] "
                   "[--head-dim N] [--iters N>=5] [--json PATH]\n",
                   argv[0]);
      return 2;
    }
  }
  if (context < 1 || iters < 5 || p.num_heads < 1 || p.num_kv_heads < 1 || p.num_heads % p.num_kv_heads != 0 ||
      p.head_dim < 8 || p.head_dim % 8 != 0) {
    std::fprintf(stderr, "bench_cuda_attention: bad shape or counts (context ≥ 1, iters ≥ 5, heads a multiple of "
                         "kv-heads, head_dim a multiple of 8)\n");
    return 2;
  }
  for (const int b : batches)
    if (b < 1) {
      std::fprintf(stderr, "bench_cuda_attention: --batch %d is not ≥ 1\n", b);
      return 2;
    }
  for (const std::string& kv : kvs)
    if (kv != "bf16" && kv != "e4m3") {
      std::fprintf(stderr, "bench_cuda_attention: --kv %s is not bf16 or e4m3\n", kv.c_str());
      return 2;
    }
  p.scale = 1.0f / std::sqrt(float(p.head_dim));

  cudaDeviceProp prop{};
  FP8LM_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const std::string switches = "FP8LM_CUDA_DECODE_SPLIT=" + env_or("FP8LM_CUDA_DECODE_SPLIT", "1") +
                               " FP8LM_CUDA_DECODE_CTAS=" + env_or("FP8LM_CUDA_DECODE_CTAS", "4") +
                               " FP8LM_CUDA_FUSED_MERGE=" + env_or("FP8LM_CUDA_FUSED_MERGE", "1") +
                               " FP8LM_CUDA_KV_PREFETCH=" + env_or("FP8LM_CUDA_KV_PREFETCH", "1");
  std::printf("device: %s, %d SMs; %d heads, %d KV heads, head_dim %lld, context %d + 1, blocks of %d\n%s\n\n",
              prop.name, prop.multiProcessorCount, p.num_heads, p.num_kv_heads, (long long)p.head_dim, context,
              kBlockSize, switches.c_str());
  std::printf("| batch | KV cache | kernel | median us | min | max | K+V MB | GB/s | %% of 4.29 TB/s |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  nlohmann::json rows = nlohmann::json::array();
  for (const std::string& kv : kvs) {
    const KvElement e = kv == "bf16" ? KvElement::kBF16 : KvElement::kE4M3;
    for (const int b : batches) {
      const Result r = run(b, context, e, kv, p, iters);
      std::printf("| %d | %s | %s | %.2f | %.2f | %.2f | %.1f | %.0f | %.1f |\n", r.batch, r.kv.c_str(),
                  r.kernel.c_str(), r.median_us, r.min_us, r.max_us, r.kv_bytes / 1e6, r.gbs, r.roofline_pct);
      std::fflush(stdout);
      rows.push_back({{"batch", r.batch}, {"kv", r.kv}, {"kernel", r.kernel}, {"median_us", r.median_us},
                      {"min_us", r.min_us}, {"max_us", r.max_us}, {"kv_bytes", r.kv_bytes}, {"gbs", r.gbs},
                      {"pct_of_copy_rate", r.roofline_pct}});
    }
  }
  if (!json_path.empty()) {
    const nlohmann::json doc = {{"benchmark", "cuda_attention_decode"},
                                {"device", prop.name},
                                {"switches", switches},
                                {"shape",
                                 {{"heads", p.num_heads},
                                  {"kv_heads", p.num_kv_heads},
                                  {"head_dim", p.head_dim},
                                  {"context", context},
                                  {"block_size", kBlockSize}}},
                                {"iters", iters},
                                {"results", rows}};
    std::ofstream(json_path) << doc.dump(1) << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run_main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda_attention: %s\n", e.what());
    return 1;
  }
}
