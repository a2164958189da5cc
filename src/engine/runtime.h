// A model loaded and ready to run: the checked checkpoint, its tokenizer, the
// weights on a backend, the paged KV cache and its block allocator. Every
// front-end (generate, chat, eval, bench, serve) starts from one of these.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/factory/make_ops.h"
#include "backend/ops.h"
#include "common/decode_weight_bytes.h"
#include "engine/block_allocator.h"
#include "engine/model_runner.h"
#include "io/model_spec.h"
#include "loader/host_weights.h"
#include "model/llama_model.h"
#include "tokenizer/tokenizer.h"

namespace fp8lm::engine {

struct RuntimeOptions {
  backend::Device device = backend::Device::kCpu;
  bool cuda_graphs = true;               // CUDA: record decode steps as graphs
  backend::DecodeKernel decode_kernel = backend::DecodeKernel::kAuto;  // CUDA: --decode-kernel
  // CPU: pad decode steps to the graph ladder as CUDA does, with the padding
  // blocks that needs (tests: the padding changes no real row). A backend that
  // records decode steps pads them whatever this says.
  bool cpu_pad_decode_batches = false;
  double gpu_memory_utilization = 0.9;   // CUDA: share of the GPU's memory fp8lm may fill (KV cache sizing)
  int64_t max_num_batched_tokens = 8192; // CUDA: rows of one step the KV sizing keeps room for
  // Sequences run at once: on a GPU the logits rows of one step the KV sizing keeps room for; on
  // the CPU a cache given no size holds at most this many sequences of max_model_len.
  int64_t max_num_seqs = 256;
  // The longest sequence, prompt + generated tokens, the engine admits (vLLM's --max-model-len):
  // at most the model's context (max_position_embeddings); 0 = that context, lowered to what a
  // KV cache given no size holds. Given, a cache given no size must hold one such sequence.
  int64_t max_model_len = 0;
  int threads = 1;  // CPU: worker threads in all (split between the ranks)
  // Ranks of tensor parallelism (issue 22): the model split over this many CPU thread groups or
  // GPUs (rank r on GPU r); 1 = none.
  int tensor_parallel_size = 1;
  KernelChoice kernels = KernelChoice::kAuto;
  int block_size = 16;
  // KV-cache capacity in tokens; 0 = sized from the memory there is: on a GPU what
  // gpu_memory_utilization leaves, on the CPU at most half of the host memory available and
  // no more than max_num_seqs sequences of max_model_len (backend/cpu/host_memory.h).
  int64_t kv_cache_tokens = 0;
  // KV-cache capacity in bytes instead (vLLM's --kv-cache-memory): as many
  // tokens as the layers' formats fit in it. 0 = not given; at most one of
  // kv_cache_tokens and kv_cache_bytes.
  uint64_t kv_cache_bytes = 0;
  // Whether the capacity was given, in tokens or in bytes.
  bool kv_cache_sized() const { return kv_cache_tokens > 0 || kv_cache_bytes > 0; }
  // Bytes a token takes in a cache kept beside the KV cache with the same blocks (an EAGLE-3
  // head's layer, engine/eagle3_drafter.h): counted in every sizing of the cache, so that the
  // companion fits in what --gpu-memory-utilization or --kv-cache-memory leaves.
  uint64_t kv_companion_bytes_per_token = 0;
  // Explicit KV scales (per layer), overriding the checkpoint's; empty = none.
  std::vector<float> k_scales, v_scales;
  // An FP8 E4M3 KV cache without scales (none in the checkpoint, none given):
  // calibrate them at load on fp8lm's built-in text (true), or use 1.0 (false).
  bool calibrate_kv_scales = true;
  // FP8 attention over the E4M3 cache layers (Ops::set_fp8_attention): needs an FP8 E4M3 KV
  // cache; refused by name where the backend does not run it.
  bool fp8_attention = false;
  // false: no tokenizer is loaded, tokenizer.json or not (has_tokenizer() is then false): for
  // programs that feed token ids alone, such as tests on tiny checkpoints that ship none.
  bool load_tokenizer = true;
  // Called as the weights load (and, with --quantization, are quantized): layers done of all.
  std::function<void(int64_t done, int64_t total)> load_progress;
};

// The max_model_len a run asked for (0: none) against the model's context: `requested`, or the
// context when 0. Throws fp8lm::Error naming --max-model-len when it is negative or beyond the
// context.
int64_t resolve_max_model_len(int64_t requested, int64_t context);

class Runtime {
 public:
  // Reads, checks and loads `model_dir` (config, tokenizer, weights) on the
  // backend options.device names. notes() then says what a user should know (e.g. FP8 KV
  // scales of 1.0). Throws fp8lm::Error naming what is wrong.
  static std::unique_ptr<Runtime> load(const std::filesystem::path& model_dir, const io::LoadOverrides& overrides,
                                       const RuntimeOptions& options);

  const io::ModelSpec& spec() const { return spec_; }
  const ModelConfig& config() const { return spec_.config; }
  // The longest sequence (prompt + generated tokens) to admit: RuntimeOptions::max_model_len, or
  // the model's context lowered to what a KV cache given no size holds (notes() says so).
  int64_t max_model_len() const { return max_model_len_; }
  // A model loaded with --load-format dummy from a directory without
  // tokenizer.json has none: tokenizer() then throws fp8lm::Error saying so
  // (commands that need text cannot run it; bench latency can).
  bool has_tokenizer() const { return tokenizer_ != nullptr; }
  const tokenizer::Tokenizer& tokenizer() const;
  // The model's step calls, on every rank of a tensor-parallel group where there is one.
  ModelRunner& model() { return *runner_; }
  int tensor_parallel_size() const { return runner_->size(); }
  // Rank 0's KV cache (every rank's holds as many tokens, of its own KV heads).
  backend::KvCache& kv_cache() { return *runner_->rank(0).cache; }
  // The blocks sequences may use: the KV cache's, less its padding blocks
  // (KvCacheShape::padding_blocks), which no sequence is ever given.
  BlockAllocator& blocks() { return *blocks_; }
  int block_size() const { return runner_->rank(0).cache->shape().block_size; }
  uint64_t weight_bytes() const { return weight_bytes_; }
  // The weight bytes a decode step of `batch` sequences reads (a bandwidth roofline's): every
  // weight once, of an MoE model only the experts routed to, of the embedding table the rows of
  // the step's tokens unless lm_head is the table (common/decode_weight_bytes.h).
  double decode_weight_bytes(int64_t batch) const;
  const EmbeddingTable& embedding_table() const { return embedding_; }
  uint64_t expert_bytes() const { return expert_bytes_; }  // the part of weight_bytes() in MoE experts
  // A device backend's peak allocation once the weights were uploaded, before the step profile
  // and the KV cache (0 on the CPU): what loading itself needed (online quantization streams
  // each layer through host memory, so this is the device form's size plus alignment).
  uint64_t load_peak_device_bytes() const { return load_peak_device_bytes_; }
  uint64_t kv_cache_bytes() const { return runner_->rank(0).cache->bytes(); }  // rank 0's
  std::string backend_name() const { return ops_->name(); }
  backend::Ops& ops() { return *ops_; }  // rank 0's
  // The ids that end generation: config.json's eos_token_id(s), else the tokenizer's EOS.
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }
  const std::vector<std::string>& notes() const { return notes_; }
  // The KV cache's per-layer formats and scales in use (for logs and inspect).
  std::vector<backend::KvLayerFormat> kv_formats() const;

 private:
  Runtime() = default;
  io::ModelSpec spec_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  bool tokenizer_skipped_ = false;  // RuntimeOptions::load_tokenizer was off
  std::unique_ptr<ModelRunner> runner_;
  backend::Ops* ops_ = nullptr;  // rank 0's
  std::unique_ptr<BlockAllocator> blocks_;
  uint64_t weight_bytes_ = 0;
  uint64_t expert_bytes_ = 0;  // the part of weight_bytes_ in MoE experts
  EmbeddingTable embedding_;   // the part of weight_bytes_ in the embedding table
  uint64_t load_peak_device_bytes_ = 0;
  int64_t max_model_len_ = 0;
  std::vector<int32_t> eos_ids_;
  std::vector<std::string> notes_;
};

}  // namespace fp8lm::engine
