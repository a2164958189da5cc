#include "engine/runtime.h"

#include <algorithm>
#include <cstdio>

#include "backend/cpu/cpu_ops.h"
#include "common/error.h"
#include "quantize/calibration.h"

namespace fp8lm::engine {

std::unique_ptr<Runtime> Runtime::load(const std::filesystem::path& dir, const io::LoadOverrides& overrides,
                                       const RuntimeOptions& options) {
  if (options.block_size <= 0) throw Error("KV cache block size must be positive");
  if (options.kv_cache_tokens < 0) throw Error("KV cache size must not be negative");
  std::unique_ptr<Runtime> rt(new Runtime());
  rt->spec_ = io::read_model_spec(dir, overrides);
  const ModelConfig& c = rt->spec_.config;
  loader::check_supported(rt->spec_);
  const model::RopeTable rope_check(c);  // an unsupported RoPE scaling fails here, before anything loads
  rt->tokenizer_ = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::load(dir));

  for (int64_t id : c.eos_token_ids) rt->eos_ids_.push_back(int32_t(id));
  if (rt->eos_ids_.empty() && rt->tokenizer_->eos()) rt->eos_ids_.push_back(int32_t(rt->tokenizer_->eos()->id));

  loader::HostModelWeights w = loader::load_host_weights(rt->spec_);
  rt->weight_bytes_ = loader::resident_weight_bytes(w);
  rt->ops_ = std::make_unique<cpu::CpuOps>(options.threads, options.kernels);
  rt->model_ = std::make_unique<model::LlamaModel>(c, w, *rt->ops_);

  std::vector<float> k_scales = options.k_scales.empty() ? w.k_scales : options.k_scales;
  std::vector<float> v_scales = options.v_scales.empty() ? w.v_scales : options.v_scales;
  const KvCacheScheme& kv = rt->spec_.kv_cache();
  if (kv.dtype == KvCacheDType::kFP8E4M3 && k_scales.empty() && options.calibrate_kv_scales) {
    // Never a silent 1.0: measure K/V ranges on the built-in text (vLLM and
    // SGLang default to 1.0, a known accuracy trap).
    const int64_t len = std::min<int64_t>(256, c.max_position_embeddings);
    const auto samples = quantize::calibration_samples(*rt->tokenizer_, quantize::builtin_calibration_text(), 8, len);
    const quantize::CalibrationStats stats = quantize::calibrate(*rt->model_, *rt->ops_, samples);
    for (int i = 0; i < c.num_hidden_layers; ++i) {
      k_scales.push_back(quantize::kv_scale(stats.k_amax[size_t(i)]));
      v_scales.push_back(quantize::kv_scale(stats.v_amax[size_t(i)]));
    }
    const auto [kmin, kmax] = std::minmax_element(k_scales.begin(), k_scales.end());
    const auto [vmin, vmax] = std::minmax_element(v_scales.begin(), v_scales.end());
    char text[320];
    std::snprintf(text, sizeof text,
                  "KV cache fp8_e4m3: the checkpoint has no k/v scales, so they were calibrated at load on fp8lm's "
                  "built-in text (%lld tokens): k_scale %.3g..%.3g, v_scale %.3g..%.3g per layer",
                  static_cast<long long>(stats.tokens), double(*kmin), double(*kmax), double(*vmin), double(*vmax));
    rt->notes_.push_back(text);
  }
  std::vector<backend::KvLayerFormat> formats = model::kv_layer_formats(c, kv, k_scales, v_scales, &rt->notes_);
  const int64_t tokens = options.kv_cache_tokens > 0 ? options.kv_cache_tokens : c.max_position_embeddings;
  const int64_t blocks = (tokens + options.block_size - 1) / options.block_size;
  rt->kv_cache_ = rt->ops_->make_kv_cache(rt->model_->kv_cache_shape(options.block_size, blocks), std::move(formats));
  rt->blocks_ = std::make_unique<BlockAllocator>(blocks);
  return rt;
}

std::vector<backend::KvLayerFormat> Runtime::kv_formats() const {
  std::vector<backend::KvLayerFormat> out;
  for (int i = 0; i < config().num_hidden_layers; ++i) out.push_back(kv_cache_->layer_format(i));
  return out;
}

}  // namespace fp8lm::engine
