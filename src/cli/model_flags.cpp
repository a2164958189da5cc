#include "cli/model_flags.h"

namespace fp8lm::cli {

io::LoadOverrides ModelFlags::overrides() const {
  io::LoadOverrides o;
  if (!quantization.empty()) o.quantization = io::parse_online_quant(quantization);
  if (!kv_cache_dtype.empty()) o.kv_cache_dtype = io::parse_kv_cache_dtype(kv_cache_dtype);
  if (!kv_cache_skip_layers.empty()) o.kv_cache_skip_layers = io::parse_layer_list(kv_cache_skip_layers);
  o.keep_bf16 = keep_bf16;
  o.fp8_embeddings = fp8_embeddings;
  o.load_format = io::parse_load_format(load_format);
  return o;
}

std::shared_ptr<ModelFlags> add_model_flags(CLI::App* cmd) {
  auto f = std::make_shared<ModelFlags>();
  cmd->add_option("model,--model", f->model, "Model directory (Hugging Face layout: config.json + *.safetensors)")
      ->required();
  cmd->add_option("--quantization", f->quantization,
                  "Quantize a BF16/F16/F32 checkpoint to FP8 while loading: fp8 (= fp8:channel, per-channel "
                  "weights + per-token activations), fp8:tensor, fp8:block (128x128 weights + 1x128 activations), fp8:weight-only (per-channel weights, "
                  "activations unquantized: W8A16)");
  cmd->add_option("--kv-cache-dtype", f->kv_cache_dtype,
                  "KV cache element type: auto (checkpoint's choice), bf16, fp32, fp8 (= fp8_e4m3), fp8_e5m2");
  cmd->add_option("--kv-cache-dtype-skip-layers", f->kv_cache_skip_layers,
                  "Comma-separated layers whose KV cache stays BF16 (with an FP8 KV cache)");
  cmd->add_option("--keep-bf16", f->keep_bf16,
                  "With --quantization: keep this module (name, ancestor, or re:<regex>) in BF16; repeatable");
  cmd->add_flag("--fp8-embeddings", f->fp8_embeddings,
               "Also store the token embedding table and lm_head in FP8 E4M3 with one scale per row (weight-only; "
               "vLLM keeps both in BF16): for models whose vocabulary is a large share of the weights");
  cmd->add_option("--load-format", f->load_format,
                  "Where the weights come from: auto (the checkpoint's safetensors) or dummy (random weights of "
                  "realistic scale generated from config.json alone, for benchmarks; no tokenizer needed)");
  return f;
}

}  // namespace fp8lm::cli
