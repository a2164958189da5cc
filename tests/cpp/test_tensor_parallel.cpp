// Tensor parallelism's split of a model (src/loader/tensor_parallel.h), without any device:
//
// * plan_tensor_parallel tiles the query heads, the KV heads (each KV head's ranks hold the
//   query heads of its group, also when the KV heads are replicated) and the vocabulary for
//   every size that divides, and refuses the others naming the config value;
// * shard_host_weights' ranks put back together are the model: q/k/v and gate/up rows,
//   o_proj and down_proj columns (bias on rank 0 only), embedding and lm_head rows, each
//   expert's projections, norms and routers whole — byte for byte, on dummy Llama and
//   Qwen3-MoE models in BF16 and FP8 (per-channel, 128 × 128 blocks), and a block-FP8 model
//   whose per-rank MLP width (192) cuts 128 × 128 blocks reports the cells it re-scaled.
#include <gtest/gtest.h>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/error.h"
#include "io/load_overrides.h"
#include "io/model_spec.h"
#include "loader/dummy_weights.h"
#include "loader/tensor_parallel.h"
#include "cpp/test_util.h"

namespace fp8lm::loader {
namespace {

namespace fs = std::filesystem;

using test::ConfigDir;

std::string config(const std::string& arch, const std::string& type, int heads, int kv_heads, int intermediate,
                   const std::string& extra = "") {
  return R"({"architectures": [")" + arch + R"("], "model_type": ")" + type +
         R"(", "hidden_size": 256, "intermediate_size": )" + std::to_string(intermediate) +
         R"(, "num_hidden_layers": 2, "num_attention_heads": )" + std::to_string(heads) +
         R"(, "num_key_value_heads": )" + std::to_string(kv_heads) + R"(, "head_dim": 64, "vocab_size": 1001,
          "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "torch_dtype": "bfloat16",
          "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": false)" +
         extra + "}";
}

HostModelWeights dummy_model(const fs::path& dir, const char* quant) {
  io::LoadOverrides o;
  o.load_format = io::LoadFormat::kDummy;
  if (*quant) o.quantization = io::parse_online_quant(quant);
  return dummy_host_weights(io::read_model_spec(dir, o));
}

ModelConfig config_of(const fs::path& dir) {
  io::LoadOverrides o;
  o.load_format = io::LoadFormat::kDummy;
  return io::read_model_spec(dir, o).config;
}

TEST(TensorParallel, PlansTileHeadsKvHeadsAndVocabulary) {
  ConfigDir dir(config("LlamaForCausalLM", "llama", 32, 8, 512));
  const ModelConfig c = config_of(dir.path());
  for (const int size : {1, 2, 4, 8, 16, 32}) {
    SCOPED_TRACE(size);
    int64_t q_next = 0, vocab_next = 0;
    for (int r = 0; r < size; ++r) {
      const TensorParallelPlan p = plan_tensor_parallel(c, r, size);
      EXPECT_EQ(p.q_head0, q_next);
      q_next += p.q_heads;
      EXPECT_EQ(p.vocab0, vocab_next);
      vocab_next += p.vocab;
      EXPECT_EQ(p.kv_replicated, size > 8);
      // Every query head of the rank reads a KV head the rank holds (GQA groups of 4).
      for (int64_t h = p.q_head0; h < p.q_head0 + p.q_heads; ++h) {
        EXPECT_GE(h / 4, p.kv_head0);
        EXPECT_LT(h / 4, p.kv_head0 + p.kv_heads);
      }
    }
    EXPECT_EQ(q_next, 32);
    EXPECT_EQ(vocab_next, 1001);
  }
  EXPECT_NE(test::error_of([&] { plan_tensor_parallel(c, 0, 3); })
                .find("num_attention_heads 32 is not divisible by --tensor-parallel-size 3"),
            std::string::npos);
  ConfigDir odd(config("LlamaForCausalLM", "llama", 12, 6, 512));
  EXPECT_NE(test::error_of([&] { plan_tensor_parallel(config_of(odd.path()), 0, 4); })
                .find("num_key_value_heads 6 and --tensor-parallel-size 4: neither divides the other"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { plan_tensor_parallel(c, 2, 2); }).find("rank 2 of 2"), std::string::npos);
}

const std::byte* bytes(const weights::LinearWeight& w) { return static_cast<const std::byte*>(w.data); }

// The ranks' slices of `whole` put back together: rows (dim 0) or K columns (dim 1).
void expect_tiles(const weights::LinearWeight& whole, const std::vector<const weights::LinearWeight*>& parts, int dim,
                  const std::string& what) {
  SCOPED_TRACE(what);
  const size_t e = element_bytes(whole.element);
  int64_t at = 0;
  for (size_t r = 0; r < parts.size(); ++r) {
    const weights::LinearWeight& p = *parts[r];
    ASSERT_EQ(dim == 0 ? p.k : p.n, dim == 0 ? whole.k : whole.n);
    for (int64_t i = 0; i < p.n; ++i) {
      const std::byte* want = dim == 0 ? bytes(whole) + size_t((at + i) * whole.k) * e
                                       : bytes(whole) + size_t(i * whole.k + at) * e;
      ASSERT_EQ(std::memcmp(bytes(p) + size_t(i * p.k) * e, want, size_t(p.k) * e), 0) << "rank " << r << " row " << i;
    }
    if (dim == 1) {
      EXPECT_EQ(p.bias.empty(), r != 0 || whole.bias.empty());
    }
    at += dim == 0 ? p.n : p.k;
  }
  EXPECT_EQ(at, dim == 0 ? whole.n : whole.k);
}

void check_model(const fs::path& dir, const char* quant, int size) {
  SCOPED_TRACE(std::string(*quant ? quant : "bf16") + " over " + std::to_string(size));
  const ModelConfig c = config_of(dir);
  const HostModelWeights w = dummy_model(dir, quant);
  std::vector<HostModelWeights> ranks;
  weights::ShardReport rep;
  for (int r = 0; r < size; ++r) ranks.push_back(shard_host_weights(w, c, plan_tensor_parallel(c, r, size), &rep));
  EXPECT_EQ(rep.cells_rescaled, 0);  // every cut here is on a cell boundary
  auto all = [&](auto get) {
    std::vector<const weights::LinearWeight*> v;
    for (const HostModelWeights& r : ranks) v.push_back(&get(r));
    return v;
  };
  expect_tiles(w.embedding, all([](const HostModelWeights& r) -> const weights::LinearWeight& { return r.embedding; }), 0,
               "embedding");
  expect_tiles(w.lm_head, all([](const HostModelWeights& r) -> const weights::LinearWeight& { return r.lm_head; }), 0,
               "lm_head");
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const HostLayer& l = w.layers[i];
    auto of = [&](auto member) {
      std::vector<const weights::LinearWeight*> v;
      for (const HostModelWeights& r : ranks) v.push_back(&(r.layers[i].*member));
      return v;
    };
    expect_tiles(l.q, of(&HostLayer::q), 0, "q");
    expect_tiles(l.o, of(&HostLayer::o), 1, "o");
    if (c.num_key_value_heads % size == 0) {
      expect_tiles(l.k, of(&HostLayer::k), 0, "k");
      expect_tiles(l.v, of(&HostLayer::v), 0, "v");
    }
    for (const HostModelWeights& r : ranks) EXPECT_EQ(r.layers[i].input_norm, l.input_norm);
    if (l.moe) {
      for (size_t e = 0; e < l.moe->gate.size(); ++e) {
        std::vector<const weights::LinearWeight*> g, u, d;
        for (const HostModelWeights& r : ranks) {
          g.push_back(&r.layers[i].moe->gate[e]);
          u.push_back(&r.layers[i].moe->up[e]);
          d.push_back(&r.layers[i].moe->down[e]);
          EXPECT_EQ(r.layers[i].moe->router.data, l.moe->router.data);
        }
        expect_tiles(l.moe->gate[e], g, 0, "expert gate");
        expect_tiles(l.moe->up[e], u, 0, "expert up");
        expect_tiles(l.moe->down[e], d, 1, "expert down");
      }
    } else {
      expect_tiles(l.gate, of(&HostLayer::gate), 0, "gate");
      expect_tiles(l.up, of(&HostLayer::up), 0, "up");
      expect_tiles(l.down, of(&HostLayer::down), 1, "down");
    }
  }
}

TEST(TensorParallel, RanksPutBackTogetherAreTheModel) {
  ConfigDir llama(config("LlamaForCausalLM", "llama", 8, 4, 512));
  ConfigDir moe(config("Qwen3MoeForCausalLM", "qwen3_moe", 8, 4, 512,
                       R"(, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 256)"));
  for (const char* quant : {"", "fp8:channel", "fp8:block"})
    for (const int size : {2, 4}) {
      check_model(llama.path(), quant, size);
      check_model(moe.path(), quant, size);
    }
  check_model(llama.path(), "", 8);  // 4 KV heads over 8 ranks: replicated
}

TEST(TensorParallel, BlockFp8WidthsThatCutBlocksAreSplitAndReported) {
  ConfigDir dir(config("LlamaForCausalLM", "llama", 8, 4, 384));
  const ModelConfig c = config_of(dir.path());
  HostModelWeights w = dummy_model(dir.path(), "fp8:block");
  // Dummy weights draw every block alike, so their scales nearly agree: make neighbours differ.
  for (weights::LinearWeight* lw : {&w.layers[0].gate, &w.layers[0].up, &w.layers[0].down})
    for (size_t i = 0; i < lw->scales.size(); ++i) lw->scales[i] *= float(1 + i % 3);
  weights::ShardReport rep;
  const HostModelWeights r1 = shard_host_weights(w, c, plan_tensor_parallel(c, 1, 2), &rep);
  // Rank 1's MLP rows [192, 384) start inside a 128-row block: gate/up re-scaled, down's K too.
  EXPECT_GT(rep.cells_rescaled, 0);
  EXPECT_GT(rep.codes_requantized, 0);
  EXPECT_LE(rep.max_rel_error, 1.0);
  EXPECT_EQ(r1.layers[0].gate.n, 192);
  EXPECT_EQ(r1.layers[0].down.k, 192);
  ConfigDir three(config("LlamaForCausalLM", "llama", 6, 3, 384));
  const ModelConfig c3 = config_of(three.path());
  const HostModelWeights w3 = dummy_model(three.path(), "");
  EXPECT_NO_THROW(shard_host_weights(w3, c3, plan_tensor_parallel(c3, 0, 3)));
  ConfigDir bad(config("LlamaForCausalLM", "llama", 6, 3, 385));
  const ModelConfig cb = config_of(bad.path());
  const HostModelWeights wb = dummy_model(bad.path(), "");
  EXPECT_NE(test::error_of([&] { shard_host_weights(wb, cb, plan_tensor_parallel(cb, 0, 3)); })
                .find("intermediate_size 385 is not divisible by --tensor-parallel-size 3"),
            std::string::npos);
}

}  // namespace
}  // namespace fp8lm::loader
