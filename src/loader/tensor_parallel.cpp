#include "loader/tensor_parallel.h"

#include <algorithm>
#include <string>

#include "common/error.h"

namespace fp8lm::loader {
namespace {

using weights::LinearWeight;
using weights::ShardReport;

std::string tp(int size) { return "--tensor-parallel-size " + std::to_string(size); }

LinearWeight rows(const LinearWeight& w, Range r, ShardReport* report) {
  return weights::shard_rows(w, r.first, r.count, report);
}

LinearWeight cols(const LinearWeight& w, Range r, int rank, ShardReport* report) {
  return weights::shard_cols(w, r.first, r.count, rank == 0, report);
}

}  // namespace

Range even_split(int64_t total, int rank, int size, const char* what) {
  if (size < 1 || rank < 0 || rank >= size)
    throw Error("tensor parallel: rank " + std::to_string(rank) + " of " + std::to_string(size) + " ranks");
  if (total % size != 0)
    throw Error(std::string("tensor parallel: ") + what + " " + std::to_string(total) + " is not divisible by " +
                tp(size));
  const int64_t per = total / size;
  return {rank * per, per};
}

TensorParallelPlan plan_tensor_parallel(const ModelConfig& c, int rank, int size) {
  TensorParallelPlan p;
  p.rank = rank;
  p.size = size;
  if (size > 1 && c.is_mla())
    throw Error("tensor parallel: " + c.architecture + "'s multi-head latent attention and shared experts are not "
                "split across ranks yet (issue 45); run it on one device");
  const Range q = even_split(c.num_attention_heads, rank, size, "num_attention_heads");
  p.q_head0 = q.first;
  p.q_heads = q.count;
  const int64_t kv = c.num_key_value_heads;
  if (kv % size == 0) {
    p.kv_heads = kv / size;
    p.kv_head0 = rank * p.kv_heads;
  } else if (size % kv == 0) {  // each KV head on size / kv ranks, with the query heads of its group
    p.kv_replicated = true;
    p.kv_heads = 1;
    p.kv_head0 = rank / (size / kv);
  } else {
    throw Error("tensor parallel: num_key_value_heads " + std::to_string(kv) + " and " + tp(size) +
                ": neither divides the other");
  }
  if (c.vocab_size < size)
    throw Error("tensor parallel: vocab_size " + std::to_string(c.vocab_size) + " is smaller than " + tp(size));
  // The vocabulary in equal parts (the last one shorter): nothing about it needs to divide.
  const int64_t per = (c.vocab_size + size - 1) / size;
  p.vocab0 = std::min<int64_t>(rank * per, c.vocab_size);
  p.vocab = std::min<int64_t>(per, c.vocab_size - p.vocab0);
  if (p.vocab <= 0)
    throw Error("tensor parallel: vocab_size " + std::to_string(c.vocab_size) + " leaves rank " +
                std::to_string(rank) + " of " + tp(size) + " no rows");
  return p;
}

HostModelWeights shard_host_weights(const HostModelWeights& w, const ModelConfig& c, const TensorParallelPlan& p,
                                    ShardReport* report) {
  const int64_t hd = c.head_dim;
  const Range q_rows{p.q_head0 * hd, p.q_heads * hd}, kv_rows{p.kv_head0 * hd, p.kv_heads * hd};
  const Range vocab{p.vocab0, p.vocab};
  HostModelWeights s;
  s.embedding = rows(w.embedding, vocab, report);
  s.lm_head = rows(w.lm_head, vocab, report);
  s.final_norm = w.final_norm;
  s.k_scales = w.k_scales;
  s.v_scales = w.v_scales;
  for (const HostLayer& l : w.layers) {
    HostLayer r;
    r.input_norm = l.input_norm;
    r.post_attention_norm = l.post_attention_norm;
    r.q_norm = l.q_norm;
    r.k_norm = l.k_norm;
    r.q = rows(l.q, q_rows, report);
    r.k = rows(l.k, kv_rows, report);
    r.v = rows(l.v, kv_rows, report);
    r.o = cols(l.o, q_rows, p.rank, report);
    if (l.moe) {
      HostMoe m;
      m.router = l.moe->router;
      for (size_t e = 0; e < l.moe->gate.size(); ++e) {
        const Range mlp = even_split(l.moe->gate[e].n, p.rank, p.size, "the experts' intermediate size");
        m.gate.push_back(rows(l.moe->gate[e], mlp, report));
        m.up.push_back(rows(l.moe->up[e], mlp, report));
        m.down.push_back(cols(l.moe->down[e], mlp, p.rank, report));
      }
      r.moe = std::move(m);
    } else {
      const Range mlp = even_split(l.gate.n, p.rank, p.size, "intermediate_size");
      r.gate = rows(l.gate, mlp, report);
      r.up = rows(l.up, mlp, report);
      r.down = cols(l.down, mlp, p.rank, report);
    }
    s.layers.push_back(std::move(r));
  }
  return s;
}

}  // namespace fp8lm::loader
