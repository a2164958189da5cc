// CudaOps' internals, shared by its source files (cuda_ops.cpp, cuda_ops_moe.cpp): the device
// forms of uploaded weights and of the KV cache, the step scratch arena, the backend's state
// (CudaOps::Impl) and the op timer. Private to the CUDA backend: nothing outside
// src/backend/cuda includes it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/cuda/common/check.h"
#include "backend/cuda/gemm/cublaslt_gemm.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/common/device_memory.h"
#include "backend/cuda/rank_link.h"
#include "backend/cuda/gemv/fp8_gemv.h"
#include "backend/cuda/linear_plan.h"
#include "backend/cuda/attention/paged_attention.h"
#include "backend/cuda/common/stream.h"
#include "common/error.h"
#include "numerics/fp8_format.h"

namespace fp8lm::cuda {
namespace ops_impl {

using backend::Tensor;
using bf16 = __nv_bfloat16;


inline bf16* B(Tensor t) { return static_cast<bf16*>(t.data); }

inline void require_shape(Tensor t, int64_t rows, int64_t cols, const char* op) {
  if (t.rows != rows || t.cols != cols)
    throw Error(std::string("cuda ops: ") + op + " expects [" + std::to_string(rows) + ", " + std::to_string(cols) +
                "], got [" + std::to_string(t.rows) + ", " + std::to_string(t.cols) + "]");
}

template <typename T>
const T& as(const backend::Weight& w, const char* what) {
  const T* p = dynamic_cast<const T*>(&w);
  if (p == nullptr) throw Error(std::string("cuda ops: ") + what + " was not uploaded by the CUDA backend");
  return *p;
}

struct VectorWeight final : backend::Weight {
  DeviceBuffer values;  // float32
  int64_t size = 0;
};

struct EmbeddingWeight final : backend::Weight {
  DeviceBuffer table;       // BF16 [vocab, dim] or FP8 codes
  DeviceBuffer row_scales;  // FP8: float [vocab]
  bool fp8 = false;
  Fp8Format format = Fp8Format::kE4M3;
  int64_t vocab = 0, dim = 0;
};

// One linear layer on the device and how each size of input is computed (its plan).
struct LinearWeight final : backend::Weight {
  int64_t n = 0, k = 0;
  LinearPlan plan;
  DeviceBuffer w;        // BF16 [n, k] or E4M3 codes [n, k]
  DeviceBuffer bias;     // BF16 [n] or empty
  // FP8: scales in fp8lm's grid (the GEMV's layouts) …
  DeviceBuffer w_scale;
  // … and as cuBLASLt's mode wants them (kOuterVector: [n]; kBlock: cuBLASLt's block layout; kTensor: w_scale).
  DeviceBuffer w_scale_gemm;
  DeviceBuffer static_scale;  // float [1]: plan.act_quant.static_scale points here
};

struct CudaKvCache final : backend::KvCache {
  backend::KvCacheShape shape_;
  std::vector<backend::KvLayerFormat> formats;
  std::vector<DeviceKvLayer> layers;
  DeviceBuffer storage;
  uint64_t bytes_ = 0;
  const backend::KvCacheShape& shape() const override { return shape_; }
  const backend::KvLayerFormat& layer_format(int layer) const override { return formats.at(size_t(layer)); }
  uint64_t bytes() const override { return bytes_; }
};

// `count` values from the host into a new device buffer (at least one byte), waited for: the host
// data may go away after it.
template <typename T>
DeviceBuffer upload(DeviceAllocator& a, const T* data, size_t count, cudaStream_t s) {
  DeviceBuffer b(a, std::max<size_t>(count * sizeof(T), 1), s);
  if (count > 0) FP8LM_CUDA_CHECK(cudaMemcpyAsync(b.get(), data, count * sizeof(T), cudaMemcpyHostToDevice, s));
  FP8LM_CUDA_CHECK(cudaStreamSynchronize(s));
  return b;
}

// Bytes per cache element: the element type's width, as every backend sizes a cache.
inline size_t kv_bytes(backend::KvElement e) { return element_bytes(e); }

constexpr size_t kAlign = 256;
inline size_t align_up(size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

}  // namespace ops_impl

using namespace ops_impl;


// Scratch that keeps its addresses: chunks are only ever added, reset() rewinds.
// A captured graph's pointers into it stay valid for the life of the backend
// (or until keep_one_piece, which drops the graphs first).
class ScratchArena {
 public:
  explicit ScratchArena(DeviceAllocator& a) : alloc_(a) {}
  void* take(size_t bytes, cudaStream_t stream) {
    bytes = align_up(std::max<size_t>(bytes, 1));
    linear_ += bytes;
    peak_ = std::max(peak_, linear_);
    while (chunk_ < chunks_.size() && offset_ + bytes > chunks_[chunk_].bytes()) {
      ++chunk_;
      offset_ = 0;
    }
    if (chunk_ == chunks_.size()) {
      // Chunks grow (fewer of them), but past the first few hundred MiB by
      // steps of that size: a step beyond the profiled worst one must not
      // double the arena.
      const size_t last = chunks_.empty() ? 0 : chunks_.back().bytes();
      chunks_.emplace_back(alloc_, std::max({bytes, size_t(64) << 20, std::min(last, size_t(512) << 20)}), stream);
      offset_ = 0;
    }
    void* p = static_cast<char*>(chunks_[chunk_].get()) + offset_;
    offset_ += bytes;
    return p;
  }
  void reset() { chunk_ = 0, offset_ = 0, linear_ = 0; }
  // The most any step took, counted as if the arena were one piece (chunk
  // tails a take skipped are not counted: one piece has none).
  size_t peak() const { return peak_; }
  // Replaces the chunks by one piece of `bytes` (≥ peak()): any later step
  // that takes no more than that fits without allocating. Pointers handed out
  // before are invalid afterwards.
  void keep_one_piece(size_t bytes, cudaStream_t stream) {
    chunks_.clear();
    chunks_.emplace_back(alloc_, std::max(bytes, peak_), stream);
    chunk_ = 0, offset_ = 0, linear_ = 0;
  }
  // An op's temporaries (quantized activations, workspaces) go back when the op
  // ends: the next op on the stream reuses them, so a prefill of many layers does
  // not pile up one copy per layer.
  struct Mark {
    size_t chunk, offset, linear;
  };
  Mark mark() const { return {chunk_, offset_, linear_}; }
  void release(Mark m) { chunk_ = m.chunk, offset_ = m.offset, linear_ = m.linear; }

 private:
  DeviceAllocator& alloc_;
  std::vector<DeviceBuffer> chunks_;
  size_t chunk_ = 0, offset_ = 0;
  size_t linear_ = 0, peak_ = 0;  // bytes taken since reset() as one piece; its maximum
};

struct PersistentDecode;  // cuda_ops_persistent.cpp

struct CudaOps::Impl {
  CudaOpsOptions options;
  // This backend as one rank of a tensor-parallel group (join_group); null alone.
  std::unique_ptr<RankLink> link;
  DeviceAllocator allocator;
  Stream stream;
  std::unique_ptr<CublasLtGemm> gemm;
  ScratchArena scratch{allocator};

  // GEMV split-K workspace (zero-filled once, left zeroed by every call).
  DeviceBuffer gemv_workspace;
  size_t gemv_workspace_bytes = 0;
  // Decode attention's merge counters (paged_attention.h; zero-filled once, left zeroed by every call).
  DeviceBuffer attention_counters;
  // FP8LM_CUDA_FUSED_MERGE=0 in the environment (an A/B switch, default on): decode attention's
  // partitions merged by the separate kernel.
  bool fused_merge = true;
  // FP8LM_CUDA_CUTLASS=0 in the environment (an A/B switch, default on): the per-token ×
  // per-channel FP8 GEMMs stay on cuBLASLt at every row count instead of taking CUTLASS where
  // the plan's measured ranges say (linear_plan.cpp). bench_cuda_gemm compares the kernels alone.
  bool cutlass_measured = true;

  // The step's metadata: int32 [ids | positions | row_seq | first_row | num_tokens | start | block tables | logit rows].
  DeviceBuffer meta;
  int32_t* meta_host = nullptr;  // pinned, same capacity
  size_t meta_capacity = 0;      // int32 elements
  backend::StepInputs step;
  DeviceAttentionBatch batch;
  // K/V that split_norm_rope_qkv already stored into the cache (its store_into): attention()
  // of that layer with those tensors skips store_kv. Cleared by begin_step and by attention.
  struct StoredKv {
    int layer = -1;
    const void* k = nullptr;
    const void* v = nullptr;
  } stored_kv;
  // Activations a producer (rms_norm, add_rms_norm given `next`) already
  // quantized for the W8A8 linear that reads them next: linear(x, *next) takes these codes and
  // scales instead of quantizing x again. They sit on top of the scratch arena (between the
  // marks), and the linear gives them back. Cleared by begin_step, reset_scratch and linear.
  struct Prequantized {
    const void* x = nullptr;
    const backend::Weight* next = nullptr;
    int64_t rows = 0;
    uint8_t* codes = nullptr;
    float* scales = nullptr;
    ScratchArena::Mark before{}, after{};
  } prequantized;
  // device_step_seconds(): an event where a step's metadata go up (begin_step) and one where
  // its results come back (fetch, synchronize); the spans summed.
  cudaEvent_t step_start = nullptr, step_end = nullptr;
  cudaEvent_t handoff = nullptr;  // end_step_before: where another stream's work may start
  bool step_open = false;
  double step_seconds = 0.0;
  void open_step() {
    close_step();
    if (step_start == nullptr) {
      FP8LM_CUDA_CHECK(cudaEventCreate(&step_start));
      FP8LM_CUDA_CHECK(cudaEventCreate(&step_end));
    }
    FP8LM_CUDA_CHECK(cudaEventRecord(step_start, stream));
    step_open = true;
  }
  // The step's end: recorded after its work queued so far (end_step), then waited for
  // (wait_step_end; callers wait for it anyway: they need its results).
  bool step_ending = false;
  void end_step() {
    if (!step_open) return;
    step_open = false;
    FP8LM_CUDA_CHECK(cudaEventRecord(step_end, stream));
    step_ending = true;
  }
  void wait_step_end() {
    if (!step_ending) return;
    step_ending = false;
    FP8LM_CUDA_CHECK(cudaEventSynchronize(step_end));
    float ms = 0.0f;
    FP8LM_CUDA_CHECK(cudaEventElapsedTime(&ms, step_start, step_end));
    step_seconds += double(ms) * 1e-3;
  }
  void close_step() {
    end_step();
    wait_step_end();
  }
  const int32_t* d_ids = nullptr;
  const int32_t* d_logit_rows = nullptr;
  int64_t context_bucket = 0;
  int64_t block_size = 16;  // the KV cache's, for the contexts a bucket covers

  // Pinned staging for to_host.
  void* host_out = nullptr;
  size_t host_out_bytes = 0;
  // Pinned staging for the MoE block's routing round trip (cuda_ops_moe.cpp), apart from
  // host_out: it must not end the step (start_fetch does).
  void* moe_host = nullptr;
  size_t moe_host_bytes = 0;
  void* moe_staging(size_t bytes) {
    if (bytes > moe_host_bytes) {
      FP8LM_CUDA_CHECK(cudaStreamSynchronize(stream));  // a queued upload may still read the old one
      if (moe_host != nullptr) FP8LM_CUDA_CHECK(cudaFreeHost(moe_host));
      moe_host = nullptr;
      moe_host_bytes = 0;
      FP8LM_CUDA_CHECK(cudaMallocHost(&moe_host, bytes));
      moe_host_bytes = bytes;
    }
    return moe_host;
  }

  std::map<const RopeTable*, DeviceBuffer> rope_freqs;

  // The persistent decode kernel's program (cuda_ops_persistent.cpp), once prepared.
  std::shared_ptr<PersistentDecode> persistent;

  struct Graph {
    int seen = 0;
    cudaGraphExec_t exec = nullptr;
    Tensor out;
    // The scratch arena where the recorded body left it: a replay leaves it there too, so that
    // what the host allocates after the step (an EAGLE-3 head's tensors beside the target's
    // hidden states) never lands on the step's own outputs.
    ScratchArena::Mark scratch_end{};
  };
  std::unordered_map<uint64_t, Graph> graphs;

  // FP8LM_CUDA_PROFILE=1 (profile_env) or set_op_profiling (profile_api): each
  // op is bracketed by two events (recorded steps run op by op); their device
  // times are summed per op and per kind of step (prefill or mixed; decode of
  // ≤ 16 rows or more) whenever the stream is synchronized. The environment's
  // table (op_seconds) goes to stderr when the backend is destroyed;
  // op_profile() hands out api_seconds. The events add ~2 µs of gap per op.
  bool profile_env = false, profile_api = false;
  bool profiling() const { return profile_env || profile_api; }
  int open_timers = 0;   // OpTimers alive: one opened inside another is nested
  enum StepKind : int { kPrefill, kDecodeSmall, kDecodeLarge };
  std::map<std::string, std::pair<double, int64_t>> op_seconds;
  struct ApiSlot {
    double seconds = 0;
    int64_t calls = 0;
    bool nested = false;
  };
  std::map<std::pair<bool, std::string>, ApiSlot> api_seconds;  // (decode?, op)
  std::map<std::string, int64_t> linear_plans;  // "n x k  plan" → linear layers uploaded with it
  struct Pending {
    std::string op;
    StepKind kind;
    bool nested;
    cudaEvent_t start, end;
  };
  std::vector<Pending> pending;
  std::vector<cudaEvent_t> spare_events;
  cudaEvent_t event() {
    if (!spare_events.empty()) {
      cudaEvent_t e = spare_events.back();
      spare_events.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    FP8LM_CUDA_CHECK(cudaEventCreate(&e));
    return e;
  }
  // After a synchronization: fold the finished ops' times into the tables asked for.
  void collect_profile() {
    static constexpr const char* kKindLabel[] = {" (prefill)", " (decode m<=16)", " (decode m>16)"};
    for (Pending& p : pending) {
      float ms = 0;
      if (cudaEventElapsedTime(&ms, p.start, p.end) == cudaSuccess) {
        if (profile_env) {
          auto& slot = op_seconds[p.op + kKindLabel[p.kind]];
          slot.first += double(ms) * 1e-3;
          ++slot.second;
        }
        if (profile_api) {
          // The op's name without the table's indentation ("  of which: …").
          const size_t text = std::min(p.op.find_first_not_of(' '), p.op.size());
          ApiSlot& slot = api_seconds[{p.kind != kPrefill, p.op.substr(text)}];
          slot.seconds += double(ms) * 1e-3;
          ++slot.calls;
          slot.nested = p.nested;
        }
      }
      spare_events.push_back(p.start);
      spare_events.push_back(p.end);
    }
    pending.clear();
  }
  uint64_t replays = 0;
  bool capturing = false;

  ~Impl() {
    if (profiling()) {
      (void)cudaStreamSynchronize(stream);
      collect_profile();
    }
    if (profile_env && !op_seconds.empty()) {
      double total = 0;
      for (const auto& [op, t] : op_seconds) total += t.first;
      std::fprintf(stderr, "fp8lm: CUDA op profile (FP8LM_CUDA_PROFILE; device time per op, m = rows):\n");
      for (const auto& [op, t] : op_seconds)
        std::fprintf(stderr, "  %-34s %10.3f ms %8lld calls %9.2f us/call %5.1f%%\n", op.c_str(), t.first * 1e3,
                     static_cast<long long>(t.second), t.first * 1e6 / double(t.second), 100.0 * t.first / total);
    }
    if (profile_env && !linear_plans.empty()) {
      std::fprintf(stderr, "fp8lm: CUDA linear plans (shape n x k, plan: layers):\n");
      for (const auto& [plan, count] : linear_plans)
        std::fprintf(stderr, "  %s: %lld\n", plan.c_str(), static_cast<long long>(count));
    }
    drop_graphs();
    if (meta_host != nullptr) (void)cudaFreeHost(meta_host);
    if (host_out != nullptr) (void)cudaFreeHost(host_out);
    if (moe_host != nullptr) (void)cudaFreeHost(moe_host);
  }

  void drop_graphs() {
    for (auto& [key, g] : graphs)
      if (g.exec != nullptr) (void)cudaGraphExecDestroy(g.exec);
    graphs.clear();
  }

  void* take(size_t bytes) { return scratch.take(bytes, stream); }

  // Copies `bytes` from the device to pinned host memory (grown as needed) and
  // waits: what to_host and argmax_rows hand back to the caller. In two halves
  // for start_argmax_rows / wait_tokens: start_fetch queues the copy and ends
  // the step; finish_fetch waits for it.
  const void* fetch(const void* device, size_t bytes) {
    start_fetch(device, bytes);
    return finish_fetch();
  }
  void start_fetch(const void* device, size_t bytes) {
    if (bytes > host_out_bytes) {
      FP8LM_CUDA_CHECK(cudaStreamSynchronize(stream));
      if (host_out != nullptr) FP8LM_CUDA_CHECK(cudaFreeHost(host_out));
      host_out = nullptr;
      host_out_bytes = 0;
      FP8LM_CUDA_CHECK(cudaMallocHost(&host_out, bytes));
      host_out_bytes = bytes;
    }
    FP8LM_CUDA_CHECK(cudaMemcpyAsync(host_out, device, bytes, cudaMemcpyDeviceToHost, stream));
    end_step();
  }
  const void* finish_fetch() {
    wait_step_end();
    FP8LM_CUDA_CHECK(cudaStreamSynchronize(stream));
    if (profiling()) collect_profile();
    return host_out;
  }
  // Returns what an op took for itself when it ends (ScratchArena::release).
  struct TempScope {
    ScratchArena& arena;
    ScratchArena::Mark mark;
    explicit TempScope(ScratchArena& a) : arena(a), mark(a.mark()) {}
    ~TempScope() { arena.release(mark); }
    TempScope(const TempScope&) = delete;
    TempScope& operator=(const TempScope&) = delete;
  };

  void ensure_gemv_workspace(size_t bytes) {
    if (bytes <= gemv_workspace_bytes) return;
    // Growing moves the workspace, which recorded graphs point at.
    drop_graphs();
    gemv_workspace = DeviceBuffer(allocator, bytes, stream);
    FP8LM_CUDA_CHECK(cudaMemsetAsync(gemv_workspace.get(), 0, bytes, stream));
    gemv_workspace_bytes = bytes;
  }
  // A GEMV call's split-K workspace, where it needs `bytes` (0: none).
  void give_gemv_workspace(Fp8GemvArgs& a, size_t bytes) {
    if (bytes == 0) return;
    ensure_gemv_workspace(bytes);
    a.workspace = gemv_workspace.get();
    a.workspace_bytes = gemv_workspace_bytes;
  }
  // x [rows, k] quantized as a W8A8 plan says (its static scale, or dynamic scales), into
  // scratch the caller's TempScope gives back: the codes, and the scales a GEMV / GEMM reads.
  struct QuantizedInput {
    const uint8_t* codes = nullptr;
    const float* scales = nullptr;
  };
  QuantizedInput quantize_input(const LinearPlan& p, const __nv_bfloat16* x, int64_t rows, int64_t k);
};

// Times one op on the device when profiling (see Impl::profile).
class OpTimer {
 public:
  OpTimer(CudaOps::Impl& m, const std::string& op, int64_t rows) : m_(m) {
    if (!m_.profiling()) return;
    // Decode steps (one new token per sequence) apart from prefill and mixed ones.
    kind_ = m_.batch.max_new_tokens > 1 ? CudaOps::Impl::kPrefill
            : rows <= kMaxGemvRows      ? CudaOps::Impl::kDecodeSmall
                                        : CudaOps::Impl::kDecodeLarge;
    op_ = op;
    start_ = m_.event();
    FP8LM_CUDA_CHECK(cudaEventRecord(start_, m_.stream));
    nested_ = m_.open_timers++ > 0;  // last: the destructor undoes it, and runs only if this returns
  }
  ~OpTimer() {
    if (start_ == nullptr) return;
    --m_.open_timers;
    cudaEvent_t end = m_.event();
    (void)cudaEventRecord(end, m_.stream);
    m_.pending.push_back({op_, kind_, nested_, start_, end});
  }
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  CudaOps::Impl& m_;
  std::string op_;
  CudaOps::Impl::StepKind kind_ = CudaOps::Impl::kPrefill;
  bool nested_ = false;
  cudaEvent_t start_ = nullptr;
};

}  // namespace fp8lm::cuda
