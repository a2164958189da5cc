#include "loader/eagle3_weights.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "io/checkpoint_files.h"
#include "loader/host_weights.h"

namespace fp8lm::loader {
namespace {

weights::LinearWeight matrix(std::vector<float> values, int64_t n, int64_t k) {
  auto owned = std::make_shared<std::vector<float>>(std::move(values));
  weights::LinearWeight w = weights::high_precision(ElementType::kF32, owned->data(), n, k);
  w.owner = owned;
  return w;
}

// Columns [c0, c0 + width) of row-major [rows, cols] values.
std::vector<float> columns(const std::vector<float>& m, int64_t rows, int64_t cols, int64_t c0, int64_t width) {
  std::vector<float> out(size_t(rows * width));
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(out.data() + r * width, m.data() + r * cols + c0, size_t(width) * sizeof(float));
  return out;
}

}  // namespace

Eagle3HostWeights load_eagle3_host_weights(const std::filesystem::path& dir, const io::Eagle3Checkpoint& checkpoint) {
  const Eagle3HeadConfig& c = checkpoint.config;
  const io::CheckpointFiles files(dir);
  const ModelConfig& l = c.layer;
  const int64_t h = l.hidden_size, hd = l.head_dim, ff = l.intermediate_size;
  const int64_t qn = int64_t(l.num_attention_heads) * hd, kvn = int64_t(l.num_key_value_heads) * hd;
  const int64_t aux = c.aux_layer_ids.empty() ? 3 : int64_t(c.aux_layer_ids.size());
  const std::string p = c.layout == Eagle3HeadConfig::Layout::kSpeculators ? "layers.0." : "midlayer.";
  Eagle3HostWeights w;
  const std::vector<float> fc = read_float_tensor(files, "fc.weight");
  for (int64_t i = 0; i < aux; ++i)
    w.fc.push_back(matrix(columns(fc, h, aux * c.target_hidden_size, i * c.target_hidden_size, c.target_hidden_size), h,
                          c.target_hidden_size));
  auto halves = [&](const char* name, int64_t rows, weights::LinearWeight& embed, weights::LinearWeight& hidden) {
    const std::vector<float> m = read_float_tensor(files, p + name);
    embed = matrix(columns(m, rows, 2 * h, 0, h), rows, h);
    hidden = matrix(columns(m, rows, 2 * h, h, h), rows, h);
  };
  halves("self_attn.q_proj.weight", qn, w.q_embed, w.q_hidden);
  halves("self_attn.k_proj.weight", kvn, w.k_embed, w.k_hidden);
  halves("self_attn.v_proj.weight", kvn, w.v_embed, w.v_hidden);
  w.o = matrix(read_float_tensor(files, p + "self_attn.o_proj.weight"), h, qn);
  w.gate = matrix(read_float_tensor(files, p + "mlp.gate_proj.weight"), ff, h);
  w.up = matrix(read_float_tensor(files, p + "mlp.up_proj.weight"), ff, h);
  w.down = matrix(read_float_tensor(files, p + "mlp.down_proj.weight"), h, ff);
  w.lm_head = matrix(read_float_tensor(files, "lm_head.weight"), c.draft_vocab_size, h);
  if (checkpoint.own_embedding) w.embedding = matrix(read_float_tensor(files, "embed_tokens.weight"), l.vocab_size, h);
  w.input_norm = read_float_tensor(files, p + "input_layernorm.weight");
  w.hidden_norm = read_float_tensor(files, p + "hidden_norm.weight");
  w.post_attention_norm = read_float_tensor(files, p + "post_attention_layernorm.weight");
  w.final_norm = read_float_tensor(files, "norm.weight");
  if (c.fc_norm)
    for (int64_t i = 0; i < aux; ++i) w.fc_norms.push_back(read_float_tensor(files, "fc_norm." + std::to_string(i) + ".weight"));
  w.draft_to_target = checkpoint.draft_to_target;
  return w;
}

}  // namespace fp8lm::loader
