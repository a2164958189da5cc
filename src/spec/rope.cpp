#include "spec/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "common/error.h"

namespace fp8lm {
namespace {

// base^(2i/dim) for i < dim/2, in float32 as torch computes `base ** (arange(0, dim, 2).float() / dim)`.
std::vector<float> base_powers(double base, int64_t dim) {
  std::vector<float> p(size_t(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) p[size_t(i)] = std::pow(float(base), float(2 * i) / float(dim));
  return p;
}

// Llama 3.1: long wavelengths divided by `factor`, short ones kept, a smooth blend between.
void apply_llama3(std::vector<float>& inv_freq, const RopeScaling& s, int64_t max_positions) {
  const float old_context = float(s.original_max_position_embeddings > 0 ? s.original_max_position_embeddings
                                                                          : max_positions);
  const float factor = float(s.factor), low = float(s.low_freq_factor), high = float(s.high_freq_factor);
  const float low_freq_wavelen = old_context / low;
  const float high_freq_wavelen = old_context / high;
  for (float& f : inv_freq) {
    const float wavelen = 2.0f * std::numbers::pi_v<float> / f;
    float scaled = wavelen > low_freq_wavelen ? f / factor : f;
    const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    if (medium) {
      const float smooth = (old_context / wavelen - low) / (high - low);
      scaled = (1.0f - smooth) * scaled / factor + smooth * scaled;
    }
    f = scaled;
  }
}

double yarn_mscale(double scale, double mscale) { return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

// YaRN: interpolated frequencies below the correction range, extrapolated above,
// a linear ramp inside; cos/sin scaled by the attention factor.
float apply_yarn(std::vector<float>& inv_freq, const RopeScaling& s, double base, int64_t dim, int64_t max_positions) {
  const double factor = s.factor;
  const double original = double(s.original_max_position_embeddings > 0 ? s.original_max_position_embeddings
                                                                        : max_positions);
  double attention = 0.0;
  if (s.attention_factor) {
    attention = *s.attention_factor;
  } else if (s.mscale != 0.0 && s.mscale_all_dim != 0.0) {
    attention = yarn_mscale(factor, s.mscale) / yarn_mscale(factor, s.mscale_all_dim);
  } else {
    attention = yarn_mscale(factor, 1.0);
  }
  auto correction_dim = [&](double rotations) {
    return (double(dim) * std::log(original / (rotations * 2.0 * std::numbers::pi))) / (2.0 * std::log(base));
  };
  double low = std::max(std::floor(correction_dim(s.beta_fast)), 0.0);
  double high = std::min(std::ceil(correction_dim(s.beta_slow)), double(dim - 1));
  if (low == high) high += 0.001;  // as transformers: no zero-width ramp
  const std::vector<float> pos = base_powers(base, dim);
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const float ramp = std::clamp((float(i) - float(low)) / float(high - low), 0.0f, 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    const float extrapolated = 1.0f / pos[i];
    const float interpolated = 1.0f / (float(factor) * pos[i]);
    inv_freq[i] = interpolated * (1.0f - extrapolation_factor) + extrapolated * extrapolation_factor;
  }
  return float(attention);
}

}  // namespace

RopeTable::RopeTable(const ModelConfig& c) {
  const int64_t dim = c.head_dim;
  if (dim <= 0 || dim % 2 != 0) throw Error("RoPE: head_dim " + std::to_string(dim) + " must be even and positive");
  for (float p : base_powers(c.rope_theta, dim)) inv_freq_.push_back(1.0f / p);
  const RopeScaling& s = c.rope_scaling;
  switch (s.type) {
    case RopeScalingType::kNone:
      break;
    case RopeScalingType::kLinear:
      for (float& f : inv_freq_) f /= float(s.factor);
      break;
    case RopeScalingType::kLlama3:
      apply_llama3(inv_freq_, s, c.max_position_embeddings);
      break;
    case RopeScalingType::kYarn:
      attention_factor_ = apply_yarn(inv_freq_, s, c.rope_theta, dim, c.max_position_embeddings);
      break;
    case RopeScalingType::kDynamic:
      throw Error("RoPE scaling 'dynamic' (NTK) is not supported: its frequencies depend on the length of each "
                  "batch, so a sequence's logits would change with what it is batched with");
  }
}

float mla_softmax_scale(const ModelConfig& c) {
  double scale = std::pow(double(c.mla.qk_head_dim()), -0.5);
  const RopeScaling& s = c.rope_scaling;
  if (s.type != RopeScalingType::kNone && s.mscale_all_dim != 0.0) {
    const double m = yarn_mscale(s.factor, s.mscale_all_dim);
    scale = scale * m * m;
  }
  return float(scale);
}

void RopeTable::cos_sin(int64_t position, float* cos_out, float* sin_out) const {
  // float32 product first, as transformers' `inv_freq @ position_ids` does.
  const float p = float(position);
  for (size_t i = 0; i < inv_freq_.size(); ++i) {
    const float angle = p * inv_freq_[i];
    cos_out[i] = std::cos(angle) * attention_factor_;
    sin_out[i] = std::sin(angle) * attention_factor_;
  }
}

}  // namespace fp8lm
