// An EAGLE-3 head's config.json read into an Eagle3HeadConfig (spec/eagle3_head.h), in either
// layout — speculators' ("speculators_model_type": "eagle3") or the EAGLE authors' release
// ("architectures": ["LlamaForCausalLMEagle3"]) — and its checkpoint checked against the tensors
// that config needs. Every option the head's forward would have to implement differently is
// refused by name (another speculators model type, a decoder layer other than Llama's, more than
// one layer, sliding-window attention, norm_before_fc), never read as something else.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "spec/eagle3_head.h"

namespace fp8lm::io {

// Parses the config object; `origin` prefixes every error (fp8lm::Error).
Eagle3HeadConfig parse_eagle3_config(const nlohmann::json& config, const std::string& origin);

// Whether a config.json object describes an EAGLE-3 head (in either layout), so that a caller
// can tell a head from a draft model before parsing either.
bool is_eagle3_config(const nlohmann::json& config);

// Reads `<dir>/config.json`, then checks `<dir>`'s safetensors files (model.safetensors, or the
// shards its index names) against eagle3_tensors: every tensor present with its shape, float
// weights in BF16 / F16 / F32, d2t in I64 with every draft id + d2t[id] inside the target
// vocabulary, t2d in BOOL marking exactly the target ids d2t reaches. Returns the config, whether
// the checkpoint keeps its own embedding table and the draft-to-target map it checked; throws
// fp8lm::Error naming the file, the tensor and what is wrong.
struct Eagle3Checkpoint {
  Eagle3HeadConfig config;
  bool own_embedding = false;
  std::vector<int64_t> draft_to_target;  // draft id d → target id d + d2t[d] (identity without d2t)
};
Eagle3Checkpoint read_eagle3_checkpoint(const std::filesystem::path& dir);

}  // namespace fp8lm::io
