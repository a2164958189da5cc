// The linear layers of Llama-3.1-8B and -70B through fp8lm's cuBLASLt GEMMs
// (src/backend/cuda/gemm/cublaslt_gemm.h) on the GPU: BF16, FP8 per-tensor, FP8
// outer-vector (per-token × per-channel) and FP8 block (1×128 × 128×128), at
// M = 1 … 16384 tokens.
//
//   bench_cuda_gemm [--json PATH] [--models 8b,70b] [--m 1,16,...] [--iters N]
//
// Method (docs/benchmarks.md): random data (never zeros); per configuration
// 3 warm-up calls (the first one runs cuBLASLt's heuristic), then ≥ 20 timed
// calls, each between two CUDA events, median reported. The weights rotate
// over as many copies as it takes for them to exceed twice the L2 (≥ 2), so
// they come from HBM as in a real forward pass; the activations stay the same
// (a real layer reads what the previous kernel just wrote). Before the timed
// calls the stream is kept busy by a spin kernel, so that the host enqueues all
// of them ahead of the GPU and the events measure GPU time, not launch gaps.
// Timed is GemmArgs → run(), i.e. with the activation-scale transposition
// block scaling needs (fp8lm's [m, L] → cuBLASLt's [L, m]); "block*" is the
// same GEMM with the scales already in cuBLASLt's layout. "CUTLASS stream-K / ping-pong" are
// the configurations of the per-token × per-channel GEMM of src/backend/cuda/gemm/cutlass_fp8_gemm.h
// (issue 19), when built, on cuBLASLt outer-vec's operands, each at every M (the engine takes
// them only in linear_plan.cpp's measured ranges).
//
// Ceilings (../shared/docs/gpu.md, measured on this H200): 1426 TFLOP/s FP8,
// 794 TFLOP/s BF16, 4.29 TB/s. "% roof" = the roofline time max(FLOP /
// ceiling, minimum bytes / 4.29 TB/s) over the measured time; minimum bytes =
// weights + their scales + activations + output, each moved once.
#include <cuda_runtime_api.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "backend/cuda/common/check.h"
#include "backend/cuda/gemm/cublaslt_gemm.h"
#include "backend/cuda/gemm/cutlass_fp8_gemm.h"
#include "backend/cuda/common/device_memory.h"
#include "backend/cuda/common/stream.h"

using namespace fp8lm;
using namespace fp8lm::cuda;

namespace {

constexpr double kFp8Peak = 1426e12, kBf16Peak = 794e12, kBandwidth = 4.29e12;

__device__ uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
__device__ float uniform(uint64_t seed, size_t i) {  // [-1, 1)
  return float(splitmix(seed ^ (uint64_t(i) * 0x2545f4914f6cdd1dull)) >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

__global__ void fill_bf16(__nv_bfloat16* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = __float2bfloat16_rn(uniform(seed, i));
}
__global__ void fill_fp8(uint8_t* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = uint8_t(__nv_cvt_float_to_fp8(uniform(seed, i) * 224.0f, __NV_SATFINITE, __NV_E4M3));
}
__global__ void fill_scales(float* p, size_t n, uint64_t seed) {  // [0.5, 1.5) · 2^-7
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = (1.0f + 0.5f * uniform(seed, i)) * (1.0f / 128.0f);
}
__global__ void spin(uint64_t ns) {
  uint64_t t0 = 0, t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

unsigned grid_for(size_t n) { return unsigned(std::min<size_t>((n + 255) / 256, 65535u * 8u)); }

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct Layer {
  const char* model;
  const char* name;
  int64_t n, k;
};

// Llama-3.1-8B: hidden 4096, intermediate 14336, 32 heads, 8 KV heads, head_dim 128.
// Llama-3.1-70B: hidden 8192, intermediate 28672, 64 heads, 8 KV heads, head_dim 128.
const Layer kLayers[] = {
    {"8b", "qkv", 6144, 4096},      {"8b", "o", 4096, 4096},       {"8b", "gate_up", 28672, 4096},
    {"8b", "down", 4096, 14336},    {"70b", "qkv", 10240, 8192},   {"70b", "o", 8192, 8192},
    {"70b", "gate_up", 57344, 8192}, {"70b", "down", 8192, 28672},
};

enum Mode { kBf16, kTensor, kOuter, kBlock, kBlockPre, kCutlassStreamK, kCutlassPingpong, kModes };
const char* kModeNames[kModes] = {"bf16",
                                  "fp8_tensor",
                                  "fp8_outer_vector",
                                  "fp8_block",
                                  "fp8_block_prescaled",
                                  "fp8_outer_vector_cutlass_stream_k",
                                  "fp8_outer_vector_cutlass_pingpong"};
const char* kModeShort[kModes] = {"BF16",      "FP8 tensor", "FP8 outer-vec", "FP8 block", "FP8 block*",
                                  "CUTLASS stream-K", "CUTLASS ping-pong"};
bool is_cutlass(int mode) { return mode == kCutlassStreamK || mode == kCutlassPingpong; }

struct Result {
  std::string model, layer;
  int64_t m = 0, n = 0, k = 0;
  int mode = 0;
  bool supported = false;
  std::string reason;
  int iters = 0, rotate = 0;
  double median_us = 0, min_us = 0, max_us = 0;
  double tflops = 0, weight_gbs = 0, total_gbs = 0, pct_compute = 0, pct_bandwidth = 0, pct_roofline = 0;
};

std::vector<int64_t> parse_list(const char* s) {
  std::vector<int64_t> out;
  for (const char* p = s; *p;) {
    out.push_back(std::strtoll(p, const_cast<char**>(&p), 10));
    if (*p == ',') ++p;
  }
  return out;
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path, models = "8b,70b";
  std::vector<int64_t> ms = {1, 16, 64, 256, 1024, 4096, 16384};
  int min_iters = 20;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) json_path = argv[++i];
    else if (a == "--models" && i + 1 < argc) models = argv[++i];
    else if (a == "--m" && i + 1 < argc) ms = parse_list(argv[++i]);
    else if (a == "--iters" && i + 1 < argc) min_iters = std::max(20, std::atoi(argv[++i]));
    else {
      std::fprintf(stderr, "usage: %s [--json PATH] [--models 8b,70b] [--m 1,16,64,...] [--iters N>=20]\n", argv[0]);
      return 2;
    }
  }
  const auto t_start = std::chrono::steady_clock::now();
  try {
    int dev = 0;
    FP8LM_CUDA_CHECK(cudaGetDevice(&dev));
    cudaDeviceProp prop{};
    FP8LM_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    std::printf("device: %s, %d SMs, L2 %.0f MB, %.1f GB\n", prop.name, prop.multiProcessorCount,
                prop.l2CacheSize / 1e6, double(prop.totalGlobalMem) / 1e9);
    const size_t rotate_bytes = 2 * size_t(prop.l2CacheSize);

    DeviceAllocator alloc;
    CublasLtGemm gemm(64ull << 20, &alloc);
    Stream stream;
    std::vector<Result> results;
    uint64_t seed = 12345;

    auto fill = [&](void* p, size_t count, int kind) {
      if (kind == 0) fill_bf16<<<grid_for(count), 256, 0, stream>>>(static_cast<__nv_bfloat16*>(p), count, seed++);
      if (kind == 1) fill_fp8<<<grid_for(count), 256, 0, stream>>>(static_cast<uint8_t*>(p), count, seed++);
      if (kind == 2) fill_scales<<<grid_for(count), 256, 0, stream>>>(static_cast<float*>(p), count, seed++);
      FP8LM_CUDA_CHECK(cudaGetLastError());
    };

    for (const Layer& L : kLayers) {
      if (models.find(L.model) == std::string::npos) continue;
      const int64_t n = L.n, k = L.k, kb = cdiv(k, 128), nb = cdiv(n, 128);
      const int64_t max_m = *std::max_element(ms.begin(), ms.end());
      const size_t wb16 = size_t(n * k) * 2, wb8 = size_t(n * k);
      const int r16 = int(std::max<size_t>(2, (rotate_bytes + wb16 - 1) / wb16));
      const int r8 = int(std::max<size_t>(2, (rotate_bytes + wb8 - 1) / wb8));

      // Weights: r16 BF16 copies; r8 FP8 copies, each with its tensor, channel and block scales.
      std::vector<DeviceBuffer> w16, w8, ws_t, ws_c, ws_b;
      for (int r = 0; r < r16; ++r) {
        w16.emplace_back(alloc, wb16, stream);
        fill(w16.back().get(), size_t(n * k), 0);
      }
      for (int r = 0; r < r8; ++r) {
        w8.emplace_back(alloc, wb8, stream);
        fill(w8.back().get(), wb8, 1);
        ws_t.emplace_back(alloc, 4, stream);
        fill(ws_t.back().get(), 1, 2);
        ws_c.emplace_back(alloc, size_t(n) * 4, stream);
        fill(ws_c.back().get(), size_t(n), 2);
        ws_b.emplace_back(alloc, size_t(nb * kb) * 4, stream);
        fill(ws_b.back().get(), size_t(nb * kb), 2);
      }
      // Activations (the largest M; smaller M use the first rows) and their scales.
      DeviceBuffer x16(alloc, size_t(max_m * k) * 2, stream), x8(alloc, size_t(max_m * k), stream);
      DeviceBuffer xs_t(alloc, 4, stream), xs_tok(alloc, size_t(max_m) * 4, stream),
          xs_grp(alloc, size_t(max_m * kb) * 4, stream), xs_cub(alloc, size_t(max_m * kb) * 4, stream);
      DeviceBuffer out(alloc, size_t(max_m * n) * 2, stream);
      fill(x16.get(), size_t(max_m * k), 0);
      fill(x8.get(), size_t(max_m * k), 1);
      fill(xs_t.get(), 1, 2);
      fill(xs_tok.get(), size_t(max_m), 2);
      fill(xs_grp.get(), size_t(max_m * kb), 2);
      stream.synchronize();

      for (int64_t m : ms) {
        group_scales_to_cublas(xs_grp.as<float>(), m, k, xs_cub.as<float>(), stream);
        for (int mode = 0; mode < kModes; ++mode) {
          Result res;
          res.model = L.model;
          res.layer = L.name;
          res.m = m;
          res.n = n;
          res.k = k;
          res.mode = mode;
          res.rotate = mode == kBf16 ? r16 : r8;
          auto args_for = [&](int r) {
            GemmArgs a;
            a.m = m;
            a.n = n;
            a.k = k;
            a.d = out.get();
            if (mode == kBf16) {
              a.a = x16.get();
              a.b = w16[size_t(r % r16)].get();
              return a;
            }
            a.a = x8.get();
            a.b = w8[size_t(r % r8)].get();
            if (mode == kTensor) {
              a.mode = GemmScaleMode::kTensor;
              a.a_scale = xs_t.as<float>();
              a.b_scale = ws_t[size_t(r % r8)].as<float>();
            } else if (mode == kOuter) {
              a.mode = GemmScaleMode::kOuterVector;
              a.a_scale = xs_tok.as<float>();
              a.b_scale = ws_c[size_t(r % r8)].as<float>();
            } else {
              a.mode = GemmScaleMode::kBlock;
              a.b_scale = ws_b[size_t(r % r8)].as<float>();  // kb % 4 == 0 for every Llama shape
              a.a_scale = mode == kBlock ? xs_grp.as<float>() : xs_cub.as<float>();
              a.cublas_scale_layout = mode == kBlockPre;
            }
            return a;
          };
          if (mode == kBlockPre && kb % 4 != 0) continue;
          // The CUTLASS GEMM on the same operands as the cuBLASLt outer-vector one, the mode's
          // configuration at every M.
          auto cutlass_args = [&](int r) {
            CutlassFp8GemmArgs c;
            c.m = m;
            c.n = n;
            c.k = k;
            c.x = x8.as<uint8_t>();
            c.x_scale = xs_tok.as<float>();
            c.w = w8[size_t(r % r8)].as<uint8_t>();
            c.w_scale = ws_c[size_t(r % r8)].as<float>();
            c.y = out.get();
            c.config =
                mode == kCutlassPingpong ? CutlassFp8Config::kPingpong64x128 : CutlassFp8Config::kStreamK128x128;
            return c;
          };
          std::optional<DeviceBuffer> cutlass_ws;
          auto run = [&](int i) {
#ifdef FP8LM_WITH_CUTLASS
            if (is_cutlass(mode)) {
              cutlass_fp8_gemm(cutlass_args(i), cutlass_ws ? cutlass_ws->get() : nullptr,
                               cutlass_ws ? cutlass_ws->bytes() : 0, stream);
              return;
            }
#endif
            gemm.run(args_for(i), stream);
          };
          if (is_cutlass(mode)) {
#ifdef FP8LM_WITH_CUTLASS
            res.reason = cutlass_fp8_gemm_unsupported(cutlass_args(0));
            if (res.reason.empty()) {
              const size_t bytes = cutlass_fp8_gemm_workspace_bytes(cutlass_args(0));
              if (bytes > 0) cutlass_ws.emplace(alloc, bytes, stream);
            }
#else
            res.reason = "built without the CUTLASS headers";
#endif
          } else if (!gemm.supported(args_for(0))) {
            res.reason = gemm.unsupported_reason(args_for(0));
          }
          if (!res.reason.empty()) {
            results.push_back(res);
            continue;
          }
          res.supported = true;
          for (int i = 0; i < 3; ++i) run(i);
          stream.synchronize();
          // One call's time, to size the run: ≥ min_iters calls, more while cheap (≤ ~0.2 s).
          EventTimer probe;
          probe.start(stream);
          run(3);
          probe.stop(stream);
          const double probe_ms = probe.elapsed_ms();
          const int iters = std::clamp(int(200.0 / std::max(probe_ms, 1e-3)), min_iters, 100);
          std::vector<Event> ev(static_cast<size_t>(iters + 1));
          spin<<<1, 1, 0, stream>>>(uint64_t(2e6));  // 2 ms: the host enqueues everything meanwhile
          FP8LM_CUDA_CHECK(cudaGetLastError());
          ev[0].record(stream);
          for (int i = 0; i < iters; ++i) {
            run(i);
            ev[size_t(i + 1)].record(stream);
          }
          stream.synchronize();
          std::vector<double> us(static_cast<size_t>(iters));
          for (int i = 0; i < iters; ++i) us[size_t(i)] = 1e3 * Event::elapsed_ms(ev[size_t(i)], ev[size_t(i + 1)]);
          std::sort(us.begin(), us.end());
          res.iters = iters;
          res.median_us = iters % 2 ? us[size_t(iters / 2)] : 0.5 * (us[size_t(iters / 2 - 1)] + us[size_t(iters / 2)]);
          res.min_us = us.front();
          res.max_us = us.back();
          const double t = res.median_us * 1e-6;
          const double flops = 2.0 * double(m) * double(n) * double(k);
          const size_t elem = mode == kBf16 ? 2 : 1;
          double wbytes = double(n * k) * double(elem);
          if (mode == kOuter || is_cutlass(mode)) wbytes += 4.0 * double(n);
          if (mode == kBlock || mode == kBlockPre) wbytes += 4.0 * double(nb * kb);
          const double bytes = wbytes + double(m * k) * double(elem) + double(m * n) * 2.0;
          const double peak = mode == kBf16 ? kBf16Peak : kFp8Peak;
          res.tflops = flops / t / 1e12;
          res.weight_gbs = wbytes / t / 1e9;
          res.total_gbs = bytes / t / 1e9;
          res.pct_compute = 100.0 * flops / t / peak;
          res.pct_bandwidth = 100.0 * bytes / t / kBandwidth;
          res.pct_roofline = 100.0 * std::max(flops / peak, bytes / kBandwidth) / t;
          results.push_back(res);
        }
        std::fprintf(stderr, "  %s %s m=%lld done\n", L.model, L.name, static_cast<long long>(m));
      }
    }

    // ---- tables
    auto find = [&](const std::string& model, const std::string& layer, int64_t m, int mode) -> const Result* {
      for (const Result& r : results)
        if (r.model == model && r.layer == layer && r.m == m && r.mode == mode) return &r;
      return nullptr;
    };
    // The fastest supported CUTLASS configuration of a case, or null.
    auto best_cutlass = [&](const std::string& model, const std::string& layer, int64_t m) -> const Result* {
      const Result* best = nullptr;
      for (int mode : {kCutlassStreamK, kCutlassPingpong}) {
        const Result* r = find(model, layer, m, mode);
        if (r && r->supported && (best == nullptr || r->median_us < best->median_us)) best = r;
      }
      return best;
    };
    for (const char* model : {"8b", "70b"}) {
      if (models.find(model) == std::string::npos) continue;
      std::printf("\n### Llama-3.1-%s: TFLOP/s (%% of roofline), weights read at GB/s\n\n", model);
      std::printf("| layer | N×K | M |");
      for (int mode = 0; mode < kModes; ++mode) std::printf(" %s |", kModeShort[mode]);
      std::printf("\n|---|---|---|");
      for (int mode = 0; mode < kModes; ++mode) std::printf("---|");
      std::printf("\n");
      for (const Layer& L : kLayers) {
        if (std::string(L.model) != model) continue;
        for (int64_t m : ms) {
          std::printf("| %s | %lld×%lld | %lld |", L.name, static_cast<long long>(L.n), static_cast<long long>(L.k),
                      static_cast<long long>(m));
          for (int mode = 0; mode < kModes; ++mode) {
            const Result* r = find(model, L.name, m, mode);
            if (r == nullptr) std::printf(" – |");
            else if (!r->supported) std::printf(" no algorithm |");
            else std::printf(" %.0f (%.0f%%), %.0f GB/s |", r->tflops, r->pct_roofline, r->weight_gbs);
          }
          std::printf("\n");
        }
      }
      std::printf("\nRatios at M ≥ 4096 (median times):\n\n| layer | M | FP8 tensor / BF16 | FP8 outer-vec / BF16 | FP8 block / BF16 | FP8 block / FP8 tensor | FP8 block* / FP8 tensor | CUTLASS / cuBLASLt outer-vec |\n|---|---|---|---|---|---|---|---|\n");
      for (const Layer& L : kLayers) {
        if (std::string(L.model) != model) continue;
        for (int64_t m : ms) {
          if (m < 4096) continue;
          const Result *b = find(model, L.name, m, kBf16), *t = find(model, L.name, m, kTensor),
                       *o = find(model, L.name, m, kOuter), *bl = find(model, L.name, m, kBlock),
                       *bp = find(model, L.name, m, kBlockPre), *co = best_cutlass(model, L.name, m);
          auto ratio = [](const Result* num, const Result* den) {
            return (num && den && num->supported && den->supported) ? den->median_us / num->median_us : NAN;
          };
          std::printf("| %s | %lld | %.2f× | %.2f× | %.2f× | %.0f%% | %.0f%% | %.2f× |\n", L.name,
                      static_cast<long long>(m), ratio(t, b), ratio(o, b), ratio(bl, b), 100 * ratio(bl, t),
                      100 * ratio(bp, t), ratio(co, o));
        }
      }
      // Issue 19's per-shape choice for per-token × per-channel: the fastest CUTLASS
      // configuration against cuBLASLt, and the faster of the two against BF16, at every M.
      std::printf("\nPer-token × per-channel FP8, every M (median times): the best CUTLASS configuration "
                  "and the best of CUTLASS / cuBLASLt\n\n| layer | M | best CUTLASS | CUTLASS / cuBLASLt | "
                  "best FP8 / BF16 |\n|---|---|---|---|---|\n");
      for (const Layer& L : kLayers) {
        if (std::string(L.model) != model) continue;
        for (int64_t m : ms) {
          const Result *b = find(model, L.name, m, kBf16), *o = find(model, L.name, m, kOuter),
                       *co = best_cutlass(model, L.name, m);
          const bool both = o && o->supported && co;
          const Result* best = both ? (co->median_us < o->median_us ? co : o) : (co ? co : o);
          const double vs_cublas = both ? o->median_us / co->median_us : NAN;
          const double vs_bf16 = best && best->supported && b && b->supported ? b->median_us / best->median_us : NAN;
          std::printf("| %s | %lld | %s | %.2f× | %.2f× |\n", L.name, static_cast<long long>(m),
                      co ? kModeShort[co->mode] : "—", vs_cublas, vs_bf16);
        }
      }
    }

    if (!json_path.empty()) {
      FILE* f = std::fopen(json_path.c_str(), "w");
      if (f == nullptr) throw std::runtime_error("cannot write " + json_path);
      std::fprintf(f, "{\n  \"benchmark\": \"bench_cuda_gemm\",\n  \"device\": \"%s\",\n", json_escape(prop.name).c_str());
      std::fprintf(f, "  \"ceilings\": {\"fp8_tflops\": 1426, \"bf16_tflops\": 794, \"hbm_tbs\": 4.29},\n");
      std::fprintf(f, "  \"results\": [\n");
      for (size_t i = 0; i < results.size(); ++i) {
        const Result& r = results[i];
        std::fprintf(f,
                     "    {\"model\": \"llama-3.1-%s\", \"layer\": \"%s\", \"m\": %lld, \"n\": %lld, \"k\": %lld, "
                     "\"mode\": \"%s\", \"supported\": %s",
                     r.model.c_str(), r.layer.c_str(), static_cast<long long>(r.m), static_cast<long long>(r.n),
                     static_cast<long long>(r.k), kModeNames[r.mode], r.supported ? "true" : "false");
        if (r.supported) {
          std::fprintf(f,
                       ", \"iters\": %d, \"weight_copies\": %d, \"median_us\": %.3f, \"min_us\": %.3f, \"max_us\": %.3f, "
                       "\"tflops\": %.2f, \"weight_gbs\": %.1f, \"total_gbs\": %.1f, \"pct_compute_ceiling\": %.1f, "
                       "\"pct_bandwidth_ceiling\": %.1f, \"pct_roofline\": %.1f",
                       r.iters, r.rotate, r.median_us, r.min_us, r.max_us, r.tflops, r.weight_gbs, r.total_gbs,
                       r.pct_compute, r.pct_bandwidth, r.pct_roofline);
        } else {
          std::fprintf(f, ", \"reason\": \"%s\"", json_escape(r.reason).c_str());
        }
        std::fprintf(f, "}%s\n", i + 1 < results.size() ? "," : "");
      }
      std::fprintf(f, "  ]\n}\n");
      std::fclose(f);
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    std::printf("\n%zu configurations in %.1f s; allocator peak %.2f GB reserved\n", results.size(), secs,
                double(alloc.stats().peak_bytes_reserved) / 1e9);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda_gemm: %s\n", e.what());
    return 1;
  }
  return 0;
}
