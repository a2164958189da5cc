// Decode attention alone on the GPU (issue 19): one decode step of B sequences over a paged KV
// cache of C cached positions each, Llama-3.1-8B's attention shape by default (32 query heads,
// 8 KV heads, head_dim 128, blocks of 16 positions), for a BF16 and an FP8 (E4M3) cache, timed
// against the bandwidth roofline of the K/V bytes it must read.
//
//   bench_cuda_attention [--batch 1,8,32,64,256] [--context 1024] [--kv bf16,e4m3]
//                        [--heads 32] [--kv-heads 8] [--head-dim 128] [--iters 50] [--json PATH]
//                        [--decode-kernel measured|pairs|key-split]
//
// The kernel is the one fp8lm's engine runs for that step (paged_attention's choice: the split
// SIMT kernel under 64 (sequence, KV head) pairs, else the tensor-core decode kernel, split over
// the context at small batches, one warp per pair for an FP8 cache from 12 pairs an SM; with
// FP8LM_CUDA_DECODE_SPLIT=0 the split SIMT kernel below 2 × the SMs pairs), under the CUDA
// backend's A/B switches (FP8LM_CUDA_DECODE_SPLIT, FP8LM_CUDA_FUSED_MERGE, FP8LM_CUDA_KV_PREFETCH),
// which the output names: run the program once per setting to compare forms. --decode-kernel
// pairs / key-split forces the pair kernel / the key-split CTAs for the FP8 decode rows that fit
// the pair kernel (paged_attention's DecodeKernelChoice), at any batch. Blocks are scattered
// over the cache (a random permutation), as a long-running server's are. The cache is replicated into as many layer copies as it takes for
// them to exceed 256 MB, and successive calls rotate over them, so the K/V come from HBM as in a
// forward pass (the 50 MB L2 never holds the next call's). Each sample times one call between
// two events; the median of --iters samples after 5 warm-up calls is reported. The workload and
// the timing are decode_attention_workload.h's, shared with bench_flashinfer_decode.
//
// Roofline: K + V bytes of every attended position (B × (C + 1) × KV heads × head_dim × element
// bytes × 2) at 4.29 TB/s (../shared/docs/gpu.md, the measured device-to-device copy rate).
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "backend/cuda/common/check.h"
#include "backend/cuda/attention/paged_attention.h"
#include "decode_attention_workload.h"

namespace {

using fp8lm::backend::AttentionParams;
using fp8lm::backend::KvElement;
using fp8lm::cuda::DecodeKernelChoice;
using fp8lm::bench::kBlockSize;

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

struct Result {
  int batch = 0;
  std::string kv;
  std::string kernel;
  double median_us = 0, min_us = 0, max_us = 0, kv_bytes = 0, gbs = 0, roofline_pct = 0;
};

Result run(int batch, int context, KvElement element, const std::string& kv_name, const AttentionParams& p,
           int iters, DecodeKernelChoice choice) {
  const fp8lm::bench::DecodeAttentionWorkload w(batch, context, element, p);
  // Eager launches, no CUDA graphs: each sample includes the call's host-side launch work.
  const auto call = [&](int copy) {
    if (choice == DecodeKernelChoice::kMeasured) {
      w.run_paged_attention(copy);
    } else {
      fp8lm::cuda::paged_attention(w.q(), w.out(), w.attention_batch(), p, kBlockSize, w.layer(copy), w.workspace(),
                                   w.workspace_bytes(), w.stream(), w.merge_counters(), choice);
    }
  };
  const fp8lm::bench::Timing t = fp8lm::bench::time_calls(call, w.copies(), iters, false, w.stream());

  Result r;
  r.batch = batch;
  r.kv = kv_name;
  // The engine's kernel, unless the forced choice runs the other one.
  r.kernel = w.paged_attention_kernel();
  if (fp8lm::cuda::paged_attention_decode_uses_pairs(w.attention_batch(), p, element, choice) !=
      fp8lm::cuda::paged_attention_decode_uses_pairs(w.attention_batch(), p, element))
    r.kernel = choice == DecodeKernelChoice::kPairs ? "warp per pair" : "tensor-core decode";
  r.median_us = t.median_us;
  r.min_us = t.min_us;
  r.max_us = t.max_us;
  r.kv_bytes = w.kv_bytes();
  r.gbs = w.gbs(r.median_us);
  r.roofline_pct = w.roofline_pct(r.median_us);
  return r;
}

int run_main(int argc, char** argv) {
  fp8lm::bench::DecodeAttentionArgs o;
  std::string decode_kernel = "measured";
  for (int i = 1; i < argc; ++i) {
    if (o.take_flag(argc, argv, i)) continue;
    const std::string a = argv[i];
    if (a == "--decode-kernel" && i + 1 < argc) {
      decode_kernel = argv[++i];
      if (decode_kernel == "measured" || decode_kernel == "pairs" || decode_kernel == "key-split") continue;
    }
    std::fprintf(stderr,
                 "usage: %s [--batch 1,8,...] [--context N] [--kv bf16,e4m3] [--heads N] [--kv-heads N] "
                 "[--head-dim N] [--iters N>=5] [--json PATH] [--decode-kernel measured|pairs|key-split]\n",
                 argv[0]);
    return 2;
  }
  const DecodeKernelChoice choice = decode_kernel == "pairs"       ? DecodeKernelChoice::kPairs
                                    : decode_kernel == "key-split" ? DecodeKernelChoice::kKeySplit
                                                                   : DecodeKernelChoice::kMeasured;
  AttentionParams& p = o.p;
  if (o.context < 1 || o.iters < 5 || p.num_heads < 1 || p.num_kv_heads < 1 || p.num_heads % p.num_kv_heads != 0 ||
      p.head_dim < 8 || p.head_dim % 8 != 0) {
    std::fprintf(stderr, "bench_cuda_attention: bad shape or counts (context ≥ 1, iters ≥ 5, heads a multiple of "
                         "kv-heads, head_dim a multiple of 8)\n");
    return 2;
  }
  if (!o.lists_ok("bench_cuda_attention")) return 2;
  p.scale = 1.0f / std::sqrt(float(p.head_dim));

  cudaDeviceProp prop{};
  FP8LM_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const std::string switches = "FP8LM_CUDA_DECODE_SPLIT=" + env_or("FP8LM_CUDA_DECODE_SPLIT", "1") +
                               " FP8LM_CUDA_FUSED_MERGE=" + env_or("FP8LM_CUDA_FUSED_MERGE", "1") +
                               " FP8LM_CUDA_KV_PREFETCH=" + env_or("FP8LM_CUDA_KV_PREFETCH", "1") +
                               " --decode-kernel " + decode_kernel;
  std::printf("device: %s, %d SMs; %d heads, %d KV heads, head_dim %lld, context %d + 1, blocks of %d\n%s\n\n",
              prop.name, prop.multiProcessorCount, p.num_heads, p.num_kv_heads, (long long)p.head_dim, o.context,
              kBlockSize, switches.c_str());
  std::printf("| batch | KV cache | kernel | median us | min | max | K+V MB | GB/s | %% of 4.29 TB/s |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  nlohmann::json rows = nlohmann::json::array();
  for (const std::string& kv : o.kvs) {
    const KvElement e = kv == "bf16" ? KvElement::kBF16 : KvElement::kE4M3;
    for (const int b : o.batches) {
      const Result r = run(b, o.context, e, kv, p, o.iters, choice);
      std::printf("| %d | %s | %s | %.2f | %.2f | %.2f | %.1f | %.0f | %.1f |\n", r.batch, r.kv.c_str(),
                  r.kernel.c_str(), r.median_us, r.min_us, r.max_us, r.kv_bytes / 1e6, r.gbs, r.roofline_pct);
      std::fflush(stdout);
      rows.push_back({{"batch", r.batch}, {"kv", r.kv}, {"kernel", r.kernel}, {"median_us", r.median_us},
                      {"min_us", r.min_us}, {"max_us", r.max_us}, {"kv_bytes", r.kv_bytes}, {"gbs", r.gbs},
                      {"pct_of_copy_rate", r.roofline_pct}});
    }
  }
  o.write_json({{"benchmark", "cuda_attention_decode"}, {"device", prop.name}, {"switches", switches}}, rows);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return fp8lm::bench::run_reporting_errors("bench_cuda_attention", run_main, argc, argv);
}
