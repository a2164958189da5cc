// A model's generation_config.json as default sampling parameters, as vLLM's
// --generation-config auto and transformers' generate() take them: the fields
// that set how a model samples (do_sample, temperature, top_p, top_k, min_p,
// repetition_penalty) and its EOS ids. Requests and flags
// override them (engine/sampler.h and the front-ends apply them).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace fp8lm::io {

struct GenerationDefaults {
  std::filesystem::path source;  // the file read; empty when there was none
  std::optional<bool> do_sample;
  std::optional<double> temperature, top_p, min_p, repetition_penalty;
  std::optional<int64_t> top_k;
  std::vector<int64_t> eos_token_ids;

  bool empty() const { return source.empty(); }
  // "temperature 0.8, top_p 0.95, top_k 50" (the sampling fields given; "greedy" for do_sample false).
  std::string describe() const;
};

// dir/generation_config.json; empty defaults when the file does not exist. Throws
// fp8lm::Error naming the file and the field for a value of the wrong type or out of range
// (temperature < 0, top_p outside (0, 1], min_p outside [0, 1], repetition_penalty ≤ 0,
// top_k < -1, an EOS id < 0). Fields it does not read are ignored.
GenerationDefaults read_generation_config(const std::filesystem::path& dir);

}  // namespace fp8lm::io
