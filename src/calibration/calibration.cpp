#include "calibration/calibration.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "spec/model_tensors.h"

namespace fp8lm::calibration {
namespace {

float amax_of(std::span<const float> x) {
  float m = 0.0f;
  for (float v : x) m = std::max(m, std::fabs(v));
  return m;
}

class RangeObserver final : public model::ForwardObserver {
 public:
  RangeObserver(CalibrationStats& stats, const ModelConfig& c)
      // MLA's cache holds one latent entry a token, observed as one K "head" of its width.
      : stats_(stats), kv_heads_(c.is_mla() ? 1 : c.num_key_value_heads),
        head_dim_(c.is_mla() ? c.mla.latent_width() : c.head_dim) {
    const auto layers = c.num_hidden_layers;
    moe_names_.resize(size_t(layers));
    for (int i = 0; i < layers; ++i)
      if (c.is_moe_layer(i)) moe_names_[size_t(i)] = moe_tensor_names(c, i);
    stats_.k_amax.assign(size_t(layers), 0.0f);
    stats_.v_amax.assign(size_t(layers), 0.0f);
    stats_.k_head_amax.assign(size_t(layers), std::vector<float>(size_t(kv_heads_), 0.0f));
    stats_.v_head_amax.assign(size_t(layers), std::vector<float>(size_t(kv_heads_), 0.0f));
  }

  void linear_input(int layer, model::LinearInput input, std::span<const float> x, int64_t, int64_t) override {
    const float a = amax_of(x);
    for (const std::string& m : model::modules_reading(input)) {
      float& slot = stats_.input_amax["model.layers." + std::to_string(layer) + "." + m];
      slot = std::max(slot, a);
    }
  }

  // Each expert's own range under its checkpoint module name
  // ("model.layers.L.mlp.experts.E.gate_proj", Mixtral's "...experts.E.w1").
  void expert_input(int layer, int expert, model::LinearInput input, std::span<const float> x, int64_t,
                    int64_t) override {
    const ExpertTensorNames& n = moe_names_.at(size_t(layer)).experts.at(size_t(expert));
    const float a = amax_of(x);
    const auto note = [&](const std::string& m) { stats_.input_amax[m] = std::max(stats_.input_amax[m], a); };
    if (input == model::LinearInput::kDown) {
      note(n.down_proj);
    } else {
      note(n.gate_proj);
      note(n.up_proj);
    }
  }

  void key_value(int layer, std::span<const float> k, std::span<const float> v, int64_t rows, int64_t width) override {
    const auto l = size_t(layer);
    // A tensor-parallel rank holds some of the KV heads: those it holds, numbered from 0.
    const int64_t heads = width / head_dim_;
    if (width % head_dim_ != 0 || heads > kv_heads_ || k.size() < size_t(rows * width) || v.size() < size_t(rows * width))
      throw Error("calibration: K/V of " + std::to_string(rows) + " rows × " + std::to_string(width) +
                  " values do not hold whole heads of " + std::to_string(head_dim_) + " (at most " +
                  std::to_string(kv_heads_) + ")");
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < heads; ++h) {
        const size_t at = size_t(r * width + h * head_dim_);
        float& kh = stats_.k_head_amax[l][size_t(h)];
        float& vh = stats_.v_head_amax[l][size_t(h)];
        kh = std::max(kh, amax_of(k.subspan(at, size_t(head_dim_))));
        vh = std::max(vh, amax_of(v.subspan(at, size_t(head_dim_))));
      }
    stats_.k_amax[l] = *std::max_element(stats_.k_head_amax[l].begin(), stats_.k_head_amax[l].end());
    stats_.v_amax[l] = *std::max_element(stats_.v_head_amax[l].begin(), stats_.v_head_amax[l].end());
  }

 private:
  CalibrationStats& stats_;
  int kv_heads_;
  int64_t head_dim_;
  std::vector<MoeTensorNames> moe_names_;  // per layer; empty for a dense layer
};

// Detaches the observer however calibration ends.
struct ObserverGuard {
  model::LlamaModel& model;
  ~ObserverGuard() { model.set_observer(nullptr); }
};

}  // namespace

CalibrationStats calibrate(model::LlamaModel& model, backend::Ops& ops, std::span<const std::vector<int32_t>> samples,
                           const std::function<void(size_t, size_t)>& progress) {
  const ModelConfig& c = model.config();
  if (samples.empty()) throw Error("calibration: no samples (the calibration text gave no tokens)");
  size_t longest = 0;
  for (const auto& s : samples) {
    if (s.empty()) throw Error("calibration: an empty sample");
    longest = std::max(longest, s.size());
  }
  if (int64_t(longest) > c.max_position_embeddings)
    throw Error("calibration: samples of " + std::to_string(longest) + " tokens exceed the model's context of " +
                std::to_string(c.max_position_embeddings));

  constexpr int kBlock = 16;
  const int64_t blocks = (int64_t(longest) + kBlock - 1) / kBlock;
  std::vector<backend::KvLayerFormat> f32(size_t(c.num_hidden_layers), {backend::KvElement::kF32, 1.0f, 1.0f});
  std::unique_ptr<backend::KvCache> cache = ops.make_kv_cache(model.kv_cache_shape(kBlock, blocks), f32);
  std::vector<int64_t> table(static_cast<size_t>(blocks));
  for (size_t i = 0; i < table.size(); ++i) table[i] = int64_t(i);

  CalibrationStats stats;
  RangeObserver observer(stats, c);
  model.set_observer(&observer);
  const ObserverGuard guard{model};
  std::vector<float> logits;
  for (size_t i = 0; i < samples.size(); ++i) {
    const model::SequenceInput in{samples[i], 0, table, false};
    model.forward({&in, 1}, *cache, logits);  // each sample overwrites the same blocks from position 0
    ++stats.samples;
    stats.tokens += int64_t(samples[i].size());
    if (progress) progress(i + 1, samples.size());
  }
  return stats;
}

float kv_scale(float amax) { return amax > 0.0f ? amax / 448.0f : 1.0f; }

std::vector<std::vector<int32_t>> calibration_samples(const tokenizer::Tokenizer& tokenizer, std::string_view text,
                                                      int64_t count, int64_t length) {
  if (count <= 0 || length <= 0) throw Error("calibration: sample count and length must be positive");
  const std::vector<uint32_t> ids = tokenizer.encode(text, /*add_special_tokens=*/true);
  if (ids.empty()) throw Error("calibration: the calibration text gives no tokens");
  std::vector<std::vector<int32_t>> out;
  for (size_t start = 0; start < ids.size() && int64_t(out.size()) < count; start += size_t(length)) {
    const size_t end = std::min(ids.size(), start + size_t(length));
    if (end - start < 2) break;
    out.emplace_back(ids.begin() + std::ptrdiff_t(start), ids.begin() + std::ptrdiff_t(end));
  }
  return out;
}

}  // namespace fp8lm::calibration
