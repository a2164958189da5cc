#include "model/eagle3_head.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"

namespace fp8lm::model {

Eagle3Head::Eagle3Head(const Eagle3HeadConfig& config, const loader::Eagle3HostWeights& w, backend::Ops& ops,
                       const backend::Weight* target_embedding)
    : config_(config), ops_(ops), rope_(config.layer), q_heads_(config.layer.num_attention_heads),
      kv_heads_(config.layer.num_key_value_heads), draft_to_target_(w.draft_to_target) {
  if (w.embedding) {
    const weights::LinearWeight& table = *w.embedding;
    if (table.n != config.layer.vocab_size || table.k != config.layer.hidden_size)
      throw Error("EAGLE-3 head: an embedding table of " + std::to_string(table.n) + " x " + std::to_string(table.k) +
                  " for a head of vocabulary " + std::to_string(config.layer.vocab_size) + " and hidden size " +
                  std::to_string(config.layer.hidden_size));
    own_embedding_ = ops.upload_embedding(table);
    embedding_ = own_embedding_.get();
  } else {
    embedding_ = target_embedding;
  }
  if (embedding_ == nullptr) throw Error("EAGLE-3 head: no embedding table (the head has none; give the target's)");
  for (const weights::LinearWeight& block : w.fc) fc_.push_back(ops.upload_linear(block));
  for (const std::vector<float>& norm : w.fc_norms) fc_norms_.push_back(ops.upload_vector(norm));
  q_embed_ = ops.upload_linear(w.q_embed);
  q_hidden_ = ops.upload_linear(w.q_hidden);
  k_embed_ = ops.upload_linear(w.k_embed);
  k_hidden_ = ops.upload_linear(w.k_hidden);
  v_embed_ = ops.upload_linear(w.v_embed);
  v_hidden_ = ops.upload_linear(w.v_hidden);
  o_ = ops.upload_linear(w.o);
  gate_ = ops.upload_linear(w.gate);
  up_ = ops.upload_linear(w.up);
  down_ = ops.upload_linear(w.down);
  lm_head_ = ops.upload_linear(w.lm_head);
  input_norm_ = ops.upload_vector(w.input_norm);
  hidden_norm_ = ops.upload_vector(w.hidden_norm);
  post_norm_ = ops.upload_vector(w.post_attention_norm);
  final_norm_ = ops.upload_vector(w.final_norm);
}

backend::KvCacheShape Eagle3Head::kv_cache_shape(int block_size, int64_t num_blocks) const {
  return {1, kv_heads_, config_.layer.head_dim, block_size, num_blocks};
}

Eagle3Head::Output Eagle3Head::step(std::span<const SequenceInput> batch, std::span<const backend::Tensor> input,
                                    bool from_aux, backend::KvCache& cache, std::span<const int64_t> out_rows) {
  const ModelConfig& c = config_.layer;
  const int64_t h = c.hidden_size, hd = c.head_dim;
  const int64_t q_width = q_heads_ * hd, kv_width = kv_heads_ * hd;
  std::vector<int32_t> ids;
  std::vector<int64_t> positions, rows_all;
  std::vector<backend::AttentionSequence> seqs;
  const int block_size = cache.shape().block_size;
  for (const SequenceInput& s : batch) {
    const auto n = int64_t(s.tokens.size());
    if (n == 0) throw Error("EAGLE-3 head: a sequence in the batch has no rows");
    if (s.start_position < 0 || s.start_position + n + 1 > c.max_position_embeddings)
      throw Error("EAGLE-3 head: slots " + std::to_string(s.start_position) + ".." +
                  std::to_string(s.start_position + n - 1) + " exceed its context of " +
                  std::to_string(c.max_position_embeddings) + " positions");
    if (int64_t(s.block_table.size()) * block_size < s.start_position + n)
      throw Error("EAGLE-3 head: a block table of " + std::to_string(s.block_table.size()) + " blocks cannot hold " +
                  std::to_string(s.start_position + n) + " slots");
    seqs.push_back({int64_t(ids.size()), n, s.start_position, s.block_table});
    for (int64_t i = 0; i < n; ++i) {
      const int32_t id = s.tokens[size_t(i)];
      if (id < 0 || id >= c.vocab_size)
        throw Error("token id " + std::to_string(id) + " is outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")");
      rows_all.push_back(int64_t(ids.size()));
      ids.push_back(id);
      positions.push_back(s.start_position + i + 1);  // slot s holds position s + 1
    }
  }
  const auto rows = int64_t(ids.size());
  if (!out_rows.empty()) {
    for (const int64_t r : out_rows)
      if (r < 0 || r >= rows)
        throw Error("EAGLE-3 head: output row " + std::to_string(r) + " of a step of " + std::to_string(rows) + " rows");
    rows_all.assign(out_rows.begin(), out_rows.end());
  }
  if (input.size() != (from_aux ? fc_.size() : 1))
    throw Error("EAGLE-3 head: " + std::to_string(input.size()) + " input tensors (it takes " +
                (from_aux ? std::to_string(fc_.size()) + " auxiliary states" : std::string("one hidden state")) + ")");
  for (const backend::Tensor& t : input)
    if (t.rows != rows || t.cols != (from_aux ? config_.target_hidden_size : h))
      throw Error("EAGLE-3 head: an input of " + std::to_string(t.rows) + " x " + std::to_string(t.cols) + " for " +
                  std::to_string(rows) + " rows of " + (from_aux ? "auxiliary states" : "hidden states"));
  ops_.begin_step({ids, positions, seqs, rows_all});
  const auto eps = float(c.rms_norm_eps);

  // The fused state: fc(concat(x_i)) = Σ_i fc_i · x_i over the auxiliary states (each RMS-normed
  // first with fc_norm), or the hidden state the previous step handed on.
  backend::Tensor fused = input[0];
  if (from_aux) {
    fused = ops_.alloc(rows, h);
    backend::Tensor term = ops_.alloc(rows, h);
    for (size_t i = 0; i < input.size(); ++i) {
      backend::Tensor x = input[i];
      if (config_.fc_norm) {
        x = ops_.alloc(rows, config_.target_hidden_size);
        ops_.rms_norm(input[i], *fc_norms_[i], eps, x);
      }
      ops_.linear(x, *fc_[i], i == 0 ? fused : term);
      if (i > 0) ops_.add(fused, term);
    }
  }
  // The layer: q/k/v of [norm(embedding), hidden_norm(fused)] as the two halves' products.
  backend::Tensor e = ops_.alloc(rows, h), ne = ops_.alloc(rows, h), nf = ops_.alloc(rows, h);
  ops_.embedding(*embedding_, e);
  ops_.rms_norm(e, *input_norm_, eps, ne);
  ops_.rms_norm(fused, *hidden_norm_, eps, nf);
  backend::Tensor q = ops_.alloc(rows, q_width), k = ops_.alloc(rows, kv_width), v = ops_.alloc(rows, kv_width);
  backend::Tensor q2 = ops_.alloc(rows, q_width), kv2 = ops_.alloc(rows, kv_width);
  ops_.linear(ne, *q_embed_, q);
  ops_.linear(nf, *q_hidden_, q2);
  ops_.add(q, q2);
  ops_.linear(ne, *k_embed_, k);
  ops_.linear(nf, *k_hidden_, kv2);
  ops_.add(k, kv2);
  ops_.linear(ne, *v_embed_, v);
  ops_.linear(nf, *v_hidden_, kv2);
  ops_.add(v, kv2);
  ops_.rope_qk(q, k, hd, rope_);
  backend::Tensor attn = ops_.alloc(rows, q_width);
  ops_.attention(q, k, v, attn, {q_heads_, kv_heads_, hd, 1.0f / std::sqrt(float(hd)), std::nullopt}, cache, 0);
  // h = residual + o(attn), then h += mlp(post_norm(h)).
  backend::Tensor hs = ops_.alloc(rows, h);
  ops_.linear(attn, *o_, hs);
  ops_.add(hs, config_.norm_before_residual ? nf : fused);
  backend::Tensor x2 = ops_.alloc(rows, h);
  ops_.rms_norm(hs, *post_norm_, eps, x2);
  backend::Tensor gate = ops_.alloc(rows, c.intermediate_size), up = ops_.alloc(rows, c.intermediate_size);
  ops_.linear(x2, *gate_, gate);
  ops_.linear(x2, *up_, up);
  backend::Tensor act = ops_.alloc(rows, c.intermediate_size);
  ops_.silu_mul(gate, up, act);
  backend::Tensor mlp = ops_.alloc(rows, h);
  ops_.linear(act, *down_, mlp);
  ops_.add(hs, mlp);
  // The wanted rows; the final norm, the draft logits; the next step's state is the post-norm one
  // with norm_output.
  const auto picked = int64_t(rows_all.size());
  backend::Tensor last = hs;
  if (!out_rows.empty()) {
    last = ops_.alloc(picked, h);
    ops_.gather_rows(hs, last);
  }
  backend::Tensor normed = ops_.alloc(picked, h);
  ops_.rms_norm(last, *final_norm_, eps, normed);
  Output out{ops_.alloc(picked, config_.draft_vocab_size), config_.norm_output ? normed : last};
  ops_.linear(normed, *lm_head_, out.logits);
  return out;
}

}  // namespace fp8lm::model
