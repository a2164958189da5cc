// `fp8lm quantize`'s output: a BF16 (or float32) checkpoint rewritten in the
// compressed-tensors format exactly as LLM Compressor writes it — the
// `quantization_config` block of config.json, `weight` F8_E4M3 + `weight_scale`
// (+ `input_scale` for static activations) per quantized linear layer in the
// model's dtype, `self_attn.k_scale`/`v_scale` for an FP8 KV cache, every other
// tensor unchanged (../shared/docs/fp8-checkpoint-formats.md §3). The weights
// go through weights::quantize_weight's spec, the quantizer `--quantization fp8` uses.
//
// Everything is written into a temporary directory beside OUT and renamed
// to OUT at the end; OUT must not exist; the input is only read.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/model_spec.h"
#include "calibration/calibration.h"

namespace fp8lm::quantize {

// LLM Compressor's FP8 presets.
enum class Preset : uint8_t {
  kFp8Dynamic,  // per-channel weights, dynamic per-token activations (data-free)
  kFp8,         // per-tensor weights, static per-tensor activations (calibrated)
  kFp8Block,    // 128×128 weight blocks, dynamic 1×128 activation groups (data-free)
};
Preset parse_preset(std::string_view name);  // "FP8_DYNAMIC", "FP8", "FP8_BLOCK"; fp8lm::Error otherwise
std::string_view name(Preset p);
LinearQuantScheme preset_scheme(Preset p);   // a layer of that preset, as fp8lm runs it
bool needs_calibration(Preset p);            // static activation scales

struct QuantizeOptions {
  Preset preset = Preset::kFp8Dynamic;
  // Linear modules left in high precision: exact names or "re:<regex>"
  // (compressed-tensors' rules). lm_head and MoE routers are always kept; an
  // MoE layer's experts are kept all or none.
  std::vector<std::string> ignore;
  bool kv_cache_fp8 = false;  // write calibrated k_scale / v_scale
};

struct QuantizeSummary {
  std::vector<std::string> quantized;  // module names
  std::vector<std::string> kept;       // linear modules left in high precision
  std::vector<std::string> dropped;    // tensors not written (DeepSeek-V3's MTP layers)
  uint64_t tensor_bytes = 0;           // sum of the written tensors' sizes
};

// Progress: (what is being written, done, total) once per tensor.
using WriteProgress = std::function<void(const std::string& tensor, size_t done, size_t total)>;

// What the writer refuses for this model whatever the data (so a command can
// say so before calibrating): the static FP8 preset and the FP8 KV cache on an MLA model.
void check_supported(const io::ModelSpec& source, const QuantizeOptions& options);

// Throws fp8lm::Error naming the problem: OUT exists, the input is already
// quantized or not BF16/F32, calibration missing for a static preset or an
// FP8 KV cache, an invalid --ignore pattern, --ignore keeping some but not all
// experts of an MoE layer, what check_supported refuses, any I/O failure (nothing is left
// behind at OUT then).
QuantizeSummary write_compressed_tensors(const io::ModelSpec& source, const std::filesystem::path& out,
                                         const QuantizeOptions& options,
                                         const calibration::CalibrationStats* calibration,
                                         const WriteProgress& progress = {});

// The `quantization_config` object for config.json, as compressed-tensors 0.19
// serializes it (every QuantizationArgs key spelled out; later versions omit
// null ones, and both read both forms: tests/fixtures/quantize/README.md).
nlohmann::json quantization_config(const QuantizeOptions& options, const std::vector<std::string>& ignore);

}  // namespace fp8lm::quantize
