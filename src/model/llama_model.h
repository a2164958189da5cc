// The Llama family — LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM,
// MistralForCausalLM, the mixture-of-experts Qwen3MoeForCausalLM and
// MixtralForCausalLM, and DeepseekV3ForCausalLM — as one forward pass over the
// backend op interface. What differs between them is data in ModelConfig
// (biases, q/k norms, RoPE scaling, sliding window, tied embeddings, which
// layers are sparse MoE blocks and how they route, multi-head latent attention
// instead of GQA: mla_layer.cpp), never a branch on the name; how each linear
// layer is quantized is data in its weights.
//
// One forward call runs a batch of sequences, each with some new tokens at its
// own position (a prompt chunk or one decode token): prefill and decode mix
// freely, and every row's result is independent of what it is batched with
// (up to a dynamic per-tensor activation scale, which by definition spans the
// whole call).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "loader/host_model.h"
#include "loader/tensor_parallel.h"
#include "spec/model_config.h"
#include "spec/rope.h"

namespace fp8lm::model {

struct SequenceInput {
  std::span<const int32_t> tokens;       // new tokens, at least one
  int64_t start_position = 0;            // tokens of this sequence already in the cache
  std::span<const int64_t> block_table;  // blocks for positions [0, start_position + tokens.size())
  bool all_logits = false;               // logits for every new token (scoring) or the last only
};

// Which activation of a decoder layer an observer sees: the input shared by
// q/k/v_proj, the input of o_proj, the input shared by gate/up_proj, the input
// of down_proj. MoE layers report kQkv and kO here, and their experts' inputs
// through ForwardObserver::expert_input where LlamaModel::observe_all_experts was called.
enum class LinearInput : uint8_t { kQkv, kO, kGateUp, kDown };

// The projections that read each LinearInput ("self_attn.q_proj", ...).
std::vector<std::string> modules_reading(LinearInput input);

// Sees activations during a forward pass, for calibration (fp8lm quantize, KV
// scales at load). Values are float32 copies in host memory, row-major.
class ForwardObserver {
 public:
  virtual ~ForwardObserver() = default;
  virtual void linear_input(int layer, LinearInput input, std::span<const float> x, int64_t rows, int64_t cols) = 0;
  // K after q/k norm and RoPE (what the cache stores) and V, [rows, kv_heads × head_dim] each.
  virtual void key_value(int layer, std::span<const float> k, std::span<const float> v, int64_t rows,
                         int64_t width) = 0;
  // An MoE layer's expert (only after LlamaModel::observe_all_experts): kGateUp is
  // the block's input x, every row; kDown is silu(gate_e·x) · up_e·x of every row —
  // not only the rows the router sends to the expert (see observe_all_experts).
  virtual void expert_input(int layer, int expert, LinearInput input, std::span<const float> x, int64_t rows,
                            int64_t cols) {
    (void)layer, (void)expert, (void)input, (void)x, (void)rows, (void)cols;
  }
};

class LlamaModel {
 public:
  // Uploads the weights to `ops`' backend; `ops` must outlive the model.
  // Throws fp8lm::Error before uploading anything for an MoE model on a
  // backend that does not run MoE blocks (Ops::supports_moe).
  // With `tp`, the model is rank tp->rank of a tensor-parallel group (issue 22): `weights` are
  // that rank's (loader::shard_host_weights), `ops` a rank of the group, and every rank runs the
  // same forward calls from its own thread; each gets the whole logits.
  LlamaModel(const ModelConfig& config, const loader::HostModelWeights& weights, backend::Ops& ops,
             const loader::TensorParallelPlan* tp = nullptr);

  const ModelConfig& config() const { return config_; }
  int64_t vocab_size() const { return config_.vocab_size; }

  backend::KvCacheShape kv_cache_shape(int block_size, int64_t num_blocks) const;

  // Runs the batch; `logits` receives [rows, vocab] float32, the rows in
  // sequence order (every new token's with all_logits, else the last one's).
  // Throws fp8lm::Error for positions beyond the context, short block tables,
  // token ids outside the vocabulary.
  void forward(std::span<const SequenceInput> batch, backend::KvCache& cache, std::vector<float>& logits);

  // The same step with greedy sampling where the logits are: `tokens` receives
  // the argmax of each logits row (the lowest index on ties), and the logits
  // never leave the backend (on a GPU: rows int32 values instead of rows × vocab).
  void forward_greedy(std::span<const SequenceInput> batch, backend::KvCache& cache, std::vector<int32_t>& tokens);

  // The same step with any sampling where the logits are: `tokens` receives
  // the token each logits row draws as rows[r] says (backend::Ops::sample_rows;
  // one description per logits row, greedy rows included), and only those
  // tokens leave the backend.
  void forward_sample(std::span<const SequenceInput> batch, backend::KvCache& cache,
                      std::span<const backend::RowSampling> rows, std::vector<int32_t>& tokens);

  // forward_greedy / forward_sample in two halves, for the engine's async scheduling: start_*
  // queues the step and may return before the backend has run it (Ops::start_argmax_rows);
  // wait_tokens() gives its tokens, and must come before the next step starts. Between the two
  // the caller may do anything that needs neither the tokens nor the backend.
  void start_greedy(std::span<const SequenceInput> batch, backend::KvCache& cache);
  // `before_sampling`, when given, runs between the step's launch and its sampling's: host work
  // the descriptions in `rows` point at (structured outputs' masks) overlaps the device's forward.
  void start_sample(std::span<const SequenceInput> batch, backend::KvCache& cache,
                    std::span<const backend::RowSampling> rows, const std::function<void()>& before_sampling = {});
  void wait_tokens(std::vector<int32_t>& tokens);

  // What the calls above refuse (fp8lm::Error): a batch this model cannot run on `cache`, and
  // sampling descriptions that are not one per logits row.
  void check_batch(std::span<const SequenceInput> batch, const backend::KvCache& cache) const;
  static void check_sampling(std::span<const SequenceInput> batch, std::span<const backend::RowSampling> rows);

  // MLA layers attend absorbed (the default: every step, prefill and decode) or, with false, over
  // K/V decompressed from the cached latents — the textbook form, the same numbers to float32
  // rounding (backend::MlaParams::absorbed); for comparisons. No effect without MLA.
  void set_mla_absorbed(bool absorbed) { mla_absorbed_ = absorbed; }

  // Observes every following forward pass (nullptr: none, the default).
  void set_observer(ForwardObserver* observer) { observer_ = observer; }

  // The target side of an EAGLE-3 head (issue 42): every following step also keeps the residual
  // stream entering each of `layers` (vLLM's aux_hidden_state_layers: embedding output for layer
  // 0), every row, in scratch tensors that aux_states() gives until the next step. Decode steps
  // then run layer by layer (the one-program decode keeps no intermediate stream). Throws
  // fp8lm::Error for a layer outside [0, num_hidden_layers) and on a tensor-parallel rank.
  void capture_aux_states(std::vector<int> layers);
  // The last step's kept streams, one [rows, hidden] tensor per captured layer, its real rows
  // (without a recorded step's padding) in the step's row order; empty when none are captured.
  std::span<const backend::Tensor> aux_states() const { return aux_; }
  // The uploaded embedding table (an EAGLE-3 head without its own embeds with the target's).
  const backend::Weight& embedding() const { return *embedding_; }

  // Calibration of MoE layers as LLM Compressor does it (oneshot's default
  // moe_calibrate_all_experts): while an observer is set, every expert also
  // runs on every row of its block's input, so each expert's input ranges come
  // from all calibration tokens and an expert the router rarely picks still
  // gets a range; the observer sees them through expert_input. The block's own
  // output is unchanged (the extra SwiGLUs feed only the observer). Uploads
  // each expert's gate and up projection once more as a plain linear — `weights`
  // must be those the model was built from, and outlive it on backends that do
  // not copy them (the CPU) — so this is for calibration runs only.
  void observe_all_experts(const loader::HostModelWeights& weights);

  // The rows a decode-only step (one new token per sequence) of `rows`
  // sequences runs on `cache`: backend::decode_graph_rows(rows) where the
  // backend records such steps as graphs (Ops::pads_decode_batches) and the
  // cache has padding blocks (KvCacheShape::padding_blocks); `rows` otherwise,
  // and for a model with a dynamic per-tensor activation scale, whose one
  // amax per step padding rows would join. Padding row j embeds token 0 at
  // position j of the padding blocks (a slot of its own) and attends over
  // padding positions 0..j only; its logits are dropped. Every op but that
  // scale is row-independent, so the real rows' results and cache entries
  // are exactly those of the unpadded step.
  int64_t decode_step_rows(int64_t rows, const backend::KvCache& cache) const;
  // The sequences a speculative verify step of `seqs` sequences × `tokens_each` tokens (every
  // position's logits) runs on `cache`: padded as decode_step_rows pads a decode step's, padding
  // sequence j `tokens_each` tokens 0 at padding positions j · tokens_each onwards, where they
  // fit the padding blocks; `seqs` otherwise (such a step is recorded at its own size), and
  // where a decode step would not be padded.
  int64_t verify_step_sequences(int64_t seqs, int64_t tokens_each, const backend::KvCache& cache) const;
  // Whether a step of `rows` rows may be recorded as far as the MoE blocks go: every block's
  // moe() stays on the device at that size (Ops::moe_recordable); true without MoE.
  bool moe_recordable(int64_t rows) const;
  // Why decode steps run op by op rather than as the backend's one program (Ops::
  // prepare_decode_program); empty where the backend takes them as one program.
  const std::string& decode_program_note() const { return decode_program_note_; }

 private:
  // decode_step_rows and verify_step_sequences: `seqs` sequences of `tokens_each` tokens padded
  // to the ladder where the padding blocks hold the padding sequences' positions.
  int64_t padded_sequences(int64_t seqs, int64_t tokens_each, const backend::KvCache& cache) const;

  struct Layer {
    std::unique_ptr<backend::Weight> input_norm, post_attention_norm, q_norm, k_norm;
    std::unique_ptr<backend::Weight> q, k, v, o, gate, up, down;
    // An MoE layer: the router (its own linear, never quantized) and the experts; gate/up/down are null.
    std::unique_ptr<backend::Weight> router, experts;
    // observe_all_experts only: each expert's gate and up as plain linears.
    std::vector<std::unique_ptr<backend::Weight>> observed_gate, observed_up;
    // Where the backend fuses them: q/k/v as one weight, gate/up as one (then q, k, v, gate, up are null).
    std::unique_ptr<backend::Weight> qkv, gate_up;
    std::optional<int64_t> sliding_window;
    // Multi-head latent attention (DeepSeek-V3): q is q_proj (null with q_lora_rank: q_a, q_a_norm,
    // q_b), kv_a the latent + rope projection, kv_a_norm its latent's norm, mla_up kv_b_proj as
    // the backend's up-projections; k and v are null.
    std::unique_ptr<backend::Weight> q_a, q_a_norm, q_b, kv_a, kv_a_norm, mla_up;
    // DeepSeek-V3's MoE layers: the shared experts (one SwiGLU MLP every row runs) and the router's
    // correction bias (inside `routing`).
    std::unique_ptr<backend::Weight> shared_gate, shared_up, shared_down, router_bias;
    backend::MoeRouting routing;  // an MoE layer's routing (the bias is this layer's)
  };
  // Scratch tensors of a step's MLA layers (mla_layer.cpp).
  struct MlaTensors {
    backend::Tensor q_a, q_a_normed, q, kv_a, latent, latent_normed, k_pe, out;
  };
  // Scratch tensors of a step's shared experts.
  struct SharedTensors {
    backend::Tensor gate, up, act, out;
  };

  ModelConfig config_;
  backend::Ops& ops_;
  // This rank's share (the whole model without tensor parallelism): query and KV heads, dense
  // MLP rows, vocabulary rows [vocab0_, vocab0_ + vocab_).
  int tp_size_ = 1;
  int q_heads_ = 0, kv_heads_ = 0;
  int64_t intermediate_ = 0, vocab0_ = 0, vocab_ = 0;
  RopeTable rope_;
  backend::MoeRouting routing_;  // MoE layers' top-k and renormalisation
  std::unique_ptr<backend::Weight> embedding_, final_norm_, lm_head_;
  std::vector<Layer> layers_;
  ForwardObserver* observer_ = nullptr;
  bool rows_coupled_ = false;  // some linear quantizes its input with one dynamic scale per call
  bool has_moe_ = false;       // some layer is an MoE block: steps recorded only where moe_recordable
  bool decode_program_ = false;       // the backend runs decode-only steps as one program
  std::string decode_program_note_;   // why not
  std::vector<float> observed_, observed_v_;  // host copies for the observer
  std::vector<int> aux_layers_;               // capture_aux_states' layers
  std::vector<backend::Tensor> aux_;          // their streams in the last step

  float mla_scale_ = 1.0f;  // MLA's softmax scale (spec/rope.h mla_softmax_scale)
  bool mla_absorbed_ = true;

  // mla_layer.cpp: an MLA layer's uploads, its step tensors, and its attention block from the
  // normed input x to the input of o_proj.
  void upload_mla(Layer& l, const loader::HostMla& h);
  MlaTensors alloc_mla_tensors(int64_t rows);
  void mla_attention(int layer, Layer& l, backend::Tensor x, MlaTensors& t, backend::KvCache& cache);
  // The observer's key_value of an MLA layer: the latent entries the cache stores.
  void observe_latent_entries(int layer, const MlaTensors& t);
  // DeepSeek-V3's MoE extras: uploads, and out += shared experts of x.
  void upload_deepseek_moe(Layer& l, const loader::HostMoe& h);
  SharedTensors alloc_shared_tensors(int64_t rows);
  void add_shared_experts(const Layer& l, backend::Tensor x, SharedTensors& t, backend::Tensor out);

  void observe(int layer, LinearInput input, backend::Tensor x);
  // expert_input of every expert of MoE layer `layer`, whose block input is x.
  void observe_experts(int layer, const Layer& l, backend::Tensor x);
  // Hands a dense model to the backend's one-program decode where it has one (the constructor).
  void prepare_decode_program();
  // Checks and flattens the batch, hands it to the backend, runs the step: the logits tensor.
  backend::Tensor run_step(std::span<const SequenceInput> batch, backend::KvCache& cache);
  // The step's ops after begin_step, on a scratch arena reset by the caller: every layer, then
  // the logits of `logit_rows` rows.
  backend::Tensor run_layers(int64_t rows, int64_t logit_rows, backend::KvCache& cache);
};

// Each layer's KV-cache element type and scales: the scheme's dtype (kAuto =
// BF16), FP8 scales from the checkpoint or 1.0, skipped layers in BF16.
// `notes` receives what a user should know (e.g. that scales of 1.0 are used).
std::vector<backend::KvLayerFormat> kv_layer_formats(const ModelConfig& config, const KvCacheScheme& scheme,
                                                     const std::vector<float>& k_scales,
                                                     const std::vector<float>& v_scales,
                                                     std::vector<std::string>* notes = nullptr);

}  // namespace fp8lm::model
