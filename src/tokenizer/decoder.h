// Decoders of tokenizer.json: the chain that turns token strings back into
// text (byte-level bytes, <0xXX> byte fallback, ▁ spaces, fusing, stripping).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/json_util.h"

namespace fp8lm::tokenizer {

class Decoder {
 public:
  virtual ~Decoder() = default;
  // One step of the chain: token strings in, (possibly fewer) strings out.
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

// ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace, Sequence; others
// are an error naming the type. nullptr for a JSON null.
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& spec, const JsonPath& at);

}  // namespace fp8lm::tokenizer
