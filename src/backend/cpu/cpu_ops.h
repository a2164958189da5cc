// The CPU backend's implementation of the op interface (backend/ops.h):
// float32 activations in host memory, weights used where the loader put them
// (the mmapped checkpoint or fp8lm's own FP8 copies), work spread over a
// thread pool. It is the reference the CUDA backend is tested against.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/moe.h"
#include "backend/cpu/thread_group.h"
#include "backend/ops.h"
#include "common/thread_pool.h"

namespace fp8lm::cpu {

class CpuOps final : public backend::Ops {
 public:
  // threads ≥ 1; kernels: which vector loops (kAuto = the widest this CPU runs).
  // pad_decode_batches: decode steps padded as a backend that records graphs
  // pads them (pads_decode_batches), which the CPU itself has no use for: the
  // tests prove with it that padding changes no real row.
  explicit CpuOps(int threads, KernelChoice kernels = KernelChoice::kAuto, bool pad_decode_batches = false);

  std::string name() const override;
  int threads() const { return pool_.size(); }
  // Makes this backend rank `rank` of `group` (tensor parallelism over CPU ranks, each rank's
  // model run from its own thread); the group must outlive it.
  void join_group(ThreadGroup& group, int rank);

  // The KV-cache budget on host memory (cpu_ops_memory.cpp, backend/cpu/host_memory.h): by
  // default at most half of what is available, shared by the group's ranks, no more than the
  // sequences can use; a size given may take what is available, never more.
  std::optional<int64_t> default_kv_cache_tokens(uint64_t bytes_per_token,
                                                 const backend::KvBudget& budget) const override;
  void check_kv_cache_fits(int64_t tokens, uint64_t bytes_per_token, const backend::KvBudget& budget,
                           bool given_in_bytes) const override;

  std::unique_ptr<backend::Weight> upload_linear(const weights::LinearWeight& w) override;
  std::unique_ptr<backend::Weight> upload_vector(std::vector<float> values) override;
  std::unique_ptr<backend::Weight> upload_embedding(const weights::LinearWeight& table) override;
  // The plan of a linear weight or embedding table (LinearPlan::describe); empty for a vector.
  std::string describe(const backend::Weight& w) const override;
  bool supports_moe() const override { return true; }
  std::unique_ptr<backend::Weight> upload_moe_experts(std::span<const weights::LinearWeight> gate,
                                                      std::span<const weights::LinearWeight> up,
                                                      std::span<const weights::LinearWeight> down) override;
  std::unique_ptr<backend::KvCache> make_kv_cache(const backend::KvCacheShape& shape,
                                                  std::vector<backend::KvLayerFormat> layers) override;
  bool supports_mla() const override { return true; }
  std::unique_ptr<backend::Weight> upload_mla_up_projections(const weights::LinearWeight& kv_b, int num_heads,
                                                             int64_t nope_dim, int64_t v_dim) override;

  backend::Tensor alloc(int64_t rows, int64_t cols) override;
  void reset_scratch() override { next_scratch_ = 0; }

  void begin_step(const backend::StepInputs& step) override;
  bool pads_decode_batches() const override { return pad_decode_batches_; }
  // FP8 attention's numerics over E4M3 cache layers (the reference the GPU kernel will be held to;
  // attention.h); MLA refuses it by name.
  void set_fp8_attention(bool on) override { fp8_attention_ = on; }

  void embedding(const backend::Weight& table, backend::Tensor out) override { embedding(table, step_.ids, out); }
  void embedding_shard(const backend::Weight& table, int64_t vocab0, backend::Tensor out) override;
  void all_reduce_sum(backend::Tensor x) override;
  void all_gather_cols(backend::Tensor local, backend::Tensor out) override;
  void rms_norm(backend::Tensor x, const backend::Weight& w, float eps, backend::Tensor out,
                const backend::Weight* next = nullptr) override;
  void add_rms_norm(backend::Tensor h, backend::Tensor delta, const backend::Weight& w, float eps,
                    backend::Tensor out, const backend::Weight* next = nullptr) override;
  void head_rms_norm(backend::Tensor x, int64_t head_dim, const backend::Weight& w, float eps) override;
  void add(backend::Tensor acc, backend::Tensor x) override;
  void linear(backend::Tensor x, const backend::Weight& w, backend::Tensor y) override;
  void rope_qk(backend::Tensor q, backend::Tensor k, int64_t head_dim, const RopeTable& rope) override;
  void silu_mul(backend::Tensor gate, backend::Tensor up, backend::Tensor out) override;
  void split_columns(backend::Tensor x, std::span<const backend::Tensor> parts) override;
  void moe(backend::Tensor x, backend::Tensor router_logits, const backend::Weight& experts,
           const backend::MoeRouting& routing, backend::Tensor out) override;
  void attention(backend::Tensor q, backend::Tensor k, backend::Tensor v, backend::Tensor out,
                 const backend::AttentionParams& params, backend::KvCache& cache, int layer) override {
    attention(q, k, v, out, step_.sequences, params, cache, layer);
  }
  void rope_mla(backend::Tensor q, backend::Tensor k_pe, int64_t nope_dim, const RopeTable& rope,
                bool interleaved) override;
  void mla_attention(backend::Tensor q, backend::Tensor latent, backend::Tensor k_pe, const backend::Weight& up,
                     backend::Tensor out, const backend::MlaParams& params, backend::KvCache& cache,
                     int layer) override {
    mla_attention(q, latent, k_pe, up, out, step_.sequences, params, cache, layer);
  }
  void gather_rows(backend::Tensor x, backend::Tensor out) override { gather_rows(x, step_.logit_rows, out); }
  void to_host(backend::Tensor x, std::span<float> out) override;
  void argmax_rows(backend::Tensor x, std::span<int32_t> out) override;
  // The row math (backend/sampling.h) on a copy of each row, one row at a time.
  void sample_rows(backend::Tensor logits, std::span<const backend::RowSampling> rows,
                   std::span<int32_t> tokens) override;

  // Each op's wall time (steady_clock), per step kind and op.
  bool set_op_profiling(bool on) override {
    profiling_ = on;
    return true;
  }
  std::vector<backend::OpProfileEntry> op_profile() override;
  void clear_op_profile() override { profile_.clear(); }

  // The same ops with their inputs given directly rather than by begin_step
  // (the CUDA backend's tests call these as the reference).
  void embedding(const backend::Weight& table, std::span<const int32_t> ids, backend::Tensor out);
  void rope(backend::Tensor x, int64_t head_dim, std::span<const int64_t> positions, const RopeTable& rope);
  void attention(backend::Tensor q, backend::Tensor k, backend::Tensor v, backend::Tensor out,
                 std::span<const backend::AttentionSequence> sequences, const backend::AttentionParams& params,
                 backend::KvCache& cache, int layer);
  void gather_rows(backend::Tensor x, std::span<const int64_t> rows, backend::Tensor out);
  void mla_attention(backend::Tensor q, backend::Tensor latent, backend::Tensor k_pe, const backend::Weight& up,
                     backend::Tensor out, std::span<const backend::AttentionSequence> sequences,
                     const backend::MlaParams& params, backend::KvCache& cache, int layer);

 private:
  backend::StepInputs step_;
  ThreadPool pool_;
  ThreadGroup* group_ = nullptr;
  int rank_ = 0;
  std::vector<int32_t> shard_ids_;
  KernelChoice kernels_;
  bool pad_decode_batches_ = false;
  bool fp8_attention_ = false;
  std::vector<std::vector<float>> scratch_;
  backend::RowSampler row_sampler_;  // sample_rows' scratch
  std::vector<float> sample_row_;    // the row it works on
  MoeScratch moe_scratch_;           // moe's buffers
  size_t next_scratch_ = 0;

  // Times one op while profiling; only the outermost (add_rms_norm calls add
  // and rms_norm, which are not counted again).
  class OpClock;
  bool profiling_ = false;
  bool prefill_step_ = false;  // the step's kind, kept: step_'s spans end before its argmax_rows
  int open_clocks_ = 0;
  std::map<std::pair<std::string, std::string>, std::pair<double, int64_t>> profile_;  // (step, op) → s, calls
};

}  // namespace fp8lm::cpu
