#include "model/llama_model.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "weights/element_type_maps.h"

namespace fp8lm::model {

LlamaModel::LlamaModel(const ModelConfig& config, const loader::HostModelWeights& w, backend::Ops& ops,
                       const loader::TensorParallelPlan* tp)
    : config_(config), ops_(ops), rope_(config),
      routing_{config.moe.num_experts_per_tok, config.moe.norm_topk_prob} {
  tp_size_ = tp != nullptr ? tp->size : 1;
  q_heads_ = tp != nullptr ? int(tp->q_heads) : config.num_attention_heads;
  kv_heads_ = tp != nullptr ? int(tp->kv_heads) : config.num_key_value_heads;
  intermediate_ = config.intermediate_size / tp_size_;
  vocab0_ = tp != nullptr ? tp->vocab0 : 0;
  vocab_ = tp != nullptr ? tp->vocab : config.vocab_size;
  if (tp != nullptr && !w.layers.empty() && (w.layers[0].q.n != q_heads_ * config.head_dim || w.embedding.n != vocab_))
    throw Error("model: the weights hold " + std::to_string(w.layers[0].q.n / std::max<int64_t>(config.head_dim, 1)) +
                " query heads and " + std::to_string(w.embedding.n) + " vocabulary rows, this rank's share is " +
                std::to_string(q_heads_) + " and " + std::to_string(vocab_));
  if (int(w.layers.size()) != config.num_hidden_layers)
    throw Error("model: weights for " + std::to_string(w.layers.size()) + " layers, config says " +
                std::to_string(config.num_hidden_layers));
  if (config.is_moe() && !ops.supports_moe())
    throw Error(config.architecture + ": MoE on " + ops.name() + " is not implemented yet (issue 20); run it with "
                "--device cpu");
  if (config.is_mla() && !ops.supports_mla())
    throw Error(config.architecture + ": multi-head latent attention on " + ops.name() +
                " is not implemented yet (issue 45): it lacks the latent KV cache (one compressed entry a token "
                "shared by every head) and the MLA attention kernels (absorbed decode over the latent cache); run it "
                "with --device cpu");
  if (config.is_mla()) mla_scale_ = mla_softmax_scale(config);
  embedding_ = ops.upload_embedding(w.embedding);
  final_norm_ = ops.upload_vector(w.final_norm);
  lm_head_ = ops.upload_linear(w.lm_head);
  for (int i = 0; i < config.num_hidden_layers; ++i) {
    const loader::HostLayer& h = w.layers[size_t(i)];
    Layer l;
    l.input_norm = ops.upload_vector(h.input_norm);
    l.post_attention_norm = ops.upload_vector(h.post_attention_norm);
    if (config.qk_norm) {
      l.q_norm = ops.upload_vector(h.q_norm);
      l.k_norm = ops.upload_vector(h.k_norm);
    }
    if (h.mla.has_value() != config.is_mla())
      throw Error("model: layer " + std::to_string(i) + (h.mla ? " has" : " lacks") +
                  " multi-head latent attention weights, the config says otherwise");
    if (h.mla) {
      upload_mla(l, *h.mla);
    } else {
      const weights::LinearWeight qkv[] = {h.q, h.k, h.v};
      l.qkv = ops.upload_fused_linear(qkv);
      if (!l.qkv) {
        l.q = ops.upload_linear(h.q);
        l.k = ops.upload_linear(h.k);
        l.v = ops.upload_linear(h.v);
      }
    }
    l.o = ops.upload_linear(h.o);
    if (h.moe.has_value() != config.is_moe_layer(i))
      throw Error("model: layer " + std::to_string(i) + " has " + (h.moe ? "an MoE block" : "a dense MLP") +
                  ", the config says " + (config.is_moe_layer(i) ? "MoE" : "dense"));
    if (h.moe) {
      l.router = ops.upload_linear(h.moe->router);
      l.experts = ops.upload_moe_experts(h.moe->gate, h.moe->up, h.moe->down);
      l.routing = routing_;
      if (config.arch == Architecture::kDeepseekV3) upload_deepseek_moe(l, *h.moe);
      has_moe_ = true;
    } else {
      const weights::LinearWeight gate_up[] = {h.gate, h.up};
      l.gate_up = ops.upload_fused_linear(gate_up);
      if (!l.gate_up) {
        l.gate = ops.upload_linear(h.gate);
        l.up = ops.upload_linear(h.up);
      }
      l.down = ops.upload_linear(h.down);
    }
    if (config.sliding_window && i >= config.sliding_window_from_layer) l.sliding_window = config.sliding_window;
    layers_.push_back(std::move(l));
    for (const weights::LinearWeight* lw : {&h.q, &h.k, &h.v, &h.o, &h.gate, &h.up, &h.down})
      rows_coupled_ = rows_coupled_ || lw->activation == ActivationQuant::kDynamicTensor;
    if (h.mla)
      for (const weights::LinearWeight* lw : {&h.mla->q_proj, &h.mla->q_a, &h.mla->q_b, &h.mla->kv_a})
        rows_coupled_ = rows_coupled_ || lw->activation == ActivationQuant::kDynamicTensor;
    if (h.moe)
      for (const weights::LinearWeight* lw : {&h.moe->shared_gate, &h.moe->shared_up, &h.moe->shared_down})
        rows_coupled_ = rows_coupled_ || lw->activation == ActivationQuant::kDynamicTensor;
    // FP8 experts with a dynamic per-tensor scale: one scale over the block's rows (Ops::moe).
    if (h.moe)
      for (const auto* experts : {&h.moe->gate, &h.moe->up, &h.moe->down})
        for (const weights::LinearWeight& lw : *experts)
          rows_coupled_ = rows_coupled_ || lw.activation == ActivationQuant::kDynamicTensor;
  }
  rows_coupled_ = rows_coupled_ || w.lm_head.activation == ActivationQuant::kDynamicTensor;
  prepare_decode_program();
}

void LlamaModel::prepare_decode_program() {
  // A dense model whose q/k/v and gate/up the backend fused, on one rank: the program's shape.
  const bool dense_fused = std::all_of(layers_.begin(), layers_.end(), [](const Layer& l) {
    return l.qkv != nullptr && l.gate_up != nullptr && l.experts == nullptr;
  });
  if (tp_size_ > 1 || config_.is_mla() || has_moe_ || !dense_fused || rows_coupled_) {
    decode_program_note_ = "decode steps op by op: " + std::string(tp_size_ > 1     ? "tensor parallelism"
                                                                   : config_.is_mla() ? "multi-head latent attention"
                                                                   : has_moe_       ? "MoE blocks"
                                                                   : !dense_fused   ? "unfused projections"
                                                                                    : "a per-tensor dynamic scale") +
                           " (the persistent decode kernel runs dense models on one GPU)";
    return;
  }
  const ModelConfig& c = config_;
  backend::DecodeModel m;
  m.hidden = c.hidden_size, m.intermediate = intermediate_, m.vocab = vocab_;
  m.q_heads = q_heads_, m.kv_heads = kv_heads_, m.head_dim = c.head_dim;
  m.eps = float(c.rms_norm_eps);
  m.attention_scale = 1.0f / std::sqrt(float(c.head_dim));
  m.rope = &rope_;
  m.embedding = embedding_.get(), m.final_norm = final_norm_.get(), m.lm_head = lm_head_.get();
  for (const Layer& l : layers_)
    m.layers.push_back({l.input_norm.get(), l.post_attention_norm.get(), l.q_norm.get(), l.k_norm.get(), l.qkv.get(),
                        l.o.get(), l.gate_up.get(), l.down.get(), l.sliding_window.value_or(0)});
  decode_program_note_ = ops_.prepare_decode_program(m);
  decode_program_ = decode_program_note_.empty();
}

bool LlamaModel::moe_recordable(int64_t rows) const {
  if (!has_moe_) return true;
  return std::all_of(layers_.begin(), layers_.end(), [&](const Layer& l) {
    return l.experts == nullptr || ops_.moe_recordable(*l.experts, rows, l.routing.top_k);
  });
}

backend::KvCacheShape LlamaModel::kv_cache_shape(int block_size, int64_t num_blocks) const {
  // MLA: one latent entry a token (kv_lora_rank + qk_rope_head_dim values), shared by every head.
  if (config_.is_mla())
    return {config_.num_hidden_layers, 1, config_.mla.latent_width(), block_size, num_blocks, 0, true};
  return {config_.num_hidden_layers, kv_heads_, config_.head_dim, block_size, num_blocks};
}

int64_t LlamaModel::decode_step_rows(int64_t rows, const backend::KvCache& cache) const {
  return padded_sequences(rows, 1, cache);
}

int64_t LlamaModel::verify_step_sequences(int64_t seqs, int64_t tokens_each, const backend::KvCache& cache) const {
  return padded_sequences(seqs, tokens_each, cache);
}

int64_t LlamaModel::padded_sequences(int64_t seqs, int64_t tokens_each, const backend::KvCache& cache) const {
  const backend::KvCacheShape& shape = cache.shape();
  if (rows_coupled_ || shape.padding_blocks <= 0 || !ops_.pads_decode_batches()) return seqs;
  const int64_t padded = backend::decode_graph_rows(seqs);
  if (!moe_recordable(padded * tokens_each)) return seqs;
  if ((padded - seqs) * tokens_each <= shape.padding_blocks * shape.block_size) return padded;
  // A verify step whose padding would not fit runs at its own size; the runtime reserves a
  // decode step's padding (kMaxDecodePadding), so there it always fits.
  if (tokens_each > 1) return seqs;
  throw Error("model: a decode step of " + std::to_string(seqs) + " sequences is padded to " + std::to_string(padded) +
              " rows, but the KV cache's " + std::to_string(shape.padding_blocks) + " padding blocks hold only " +
              std::to_string(shape.padding_blocks * shape.block_size) + " padding rows");
}

void LlamaModel::forward(std::span<const SequenceInput> batch, backend::KvCache& cache, std::vector<float>& logits) {
  const backend::Tensor out = run_step(batch, cache);
  logits.resize(size_t(out.rows * out.cols));
  ops_.to_host(out, logits);
}

void LlamaModel::forward_greedy(std::span<const SequenceInput> batch, backend::KvCache& cache,
                                std::vector<int32_t>& tokens) {
  start_greedy(batch, cache);
  wait_tokens(tokens);
}

void LlamaModel::forward_sample(std::span<const SequenceInput> batch, backend::KvCache& cache,
                                std::span<const backend::RowSampling> rows, std::vector<int32_t>& tokens) {
  start_sample(batch, cache, rows);
  wait_tokens(tokens);
}

void LlamaModel::start_greedy(std::span<const SequenceInput> batch, backend::KvCache& cache) {
  ops_.start_argmax_rows(run_step(batch, cache));
}

void LlamaModel::start_sample(std::span<const SequenceInput> batch, backend::KvCache& cache,
                              std::span<const backend::RowSampling> rows, const std::function<void()>& before_sampling) {
  check_sampling(batch, rows);
  const backend::Tensor logits = run_step(batch, cache);
  if (before_sampling) before_sampling();
  ops_.start_sample_rows(logits, rows);
}

void LlamaModel::check_sampling(std::span<const SequenceInput> batch, std::span<const backend::RowSampling> rows) {
  size_t logit_rows = 0;
  for (const SequenceInput& s : batch) logit_rows += s.all_logits ? s.tokens.size() : 1;
  if (rows.size() != logit_rows)
    throw Error("model: the step has " + std::to_string(logit_rows) + " logits rows, but " +
                std::to_string(rows.size()) + " sampling descriptions were given");
}

void LlamaModel::wait_tokens(std::vector<int32_t>& tokens) { ops_.wait_tokens(tokens); }

void LlamaModel::check_batch(std::span<const SequenceInput> batch, const backend::KvCache& cache) const {
  const ModelConfig& c = config_;
  const int block_size = cache.shape().block_size;
  for (const SequenceInput& s : batch) {
    const auto n = int64_t(s.tokens.size());
    if (n == 0) throw Error("model: a sequence in the batch has no new tokens");
    if (s.start_position < 0 || s.start_position + n > c.max_position_embeddings)
      throw Error("model: positions " + std::to_string(s.start_position) + ".." +
                  std::to_string(s.start_position + n - 1) + " exceed the context of " +
                  std::to_string(c.max_position_embeddings) + " tokens");
    const int64_t needed = (s.start_position + n + block_size - 1) / block_size;
    if (int64_t(s.block_table.size()) < needed)
      throw Error("model: a block table of " + std::to_string(s.block_table.size()) + " blocks cannot hold " +
                  std::to_string(s.start_position + n) + " positions");
    for (const int32_t id : s.tokens)
      if (id < 0 || id >= c.vocab_size)
        throw Error("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                    std::to_string(c.vocab_size) + ")");
  }
}

backend::Tensor LlamaModel::run_step(std::span<const SequenceInput> batch, backend::KvCache& cache) {
  // Flatten the batch: one row per new token.
  std::vector<int32_t> ids;
  std::vector<int64_t> positions, logit_rows;
  std::vector<backend::AttentionSequence> seqs;
  check_batch(batch, cache);
  for (const SequenceInput& s : batch) {
    const auto n = int64_t(s.tokens.size());
    seqs.push_back({int64_t(ids.size()), n, s.start_position, s.block_table});
    for (int64_t i = 0; i < n; ++i) {
      if (s.all_logits || i == n - 1) logit_rows.push_back(int64_t(ids.size()));
      ids.push_back(s.tokens[size_t(i)]);
      positions.push_back(s.start_position + i);
    }
  }
  const auto rows = int64_t(ids.size());
  const auto real_logit_rows = int64_t(logit_rows.size());
  // A step in which every sequence feeds the same number of tokens V with every position's
  // logits — a decode step (V = 1) or a speculative verify step (V = k + 1) — has the same ops
  // for any positions and contexts, so a backend may record it once per (sequences, V) and
  // replay it.
  const int64_t per_seq = seqs.empty() ? 0 : seqs.front().num_tokens;
  const bool uniform = observer_ == nullptr && real_logit_rows == rows && per_seq <= backend::kMaxRecordedVerifyTokens &&
                       std::all_of(seqs.begin(), seqs.end(), [&](const auto& s) { return s.num_tokens == per_seq; });
  const bool decode_only = uniform && per_seq == 1;
  // Where the backend records it, the step is padded to a size of the graph
  // ladder (decode_step_rows, over sequences): padding sequence j is V tokens 0
  // at positions jV … jV + V − 1 of the cache's padding blocks — slots of its
  // own, which no real sequence's block table holds — so it reads and writes
  // only padding. Their logits rows come after the real ones and are cut off
  // below.
  const auto real_seqs = int64_t(seqs.size());
  const int64_t step_seqs = uniform ? padded_sequences(real_seqs, per_seq, cache) : real_seqs;
  std::vector<int64_t> padding_table;
  if (step_seqs > real_seqs) {
    const backend::KvCacheShape& shape = cache.shape();
    for (int64_t b = shape.num_blocks - shape.padding_blocks; b < shape.num_blocks; ++b) padding_table.push_back(b);
    for (int64_t j = 0; j < step_seqs - real_seqs; ++j) {
      const int64_t start = j * per_seq;
      seqs.push_back({int64_t(ids.size()), per_seq, start, padding_table});
      for (int64_t i = 0; i < per_seq; ++i) {
        logit_rows.push_back(int64_t(ids.size()));
        ids.push_back(0);
        positions.push_back(start + i);
      }
    }
  }
  const int64_t step_rows = int64_t(ids.size());
  ops_.begin_step({ids, positions, seqs, logit_rows});
  // The step's tensors start from an empty arena; the kept streams come first, outside the
  // recorded body, so that a replayed step hands out the same addresses its recording wrote.
  ops_.reset_scratch();
  aux_.clear();
  for (size_t i = 0; i < aux_layers_.size(); ++i) aux_.push_back(ops_.alloc(step_rows, config_.hidden_size));
  // MoE blocks are recorded only where the backend keeps them on the device (Ops::moe_recordable).
  const uint64_t key = !uniform || !moe_recordable(step_rows) ? 0
                       : decode_only                          ? uint64_t(step_rows)
                                                              : uint64_t(step_rows) | uint64_t(per_seq) << 32;
  backend::Tensor out = ops_.run_step(key, [&] {
    // A decode-only step may run as the backend's one program (its persistent kernel).
    if (decode_only && decode_program_)
      if (std::optional<backend::Tensor> logits = ops_.decode_program(step_rows, cache)) return *logits;
    return run_layers(step_rows, int64_t(logit_rows.size()), cache);
  });
  out.rows = real_logit_rows;  // row-major: the real rows' logits are the first ones
  for (backend::Tensor& a : aux_) a.rows = rows;  // and the real rows' streams
  return out;
}

backend::Tensor LlamaModel::run_layers(int64_t rows, int64_t logit_rows, backend::KvCache& cache) {
  const ModelConfig& c = config_;
  const int64_t hidden = c.hidden_size, hd = c.head_dim;
  const bool mla = c.is_mla();
  const int64_t q_width = mla ? 0 : q_heads_ * hd, kv_width = mla ? 0 : kv_heads_ * hd;
  backend::Tensor h = ops_.alloc(rows, hidden);
  backend::Tensor x = ops_.alloc(rows, hidden);
  backend::Tensor q = ops_.alloc(rows, q_width);
  backend::Tensor k = ops_.alloc(rows, kv_width);
  backend::Tensor v = ops_.alloc(rows, kv_width);
  backend::Tensor attn = ops_.alloc(rows, q_width);
  MlaTensors mla_t = mla ? alloc_mla_tensors(rows) : MlaTensors{};
  SharedTensors shared_t = c.moe.n_shared_experts > 0 ? alloc_shared_tensors(rows) : SharedTensors{};
  backend::Tensor proj = ops_.alloc(rows, hidden);
  backend::Tensor act = ops_.alloc(rows, intermediate_);
  const bool any_moe = std::any_of(layers_.begin(), layers_.end(), [](const Layer& l) { return l.experts != nullptr; });
  backend::Tensor router_logits = any_moe ? ops_.alloc(rows, c.moe.num_experts) : backend::Tensor{};
  // Separate or fused (backends that fuse them) projection outputs, as the layers need.
  const bool any_qkv = std::any_of(layers_.begin(), layers_.end(), [](const Layer& l) { return l.qkv != nullptr; });
  const bool all_gate_up = std::all_of(layers_.begin(), layers_.end(),
                                       [](const Layer& l) { return l.gate_up != nullptr || l.experts != nullptr; });
  const bool any_gate_up =
      std::any_of(layers_.begin(), layers_.end(), [](const Layer& l) { return l.gate_up != nullptr; });
  backend::Tensor qkv = any_qkv ? ops_.alloc(rows, q_width + 2 * kv_width) : backend::Tensor{};
  backend::Tensor gate_up = any_gate_up ? ops_.alloc(rows, 2 * intermediate_) : backend::Tensor{};
  backend::Tensor gate = all_gate_up ? backend::Tensor{} : ops_.alloc(rows, intermediate_);
  backend::Tensor up = all_gate_up ? backend::Tensor{} : ops_.alloc(rows, intermediate_);
  const auto eps = float(c.rms_norm_eps);

  // Each norm names the fused linear that reads its output next, so that a
  // backend may quantize that input in the same pass (Ops::rms_norm's `next`).
  // A rank holds a vocabulary shard: its rows, zeros for the other ids, summed over the ranks.
  if (tp_size_ > 1) {
    ops_.embedding_shard(*embedding_, vocab0_, h);
    ops_.all_reduce_sum(h);
  } else {
    ops_.embedding(*embedding_, h);
  }
  ops_.rms_norm(h, *layers_[0].input_norm, eps, x, layers_[0].qkv.get());
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    Layer& l = layers_[size_t(i)];
    for (size_t a = 0; a < aux_layers_.size(); ++a)
      if (aux_layers_[a] == i) ops_.copy(h, aux_[a]);  // the stream entering layer i
    // Attention block: h += o_proj(attention(rope(q), rope(k), v)) of x = norm(h).
    observe(i, LinearInput::kQkv, x);
    if (mla) {
      mla_attention(i, l, x, mla_t, cache);
      observe(i, LinearInput::kO, mla_t.out);
      ops_.linear(mla_t.out, *l.o, proj);
    } else if (l.qkv) {
      ops_.linear(x, *l.qkv, qkv);
      // Split, q/k norm, RoPE and the K/V cache store as one op: one kernel where the
      // backend fuses them (attention() below then only attends).
      ops_.split_norm_rope_qkv(qkv, q, k, v, hd, c.qk_norm ? l.q_norm.get() : nullptr,
                               c.qk_norm ? l.k_norm.get() : nullptr, eps, rope_, &cache, i);
    } else {
      ops_.linear(x, *l.q, q);
      ops_.linear(x, *l.k, k);
      ops_.linear(x, *l.v, v);
      if (c.qk_norm) {
        ops_.head_rms_norm(q, hd, *l.q_norm, eps);
        ops_.head_rms_norm(k, hd, *l.k_norm, eps);
      }
      ops_.rope_qk(q, k, hd, rope_);
    }
    if (!mla) {
      const backend::AttentionParams params{q_heads_, kv_heads_, hd, 1.0f / std::sqrt(float(hd)), l.sliding_window};
      if (observer_ != nullptr) {
        observed_.resize(size_t(k.rows * k.cols));
        observed_v_.resize(size_t(v.rows * v.cols));
        ops_.to_host(k, observed_);
        ops_.to_host(v, observed_v_);
        observer_->key_value(i, observed_, observed_v_, k.rows, k.cols);
      }
      ops_.attention(q, k, v, attn, params, cache, i);
      observe(i, LinearInput::kO, attn);
      ops_.linear(attn, *l.o, proj);
    }
    if (tp_size_ > 1) ops_.all_reduce_sum(proj);  // o_proj is row-parallel: partial sums
    // MLP block: h += down(silu(gate(x)) · up(x)) of x = norm(h), or in an MoE
    // layer h += Σ p_e · expert_e(x) over the experts the router picks.
    ops_.add_rms_norm(h, proj, *l.post_attention_norm, eps, x, l.gate_up.get());
    if (l.experts) {
      if (observer_ != nullptr && !l.observed_gate.empty()) observe_experts(i, l, x);
      ops_.linear(x, *l.router, router_logits);
      ops_.moe(x, router_logits, *l.experts, l.routing, proj);
      add_shared_experts(l, x, shared_t, proj);
    } else {
      observe(i, LinearInput::kGateUp, x);
      if (l.gate_up) {
        ops_.linear(x, *l.gate_up, gate_up);
        ops_.silu_mul_fused(gate_up, act);
      } else {
        ops_.linear(x, *l.gate, gate);
        ops_.linear(x, *l.up, up);
        ops_.silu_mul(gate, up, act);
      }
      observe(i, LinearInput::kDown, act);
      ops_.linear(act, *l.down, proj);
    }
    if (tp_size_ > 1) ops_.all_reduce_sum(proj);  // down_proj (each expert's too) is row-parallel
    if (i + 1 < c.num_hidden_layers) {
      const Layer& next = layers_[size_t(i) + 1];
      ops_.add_rms_norm(h, proj, *next.input_norm, eps, x, next.qkv.get());
    } else {
      ops_.add(h, proj);
    }
  }
  backend::Tensor last = ops_.alloc(logit_rows, hidden);
  ops_.gather_rows(h, last);
  backend::Tensor normed = ops_.alloc(last.rows, hidden);
  backend::Tensor out = ops_.alloc(last.rows, c.vocab_size);
  ops_.rms_norm(last, *final_norm_, eps, normed, lm_head_.get());
  if (tp_size_ == 1) {
    ops_.linear(normed, *lm_head_, out);
    return out;
  }
  backend::Tensor local = ops_.alloc(last.rows, vocab_);  // this rank's vocabulary columns
  ops_.linear(normed, *lm_head_, local);
  ops_.all_gather_cols(local, out);
  return out;
}

void LlamaModel::capture_aux_states(std::vector<int> layers) {
  if (tp_size_ > 1) throw Error("model: EAGLE-3's hidden states are not kept under tensor parallelism");
  for (const int l : layers)
    if (l < 0 || l >= config_.num_hidden_layers)
      throw Error("model: EAGLE-3 reads the hidden state entering layer " + std::to_string(l) + ", but the model has " +
                  std::to_string(config_.num_hidden_layers) + " layers (0 … " +
                  std::to_string(config_.num_hidden_layers - 1) + ")");
  aux_layers_ = std::move(layers);
  if (!aux_layers_.empty() && decode_program_) {
    decode_program_ = false;
    decode_program_note_ = "an EAGLE-3 head reads the target's intermediate hidden states";
  }
}

void LlamaModel::observe(int layer, LinearInput input, backend::Tensor x) {
  if (observer_ == nullptr) return;
  observed_.resize(size_t(x.rows * x.cols));
  ops_.to_host(x, observed_);
  observer_->linear_input(layer, input, observed_, x.rows, x.cols);
}

void LlamaModel::observe_all_experts(const loader::HostModelWeights& w) {
  if (w.layers.size() != layers_.size())
    throw Error("model: observe_all_experts given weights of " + std::to_string(w.layers.size()) +
                " layers for a model of " + std::to_string(layers_.size()));
  for (size_t i = 0; i < layers_.size(); ++i) {
    Layer& l = layers_[i];
    const loader::HostLayer& h = w.layers[i];
    if (h.moe.has_value() != (l.experts != nullptr))
      throw Error("model: observe_all_experts given weights whose layer " + std::to_string(i) +
                  " is not the model's (MoE or dense)");
    if (!h.moe || !l.observed_gate.empty()) continue;
    for (size_t e = 0; e < h.moe->gate.size(); ++e) {
      l.observed_gate.push_back(ops_.upload_linear(h.moe->gate[e]));
      l.observed_up.push_back(ops_.upload_linear(h.moe->up[e]));
    }
  }
}

void LlamaModel::observe_experts(int layer, const Layer& l, backend::Tensor x) {
  // Every expert's gate/up reads the whole block input: one host copy for all.
  observed_.resize(size_t(x.rows * x.cols));
  ops_.to_host(x, observed_);
  for (size_t e = 0; e < l.observed_gate.size(); ++e)
    observer_->expert_input(layer, int(e), LinearInput::kGateUp, observed_, x.rows, x.cols);
  const int64_t width = config_.moe.moe_intermediate_size / tp_size_;
  const backend::Tensor gate = ops_.alloc(x.rows, width), up = ops_.alloc(x.rows, width);
  const backend::Tensor act = ops_.alloc(x.rows, width);
  for (size_t e = 0; e < l.observed_gate.size(); ++e) {
    ops_.linear(x, *l.observed_gate[e], gate);
    ops_.linear(x, *l.observed_up[e], up);
    ops_.silu_mul(gate, up, act);
    observed_.resize(size_t(act.rows * act.cols));
    ops_.to_host(act, observed_);
    observer_->expert_input(layer, int(e), LinearInput::kDown, observed_, act.rows, act.cols);
  }
}

std::vector<std::string> modules_reading(LinearInput input) {
  switch (input) {
    case LinearInput::kQkv: return {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"};
    case LinearInput::kO: return {"self_attn.o_proj"};
    case LinearInput::kGateUp: return {"mlp.gate_proj", "mlp.up_proj"};
    case LinearInput::kDown: return {"mlp.down_proj"};
  }
  return {};
}

std::vector<backend::KvLayerFormat> kv_layer_formats(const ModelConfig& c, const KvCacheScheme& s,
                                                     const std::vector<float>& k_scales,
                                                     const std::vector<float>& v_scales,
                                                     std::vector<std::string>* notes) {
  backend::KvLayerFormat base;
  base.element = kv_element_type(s.dtype);
  const bool fp8 = is_fp8(s.dtype);
  const bool have_scales = fp8 && int(k_scales.size()) == c.num_hidden_layers &&
                           int(v_scales.size()) == c.num_hidden_layers;
  if (fp8 && !have_scales && notes)
    notes->push_back(std::string("KV cache ") + std::string(name(s.dtype)) + " with scale 1.0 for every layer" +
                     (s.dtype == KvCacheDType::kFP8E5M2
                          ? std::string(" (E5M2's range needs no scaling)")
                          : std::string(": no k/v scales in the checkpoint and calibration at load is off "
                                        "(--no-kv-calibration); calibrated scales are more accurate")));
  std::vector<backend::KvLayerFormat> out(size_t(c.num_hidden_layers), base);
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    backend::KvLayerFormat& f = out[size_t(i)];
    if (std::find(s.skip_layers.begin(), s.skip_layers.end(), i) != s.skip_layers.end()) {
      f = backend::KvLayerFormat{};  // BF16
    } else if (have_scales) {
      f.k_scale = k_scales[size_t(i)];
      f.v_scale = v_scales[size_t(i)];
    }
  }
  return out;
}

}  // namespace fp8lm::model
