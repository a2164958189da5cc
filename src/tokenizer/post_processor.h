// Post-processors of tokenizer.json: the special tokens put around an encoded
// sequence when add_special_tokens is asked for (BOS/EOS, <s> ... </s>).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/json_util.h"

namespace fp8lm::tokenizer {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Wraps the ids of a single sequence (pairs are not needed for serving).
  virtual std::vector<std::uint32_t> process(std::vector<std::uint32_t> ids) const = 0;
};

// TemplateProcessing, RobertaProcessing, BertProcessing, ByteLevel (ids
// unchanged), Sequence; others are an error. nullptr for a JSON null.
std::unique_ptr<PostProcessor> make_post_processor(const nlohmann::json& spec, const JsonPath& at);

}  // namespace fp8lm::tokenizer
