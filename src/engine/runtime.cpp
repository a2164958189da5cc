#include "engine/runtime.h"

#include <algorithm>

#include "backend/cpu/cpu_ops.h"
#include "common/error.h"

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
  std::vector<backend::KvLayerFormat> formats =
      model::kv_layer_formats(c, rt->spec_.kv_cache(), k_scales, v_scales, &rt->notes_);
  const int64_t tokens = options.kv_cache_tokens > 0 ? options.kv_cache_tokens : c.max_position_embeddings;
  const int64_t blocks = (tokens + options.block_size - 1) / options.block_size;
  rt->kv_cache_ = rt->ops_->make_kv_cache(rt->model_->kv_cache_shape(options.block_size, blocks), std::move(formats));
  rt->blocks_ = std::make_unique<BlockAllocator>(blocks);
  return rt;
}

}  // namespace fp8lm::engine
