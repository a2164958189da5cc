// libFuzzer target for the config.json and quantization_config parsers and the
// load-override flag parsers. Any input must either parse or throw
// fp8lm::Error; any other exception, a crash, a leak or a hang is a bug.
//
// The input is a config.json text. Whatever parses is then exercised further:
// the tensor list of the architecture and the scheme of each linear module
// (which runs the module-list matchers: regexes, wildcards, prefixes).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"
#include "io/json_file.h"
#include "io/load_overrides.h"
#include "io/model_config_json.h"
#include "io/quant_config.h"
#include "spec/model_config.h"
#include "spec/model_tensors.h"

namespace {

void fuzz_flags(std::string_view text) {
  using namespace fp8lm::io;
  try { (void)parse_online_quant(text); } catch (const fp8lm::Error&) {}
  try { (void)parse_kv_cache_dtype(text); } catch (const fp8lm::Error&) {}
  try { (void)parse_layer_list(text); } catch (const fp8lm::Error&) {}
}

void fuzz_config(const nlohmann::json& config) {
  std::optional<fp8lm::ModelConfig> model;
  try {
    model = fp8lm::io::parse_model_config(config, "config.json");
  } catch (const fp8lm::Error&) {
  }
  // A directory that does not exist: the parser must not read hf_quant_config.json from the cwd.
  fp8lm::io::CheckpointQuantization quant;
  try {
    quant = fp8lm::io::parse_quantization(config, "/nonexistent/fuzz-model");
  } catch (const fp8lm::Error&) {
    return;
  }
  (void)quant.describe();
  if (!model || fp8lm::count_linear_modules(*model) > 4096) return;  // keep each run small
  (void)fp8lm::expected_tensors(*model);
  for (const fp8lm::LinearModule& m : fp8lm::linear_modules(*model)) (void)quant.scheme_for(m.name);
  fp8lm::io::LoadOverrides o;
  o.quantization = fp8lm::io::OnlineQuant::kBlock;
  o.kv_cache_dtype = fp8lm::KvCacheDType::kFP8E4M3;
  o.kv_cache_skip_layers = {0};
  try {
    fp8lm::io::apply_overrides(quant, o, model->num_hidden_layers);
  } catch (const fp8lm::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (size < 64) fuzz_flags(text);
  nlohmann::json config;
  try {
    config = fp8lm::io::parse_json(text, "config.json");
  } catch (const fp8lm::Error&) {
    return 0;
  }
  fuzz_config(config);
  return 0;
}
