// The decode-attention workload of bench_cuda_attention and bench_flashinfer_decode (issue 19),
// in one place so that both programs time the same bytes: one decode step of B sequences of
// C cached positions + the new token's own (C + 1 attended), blocks of kBlockSize positions
// scattered over the cache by a random permutation (as a long-running server's are), random
// K/V/Q from one generator seeded by B in one draw order, and the cache replicated into as many
// layer copies as it takes to exceed kRotateBytes, so that calls rotating over them read the
// K/V from HBM as in a forward pass (the 50 MB L2 never holds the next call's). Also what the
// two programs' mains share: the event timing, the roofline, the common flags and the JSON report.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cuda/common/check.h"
#include "backend/cuda/common/device_memory.h"
#include "backend/cuda/attention/paged_attention.h"

namespace fp8lm::bench {

// The roofline's bandwidth: the measured device-to-device copy rate (../shared/docs/gpu.md).
inline constexpr double kCopyTBps = 4.29;
// Positions a cache block holds (a FlashInfer page).
inline constexpr int kBlockSize = 16;
// The layer copies together exceed this: several times the 50 MB L2.
inline constexpr size_t kRotateBytes = size_t(256) << 20;
// k_scale = v_scale of an FP8 cache (a BF16 cache: 1).
inline constexpr float kFp8KvScale = 0.01f;

// The flags both programs take, with their defaults: Llama-3.1-8B's attention shape.
struct DecodeAttentionArgs {
  DecodeAttentionArgs() {
    p.num_heads = 32;
    p.num_kv_heads = 8;
    p.head_dim = 128;
  }

  std::vector<int> batches = {1, 8, 32, 64, 256};
  std::vector<std::string> kvs = {"bf16", "e4m3"};
  int context = 1024, iters = 50;
  backend::AttentionParams p;  // scale: the caller's, once the shape is checked
  std::string json_path;

  // Takes argv[i] and its value (leaving i at the value) when it is one of --batch, --context,
  // --kv, --heads, --kv-heads, --head-dim, --iters, --json; false for anything else, a flag
  // without its value included (the caller's flags, or its usage message).
  bool take_flag(int argc, char** argv, int& i);
  // Whether every --batch is ≥ 1 and every --kv bf16 or e4m3; the first that is not goes to
  // stderr as "<program>: …".
  bool lists_ok(const char* program) const;
  // With --json: writes `doc` (the program's own fields) with the shape, --iters and `results`.
  void write_json(nlohmann::json doc, const nlohmann::json& results) const;
};

// Both programs' main: run(argc, argv), where an exception (a CUDA error: no device, out of
// memory, …) becomes "<program>: <what>" on stderr and exit status 1.
int run_reporting_errors(const char* program, int (*run)(int, char**), int argc, char** argv);

// The device buffers of one (batch, context, KV element, params) workload, filled in the
// constructor; every buffer is given back to the driver when it is destroyed (not cached for the
// next, larger batch), and so is every buffer the caller allocates from DeviceAllocator::global()
// while it lives.
class DecodeAttentionWorkload {
 public:
  DecodeAttentionWorkload(int batch, int context, backend::KvElement element, const backend::AttentionParams& p);
  DecodeAttentionWorkload(const DecodeAttentionWorkload&) = delete;
  DecodeAttentionWorkload& operator=(const DecodeAttentionWorkload&) = delete;

  int attended() const { return attended_; }  // context + 1: the cached positions and the new token's own
  int blocks_per_seq() const { return blocks_per_seq_; }
  int64_t num_blocks() const { return int64_t(batch_) * blocks_per_seq_; }
  int copies() const { return copies_; }
  float kv_scale() const { return element_ == backend::KvElement::kBF16 ? 1.0f : kFp8KvScale; }

  // One decode row per sequence at position `context`. block_tables is [batch][blocks_per_seq]
  // device memory (non-const here for FlashInfer's page indices, which are that array).
  const cuda::DeviceAttentionBatch& attention_batch() const { return attention_batch_; }
  int32_t* block_tables() const { return meta_.as<int32_t>() + 5 * batch_; }
  // Cache copy `copy` as fp8lm's layer: K and V arrays of [block][KV head][position][head_dim].
  cuda::DeviceKvLayer layer(int copy) const;
  // Q and fp8lm's output: [batch][heads][head_dim] BF16, q_elems() elements each.
  __nv_bfloat16* q() const { return q_.as<__nv_bfloat16>(); }
  __nv_bfloat16* out() const { return out_.as<__nv_bfloat16>(); }
  size_t q_elems() const { return size_t(batch_) * size_t(p_.num_heads) * size_t(p_.head_dim); }
  void* workspace() const { return workspace_.get(); }  // null when paged_attention needs none
  size_t workspace_bytes() const { return workspace_.bytes(); }
  unsigned* merge_counters() const { return counters_.as<unsigned>(); }
  cudaStream_t stream() const { return stream_.s; }

  // fp8lm's decode attention on copy `copy`, q() → out(), on stream(): the kernel the engine
  // runs for this step (paged_attention's choice, under the FP8LM_CUDA_* switches).
  void run_paged_attention(int copy) const;
  // Which decode kernel that choice is, as the tables name it.
  const char* paged_attention_kernel() const;

  // Roofline: K + V bytes of every attended position (B × (C + 1) × KV heads × head_dim ×
  // element bytes × 2), the rate reading them in `us` microseconds gives, and that rate as a
  // percentage of kCopyTBps.
  double kv_bytes() const;
  double gbs(double us) const { return kv_bytes() / (us * 1e3); }
  double roofline_pct(double us) const { return 100.0 * (kv_bytes() / (kCopyTBps * 1e12)) / (us * 1e-6); }

 private:
  struct ReleaseCached {
    ~ReleaseCached() { cuda::DeviceAllocator::global().release_cached(); }
  };
  struct Stream {
    cudaStream_t s = nullptr;
    ~Stream() {
      if (s != nullptr) cudaStreamDestroy(s);
    }
  };

  // Declared first, so destroyed last: after every buffer below is back in the allocator's cache.
  ReleaseCached release_;
  int batch_;
  backend::KvElement element_;
  backend::AttentionParams p_;
  int attended_, blocks_per_seq_, copies_;
  std::vector<cuda::DeviceBuffer> ks_, vs_;
  cuda::DeviceBuffer meta_, q_, out_, workspace_, counters_;
  cuda::DeviceAttentionBatch attention_batch_;
  Stream stream_;
};

struct Timing {
  double median_us = 0, min_us = 0, max_us = 0;
};

// Times call(copy): 5 warm-up calls, then `iters` samples of one call between two events on
// `stream`, rotating over the `copies` cache copies; median, min, max in microseconds. With
// `graphs`, each copy's call is captured once into a CUDA graph and the samples time graph
// launches instead: what the engine replays, without the host-side launch work (argument checks,
// FlashInfer's per-call cudaFuncSetAttribute and device queries) that an eager call spends while
// the first event has already been passed and the GPU waits.
template <typename Call>
Timing time_calls(Call&& call, int copies, int iters, bool graphs, cudaStream_t stream) {
  std::vector<cudaGraphExec_t> execs;
  if (graphs) {
    for (int c = 0; c < copies; ++c) {
      cudaGraph_t g = nullptr;
      cudaGraphExec_t exec = nullptr;
      FP8LM_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      call(c);
      FP8LM_CUDA_CHECK(cudaStreamEndCapture(stream, &g));
      FP8LM_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
      FP8LM_CUDA_CHECK(cudaGraphDestroy(g));
      FP8LM_CUDA_CHECK(cudaGraphUpload(exec, stream));
      execs.push_back(exec);
    }
  }
  int next = 0;
  auto one = [&] {
    if (graphs) FP8LM_CUDA_CHECK(cudaGraphLaunch(execs[size_t(next)], stream));
    else call(next);
    next = (next + 1) % copies;
  };
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  FP8LM_CUDA_CHECK(cudaEventCreate(&e0));
  FP8LM_CUDA_CHECK(cudaEventCreate(&e1));
  for (int i = 0; i < 5; ++i) one();
  std::vector<double> us;
  for (int i = 0; i < iters; ++i) {
    FP8LM_CUDA_CHECK(cudaEventRecord(e0, stream));
    one();
    FP8LM_CUDA_CHECK(cudaEventRecord(e1, stream));
    FP8LM_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    FP8LM_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    us.push_back(double(ms) * 1e3);
  }
  FP8LM_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  for (cudaGraphExec_t exec : execs) cudaGraphExecDestroy(exec);
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us.front(), us.back()};
}

}  // namespace fp8lm::bench
