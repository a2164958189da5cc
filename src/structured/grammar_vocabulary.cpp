#include "structured/grammar_vocabulary.h"

#include <xgrammar/xgrammar.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/error.h"
#include "structured/xgrammar_handles.h"

namespace fp8lm::structured {

namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("structured outputs: cannot read " + path.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

GrammarVocabulary::GrammarVocabulary(const tokenizer::Tokenizer& tokenizer, const std::filesystem::path& tokenizer_json,
                                     int64_t model_vocab_size, std::span<const int32_t> eos_ids)
    : vocab_size_(model_vocab_size), eos_ids_(eos_ids.begin(), eos_ids.end()) {
  const auto tokens = int64_t(tokenizer.vocab_size());
  if (model_vocab_size < tokens)
    throw Error("structured outputs: the model's vocabulary (" + std::to_string(model_vocab_size) +
                " ids) is smaller than its tokenizer's (" + std::to_string(tokens) + ")");
  for (const int32_t id : eos_ids_)
    if (id < 0 || id >= model_vocab_size)
      throw Error("structured outputs: EOS id " + std::to_string(id) + " is outside the vocabulary of " +
                  std::to_string(model_vocab_size));
  // As xgrammar's TokenizerInfo.from_huggingface: each id's string as the vocabulary spells it,
  // "" where an id has none (ids past the tokenizer's, up to the model's size, are never allowed).
  std::vector<std::string> encoded(static_cast<size_t>(model_vocab_size));
  for (int64_t id = 0; id < tokens; ++id)
    if (auto t = tokenizer.id_to_token(uint32_t(id))) encoded[size_t(id)] = std::move(*t);
  // How tokens encode bytes, from tokenizer.json as xgrammar's Python reads it:
  // {"vocab_type": 0 | 1 | 2, "add_prefix_space": bool}.
  nlohmann::json metadata;
  try {
    metadata = nlohmann::json::parse(xgrammar::TokenizerInfo::DetectMetadataFromHF(read_file(tokenizer_json)));
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error("structured outputs: " + tokenizer_json.string() + ": " + e.what());
  }
  const auto type = static_cast<xgrammar::VocabType>(metadata.at("vocab_type").get<int>());
  handle_ = std::make_unique<VocabularyHandle>(VocabularyHandle{xgrammar::TokenizerInfo(encoded, type, int(model_vocab_size), eos_ids_,
                                                              metadata.at("add_prefix_space").get<bool>())});
}

GrammarVocabulary::~GrammarVocabulary() = default;

std::string GrammarVocabulary::vocab_type() const {
  switch (handle_->info.GetVocabType()) {
    case xgrammar::VocabType::BYTE_LEVEL: return "byte_level";
    case xgrammar::VocabType::BYTE_FALLBACK: return "byte_fallback";
    case xgrammar::VocabType::RAW: return "raw";
  }
  return "?";
}

}  // namespace fp8lm::structured
