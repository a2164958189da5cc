// The CUDA backend's implementation of the op interface (backend/ops.h), on one
// Hopper GPU: BF16 activations in device memory, weights uploaded once (FP8
// codes stay one byte, scales float32), a paged KV cache in BF16, F32 or FP8,
// every op a kernel on one stream.
//
// Linear layers dispatch by the number of rows m, as each layer's plan says
// (linear_plan.h, made at upload; docs/benchmarks.md, "CUDA
// GEMMs" and "FP8 weight-streaming GEMV"): W8A8 m ≤ 8 (W8A16 m ≤ 16) → fp8lm's
// weight-streaming GEMV (fp8_gemv.h), which reads FP8 weights faster than
// cuBLASLt's FP8 kernels there and has every scale layout (cuBLASLt has no
// block-scaled algorithm at m = 1); larger m → cuBLASLt (cublaslt_gemm.h) in
// the scheme's scale mode. What cuBLASLt cannot do (block scales on m % 4 rows, shapes off
// its alignment, scale layouts it has no mode for) goes through the GEMV 16 rows
// at a time; weight-only FP8 (W8A16) above 16 rows dequantizes the weight to
// BF16 scratch and runs the BF16 GEMM.
//
// Steps: begin_step copies the step's ids, positions and attention metadata to
// the device in one transfer (through pinned memory); ops read them there. A
// step run_step sees with a key ≠ 0 (a decode step of one batch size, padded by
// the model to a size of backend::decode_graph_rows' ladder) is run
// once directly, captured into a CUDA graph the second time, and replayed
// from then on: one launch per step instead of hundreds. Everything a graph
// touches — scratch, metadata buffers, workspaces — is allocated once and kept
// at the same address; when a metadata buffer must grow, every graph is dropped.
//
// Numerics: the kernels' own headers (quant_kernels.h, fp8_gemv.h,
// model_kernels.h, paged_attention.h); activations are rounded to BF16 after
// every op, the CPU backend keeps float32 — the tolerance the model tests use
// (tests/cuda/test_cuda_model.cpp) comes from that difference.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/cuda/common/device_memory.h"
#include "backend/ops.h"

namespace fp8lm::cuda {

class RankLink;        // rank_link.h

struct CudaOpsOptions {
  int device = 0;
  bool cuda_graphs = true;  // record and replay decode steps
  // Routed pairs an expert has on average from which MoE blocks run the grouped GEMM instead of
  // the grouped GEMV; unset: kMoeGemmMinRows (cuda_ops_moe.cpp). Tests give 0: every block.
  std::optional<int64_t> moe_gemm_min_rows = std::nullopt;
  // Which kernels run a dense model's decode steps (--decode-kernel): the persistent decode
  // kernel where it runs the step and measured faster (kAuto), always where it runs the step
  // (kPersistent), or never (kLayered: one kernel per op).
  backend::DecodeKernel decode_kernel = backend::DecodeKernel::kAuto;
};

class CudaOps final : public backend::Ops {
 public:
  // Throws fp8lm::Error when the device is missing or is not a GPU this build runs on.
  explicit CudaOps(CudaOpsOptions options = {});
  ~CudaOps() override;
  CudaOps(const CudaOps&) = delete;
  CudaOps& operator=(const CudaOps&) = delete;

  std::string name() const override;

  // Makes this backend rank link->rank() of a tensor-parallel group (issue 22): the model's
  // collectives go through `link` (NCCL between GPUs, nccl_group.h). Decode steps are recorded
  // as graphs only where the link's calls may be captured.
  void join_group(std::unique_ptr<RankLink> link);

  std::unique_ptr<backend::Weight> upload_linear(const weights::LinearWeight& w) override;
  std::unique_ptr<backend::Weight> upload_vector(std::vector<float> values) override;
  std::unique_ptr<backend::Weight> upload_embedding(const weights::LinearWeight& table) override;
  // Fuses parts of one scheme (BF16, or FP8 with the same activation
  // quantization and format; can_fuse in linear_plan.h): weights concatenated along the output rows;
  // per-tensor weight scales become per-channel rows (the same multipliers);
  // block scales need every part's rows to be a multiple of 128; static input
  // scales must be equal. Otherwise nullptr (the model uploads them one by one).
  std::unique_ptr<backend::Weight> upload_fused_linear(std::span<const weights::LinearWeight> parts) override;
  // MoE blocks (cuda_ops_moe.cpp): every expert an ordinary linear layer of its scheme. Up to
  // kMoeGroupMaxPairs routed pairs run grouped, all on the device
  // (recordable); otherwise moe() groups the rows on the host (one synchronization a block) and
  // runs each expert over its rows.
  bool supports_moe() const override;
  bool moe_recordable(const backend::Weight& experts, int64_t rows, int top_k) const override;
  std::unique_ptr<backend::Weight> upload_moe_experts(std::span<const weights::LinearWeight> gate,
                                                      std::span<const weights::LinearWeight> up,
                                                      std::span<const weights::LinearWeight> down) override;
  // A linear weight's plan (LinearPlan::describe); empty for other weights.
  std::string describe(const backend::Weight& w) const override;
  std::unique_ptr<backend::KvCache> make_kv_cache(const backend::KvCacheShape& shape,
                                                  std::vector<backend::KvLayerFormat> layers) override;

  backend::Tensor alloc(int64_t rows, int64_t cols) override;
  void reset_scratch() override;

  void begin_step(const backend::StepInputs& step) override;
  backend::Tensor run_step(uint64_t key, const std::function<backend::Tensor()>& body) override;
  // While steps are recorded (graphs on, no op profile): decode steps come
  // padded to backend::decode_graph_rows, one graph per ladder size.
  bool pads_decode_batches() const override;

  void embedding(const backend::Weight& table, backend::Tensor out) override;
  void embedding_shard(const backend::Weight& table, int64_t vocab0, backend::Tensor out) override;
  void all_reduce_sum(backend::Tensor x) override;
  // The link's all-gather into scratch (rank blocks one after another), then one kernel that
  // lays them side by side.
  void all_gather_cols(backend::Tensor local, backend::Tensor out) override;
  void rms_norm(backend::Tensor x, const backend::Weight& w, float eps, backend::Tensor out,
                const backend::Weight* next = nullptr) override;
  void add_rms_norm(backend::Tensor h, backend::Tensor delta, const backend::Weight& w, float eps,
                    backend::Tensor out, const backend::Weight* next = nullptr) override;
  void head_rms_norm(backend::Tensor x, int64_t head_dim, const backend::Weight& w, float eps) override;
  void add(backend::Tensor acc, backend::Tensor x) override;
  void linear(backend::Tensor x, const backend::Weight& w, backend::Tensor y) override;
  void rope_qk(backend::Tensor q, backend::Tensor k, int64_t head_dim, const RopeTable& rope) override;
  // One kernel (qkv_rope_kernels.h) for split_columns + head_rms_norm ×2 + rope_qk, the same bits.
  void split_norm_rope_qkv(backend::Tensor qkv, backend::Tensor q, backend::Tensor k, backend::Tensor v,
                           int64_t head_dim, const backend::Weight* q_norm, const backend::Weight* k_norm, float eps,
                           const RopeTable& rope, backend::KvCache* store_into = nullptr, int layer = -1) override;
  void silu_mul(backend::Tensor gate, backend::Tensor up, backend::Tensor out) override;
  void silu_mul_fused(backend::Tensor gate_up, backend::Tensor out) override;
  void split_columns(backend::Tensor x, std::span<const backend::Tensor> parts) override;
  void attention(backend::Tensor q, backend::Tensor k, backend::Tensor v, backend::Tensor out,
                 const backend::AttentionParams& params, backend::KvCache& cache, int layer) override;
  void moe(backend::Tensor x, backend::Tensor router_logits, const backend::Weight& experts,
           const backend::MoeRouting& routing, backend::Tensor out) override;
  void gather_rows(backend::Tensor x, backend::Tensor out) override;
  void copy(backend::Tensor x, backend::Tensor out) override;  // one device-to-device copy (recordable)
  void to_host(backend::Tensor x, std::span<float> out) override;
  void argmax_rows(backend::Tensor x, std::span<int32_t> out) override;
  // The sampling kernel (sampling_kernels.h) on its own stream once this
  // one's work is done; only the tokens come back (cuda_ops_sampling.cpp).
  void sample_rows(backend::Tensor logits, std::span<const backend::RowSampling> rows,
                   std::span<int32_t> tokens) override;
  // Both queued without waiting (the engine's async scheduling): only the tokens' copy to
  // pinned host memory is queued behind the step, and wait_tokens waits for it.
  void start_argmax_rows(backend::Tensor x) override;
  void start_sample_rows(backend::Tensor logits, std::span<const backend::RowSampling> rows) override;
  void wait_tokens(std::vector<int32_t>& tokens) override;

  std::optional<backend::MemoryInfo> memory_info() const override;
  uint64_t keep_step_scratch() override;

  // Per-op device times (two events per op, ~2 µs of gap each; recorded steps
  // run op by op while on), per step kind; FP8LM_CUDA_PROFILE=1 keeps its own
  // table, printed to stderr at destruction, whatever these do.
  bool set_op_profiling(bool on) override;
  std::vector<backend::OpProfileEntry> op_profile() override;
  void clear_op_profile() override;

  // Device memory: what fp8lm's allocator holds (weights, KV cache, scratch).
  DeviceMemoryStats memory_stats() const;
  // The device's free and total memory now (cudaMemGetInfo).
  void device_memory(size_t& free_bytes, size_t& total_bytes) const;
  // Steps replayed from a CUDA graph, and graphs recorded.
  uint64_t graph_replays() const;
  size_t graphs() const;
  void synchronize();
  std::optional<double> device_step_seconds() override;

  // The persistent decode kernel (cuda_ops_persistent.cpp, persistent/decode_program.h).
  std::string prepare_decode_program(const backend::DecodeModel& model) override;
  std::optional<backend::Tensor> decode_program(int64_t rows, backend::KvCache& cache) override;

  struct Impl;  // defined in cuda_ops.cpp

 private:
  // upload_linear of `w`, whose elements are those of `parts` stacked along n (`w` itself, or
  // weights::stack_rows(parts): each part copied to its rows of the device buffer).
  std::unique_ptr<backend::Weight> upload_linear_rows(const weights::LinearWeight& w,
                                                      std::span<const weights::LinearWeight> parts);
  // moe()'s grouped path (cuda_ops_moe.cpp), where moe_recordable.
  void moe_grouped(backend::Tensor x, backend::Tensor router_logits, const backend::Weight& experts,
                   const backend::MoeRouting& routing, backend::Tensor out);
  // The experts of either path as grouped GEMMs over routed pairs in grouped order (cuda_ops_moe.cpp).
  // xs and ys: BF16 on the device.
  void moe_experts_gemm(const backend::Weight& experts, const void* xs, int64_t pairs, const int32_t* expert_start,
                        void* ys);
  std::unique_ptr<Impl> impl_;
  // sample_rows' stream and buffers, made at its first call (cuda_ops_sampling.cpp;
  // a shared_ptr, so that it is deleted where its type is complete).
  struct Sampling;
  std::shared_ptr<Sampling> sampling_;
  // Which start_* wait_tokens finishes, and its rows.
  enum class Started { kNone, kArgmax, kSample } started_ = Started::kNone;
  int64_t started_rows_ = 0;
  void finish_sampling(std::vector<int32_t>& tokens);  // wait_tokens of start_sample_rows
  // Ends the step's device time (device_step_seconds) after the work queued on this
  // backend's stream, and makes `other` wait for that work; wait_step_end() waits for the end.
  void end_step_before(cudaStream_t other);
  void wait_step_end();
};

}  // namespace fp8lm::cuda
