// FlashInfer's paged decode attention as a peer of fp8lm's (issue 19): bench_cuda_attention's
// workload, timed the same way, run through FlashInfer's BatchDecodeWithPagedKVCache (its
// CUDA-core decode kernel, flashinfer/attention/decode.cuh, called through its C++ headers, no
// Python), and fp8lm's paged_attention on the same inputs beside it, with the largest difference
// between the two outputs as a check that both computed the same thing.
//
//   bench_flashinfer_decode [--batch 1,8,32,64,256] [--context 1024] [--kv bf16,e4m3]
//                           [--heads 32] [--kv-heads 8] [--iters 50] [--pdl 0|1] [--graph-plan]
//                           [--graphs] [--json PATH]
//
// Built only with -DFP8LM_FLASHINFER=ON (headers from scripts/fetch_flashinfer.sh; never in CI).
//
// The workload is bench_cuda_attention's, byte for byte (both build it with
// decode_attention_workload.h, and time it with its time_calls): one decode step of B sequences
// of C cached positions + the new one (C + 1 attended), 32 query heads, 8 KV heads, head_dim 128,
// blocks of 16 positions scattered over the cache by the same random permutation, the same
// random K/V/Q (the same generator, seeds and draw order), caches replicated past 256 MB and
// rotated call to call so the K/V come from HBM, 5 warm-up calls, then the median of --iters
// samples of one call between two events.
//
// One cache, both kernels: fp8lm's cache layer is K and V arrays of [block][KV head][position]
// [head_dim] (backend/cuda/attention/paged_attention.h), which is FlashInfer's HND paged layout with
// separate k_data / v_data: its paged_kv_t is built over the same device arrays, and its page
// indices are fp8lm's block-table array itself (sequence s owns entries [s·P, (s + 1)·P), P
// blocks a sequence: indptr[s] = s·P, last_page_len = C + 1 − 16·(P − 1)).
//
// FlashInfer's arguments, as its Python wrapper (flashinfer/decode.py) derives them:
//   * Q and O BF16, KV BF16 or FP8 E4M3 (__nv_fp8_e4m3), int32 indices, head_dim 128, no RoPE in
//     the kernel (PosEncodingMode::kNone), no logits soft cap, no sliding window, no ALiBi
//     (DefaultAttention<false, false, false, false>), no LSE output.
//   * FP8 cache, per-tensor scales: k_scale folded into the softmax scale
//     (sm_scale = 1/sqrt(128) × k_scale, what decode.py does). v_scale: decode.py multiplies the
//     output by it in a separate elementwise op after the kernel; the headers also offer it
//     inside the kernel — a Params with a `v_scale` member is scaled in the variant's
//     OutputTransform (attention/variant_helper.cuh) — which is what this program uses, so
//     the timed call has no extra kernel (the Python path would be slightly slower).
//   * The plan (DecodePlan: the work estimation, whether to split the KV over chunks, the
//     request / tile indices copied to the device) runs once per table row, OUTSIDE the timed
//     region, as a server plans once per step for all its layers; its host time is printed
//     (plan us) but not in the medians. The timed region is the run call:
//     BatchDecodeWithPagedKVCacheDispatched — the decode kernel, plus the merge kernel
//     (VariableLengthMergeStates) when the plan split the KV.
//   * PDL (programmatic dependent launch) on by default, as FlashInfer's Python chooses on
//     Hopper (--pdl 0 to turn off); --graph-plan plans as for CUDA-graph capture
//     (enable_cuda_graph: always split-KV, grid padded to one full wave), what a server that
//     captures its decode steps uses; the call is still launched plainly unless --graphs.
//   * --graphs: both kernels' calls captured into CUDA graphs (one per cache copy) and the graph
//     launches timed — without it the samples include each call's host-side launch work, as
//     bench_cuda_attention's do (FlashInfer's run queries the device and sets the kernel's
//     shared-memory attribute on every call): a few microseconds that matter at batch 1.
//
// fp8lm's kernel: the same call bench_cuda_attention times (fp8lm::cuda::paged_attention, the
// engine's choice of kernel under the FP8LM_CUDA_* switches in the environment, which the
// output lists), same rotation, same timing, in the same process right after FlashInfer's.
//
// Correctness check: both kernels once on the first cache copy before the timing; the table's
// "max abs diff" is max |O_flashinfer − O_fp8lm| over every output element (BF16 outputs,
// compared as floats). Printed, not asserted: ~1e-3 expected for a BF16 cache, ~1e-2 for FP8
// (fp8lm's tensor-core kernel rounds the softmax weights to BF16/FP16 for its P·V MMA;
// FlashInfer's CUDA-core kernel stays in float32).
//
// Roofline: K + V bytes of every attended position (B × (C + 1) × KV heads × head_dim × element
// bytes × 2) at 4.29 TB/s (../shared/docs/gpu.md, the measured device-to-device copy rate).
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

// FlashInfer (header-only for these kernels): .deps/flashinfer/include, and the libcu++ its wheel
// ships (.deps/flashinfer/cccl/include: fastdiv.cuh needs a newer <cuda/cmath> than CUDA 13.0's).
#include <flashinfer/attention/decode.cuh>
#include <flashinfer/attention/default_decode_params.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/attention/variants.cuh>
#include <flashinfer/layout.cuh>
#include <flashinfer/page.cuh>
#include <flashinfer/pos_enc.cuh>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cuda/common/check.h"
#include "backend/cuda/common/device_memory.h"
#include "backend/cuda/attention/paged_attention.h"
#include "decode_attention_workload.h"

#ifndef FP8LM_FLASHINFER_VERSION
#define FP8LM_FLASHINFER_VERSION "unknown"
#endif

extern char** environ;

namespace {

constexpr int kHeadDim = 128;  // the one head_dim instantiated (FlashInfer's HEAD_DIM template)

using fp8lm::backend::AttentionParams;
using fp8lm::backend::KvElement;
using fp8lm::bench::kBlockSize;
using fp8lm::bench::Timing;
using fp8lm::cuda::DeviceBuffer;

// FlashInfer's decode instantiation: BF16 Q/O, int32 indices, the KV element as given, and a
// v_scale member so that its default variant applies the V scale in the kernel (see the top).
template <typename KV>
struct FiParams : flashinfer::BatchDecodeParams<__nv_bfloat16, KV, __nv_bfloat16, int32_t> {
  float v_scale = 1.0f;
};
// No custom mask, no sliding window, no logits soft cap, no ALiBi.
using FiVariant = flashinfer::DefaultAttention<false, false, false, false>;
constexpr auto kFiPosEnc = flashinfer::PosEncodingMode::kNone;

// FlashInfer's headers return cudaError_t (or throw flashinfer::Error, a std::exception).
void fi_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// The FP8LM_CUDA_* switches set in the environment (they choose fp8lm's kernel form).
std::string fp8lm_switches() {
  std::string out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e)
    if (std::strncmp(*e, "FP8LM_CUDA_", 11) == 0) out += (out.empty() ? "" : " ") + std::string(*e);
  return out.empty() ? "(no FP8LM_CUDA_* switch set: the defaults)" : out;
}

float bf16_bits_to_float(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// bench_cuda_attention's flags, and FlashInfer's launch choices.
struct Options : fp8lm::bench::DecodeAttentionArgs {
  bool pdl = true, graph_plan = false, graphs = false;
};

struct Result {
  int batch = 0;
  std::string kv;
  std::string fi_form;  // how FlashInfer's plan split the work
  int fi_ctas = 0;      // decode-kernel CTAs (padded batch × KV heads)
  double plan_us = 0;   // host time of DecodePlan (+ its copy), not in the medians
  Timing fi, ours;
  std::string ours_kernel;
  double kv_bytes = 0, gbs = 0, roofline_pct = 0, max_abs_diff = 0, max_abs_out = 0;
};

// Max |a − b| and max |b| over two BF16 device arrays of n elements.
std::pair<double, double> max_abs_diff(const __nv_bfloat16* a, const __nv_bfloat16* b, size_t n) {
  std::vector<uint16_t> ha(n), hb(n);
  FP8LM_CUDA_CHECK(cudaMemcpy(ha.data(), a, n * 2, cudaMemcpyDeviceToHost));
  FP8LM_CUDA_CHECK(cudaMemcpy(hb.data(), b, n * 2, cudaMemcpyDeviceToHost));
  double diff = 0, mag = 0;
  for (size_t i = 0; i < n; ++i) {
    const double x = bf16_bits_to_float(ha[i]), y = bf16_bits_to_float(hb[i]);
    diff = std::max(diff, std::isnan(x - y) ? INFINITY : std::fabs(x - y));
    mag = std::max(mag, std::fabs(y));
  }
  return {diff, mag};
}

// One table row: batch B, one cache type. KV is FlashInfer's element type for it.
template <typename KV>
Result run(int batch, KvElement element, const std::string& kv_name, const Options& o) {
  const AttentionParams& p = o.p;
  // ---- The inputs, and fp8lm's call on them: exactly bench_cuda_attention's ----
  // Declared first, so destroyed last: it hands the buffers below back to the driver with its own.
  const fp8lm::bench::DecodeAttentionWorkload w(batch, o.context, element, p);
  fp8lm::cuda::DeviceAllocator& alloc = fp8lm::cuda::DeviceAllocator::global();
  const cudaStream_t stream = w.stream();
  const auto call_ours = [&](int copy) { w.run_paged_attention(copy); };
  DeviceBuffer out_fi(alloc, w.q_elems() * 2);

  // FlashInfer's paged_kv_t page table over the workload's block table (its page indices):
  // sequence s owns pages [indptr[s], indptr[s + 1]), the last holding last_page_len positions.
  // indptr is read on the host too, by the plan.
  const auto n = static_cast<size_t>(batch);
  const int bps = w.blocks_per_seq();
  std::vector<int32_t> indptr(n + 1), last_page_len(n, w.attended() - kBlockSize * (bps - 1));
  for (size_t s = 0; s <= n; ++s) indptr[s] = int32_t(s) * bps;
  std::vector<int32_t> pages = indptr;  // one upload: indptr, then last_page_len
  pages.insert(pages.end(), last_page_len.begin(), last_page_len.end());
  DeviceBuffer pages_dev(alloc, pages.size() * 4);
  FP8LM_CUDA_CHECK(cudaMemcpy(pages_dev.get(), pages.data(), pages.size() * 4, cudaMemcpyHostToDevice));
  int32_t* indptr_dev = pages_dev.as<int32_t>();
  int32_t* last_page_len_dev = indptr_dev + batch + 1;

  // ---- FlashInfer: plan once (outside the timing), then run ----
  using Params = FiParams<KV>;
  const uint32_t group = uint32_t(p.num_heads / p.num_kv_heads);
  flashinfer::DecodePlanInfo plan;
  size_t fi_float_bytes = 0, fi_int_bytes = 0;
  DeviceBuffer fi_float_ws, fi_int_ws;
  void* fi_pinned = nullptr;  // the plan's host staging buffer (page-locked, as FlashInfer's)
  double plan_us = 0;
  // The work estimation is instantiated per GQA group size (FlashInfer's dispatch macro).
  DISPATCH_GQA_GROUP_SIZE(group, GROUP_SIZE, {
    auto estimate = flashinfer::BatchDecodeWithPagedKVCacheWorkEstimationDispatched<GROUP_SIZE, kHeadDim, kFiPosEnc,
                                                                                     FiVariant, Params>;
    fi_check(flashinfer::DecodePlanWorkspaceSize<kHeadDim, kFiPosEnc, FiVariant, Params>(
                 fi_float_bytes, fi_int_bytes, indptr.data(), uint32_t(batch), uint32_t(p.num_heads), kBlockSize,
                 o.graph_plan, stream, estimate),
             "FlashInfer DecodePlanWorkspaceSize");
    fi_float_ws = DeviceBuffer(alloc, std::max<size_t>(fi_float_bytes, 256));
    fi_int_ws = DeviceBuffer(alloc, std::max<size_t>(fi_int_bytes, 256));
    FP8LM_CUDA_CHECK(cudaMallocHost(&fi_pinned, std::max<size_t>(fi_int_bytes, 256)));
    const auto t0 = std::chrono::steady_clock::now();
    fi_check(flashinfer::DecodePlan<kHeadDim, kFiPosEnc, FiVariant, Params>(
                 fi_float_ws.get(), fi_float_ws.bytes(), fi_int_ws.get(), fi_pinned, fi_int_ws.bytes(), plan,
                 indptr.data(), uint32_t(batch), uint32_t(p.num_heads), kBlockSize, o.graph_plan, stream, estimate),
             "FlashInfer DecodePlan");
    FP8LM_CUDA_CHECK(cudaStreamSynchronize(stream));  // its index copy, from fi_pinned
    plan_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  });
  const int32_t kv_chunk = *flashinfer::GetPtrFromBaseOffset<int32_t>(fi_pinned, plan.kv_chunk_size_ptr_offset);
  FP8LM_CUDA_CHECK(cudaFreeHost(fi_pinned));

  Params fp;
  fp.q = w.q();
  fp.o = out_fi.as<__nv_bfloat16>();
  fp.lse = nullptr;
  fp.num_qo_heads = uint32_t(p.num_heads);
  fp.q_stride_n = int32_t(p.num_heads * p.head_dim);  // q is [batch][heads][head_dim], as fp8lm's rows
  fp.q_stride_h = int32_t(p.head_dim);
  fp.window_left = -1;
  fp.logits_soft_cap = 0.0f;
  fp.sm_scale = p.scale * w.kv_scale();  // k_scale folded into the softmax scale
  fp.v_scale = w.kv_scale();             // applied by the variant's OutputTransform
  fp.rope_rcp_scale = 1.0f;              // unused: PosEncodingMode::kNone
  fp.rope_rcp_theta = 1.0f / 1e4f;
  fp.request_indices = flashinfer::GetPtrFromBaseOffset<int32_t>(fi_int_ws.get(), plan.request_indices_offset);
  fp.kv_tile_indices = flashinfer::GetPtrFromBaseOffset<int32_t>(fi_int_ws.get(), plan.kv_tile_indices_offset);
  fp.o_indptr = flashinfer::GetPtrFromBaseOffset<int32_t>(fi_int_ws.get(), plan.o_indptr_offset);
  fp.kv_chunk_size_ptr = flashinfer::GetPtrFromBaseOffset<int32_t>(fi_int_ws.get(), plan.kv_chunk_size_ptr_offset);
  fp.padded_batch_size = uint32_t(plan.padded_batch_size);
  __nv_bfloat16* tmp_v = nullptr;  // the split-KV partial outputs and LSEs
  float* tmp_s = nullptr;
  if (plan.split_kv) {
    tmp_v = flashinfer::GetPtrFromBaseOffset<__nv_bfloat16>(fi_float_ws.get(), plan.v_offset);
    tmp_s = flashinfer::GetPtrFromBaseOffset<float>(fi_float_ws.get(), plan.s_offset);
    if (plan.enable_cuda_graph)
      fp.block_valid_mask = flashinfer::GetPtrFromBaseOffset<bool>(fi_int_ws.get(), plan.block_valid_mask_offset);
  }
  auto call_fi = [&](int copy) {
    // HND pages over fp8lm's arrays: [block][KV head][position][head_dim], K and V apart.
    const fp8lm::cuda::DeviceKvLayer layer = w.layer(copy);
    fp.paged_kv = flashinfer::paged_kv_t<KV, int32_t>(
        uint32_t(p.num_kv_heads), kBlockSize, uint32_t(p.head_dim), uint32_t(batch), flashinfer::QKVLayout::kHND,
        static_cast<KV*>(layer.k), static_cast<KV*>(layer.v), w.block_tables(), indptr_dev, last_page_len_dev);
    fi_check(flashinfer::BatchDecodeWithPagedKVCacheDispatched<kHeadDim, kFiPosEnc, FiVariant>(fp, tmp_v, tmp_s,
                                                                                               o.pdl, stream),
             "FlashInfer BatchDecodeWithPagedKVCacheDispatched");
  };

  // ---- Correctness: both on copy 0 ----
  FP8LM_CUDA_CHECK(cudaMemsetAsync(out_fi.get(), 0xFF, out_fi.bytes(), stream));  // NaN until written
  FP8LM_CUDA_CHECK(cudaMemsetAsync(w.out(), 0xFF, w.q_elems() * 2, stream));
  call_fi(0);
  call_ours(0);
  FP8LM_CUDA_CHECK(cudaStreamSynchronize(stream));
  FP8LM_CUDA_CHECK(cudaGetLastError());
  const auto [diff, mag] = max_abs_diff(out_fi.as<__nv_bfloat16>(), w.out(), w.q_elems());

  // ---- Timing, each over the rotated copies ----
  const Timing fi = fp8lm::bench::time_calls(call_fi, w.copies(), o.iters, o.graphs, stream);
  const Timing ours = fp8lm::bench::time_calls(call_ours, w.copies(), o.iters, o.graphs, stream);

  Result r;
  r.batch = batch;
  r.kv = kv_name;
  r.fi_ctas = int(plan.padded_batch_size) * p.num_kv_heads;
  r.fi_form = plan.split_kv ? "split-KV, chunks of " + std::to_string(kv_chunk) + " + merge"
                            : std::string("whole context per CTA");
  r.plan_us = plan_us;
  r.fi = fi;
  r.ours = ours;
  r.ours_kernel = w.paged_attention_kernel();
  r.kv_bytes = w.kv_bytes();
  r.gbs = w.gbs(fi.median_us);
  r.roofline_pct = w.roofline_pct(fi.median_us);
  r.max_abs_diff = diff;
  r.max_abs_out = mag;
  return r;
}

int run_main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    if (o.take_flag(argc, argv, i)) continue;
    const std::string a = argv[i];
    if (a == "--pdl" && i + 1 < argc) o.pdl = std::atoi(argv[++i]) != 0;
    else if (a == "--graph-plan") o.graph_plan = true;
    else if (a == "--graphs") o.graphs = true;
    else {
      std::fprintf(stderr,
                   "usage: %s [--batch 1,8,...] [--context N] [--kv bf16,e4m3] [--heads N] [--kv-heads N] "
                   "[--head-dim 128] [--iters N>=5] [--pdl 0|1] [--graph-plan] [--graphs] [--json PATH]\n",
                   argv[0]);
      return 2;
    }
  }
  // FlashInfer's decode dispatches these GQA group sizes (DISPATCH_GQA_GROUP_SIZE); only
  // head_dim 128 is instantiated here.
  const int group = o.p.num_kv_heads > 0 ? o.p.num_heads / o.p.num_kv_heads : 0;
  const bool group_ok = group == 1 || group == 2 || group == 3 || group == 4 || group == 6 || group == 8 || group == 16;
  if (o.context < 1 || o.iters < 5 || o.p.num_kv_heads < 1 || o.p.num_heads % o.p.num_kv_heads != 0 || !group_ok ||
      o.p.head_dim != kHeadDim) {
    std::fprintf(stderr, "bench_flashinfer_decode: bad shape or counts (context ≥ 1, iters ≥ 5, heads / kv-heads in "
                         "{1, 2, 3, 4, 6, 8, 16}, head_dim 128: the one instantiated)\n");
    return 2;
  }
  if (!o.lists_ok("bench_flashinfer_decode")) return 2;
  o.p.scale = 1.0f / std::sqrt(float(o.p.head_dim));

  // A clear refusal where there is no GPU, or not the one this binary is compiled for.
  int devices = 0;
  const cudaError_t count_status = cudaGetDeviceCount(&devices);
  if (count_status != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "bench_flashinfer_decode: no CUDA device (%s)\n",
                 count_status != cudaSuccess ? cudaGetErrorString(count_status) : "none found");
    return 1;
  }
  cudaDeviceProp prop{};
  FP8LM_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  if (prop.major != 9 || prop.minor != 0) {
    std::fprintf(stderr, "bench_flashinfer_decode: %s is sm_%d%d; this program is built for sm_90a (Hopper) only\n",
                 prop.name, prop.major, prop.minor);
    return 1;
  }
  const std::string switches = fp8lm_switches();
  std::printf("device: %s, %d SMs; %d heads, %d KV heads, head_dim %lld, context %d + 1, blocks of %d\n", prop.name,
              prop.multiProcessorCount, o.p.num_heads, o.p.num_kv_heads, (long long)o.p.head_dim, o.context,
              kBlockSize);
  std::printf("FlashInfer %s BatchDecodeWithPagedKVCache (CUDA-core decode kernel), HND pages over fp8lm's cache; "
              "PDL %s; plan%s once per row, NOT in the timed region (plan us: its host time); timed: the run call "
              "(decode kernel + merge kernel when split-KV)%s\n",
              FP8LM_FLASHINFER_VERSION, o.pdl ? "on" : "off", o.graph_plan ? " (enable_cuda_graph)" : "",
              o.graphs ? ", replayed from CUDA graphs (both kernels)" : ", launched eagerly (both kernels)");
  std::printf("fp8lm: paged_attention, %s\n\n", switches.c_str());
  std::printf("| batch | KV cache | FlashInfer form | median us | min | max | K+V MB | GB/s | %% of 4.29 TB/s | "
              "plan us | fp8lm kernel | fp8lm median us | fp8lm ÷ FlashInfer time | max abs diff |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  nlohmann::json rows = nlohmann::json::array();
  for (const std::string& kv : o.kvs) {
    for (const int b : o.batches) {
      const Result r = kv == "bf16" ? run<__nv_bfloat16>(b, KvElement::kBF16, kv, o)
                                    : run<__nv_fp8_e4m3>(b, KvElement::kE4M3, kv, o);
      std::printf("| %d | %s | %s (%d CTAs) | %.2f | %.2f | %.2f | %.1f | %.0f | %.1f | %.0f | %s | %.2f | %.2f | "
                  "%.2e |\n",
                  r.batch, r.kv.c_str(), r.fi_form.c_str(), r.fi_ctas, r.fi.median_us, r.fi.min_us, r.fi.max_us,
                  r.kv_bytes / 1e6, r.gbs, r.roofline_pct, r.plan_us, r.ours_kernel.c_str(), r.ours.median_us,
                  r.ours.median_us / r.fi.median_us, r.max_abs_diff);
      std::fflush(stdout);
      rows.push_back({{"batch", r.batch},
                      {"kv", r.kv},
                      {"flashinfer_form", r.fi_form},
                      {"flashinfer_ctas", r.fi_ctas},
                      {"median_us", r.fi.median_us},
                      {"min_us", r.fi.min_us},
                      {"max_us", r.fi.max_us},
                      {"kv_bytes", r.kv_bytes},
                      {"gbs", r.gbs},
                      {"pct_of_copy_rate", r.roofline_pct},
                      {"plan_us_host", r.plan_us},
                      {"fp8lm_kernel", r.ours_kernel},
                      {"fp8lm_median_us", r.ours.median_us},
                      {"fp8lm_min_us", r.ours.min_us},
                      {"fp8lm_max_us", r.ours.max_us},
                      {"fp8lm_over_flashinfer_time", r.ours.median_us / r.fi.median_us},
                      {"max_abs_diff", r.max_abs_diff},
                      {"max_abs_out_fp8lm", r.max_abs_out}});
    }
  }
  o.write_json({{"benchmark", "flashinfer_attention_decode"},
                {"flashinfer", FP8LM_FLASHINFER_VERSION},
                {"flashinfer_kernel", "BatchDecodeWithPagedKVCache (CUDA cores), HND, page 16"},
                {"plan_in_timing", false},
                {"graph_plan", o.graph_plan},
                {"cuda_graphs", o.graphs},
                {"pdl", o.pdl},
                {"device", prop.name},
                {"switches", switches}},
               rows);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return fp8lm::bench::run_reporting_errors("bench_flashinfer_decode", run_main, argc, argv);
}
