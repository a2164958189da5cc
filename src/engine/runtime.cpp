#include "engine/runtime.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <optional>
#include <random>
#include <string>

#include "backend/paged_kv_types.h"
#include "calibration/calibration.h"
#include "common/decode_weight_bytes.h"
#include "common/error.h"

namespace fp8lm::engine {

namespace {

// `count` samples of `length` token ids drawn uniformly (fixed seed): KV-scale
// calibration for a model without a tokenizer (--load-format dummy, or RuntimeOptions::load_tokenizer off).
std::vector<std::vector<int32_t>> random_token_samples(int64_t vocab, int64_t count, int64_t length) {
  std::mt19937_64 rng(0x6b7663616c696221ULL);
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(count), std::vector<int32_t>(static_cast<size_t>(length)));
  for (auto& s : out)
    for (int32_t& t : s) t = int32_t(rng() % uint64_t(vocab));
  return out;
}

// What a user should know of the split: each rank's share, and what re-scaling FP8 cells that a
// shard boundary cuts changed (issue 22: split anyway, never refused, the error said).
std::string tensor_parallel_note(const loader::TensorParallelPlan& p, int size, const weights::ShardReport& r) {
  char text[512];
  std::snprintf(text, sizeof text,
                "tensor parallelism: %d ranks, each %lld query heads, %lld KV heads%s, %lld vocabulary rows", size,
                static_cast<long long>(p.q_heads), static_cast<long long>(p.kv_heads),
                p.kv_replicated ? " (replicated: more ranks than KV heads)" : "", static_cast<long long>(p.vocab));
  std::string note = text;
  if (r.cells_rescaled > 0) {
    std::snprintf(text, sizeof text,
                  "; shard boundaries cut %lld FP8 scale cells, re-scaled for their shards: %lld codes requantized, "
                  "%lld values changed, max |error| %.3g (%.3g relative)",
                  static_cast<long long>(r.cells_rescaled), static_cast<long long>(r.codes_requantized),
                  static_cast<long long>(r.values_changed), r.max_abs_error, r.max_rel_error);
    note += text;
  }
  return note;
}

// MiB of `bytes`, for messages (a double: a context's cache may be beyond 2^64 bytes).
std::string mib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.0f", bytes / 1048576.0);
  return text;
}

}  // namespace

int64_t resolve_max_model_len(int64_t requested, int64_t context) {
  if (requested < 0) throw Error("--max-model-len: " + std::to_string(requested) + " is negative");
  if (requested > context)
    throw Error("--max-model-len: " + std::to_string(requested) + " is beyond the model's context of " +
                std::to_string(context) + " tokens (max_position_embeddings in config.json)");
  return requested > 0 ? requested : context;
}

// Runs the steps that take the most memory once, on a cache of one block
// (every block table points at it: the values are meaningless, the memory
// real) and the padding blocks, and has the backend keep the scratch they
// took: a step of max_num_batched_tokens rows over max_num_seqs sequences (a
// long prompt chunk beside decodes, with every sequence's logits), and a
// decode step of max_num_seqs rows (padded as serving pads it). Attention's
// workspace is capped by the backend, so the profile's short contexts stand
// for any. Returns the scratch bytes kept.
static uint64_t profile_step_memory(model::LlamaModel& model, backend::Ops& ops, const ModelConfig& c,
                                    std::vector<backend::KvLayerFormat> formats, const RuntimeOptions& options,
                                    int64_t padding_blocks) {
  const int bs = options.block_size;
  backend::KvCacheShape shape = model.kv_cache_shape(bs, 1 + padding_blocks);
  shape.padding_blocks = padding_blocks;
  std::unique_ptr<backend::KvCache> cache = ops.make_kv_cache(shape, std::move(formats));
  const int64_t context = c.max_position_embeddings;
  const int64_t seqs = std::max<int64_t>(1, std::min(options.max_num_seqs, options.max_num_batched_tokens));
  // Decodes see this much context; the prompt chunk gets the rest of the rows.
  const int64_t decode_context = std::min<int64_t>(context, 1024);
  std::vector<std::vector<int32_t>> tokens;
  std::vector<int64_t> starts;
  int64_t rows_left = options.max_num_batched_tokens;
  for (int64_t i = 0; i < seqs && rows_left > 0; ++i) {
    // The first sequences take what the decodes leave, each at most a context.
    const int64_t n = std::min(context, std::max<int64_t>(1, rows_left - (seqs - 1 - i)));
    tokens.emplace_back(size_t(n), 0);
    starts.push_back(n > 1 ? 0 : decode_context - 1);
    rows_left -= n;
  }
  // The decode step below reads decode_context positions even where the chunk above is shorter
  // (a max_num_batched_tokens below it with one sequence).
  int64_t longest = decode_context;
  for (size_t i = 0; i < tokens.size(); ++i) longest = std::max(longest, starts[i] + int64_t(tokens[i].size()));
  const std::vector<int64_t> table(size_t((longest + bs - 1) / bs), 0);
  std::vector<model::SequenceInput> batch;
  for (size_t i = 0; i < tokens.size(); ++i) batch.push_back({tokens[i], starts[i], table, false});
  std::vector<float> logits;
  model.forward(batch, *cache, logits);
  // The decode step of every sequence, on the argmax path the engine takes for
  // greedy batches (its attention plan differs from the mixed step's); the
  // sampling path's logits are no larger than the mixed step's, taken above.
  batch.clear();
  const std::vector<int32_t> one(1, 0);
  for (int64_t i = 0; i < seqs; ++i) batch.push_back({one, decode_context - 1, table, false});
  std::vector<int32_t> argmax;
  model.forward_greedy(batch, *cache, argmax);
  cache.reset();
  return ops.keep_step_scratch();
}

std::unique_ptr<Runtime> Runtime::load(const std::filesystem::path& dir, const io::LoadOverrides& overrides,
                                       const RuntimeOptions& options) {
  if (options.block_size <= 0) throw Error("KV cache block size must be positive");
  if (options.kv_cache_tokens < 0) throw Error("KV cache size must not be negative");
  std::unique_ptr<Runtime> rt(new Runtime());
  rt->spec_ = io::read_model_spec(dir, overrides);
  const ModelConfig& c = rt->spec_.config;
  rt->max_model_len_ = resolve_max_model_len(options.max_model_len, c.max_position_embeddings);
  loader::check_supported(rt->spec_);
  const RopeTable rope_check(c);  // an unsupported RoPE scaling fails here, before anything loads
  // --load-format dummy needs config.json alone: without tokenizer.json there is no tokenizer.
  rt->tokenizer_skipped_ = !options.load_tokenizer;
  if (options.load_tokenizer && (!rt->spec_.dummy_weights || std::filesystem::exists(dir / "tokenizer.json")))
    rt->tokenizer_ = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::load(dir));

  for (int64_t id : c.eos_token_ids) rt->eos_ids_.push_back(int32_t(id));
  if (rt->eos_ids_.empty() && rt->tokenizer_ && rt->tokenizer_->eos()) rt->eos_ids_.push_back(int32_t(rt->tokenizer_->eos()->id));

  loader::LoadProgress progress;
  if (options.load_progress) progress = [&options](int i, int n) { options.load_progress(i, n); };
  loader::HostModelWeights w = loader::load_host_weights(rt->spec_, progress);
  rt->weight_bytes_ = loader::resident_weight_bytes(w);
  rt->expert_bytes_ = loader::resident_expert_bytes(w);
  rt->embedding_ = EmbeddingTable{double(w.embedding.resident_bytes()), double(w.embedding.n),
                                  w.lm_head.data == w.embedding.data};
  if (rt->spec_.dummy_weights)
    rt->notes_.push_back("weights: --load-format dummy: random N(0, 0.02) weights generated from config.json "
                         "(fixed seed); outputs are meaningless, speed and memory are real");
  const int tp = options.tensor_parallel_size;
  if (tp < 1) throw Error("--tensor-parallel-size: " + std::to_string(tp) + " is not a positive number of ranks");
  const backend::BackendOptions backend_options{.device = options.device,
                                                .threads = tp > 1 ? std::max(1, options.threads / tp) : options.threads,
                                                .kernels = options.kernels,
                                                .cuda_graphs = options.cuda_graphs,
                                                .decode_kernel = options.decode_kernel,
                                                .cpu_pad_decode_batches = options.cpu_pad_decode_batches};
  std::vector<loader::TensorParallelPlan> plans;
  for (int r = 0; r < tp && tp > 1; ++r) plans.push_back(loader::plan_tensor_parallel(c, r, tp));  // refuses first
  rt->runner_ = std::make_unique<ModelRunner>(tp, tp > 1 ? backend::make_rank_group(backend_options, tp) : nullptr);
  if (options.fp8_attention && rt->spec_.kv_cache().dtype != KvCacheDType::kFP8E4M3)
    throw Error("--fp8-attention: needs an FP8 E4M3 KV cache (--kv-cache-dtype fp8): its cached K and V are the "
                "attention's FP8 operands");
  if (options.fp8_attention && !rt->spec_.kv_cache().skip_layers.empty())
    rt->notes_.push_back("--fp8-attention: the layers --kv-cache-dtype-skip-layers keeps in BF16 run float attention "
                         "(their K and V are not FP8)");
  if (tp == 1) {
    ModelRunner::Rank& k = rt->runner_->rank(0);
    k.ops = backend::make_ops(backend_options);
    k.ops->set_fp8_attention(options.fp8_attention);
    k.model = std::make_unique<model::LlamaModel>(c, w, *k.ops);
    if (options.device == backend::Device::kCuda && options.decode_kernel != backend::DecodeKernel::kAuto &&
        !k.model->decode_program_note().empty())
      rt->notes_.push_back(k.model->decode_program_note());
  } else {
    // Each rank cuts its shard and uploads it from its own thread (a GPU's thread has its device),
    // one rank at a time: host memory holds the whole model and one shard, not every shard
    // (Llama-3.1-70B in BF16: 141 GB and 70 GB on two ranks, 35 GB on four).
    std::vector<weights::ShardReport> reports(static_cast<size_t>(tp));
    std::mutex one_shard_at_a_time;
    rt->runner_->on_every_rank([&](ModelRunner::Rank& k, int r) {
      k.ops = rt->runner_->group()->make_rank(r);  // every rank at once: NCCL's communicator needs them all
      k.ops->set_fp8_attention(options.fp8_attention);
      const std::lock_guard lock(one_shard_at_a_time);
      const loader::HostModelWeights shard = loader::shard_host_weights(w, c, plans[size_t(r)], &reports[size_t(r)]);
      k.model = std::make_unique<model::LlamaModel>(c, shard, *k.ops, &plans[size_t(r)]);
    });
    weights::ShardReport all;
    for (const weights::ShardReport& report : reports) all.add(report);
    rt->notes_.push_back(tensor_parallel_note(plans[0], tp, all));
  }
  rt->ops_ = rt->runner_->rank(0).ops.get();
  if (const std::optional<backend::MemoryInfo> info = rt->ops_->memory_info())
    rt->load_peak_device_bytes_ = info->peak_bytes_reserved;

  std::vector<float> k_scales = options.k_scales.empty() ? w.k_scales : options.k_scales;
  std::vector<float> v_scales = options.v_scales.empty() ? w.v_scales : options.v_scales;
  const KvCacheScheme& kv = rt->spec_.kv_cache();
  if (kv.dtype == KvCacheDType::kFP8E4M3 && k_scales.empty() && options.calibrate_kv_scales) {
    // Never a silent 1.0: measure K/V ranges on the built-in text (vLLM and
    // SGLang default to 1.0, a known accuracy trap).
    const int64_t len = std::min<int64_t>(256, c.max_position_embeddings);
    // Without a tokenizer (--load-format dummy), 8 samples of random token ids instead.
    const auto samples =
        rt->tokenizer_
            ? calibration::calibration_samples(*rt->tokenizer_, calibration::builtin_calibration_text(), 8, len)
            : random_token_samples(c.vocab_size, 8, len);
    // Each rank sees the K/V of its own heads: a layer's range is the largest of the ranks'.
    std::vector<calibration::CalibrationStats> rank_stats(static_cast<size_t>(tp));
    rt->runner_->on_every_rank([&](ModelRunner::Rank& k, int r) {
      rank_stats[size_t(r)] = calibration::calibrate(*k.model, *k.ops, samples);
    });
    const calibration::CalibrationStats& stats = rank_stats[0];
    for (int i = 0; i < c.num_hidden_layers; ++i) {
      float k_amax = 0.0f, v_amax = 0.0f;
      for (const calibration::CalibrationStats& st : rank_stats) {
        k_amax = std::max(k_amax, st.k_amax[size_t(i)]);
        v_amax = std::max(v_amax, st.v_amax[size_t(i)]);
      }
      k_scales.push_back(calibration::kv_scale(k_amax));
      v_scales.push_back(calibration::kv_scale(v_amax));
    }
    const auto [kmin, kmax] = std::minmax_element(k_scales.begin(), k_scales.end());
    const auto [vmin, vmax] = std::minmax_element(v_scales.begin(), v_scales.end());
    char text[320];
    std::snprintf(text, sizeof text,
                  "KV cache fp8_e4m3: the checkpoint has no k/v scales, so they were calibrated at load on %s "
                  "(%lld tokens): k_scale %.3g..%.3g, v_scale %.3g..%.3g per layer",
                  rt->tokenizer_ ? "fp8lm's built-in text" : "random token ids (no tokenizer.json)",
                  static_cast<long long>(stats.tokens), double(*kmin), double(*kmax), double(*vmin), double(*vmax));
    rt->notes_.push_back(text);
  }
  std::vector<backend::KvLayerFormat> formats = model::kv_layer_formats(c, kv, k_scales, v_scales, &rt->notes_);
  if (options.kv_cache_tokens > 0 && options.kv_cache_bytes > 0)
    throw Error("--kv-cache-tokens and --kv-cache-memory both size the KV cache: give one");
  // Per rank: each holds its KV heads' share of every token (the group's budget is the same
  // number of tokens on every rank).
  model::LlamaModel& model0 = *rt->runner_->rank(0).model;
  // A cache beside this one with the same blocks (an EAGLE-3 head's layer) is sized with it.
  const uint64_t per_token = backend::kv_bytes_per_token(model0.kv_cache_shape(options.block_size, 1), formats) +
                             options.kv_companion_bytes_per_token;
  int64_t tokens = options.kv_cache_tokens;
  if (options.kv_cache_bytes > 0) {
    tokens = int64_t(options.kv_cache_bytes / per_token) / options.block_size * options.block_size;
    if (tokens == 0)
      throw Error("--kv-cache-memory: " + std::to_string(options.kv_cache_bytes) + " bytes hold no block of " +
                  std::to_string(options.block_size) + " tokens (" + std::to_string(per_token) +
                  " bytes per token for this model and KV-cache dtype)");
  }
  // A backend that records decode steps as graphs gets them padded to a few
  // batch sizes (backend::decode_graph_rows); the padding rows' K/V go to the
  // cache's last blocks, which the allocator never hands out (vLLM reserves a
  // null block alike). They come out of the budget: the capacity reported
  // (blocks().num_total()) is what sequences can use.
  const int64_t padding_blocks =
      rt->ops_->pads_decode_batches() ? blocks_for_tokens(backend::kMaxDecodePadding, options.block_size) : 0;
  // On a device with its own memory, the worst step's scratch is measured and
  // kept before the KV cache takes the rest (vLLM's memory profiling), so that
  // no step runs out of memory mid-run.
  std::vector<uint64_t> scratch_of(static_cast<size_t>(tp), 0);
  if (rt->ops_->memory_info())
    rt->runner_->on_every_rank([&](ModelRunner::Rank& k, int r) {
      scratch_of[size_t(r)] = profile_step_memory(*k.model, *k.ops, c, formats, options, padding_blocks);
    });
  const uint64_t scratch = *std::max_element(scratch_of.begin(), scratch_of.end());
  // What the sequences can use: max_num_seqs of max_model_len, in whole blocks, and the padding
  // blocks (bounded: a context may be 2^36 tokens and the sequences many).
  const int64_t bs = options.block_size;
  const int64_t sequence_blocks = blocks_for_tokens(rt->max_model_len_, options.block_size);
  const int64_t seqs = std::max<int64_t>(1, options.max_num_seqs);
  constexpr int64_t kMost = int64_t(1) << 60;
  const int64_t useful = sequence_blocks > (kMost / bs - padding_blocks) / seqs
                             ? kMost / bs * bs
                             : (sequence_blocks * seqs + padding_blocks) * bs;
  // The backend sizes the cache from its own memory (backend/ops.cpp; the CPU's from the host's,
  // backend/cpu/host_memory.h) and refuses a size given beyond it, before anything is allocated.
  // Every rank sizes its own; the group takes the least.
  std::vector<std::optional<int64_t>> fit(static_cast<size_t>(tp));
  rt->runner_->on_every_rank([&](ModelRunner::Rank& k, int r) {
    const backend::KvBudget budget{options.gpu_memory_utilization, options.block_size, scratch_of[size_t(r)], useful};
    if (tokens == 0)
      fit[size_t(r)] = k.ops->default_kv_cache_tokens(per_token, budget);
    else
      k.ops->check_kv_cache_fits(tokens, per_token, budget, options.kv_cache_bytes > 0);
  });
  const bool sized_here = tokens == 0;
  if (sized_here) {
    tokens = fit[0].value_or(useful);
    for (const std::optional<int64_t>& t : fit)
      if (t) tokens = std::min(tokens, *t);
  }
  const int64_t blocks = (tokens + options.block_size - 1) / options.block_size;
  if (blocks <= padding_blocks)
    throw Error("the KV cache of " + std::to_string(tokens) + " tokens leaves no block for sequences beside the " +
                std::to_string(padding_blocks) + " of " + std::to_string(options.block_size) +
                " tokens kept for the padding rows of recorded decode steps; give it more");
  const int64_t sequence_tokens = (blocks - padding_blocks) * options.block_size;
  // A cache sized here holds one sequence of max_model_len (vLLM's rule), so that no request the
  // context admits fails for want of cache: a --max-model-len it cannot hold is refused, naming
  // the flags, and the model's context is lowered to what it holds (vLLM's --max-model-len auto).
  if (sized_here && sequence_tokens < rt->max_model_len_) {
    const std::string memory = rt->ops_->memory_info() ? "what --gpu-memory-utilization leaves of the device's memory"
                                                        : "at most half of the host memory available";
    const std::string need = mib(double(rt->max_model_len_) * double(per_token));
    const std::string held = std::to_string(sequence_tokens) + " tokens (" +
                             mib(double(sequence_tokens) * double(per_token)) + " MiB, " + memory + ")";
    if (options.max_model_len > 0)
      throw Error("--max-model-len: one sequence of " + std::to_string(rt->max_model_len_) +
                  " tokens needs a KV cache of " + need + " MiB (" + std::to_string(per_token) +
                  " bytes per token), but the cache sized from the memory there is holds " + held +
                  "; lower --max-model-len to at most " + std::to_string(sequence_tokens) +
                  ", or give the cache's size with --kv-cache-memory / --kv-cache-tokens");
    rt->notes_.push_back("max_model_len " + std::to_string(sequence_tokens) + ": the model's context of " +
                         std::to_string(rt->max_model_len_) + " tokens needs a KV cache of " + need +
                         " MiB a sequence, and the cache sized from the memory there is holds " + held +
                         "; sequences are limited to that (--max-model-len, --kv-cache-memory to choose)");
    rt->max_model_len_ = sequence_tokens;
  }
  if (scratch > 0)
    rt->notes_.push_back("device memory: the largest step (" + std::to_string(options.max_num_batched_tokens) +
                         " rows, " + std::to_string(options.max_num_seqs) + " sequences) was profiled: " +
                         std::to_string(scratch >> 20) + " MiB of scratch kept for the steps, " +
                         std::to_string(uint64_t(tokens) * per_token >> 20) + " MiB for the KV cache (" +
                         std::to_string(sequence_tokens) + " tokens for sequences" +
                         (padding_blocks > 0 ? " + " + std::to_string(padding_blocks * options.block_size) +
                                                   " for the padding rows of recorded decode steps)"
                                             : std::string(")")));
  rt->runner_->on_every_rank([&](ModelRunner::Rank& k, int) {
    backend::KvCacheShape shape = k.model->kv_cache_shape(options.block_size, blocks);
    shape.padding_blocks = padding_blocks;
    k.cache = k.ops->make_kv_cache(shape, formats);
  });
  rt->blocks_ = std::make_unique<BlockAllocator>(blocks - padding_blocks);
  return rt;
}

double Runtime::decode_weight_bytes(int64_t batch) const {
  const ModelConfig& c = spec_.config;
  std::optional<RoutedExperts> moe;
  if (expert_bytes_ > 0 && c.is_moe())
    moe = RoutedExperts{double(c.moe.num_experts), double(c.moe.num_experts_per_tok), double(expert_bytes_)};
  return fp8lm::decode_weight_bytes(double(batch), double(weight_bytes_), moe, embedding_);
}

const tokenizer::Tokenizer& Runtime::tokenizer() const {
  if (!tokenizer_ && !tokenizer_skipped_)
    throw Error(spec_.directory.string() +
                " has no tokenizer.json (--load-format dummy loads config.json alone); use bench latency/throughput");
  if (!tokenizer_) throw Error(spec_.directory.string() + ": loaded without its tokenizer (token ids only)");
  return *tokenizer_;
}

std::vector<backend::KvLayerFormat> Runtime::kv_formats() const {
  std::vector<backend::KvLayerFormat> out;
  for (int i = 0; i < config().num_hidden_layers; ++i) out.push_back(runner_->rank(0).cache->layer_format(i));
  return out;
}

}  // namespace fp8lm::engine
