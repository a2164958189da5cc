// The persistent decode kernel's weight stream alone (issue 41): how fast its weight ring
// (src/backend/cuda/persistent/weight_ring.cuh) moves a decode step's FP8 weights when nothing
// else runs, and what the phase barriers between a layer's GEMVs and attention's time cost it.
// The full kernel spends ~2.4× the copy roofline's time on a step; this program separates the
// stream's own pace from the rest (staging, epilogues, attention, the phases' waits).
//
//   bench_cuda_weight_stream [--model bench/configs/llama-3.1-8b] [--layers N] [--slots 10,14]
//                            [--gap-us 0,20] [--iters 10] [--json PATH]
//
// The weights: the model's q/k/v, o, gate/up and down projections (config.json's sizes; E4M3
// codes, random; one copy per layer, 6.98 GB for Llama-3.1-8B's 32: never in the 50 MB L2; no
// lm_head). The instructions and each CTA's queue are persistent::build_schedule's for one row on
// one CTA an SM, the kernel's own dealing. One launch runs them all, 7 consumer warps and a
// loader warp a CTA, the loader streaming every tile of the queue through the ring's tensor-map
// pages as the kernel's loader does. The forms:
//   stream     the consumers free each page as soon as it has landed: the ring's own pace
//   products   the consumers multiply every page by a staged input row (the kernel's FP16 MMA
//              products, page_products) before freeing it: its tiles without staging or epilogue
//   phases     products, and every instruction first waits until the phase it reads is complete
//              on every CTA (the kernel's phase counters: thread 0 polls with an acquire load,
//              the consumer warps' barrier passes it on); a warp counts itself done after its
//              pages of a tile. Attention instructions do nothing but count.
//   phases+gap phases, and each attention instruction holds its CTA's consumers for --gap-us µs
//              (attention's time in the kernel: ~21 µs a layer at 1k context on an H100, v9),
//              while the loader goes on filling the ring with the next phases' pages
//   stream-1d, products-1d  as stream and products, but every page one contiguous block of the
//              weights (cp.async.bulk of 16 rows × the page's steps, as if the weights were stored
//              tile by tile, page by page) instead of two 2-D boxes of 8 rows × ≤ 960 bytes from
//              rows k bytes apart: whether the row-major layout costs the stream its DRAM efficiency
// Each form at each --slots (the kernel has 10 at batch 1: its staging takes the rest of shared
// memory; 14 is all an SM leaves). Each time is the median of --iters launches after 2 warm-ups,
// one launch between two events; GB/s counts the weight bytes once. "of copy" is against a 4 GiB
// device-to-device copy in the same run (bytes read + written over its time, the median of 10:
// docs/results/issue41/copy_bandwidth.py's measure).
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cuda/common/check.h"
#include "backend/cuda/persistent/decode_program.h"
#include "backend/cuda/persistent/weight_map.h"
#include "backend/cuda/persistent/weight_ring.cuh"

using namespace fp8lm::cuda;
using namespace fp8lm::cuda::persistent;

namespace {

constexpr int kWarps = kThreads / 32;
enum class Form { kStream, kProducts, kPhases, kStream1d, kProducts1d };

// One instruction as this program runs it: a GEMV tile of `linear` (rows ra…ra+7, rb…rb+7), or
// (linear < 0) an attention instruction; `phase` its counter, `input` the counter it waits for
// (-1: none).
struct StreamInstruction {
  int32_t linear = -1;
  int32_t ra = 0, rb = 0;
  int32_t tile = 0;  // the tile's index in its linear layer (the 1-D forms' page addresses)
  int32_t phase = 0, input = -1;
};
struct StreamLinear {
  const void* map = nullptr;  // a CUtensorMap on the device
  const unsigned char* w = nullptr;
  int32_t steps = 0, page_steps = 0;
};
struct StreamParams {
  const StreamInstruction* instructions = nullptr;
  const StreamLinear* linears = nullptr;
  const int32_t* queue_start = nullptr;
  const int32_t* queue = nullptr;
  unsigned* counters = nullptr;       // per phase, zeroed before each launch
  const unsigned* targets = nullptr;  // per phase: its instructions × kWarps
  float* sink = nullptr;              // the products, so that they are not optimized away
  int32_t slots = 0, x_bytes = 0;
  int32_t form = 0;
  uint64_t gap_ns = 0;
};

__device__ __forceinline__ void consumers_sync() { asm volatile("bar.sync 1, %0;" ::"n"(kThreads) : "memory"); }

__device__ __forceinline__ unsigned acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__global__ void __launch_bounds__(kBlockThreads, 1) stream_kernel(const StreamParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(8) uint64_t full[kMaxSlots], empty[kMaxSlots];
  __shared__ uint32_t page[kMaxSlots];
  unsigned char* xs = smem;  // one staged row of E4M3 codes (1.0 each)
  const Ring ring{smem + p.x_bytes, full, empty, page, p.slots};
  for (int i = threadIdx.x; i < p.x_bytes; i += blockDim.x) xs[i] = 0x38;
  if (threadIdx.x < p.slots) {
    mbar_init(full + threadIdx.x, 1), mbar_init(empty + threadIdx.x, 1);
    page[threadIdx.x] = ~0u;
  }
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  __syncthreads();
  const int q0 = p.queue_start[blockIdx.x], q1 = p.queue_start[blockIdx.x + 1];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  uint32_t seq = 0;
  const Form form = Form(p.form);
  if (warp == kWarps) {  // the loader
    for (int qi = q0; qi < q1; ++qi) {
      const StreamInstruction ins = p.instructions[p.queue[qi]];
      if (ins.linear < 0) continue;
      const StreamLinear l = p.linears[ins.linear];
      const int pages = tile_pages(l.steps);
      for (int j = 0; j < pages; ++j, ++seq) {
        if (form != Form::kStream1d && form != Form::kProducts1d) {
          issue_page<false>(ring, seq, l.map, ins.ra, ins.rb, j * l.page_steps, l.page_steps, l.steps);
          continue;
        }
        // The tile's 16 rows as one block of 16 · steps · 64 bytes, page j its bytes from 16 · s0 · 64.
        const int slot = int(seq % unsigned(ring.slots));
        if (seq >= unsigned(ring.slots)) mbar_wait(ring.empty + slot, (seq / unsigned(ring.slots) - 1) & 1);
        if (lane == 0) {
          ring.page[slot] = seq;
          const int s0 = j * l.page_steps, n = min(l.page_steps, l.steps - s0);
          const uint32_t bytes = uint32_t(kTileRows * n * 64);
          const unsigned char* src = l.w + (int64_t(ins.tile) * l.steps + s0) * kTileRows * 64;
          mbar_arrive_expect_tx(ring.full + slot, bytes);
          asm volatile(
              "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                  smem_addr(ring.base + slot * kSlotBytes)),
              "l"(src), "r"(bytes), "r"(smem_addr(ring.full + slot))
              : "memory");
        }
        __syncwarp();
      }
    }
    return;
  }
  const unsigned char* xr = xs + 16 * (lane & 3);
  const bool has_x = (lane >> 2) == 0;  // one row: the MMA's first activation column
  float acc[4] = {};
  int met = -1;
  for (int qi = q0; qi < q1; ++qi) {
    const StreamInstruction ins = p.instructions[p.queue[qi]];
    if (form == Form::kPhases && ins.input >= 0 && ins.input != met) {
      if (threadIdx.x == 0)
        while (acquire(p.counters + ins.input) < p.targets[ins.input]) __nanosleep(64);
      consumers_sync();
      met = ins.input;
    }
    if (ins.linear < 0) {
      if (form != Form::kPhases) continue;
      if (threadIdx.x == 0 && p.gap_ns > 0) {
        const uint64_t end = global_ns() + p.gap_ns;
        while (global_ns() < end) __nanosleep(256);
      }
      consumers_sync();
    } else {
      const StreamLinear l = p.linears[ins.linear];
      const int pages = tile_pages(l.steps), ps = l.page_steps;
      for (int j = (warp + kWarps - int(seq % unsigned(kWarps))) % kWarps; j < pages; j += kWarps) {
        const uint32_t sq = seq + uint32_t(j);
        const unsigned char* pg = wait_page(ring, sq);
        if (form != Form::kStream && form != Form::kStream1d) {
          const int s0 = min(j * ps, l.steps), s1 = min(s0 + ps, l.steps);
          page_products<true>(pg, ps * 64, s0, s1, xr, has_x, acc);
        }
        release_page(ring, sq);
      }
      seq += uint32_t(pages);
    }
    if (form == Form::kPhases) {
      __threadfence();
      __syncwarp();
      if (lane == 0) atomicAdd(p.counters + ins.phase, 1u);
    }
  }
  p.sink[blockIdx.x * kThreads + threadIdx.x] = acc[0] + acc[1] + acc[2] + acc[3];
}

__global__ void fill_codes(unsigned char* w, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t x = uint32_t(i) * 2654435761u ^ seed;
    x ^= x >> 15, x *= 2246822519u, x ^= x >> 13;
    w[i] = uint8_t(x & 0x77u);  // finite E4M3 codes of both signs below 2^-1 … 2^6 (never 0x7F)
  }
}

template <class T>
T* upload(const std::vector<T>& v) {
  T* d = nullptr;
  FP8LM_CUDA_CHECK(cudaMalloc(&d, std::max<size_t>(v.size(), 1) * sizeof(T)));
  FP8LM_CUDA_CHECK(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Times `call` (a launch on stream 0) `iters` times after 2 warm-ups, `prepare` queued before
// each (outside the events): the median ms.
template <class F, class P>
double time_ms(int iters, F&& call, P&& prepare) {
  cudaEvent_t a, b;
  FP8LM_CUDA_CHECK(cudaEventCreate(&a));
  FP8LM_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<double> ms;
  for (int i = 0; i < iters + 2; ++i) {
    prepare();
    FP8LM_CUDA_CHECK(cudaEventRecord(a));
    call();
    FP8LM_CUDA_CHECK(cudaEventRecord(b));
    FP8LM_CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    FP8LM_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    if (i >= 2) ms.push_back(t);
  }
  FP8LM_CUDA_CHECK(cudaEventDestroy(a));
  FP8LM_CUDA_CHECK(cudaEventDestroy(b));
  return median(ms);
}

std::vector<int> int_list(const std::string& s) {
  std::vector<int> out;
  size_t i = 0;
  while (i <= s.size()) {
    const size_t j = std::min(s.find(',', i), s.size());
    out.push_back(std::stoi(s.substr(i, j - i)));
    i = j + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "bench/configs/llama-3.1-8b", json_path;
  int layers = 0, iters = 10;
  std::vector<int> slot_counts = {10, 14}, gaps = {0, 20};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    try {
      if (a == "--model") model = value();
      else if (a == "--layers") layers = std::stoi(value());
      else if (a == "--slots") slot_counts = int_list(value());
      else if (a == "--gap-us") gaps = int_list(value());
      else if (a == "--iters") iters = std::stoi(value());
      else if (a == "--json") json_path = value();
      else {
        std::fprintf(stderr, "unknown option %s (--model, --layers, --slots, --gap-us, --iters, --json)\n", a.c_str());
        return 2;
      }
    } catch (const std::exception&) {
      std::fprintf(stderr, "%s: not a number or list of numbers\n", a.c_str());
      return 2;
    }
  }
  for (int s : slot_counts)
    if (s < 2 || s > kMaxSlots) {
      std::fprintf(stderr, "--slots %d: the ring takes 2 to %d slots\n", s, kMaxSlots);
      return 2;
    }
  if (iters < 1) {
    std::fprintf(stderr, "--iters %d: at least 1\n", iters);
    return 2;
  }
  std::ifstream in(model + "/config.json");
  if (!in) {
    std::fprintf(stderr, "%s/config.json: cannot open\n", model.c_str());
    return 2;
  }
  const nlohmann::json c = nlohmann::json::parse(in, nullptr, false);
  if (c.is_discarded()) {
    std::fprintf(stderr, "%s/config.json: not JSON\n", model.c_str());
    return 2;
  }
  ModelShape shape;
  try {
    shape.layers = layers > 0 ? layers : c.at("num_hidden_layers").get<int>();
    shape.hidden = c.at("hidden_size").get<int>();
    shape.intermediate = c.at("intermediate_size").get<int>();
    shape.vocab = c.at("vocab_size").get<int>();
    shape.q_heads = c.at("num_attention_heads").get<int>();
    shape.kv_heads = c.value("num_key_value_heads", shape.q_heads);
    shape.head_dim = c.value("head_dim", shape.hidden / shape.q_heads);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s/config.json: %s\n", model.c_str(), e.what());
    return 2;
  }

  cudaDeviceProp prop{};
  FP8LM_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const int ctas = prop.multiProcessorCount;
  Schedule sched;
  try {
    sched = build_schedule(shape, 1, ctas);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }

  // The weights, one set a layer: qkv, o, gate/up, down.
  const int64_t qkv_rows = int64_t(shape.q_heads + 2 * shape.kv_heads) * shape.head_dim;
  const int64_t dims[4][2] = {{qkv_rows, shape.hidden},
                              {shape.hidden, int64_t(shape.q_heads) * shape.head_dim},
                              {2 * int64_t(shape.intermediate), shape.hidden},
                              {shape.hidden, shape.intermediate}};
  std::vector<void*> buffers;
  std::vector<CUtensorMap> maps;
  std::vector<StreamLinear> linears;
  double weight_bytes = 0;
  int64_t max_k = 0;
  for (int l = 0; l < shape.layers; ++l)
    for (const auto& d : dims) {
      void* w = nullptr;
      const size_t bytes = size_t(d[0] * d[1]);
      FP8LM_CUDA_CHECK(cudaMalloc(&w, bytes));
      fill_codes<<<4 * ctas, 256>>>(static_cast<unsigned char*>(w), bytes, uint32_t(buffers.size()) * 7919u);
      buffers.push_back(w);
      DeviceLinear dl;
      dl.w = w, dl.n = int32_t(d[0]), dl.k = int32_t(d[1]), dl.fp8 = true;
      dl.page_steps = page_steps(int(d[1] / 64));
      maps.push_back(weight_tensor_map(dl));
      linears.push_back({nullptr, static_cast<const unsigned char*>(w), int32_t(d[1] / 64), dl.page_steps});
      weight_bytes += double(bytes);
      max_k = std::max(max_k, d[1]);
    }
  FP8LM_CUDA_CHECK(cudaGetLastError());
  CUtensorMap* d_maps = upload(maps);
  for (size_t i = 0; i < linears.size(); ++i) linears[i].map = d_maps + i;

  // build_schedule's instructions as tiles of those weights (lm_head left out).
  std::vector<StreamInstruction> instructions;
  std::vector<int32_t> keep(sched.instructions.size(), -1);
  for (size_t i = 0; i < sched.instructions.size(); ++i) {
    const Instruction& ins = sched.instructions[i];
    const Op op = Op(ins.op);
    if (op == Op::kLmHead) continue;
    StreamInstruction s;
    const int phase = int(op);  // qkv 0, attention 1, o 2, gate/up 3, down 4
    s.phase = ins.layer * kPhasesPerLayer + phase;
    s.input = s.phase - 1;  // the previous phase, of this layer or the last one's down
    const int base = ins.layer * 4;
    const int r = ins.a * kTileRows;
    s.tile = ins.a;
    switch (op) {
      case Op::kQkv: s.linear = base, s.ra = r, s.rb = r + 8; break;
      case Op::kAttention: s.linear = -1; break;
      case Op::kO: s.linear = base + 1, s.ra = r, s.rb = r + 8; break;
      case Op::kGateUp: s.linear = base + 2, s.ra = ins.a * 8, s.rb = shape.intermediate + ins.a * 8; break;
      case Op::kDown: s.linear = base + 3, s.ra = r, s.rb = r + 8; break;
      default: break;
    }
    keep[i] = int32_t(instructions.size());
    instructions.push_back(s);
  }
  std::vector<int32_t> queue, queue_start{0};
  for (int b = 0; b < ctas; ++b) {
    for (int qi = sched.queue_start[size_t(b)]; qi < sched.queue_start[size_t(b) + 1]; ++qi)
      if (keep[size_t(sched.queue[size_t(qi)])] >= 0) queue.push_back(keep[size_t(sched.queue[size_t(qi)])]);
    queue_start.push_back(int32_t(queue.size()));
  }
  const int phases = shape.layers * kPhasesPerLayer;
  std::vector<unsigned> targets(size_t(phases), 0);
  for (const StreamInstruction& s : instructions) targets[size_t(s.phase)] += kWarps;

  StreamParams p;
  p.instructions = upload(instructions);
  p.linears = upload(linears);
  p.queue_start = upload(queue_start);
  p.queue = upload(queue);
  p.targets = upload(targets);
  FP8LM_CUDA_CHECK(cudaMalloc(&p.counters, size_t(phases) * sizeof(unsigned)));
  FP8LM_CUDA_CHECK(cudaMalloc(&p.sink, size_t(ctas) * kThreads * sizeof(float)));
  p.x_bytes = int32_t((max_k + 16 + 127) / 128 * 128);

  // The copy ceiling in the same run.
  const size_t copy_bytes = size_t(4) << 30;
  void *ca = nullptr, *cb = nullptr;
  FP8LM_CUDA_CHECK(cudaMalloc(&ca, copy_bytes));
  FP8LM_CUDA_CHECK(cudaMalloc(&cb, copy_bytes));
  FP8LM_CUDA_CHECK(cudaMemset(ca, 1, copy_bytes));
  const double copy_ms =
      time_ms(10, [&] { FP8LM_CUDA_CHECK(cudaMemcpyAsync(cb, ca, copy_bytes, cudaMemcpyDeviceToDevice)); }, [] {});
  FP8LM_CUDA_CHECK(cudaFree(ca));
  FP8LM_CUDA_CHECK(cudaFree(cb));
  const double copy_gbs = 2.0 * double(copy_bytes) / (copy_ms * 1e6);

  std::printf("%s, %d SMs; %s: %d layers, %.2f GB of FP8 weights a step (lm_head left out); copy %.1f GB/s\n",
              prop.name, ctas, model.c_str(), shape.layers, weight_bytes / 1e9, copy_gbs);
  std::printf("%-12s %6s %7s %10s %9s %8s\n", "form", "slots", "gap µs", "ms", "GB/s", "of copy");
  nlohmann::json rows = nlohmann::json::array();
  FP8LM_CUDA_CHECK(cudaFuncSetAttribute(stream_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSharedLimit)));
  struct Case {
    Form form;
    const char* name;
    int gap;
  };
  std::vector<Case> cases = {{Form::kStream, "stream", 0},
                             {Form::kStream1d, "stream-1d", 0},
                             {Form::kProducts, "products", 0},
                             {Form::kProducts1d, "products-1d", 0}};
  for (int g : gaps) cases.push_back({Form::kPhases, g == 0 ? "phases" : "phases+gap", g});
  for (int slots : slot_counts) {
    const size_t smem = size_t(p.x_bytes) + size_t(slots) * kSlotBytes;
    if (smem > kSharedLimit) {
      std::printf("%d slots: %zu bytes of shared memory, over %zu — skipped\n", slots, smem, kSharedLimit);
      continue;
    }
    for (const Case& k : cases) {
      p.slots = slots, p.form = int(k.form), p.gap_ns = uint64_t(k.gap) * 1000;
      const double ms = time_ms(
          iters,
          [&] {
            stream_kernel<<<ctas, kBlockThreads, smem>>>(p);
            FP8LM_CUDA_CHECK(cudaGetLastError());
          },
          [&] { FP8LM_CUDA_CHECK(cudaMemsetAsync(p.counters, 0, size_t(phases) * sizeof(unsigned))); });
      const double gbs = weight_bytes / (ms * 1e6);
      std::printf("%-12s %6d %7d %10.3f %9.1f %7.1f%%\n", k.name, slots, k.gap, ms, gbs, 100.0 * gbs / copy_gbs);
      rows.push_back({{"form", k.name}, {"slots", slots}, {"gap_us", k.gap}, {"ms", ms}, {"gb_per_s", gbs},
                      {"share_of_copy", gbs / copy_gbs}});
    }
  }
  if (!json_path.empty()) {
    const nlohmann::json out = {{"device", prop.name}, {"sms", ctas}, {"model", model}, {"layers", shape.layers},
                                {"weight_bytes", weight_bytes}, {"copy_gb_per_s", copy_gbs}, {"iters", iters},
                                {"rows", rows}};
    std::ofstream(json_path) << out.dump(2) << "\n";
  }
  for (void* b : buffers) FP8LM_CUDA_CHECK(cudaFree(b));
  return 0;
}
