// The op interface the model is written against. A backend (CPU now, CUDA
// next) implements every op on its own memory; the model never sees which.
//
// Activations are 2-D row-major matrices [rows, cols] in the backend's memory
// and element type (float32 on the CPU). Weights are uploaded once, from the
// loader's host descriptions, into opaque handles only their backend reads.
// Scratch tensors live until the next reset_scratch(), so one forward pass
// allocates nothing after its first call.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/paged_kv_types.h"
#include "backend/sampling.h"
#include "common/error.h"
#include "spec/rope.h"
#include "weights/linear_weight.h"

namespace fp8lm::backend {

struct Tensor {
  void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
};

// A weight in a backend's memory (linear layer, vector, embedding table).
class Weight {
 public:
  virtual ~Weight() = default;
};

// The paged KV cache's storage; blocks are handed out by engine::BlockAllocator.
class KvCache {
 public:
  virtual ~KvCache() = default;
  virtual const KvCacheShape& shape() const = 0;
  virtual const KvLayerFormat& layer_format(int layer) const = 0;
  virtual uint64_t bytes() const = 0;
};

// One forward step's host-side inputs, handed to the backend once, before the
// step's ops: which token each row embeds, each row's position, the sequences'
// attention metadata and which rows' logits are wanted. Ops read them from the
// backend's copy, so a backend may record a step's ops once and replay them for
// later steps with new inputs (CUDA graphs). The spans stay valid until the
// step's last op has run.
struct StepInputs {
  std::span<const int32_t> ids;                  // one per row, inside the vocabulary
  std::span<const int64_t> positions;            // one per row
  std::span<const AttentionSequence> sequences;  // rows of each sequence, in row order
  std::span<const int64_t> logit_rows;           // rows whose hidden state gather_rows picks
};

// A device's memory now (a GPU's: cudaMemGetInfo), and the most the backend's
// own allocator has held at once (0: it does not keep count).
struct MemoryInfo {
  uint64_t free_bytes = 0;
  uint64_t total_bytes = 0;
  uint64_t peak_bytes_reserved = 0;
};

// What the user's flags say about the KV cache's share of a device's memory:
// --gpu-memory-utilization, the cache's block size, and the scratch the
// profiled largest step kept (named in the out-of-memory messages). And the
// most tokens the sequences can use (--max-num-seqs sequences of
// --max-model-len, the padding blocks included; 0: no bound), which a backend
// on host memory, shared with everything else, takes no more than.
struct KvBudget {
  double gpu_memory_utilization = 0.9;
  int block_size = 16;
  uint64_t scratch_bytes = 0;
  int64_t useful_tokens = 0;
};

// The batch sizes a backend that records decode steps as graphs records them
// at: 1, 2, 4, 8, then every multiple of 8 up to 256 and of 16 beyond (vLLM's
// ladder). A decode-only step of `rows` sequences runs padded to the smallest
// size ≥ rows (LlamaModel), so serving records 35 graphs for batches of 1..256
// per context bucket instead of one per size met. Why these sizes: a padded
// step wastes at most 7 rows below 256 (15 beyond, where they are < 6 % of the
// step), and 8 and 16 — where the CUDA backend's linear plans leave the GEMV
// for W8A8 and W8A16 — are sizes of their own, so padding never moves a step
// from the GEMV to a GEMM. rows ≥ 1 (fp8lm::Error otherwise).
int64_t decode_graph_rows(int64_t rows);
// The most padding rows decode_graph_rows adds to a step (257 → 272): what the
// padding blocks of a KV cache must hold, one position per padding row.
inline constexpr int64_t kMaxDecodePadding = 15;
// Steps of the same number of tokens V for every sequence with every position's logits
// (speculative verify steps, V = k + 1) are recorded and padded like decode steps up to this V:
// the CUDA decode attention's bound on a sequence's new tokens (kDecodeMaxNewTokens); beyond it
// such a step takes the prefill kernels, which are not recorded.
inline constexpr int64_t kMaxRecordedVerifyTokens = 8;

// How a sparse MoE block (Qwen3-MoE, Mixtral) picks and weighs each row's
// experts from its router logits, as transformers does: softmax over the
// experts in float32, the top_k by probability (the lower expert index first
// on ties), and those top_k probabilities divided by their sum when
// `renormalize` (Qwen3-MoE's norm_topk_prob; Mixtral always).
//
// DeepSeek-V3's DeepSeekMoE (scoring kSigmoid, noaux_tc) instead: each expert's
// score sigmoid(logit) in float32; the choice by score + correction_bias (an
// upload_vector of one value per expert; null: none) among the topk_groups best of
// num_groups equal groups of experts, a group's rank the sum of its two best
// biased scores; the chosen experts weighted by their unbiased scores, divided
// by their sum + 1e-20 when `renormalize`, then × routed_scaling — transformers'
// DeepseekV3TopkRouter.
struct MoeRouting {
  int top_k = 0;
  bool renormalize = false;
  MoeScoring scoring = MoeScoring::kSoftmax;
  int num_groups = 1;
  int topk_groups = 1;
  float routed_scaling = 1.0f;
  const Weight* correction_bias = nullptr;
};

// One multi-head latent attention call (DeepSeek-V3; spec/model_config.h MlaConfig):
// num_heads query heads of nope_dim + rope_dim, a latent of latent_dim values, v_dim
// output values a head. `scale` multiplies q·k (transformers' scaling, YaRN's mscale
// correction included). `absorbed` (decode's way): each head's q_nope is taken into
// the latent space through W_UK, attention runs over the cached latents, and its
// result leaves through W_UV; otherwise each cached latent is decompressed into
// every head's k_nope and v first (the textbook form). The two are the same math
// in another order, so they agree to float32 rounding.
struct MlaParams {
  int num_heads = 0;
  int64_t nope_dim = 0, rope_dim = 0, v_dim = 0, latent_dim = 0;
  float scale = 1.0f;
  bool absorbed = true;
};

// One line of an op profile: the time one kind of step spent in one op, summed
// over every call since the profile was last cleared.
struct OpProfileEntry {
  std::string step;  // "prefill" (some sequence took > 1 new token) or "decode"
  std::string op;    // the op and what tells its calls apart ("linear w8a8 4096x4096")
  double seconds = 0.0;
  int64_t calls = 0;
  bool nested = false;  // timed inside another op of the profile: its time is part of that op's
};

// Which kernels run decode steps where a backend has a one-program decode (--decode-kernel):
// its choice from measurements (kAuto), one kernel per op (kLayered), or the one program
// wherever it runs the step (kPersistent).
enum class DecodeKernel { kAuto, kLayered, kPersistent };

// A dense decoder layer's uploaded weights, for a backend that runs a whole decode step as one
// program (Ops::prepare_decode_program). Null q_norm / k_norm: none; sliding_window 0: none.
struct DecodeLayer {
  const Weight* input_norm = nullptr;
  const Weight* post_attention_norm = nullptr;
  const Weight* q_norm = nullptr;
  const Weight* k_norm = nullptr;
  const Weight* qkv = nullptr;      // upload_fused_linear of q, k, v
  const Weight* o = nullptr;
  const Weight* gate_up = nullptr;  // upload_fused_linear of gate, up
  const Weight* down = nullptr;
  int64_t sliding_window = 0;
};
struct DecodeModel {
  int64_t hidden = 0, intermediate = 0, vocab = 0;
  int q_heads = 0, kv_heads = 0;
  int64_t head_dim = 0;
  float eps = 0.0f;
  float attention_scale = 1.0f;
  const RopeTable* rope = nullptr;
  const Weight* embedding = nullptr;
  const Weight* final_norm = nullptr;
  const Weight* lm_head = nullptr;
  std::vector<DecodeLayer> layers;
};

class Ops {
 public:
  virtual ~Ops() = default;
  virtual std::string name() const = 0;

  // ---- memory of backends that have a bounded device memory (a GPU): the
  // runtime profiles the largest step on it before sizing the KV cache.
  // nullopt: host memory (the CPU backend, whose budget is its own overrides below).
  virtual std::optional<MemoryInfo> memory_info() const { return std::nullopt; }
  // KV-cache tokens this backend's memory holds (a multiple of block_size)
  // when the user gave no size: what gpu_memory_utilization of the device's
  // memory leaves once the weights are loaded and the profiled step's scratch
  // is kept, less a margin for what steps allocate beside the scratch (CUDA
  // graphs, step metadata, cuBLASLt's plans); the CPU backend's, a share of the
  // host memory available, at most budget.useful_tokens. nullopt: a backend
  // with no memory to say (the runtime takes budget.useful_tokens). Throws
  // fp8lm::Error when not one block fits. The default (backend/ops.cpp) reads
  // memory_info().
  virtual std::optional<int64_t> default_kv_cache_tokens(uint64_t bytes_per_token, const KvBudget& budget) const;
  // Throws fp8lm::Error (out of memory, naming the flag: --kv-cache-memory when
  // `given_in_bytes`, else --kv-cache-tokens) when a cache of `tokens` does not
  // fit in the device's free memory (the CPU backend: the host's available
  // memory). The default is a no-op without memory_info().
  virtual void check_kv_cache_fits(int64_t tokens, uint64_t bytes_per_token, const KvBudget& budget,
                                   bool given_in_bytes) const;
  // Called once the worst-case steps have run (the runtime's memory profile):
  // keep the scratch they took, in one piece, so that no later step that takes
  // no more allocates device memory. Returns the bytes kept (0: nothing kept).
  virtual uint64_t keep_step_scratch() { return 0; }

  // ---- op profile (bench latency --profile). set_op_profiling(on) switches
  // per-op timing on or off and returns false where this backend has none (the
  // default). Timing costs: a GPU backend runs recorded steps op by op.
  // op_profile() waits for the ops issued and returns what was timed since the
  // last clear_op_profile().
  virtual bool set_op_profiling(bool on) {
    (void)on;
    return false;
  }
  virtual std::vector<OpProfileEntry> op_profile() { return {}; }
  virtual void clear_op_profile() {}
  // The device time of the steps so far, each from its metadata going up (begin_step) to its
  // results coming back, summed, where a backend times it (the CUDA backend: two events a
  // step); nullopt where the ops run on the host, whose steps are busy the whole time. A run's
  // wall time less the change in it is the time the device waited for the host between steps.
  virtual std::optional<double> device_step_seconds() { return std::nullopt; }

  // ---- weights, from the loader's host descriptions
  virtual std::unique_ptr<Weight> upload_linear(const weights::LinearWeight& w) = 0;
  virtual std::unique_ptr<Weight> upload_vector(std::vector<float> values) = 0;
  // An embedding table [vocab, dim] (high precision storage; rows are gathered).
  virtual std::unique_ptr<Weight> upload_embedding(const weights::LinearWeight& table) = 0;
  // Linear layers reading the same input (q/k/v, gate/up) as one weight: the
  // parts' outputs side by side in each row of y, in order. One GEMM or GEMV
  // reads them all, which at decode sizes saves a launch and the activation's
  // quantization per part. nullptr: this backend does not fuse these parts
  // (the CPU never does; the CUDA backend needs one scheme for all of them).
  virtual std::unique_ptr<Weight> upload_fused_linear(std::span<const weights::LinearWeight> parts) {
    (void)parts;
    return nullptr;
  }
  // Whether this backend runs sparse MoE blocks (upload_moe_experts, moe). The
  // model refuses an MoE architecture at load where it does not (issue 20: CUDA).
  virtual bool supports_moe() const { return false; }
  // Whether moe() over `rows` rows with these experts may run inside a recorded step (run_step
  // with a key): nothing of it comes back to the host. False: the model runs such steps unrecorded.
  virtual bool moe_recordable(const Weight& experts, int64_t rows, int top_k) const {
    (void)experts, (void)rows, (void)top_k;
    return false;
  }
  // One MoE block's experts, expert e the SwiGLU MLP down[e](silu(gate[e]·x) · up[e]·x):
  // gate/up [I, H], down [H, I], every expert the same shape, one scheme for the block.
  virtual std::unique_ptr<Weight> upload_moe_experts(std::span<const weights::LinearWeight> gate,
                                                     std::span<const weights::LinearWeight> up,
                                                     std::span<const weights::LinearWeight> down) {
    (void)gate, (void)up, (void)down;
    throw_no_moe("upload_moe_experts");
  }
  // FP8 attention (issue 44; FlashAttention-3's FP8 attention on Hopper; --fp8-attention): over
  // the layers whose KV cache is E4M3, QKᵀ and PV take E4M3 operands — each (row, head)'s query
  // under its own dynamic scale, the cached K and V as stored, the softmax weights as E4M3 codes
  // of p · 2^8 — accumulated in float32 (cpu/attention.h says exactly how). Throws fp8lm::Error
  // on a backend that does not run it.
  virtual void set_fp8_attention(bool on) {
    if (on) throw Error(name() + ": FP8 attention (--fp8-attention) is not implemented on this backend yet (issue 44)");
  }
  // Whether this backend runs multi-head latent attention (upload_mla_up_projections, rope_mla,
  // mla_attention) over a latent cache (KvCacheShape::latent). The model refuses an MLA
  // architecture at load where it does not (the CUDA backend: issue 45).
  virtual bool supports_mla() const { return false; }
  // kv_b_proj [num_heads · (nope_dim + v_dim), latent_dim] as MLA's up-projections: of each head's
  // nope_dim + v_dim rows, the first nope_dim are W_UK (latent → k_nope), the rest W_UV
  // (latent → v). An FP8 kv_b_proj is dequantized (codes × scales): it runs on unquantized
  // activations, as vLLM's absorbed MLA runs it.
  virtual std::unique_ptr<Weight> upload_mla_up_projections(const weights::LinearWeight& kv_b, int num_heads,
                                                            int64_t nope_dim, int64_t v_dim) {
    (void)kv_b, (void)num_heads, (void)nope_dim, (void)v_dim;
    throw_no_mla("upload_mla_up_projections");
  }
  virtual std::unique_ptr<KvCache> make_kv_cache(const KvCacheShape& shape, std::vector<KvLayerFormat> layers) = 0;
  // How this backend computes with an uploaded linear weight (its plan, one
  // line), for tests, profiles and front-ends; empty: the backend does not say.
  virtual std::string describe(const Weight& w) const {
    (void)w;
    return {};
  }

  // ---- scratch
  virtual Tensor alloc(int64_t rows, int64_t cols) = 0;
  virtual void reset_scratch() = 0;

  // ---- one step
  virtual void begin_step(const StepInputs& step) = 0;
  // Runs `body` (the step's ops, after begin_step) and returns the tensor it
  // returns. With a key ≠ 0 a backend may record the ops the first time it sees
  // the key and replay the recording for every later step with that key instead
  // of calling `body`; the caller promises that steps with one key issue the same
  // ops on the same shapes (they differ only in StepInputs' values).
  virtual Tensor run_step(uint64_t key, const std::function<Tensor()>& body) {
    (void)key;
    return body();
  }
  // Whether decode-only steps should reach run_step padded to
  // decode_graph_rows(rows) rows: true where the backend records them as graphs
  // now (one recording per ladder size instead of one per batch size met). The
  // padding rows change nothing the real rows compute or store (LlamaModel).
  virtual bool pads_decode_batches() const { return false; }

  // ---- a decode step as one program (the CUDA backend's persistent kernel, issue 41)
  // At load, after the weights: the model as the program reads it. Returns "" where the backend
  // will run decode steps of this model as one program (decode_program), else why it will not
  // (one line for the load notes). The default runs none.
  virtual std::string prepare_decode_program(const DecodeModel& model) {
    (void)model;
    return name() + " runs decode steps op by op";
  }
  // Inside a decode-only step's body (after begin_step, one row per sequence, every row's logits
  // wanted): the step's logits [rows, vocab] computed by the prepared program, the K/V stored as
  // attention() stores them; nullopt where the program does not take this step (its batch size,
  // its cache, the backend's plan), and the model runs its layers instead. The same for every
  // step of one row count, so that a recorded step stays valid.
  virtual std::optional<Tensor> decode_program(int64_t rows, KvCache& cache) {
    (void)rows, (void)cache;
    return std::nullopt;
  }

  // ---- ops (every output is written, never accumulated into, unless said)
  // out[r] = table row step.ids[r].
  virtual void embedding(const Weight& table, Tensor out) = 0;

  // ---- tensor parallelism (issue 22): this backend as one rank of a group that splits the
  // model (loader/tensor_parallel.h). Every rank calls these in the same order.
  // The embedding rows of a vocabulary shard: out[r] = table row step.ids[r] − vocab0 where the
  // id falls in [vocab0, vocab0 + the table's rows), else zeros (the all-reduce then sums them).
  virtual void embedding_shard(const Weight& table, int64_t vocab0, Tensor out) {
    (void)table, (void)vocab0, (void)out;
    throw_no_group("embedding_shard");
  }
  // x (the same shape on every rank) becomes the element-wise sum over the ranks.
  virtual void all_reduce_sum(Tensor x) {
    (void)x;
    throw_no_group("all_reduce_sum");
  }
  // Each rank's local [rows, cols_r] side by side in rank order: out [rows, Σ cols_r].
  virtual void all_gather_cols(Tensor local, Tensor out) {
    (void)local, (void)out;
    throw_no_group("all_gather_cols");
  }
  // `next` (rms_norm, add_rms_norm), where given: the linear that reads
  // `out` next, before anything else writes it. A backend may then produce out in that
  // linear's input format as well, in the same pass (the CUDA backend: FP8 codes and scales
  // for a W8A8 linear), and linear(out, *next, …) reads those instead of quantizing out again.
  // out itself is written either way.
  // out = x / sqrt(mean(x²) + eps) · w, per row.
  virtual void rms_norm(Tensor x, const Weight& w, float eps, Tensor out, const Weight* next = nullptr) = 0;
  // h += delta, then out = rms_norm(h): the residual add fused with the next norm.
  virtual void add_rms_norm(Tensor h, Tensor delta, const Weight& w, float eps, Tensor out,
                            const Weight* next = nullptr) = 0;
  // The same over each head_dim-wide slice of every row, in place (Qwen3's q/k norm).
  virtual void head_rms_norm(Tensor x, int64_t head_dim, const Weight& w, float eps) = 0;
  virtual void add(Tensor acc, Tensor x) = 0;  // acc += x
  virtual void linear(Tensor x, const Weight& w, Tensor y) = 0;  // y = x·Wᵀ (+ b)
  // Rotates every head_dim-wide slice of row r of q and of k by position
  // step.positions[r] (rotate-half layout).
  virtual void rope_qk(Tensor q, Tensor k, int64_t head_dim, const RopeTable& rope) = 0;
  virtual void silu_mul(Tensor gate, Tensor up, Tensor out) = 0;  // out = silu(gate) · up
  // The same from a fused gate/up output: each row's first half gate, second half up.
  // Only backends that fuse (upload_fused_linear) need the two below.
  virtual void silu_mul_fused(Tensor gate_up, Tensor out) {
    (void)gate_up, (void)out;
    throw_not_fused("silu_mul_fused");
  }
  // parts[i] = the next parts[i].cols columns of x (a fused output into its parts).
  virtual void split_columns(Tensor x, std::span<const Tensor> parts) {
    (void)x, (void)parts;
    throw_not_fused("split_columns");
  }
  // A layer's attention inputs from a fused q/k/v output: q, k, v = qkv's parts
  // (split_columns), q and k normed per head when q_norm and k_norm are given
  // (head_rms_norm: Qwen3; both or neither), then q and k rotated (rope_qk).
  // The default is exactly that sequence of ops; a backend may override it with
  // one pass that gives the same results (the CUDA backend: one kernel).
  // With `store_into`, a backend may also write k and v into layer `layer` of that cache
  // in the same pass (what attention() does first, the same bits); attention() of this
  // layer in this step then leaves the store out. The default does not.
  virtual void split_norm_rope_qkv(Tensor qkv, Tensor q, Tensor k, Tensor v, int64_t head_dim, const Weight* q_norm,
                                   const Weight* k_norm, float eps, const RopeTable& rope,
                                   KvCache* store_into = nullptr, int layer = -1) {
    (void)store_into, (void)layer;
    if ((q_norm == nullptr) != (k_norm == nullptr))
      throw Error(name() + ": split_norm_rope_qkv takes both q/k norm weights or neither");
    const Tensor parts[] = {q, k, v};
    split_columns(qkv, parts);
    if (q_norm != nullptr) {
      head_rms_norm(q, head_dim, *q_norm, eps);
      head_rms_norm(k, head_dim, *k_norm, eps);
    }
    rope_qk(q, k, head_dim, rope);
  }
  // A sparse MoE block: out[r] = Σ p_e · expert_e(x[r]) over the experts e that
  // row r routes to (router_logits[r], [rows, experts], as `routing` says),
  // summed in float32 from zero in increasing expert order — transformers'
  // loop over the experts, so the rounding is its rounding. Rows are
  // independent: a row's result does not depend on the others in the call —
  // except with FP8 experts whose activations take a dynamic per-tensor scale:
  // as in vLLM's fused MoE that scale spans the call (gate/up: every row of x;
  // down: every routed row), and a static input scale is the largest of the
  // block's experts (gate and up together, down apart).
  virtual void moe(Tensor x, Tensor router_logits, const Weight& experts, const MoeRouting& routing, Tensor out) {
    (void)x, (void)router_logits, (void)experts, (void)routing, (void)out;
    throw_no_moe("moe");
  }
  // MLA's RoPE: row r of q holds heads of nope_dim + rope.rotary_dim() values, of which the
  // last rotary_dim are rotated; k_pe holds one such rope part a row (shared by the heads). By
  // position step.positions[r]. `interleaved` (DeepSeek's layout, transformers' rope_interleave):
  // pairs (x0, x1), (x2, x3), … rotate together and the result is written as transformers
  // writes it, the rotated even elements then the rotated odd ones (the same for q and k, so
  // q·k is unchanged by the order); otherwise rotate-half as rope_qk.
  virtual void rope_mla(Tensor q, Tensor k_pe, int64_t nope_dim, const RopeTable& rope, bool interleaved) {
    (void)q, (void)k_pe, (void)nope_dim, (void)rope, (void)interleaved;
    throw_no_mla("rope_mla");
  }
  // Multi-head latent attention: stores each new row's latent entry — latent [rows, latent_dim]
  // (after kv_a_layernorm) beside k_pe [rows, rope_dim] (after RoPE) — into layer `layer` of a
  // latent cache, then attends each row's query heads q [rows, num_heads · (nope_dim + rope_dim)]
  // over the cached entries of its sequence, positions 0 … its own (step.sequences), with the
  // up-projections `up` (upload_mla_up_projections), as params.absorbed says: out
  // [rows, num_heads · v_dim], ready for o_proj.
  virtual void mla_attention(Tensor q, Tensor latent, Tensor k_pe, const Weight& up, Tensor out,
                             const MlaParams& params, KvCache& cache, int layer) {
    (void)q, (void)latent, (void)k_pe, (void)up, (void)out, (void)params, (void)cache, (void)layer;
    throw_no_mla("mla_attention");
  }
  // Stores the new K/V into the cache, then attends over the cached positions
  // (sequences: step.sequences).
  virtual void attention(Tensor q, Tensor k, Tensor v, Tensor out, const AttentionParams& params, KvCache& cache,
                         int layer) = 0;
  // out[i] = x row step.logit_rows[i].
  virtual void gather_rows(Tensor x, Tensor out) = 0;
  // out = x, the same shape (a step's activation kept beside the stream that overwrites it:
  // the hidden states an EAGLE-3 head reads). The default is split_columns into one part.
  virtual void copy(Tensor x, Tensor out) {
    if (out.rows != x.rows || out.cols != x.cols)
      throw Error(name() + ": copy of " + std::to_string(x.rows) + " x " + std::to_string(x.cols) + " into " +
                  std::to_string(out.rows) + " x " + std::to_string(out.cols));
    const Tensor parts[] = {out};
    split_columns(x, parts);
  }
  virtual void to_host(Tensor x, std::span<float> out) = 0;  // rows·cols float32 values
  // Greedy sampling where the logits are: out[r] = the index of row r's largest
  // value (the lowest on ties; NaN never wins, -1 for a row of NaN only). Only
  // rows.size() int32 values cross to the host instead of rows × vocab logits.
  virtual void argmax_rows(Tensor x, std::span<int32_t> out) = 0;
  // Sampling where the logits are: tokens[r] = the token row r of `logits`
  // draws as rows[r] says (backend/sampling.h: penalties, temperature, top-k,
  // top-p, min-p, the inverse CDF in id order at rows[r].uniform; a greedy row
  // is the argmax after its penalties, the lowest id on ties). Only the tokens
  // cross to the host. A row whose logits cannot be sampled (NaN, +inf, nothing
  // left) gets kNoToken: its request fails, the other rows are sampled as ever.
  // Throws fp8lm::Error only for bad arguments (sizes, a penalty token outside
  // the vocabulary). The default copies the logits to the host and runs the row
  // math there.
  virtual void sample_rows(Tensor logits, std::span<const RowSampling> rows, std::span<int32_t> tokens) {
    if (rows.size() != size_t(logits.rows) || tokens.size() != size_t(logits.rows))
      throw Error(name() + ": sample_rows of " + std::to_string(logits.rows) + " rows given " +
                  std::to_string(rows.size()) + " row descriptions and " + std::to_string(tokens.size()) + " outputs");
    std::vector<float> host(size_t(logits.rows * logits.cols));
    to_host(logits, host);
    RowSampler sampler;
    for (size_t r = 0; r < rows.size(); ++r)
      tokens[r] =
          sampler.sample_or_none(std::span<float>(host).subspan(r * size_t(logits.cols), size_t(logits.cols)), rows[r]);
  }

  // ---- a step's tokens without waiting for them (the engine's async scheduling):
  // start_argmax_rows / start_sample_rows queue argmax_rows / sample_rows and may return
  // before the device has run the step; wait_tokens() then waits and gives the tokens (one
  // per row). Between the two the host may do anything that needs no result of the step
  // (schedule the next one, detokenize the last one); wait_tokens() must come before the
  // next begin_step. The defaults run the op at once and keep its tokens until then.
  virtual void start_argmax_rows(Tensor x) {
    started_tokens_.assign(size_t(x.rows), 0);
    argmax_rows(x, started_tokens_);
    tokens_started_ = true;
  }
  virtual void start_sample_rows(Tensor logits, std::span<const RowSampling> rows) {
    started_tokens_.assign(size_t(logits.rows), 0);
    sample_rows(logits, rows, started_tokens_);
    tokens_started_ = true;
  }
  virtual void wait_tokens(std::vector<int32_t>& tokens) {
    if (!tokens_started_) throw Error(name() + ": wait_tokens without a started argmax_rows or sample_rows");
    tokens_started_ = false;
    tokens.swap(started_tokens_);
  }

 protected:
  [[noreturn]] void throw_no_group(const char* op) const {
    throw Error(name() + ": " + op + ": this backend is not a rank of a tensor-parallel group");
  }
  [[noreturn]] void throw_no_moe(const char* op) const {
    throw Error(name() + ": " + op + ": this backend does not run MoE blocks (supports_moe() is false)");
  }
  [[noreturn]] void throw_no_mla(const char* op) const {
    throw Error(name() + ": " + op +
                ": this backend does not run multi-head latent attention (supports_mla() is false)");
  }
  [[noreturn]] void throw_not_fused(const char* op) const {
    throw Error(name() + ": " + op + " of a fused linear output, but this backend fuses none");
  }

 private:
  std::vector<int32_t> started_tokens_;  // the default start_*'s tokens, until wait_tokens
  bool tokens_started_ = false;
};

}  // namespace fp8lm::backend
