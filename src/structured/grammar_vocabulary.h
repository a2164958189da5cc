// A model's vocabulary as the grammar library sees it (xgrammar's TokenizerInfo): every token id's
// string as tokenizer.json spells it, how those strings encode bytes (byte-level as GPT-2 / Llama-3 /
// Qwen, byte fallback as Llama-2 / Mistral, or raw), detected from tokenizer.json exactly as
// xgrammar's Python `TokenizerInfo.from_huggingface` does, the model's vocabulary size (the logits'
// width, which may exceed the tokenizer's: the ids past it are never allowed) and the ids that end
// a sequence (the model's EOS ids), which a grammar allows once its root rule is complete.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace fp8lm::structured {

struct VocabularyHandle;  // xgrammar_handles.h

class GrammarVocabulary {
 public:
  // `tokenizer_json`: the file `tokenizer` was loaded from (its normalizer, pre-tokenizer and
  // decoder tell how tokens encode bytes). Throws fp8lm::Error when the file cannot be read, or
  // model_vocab_size is smaller than the tokenizer's vocabulary.
  GrammarVocabulary(const tokenizer::Tokenizer& tokenizer, const std::filesystem::path& tokenizer_json,
                    int64_t model_vocab_size, std::span<const int32_t> eos_ids);
  ~GrammarVocabulary();
  GrammarVocabulary(const GrammarVocabulary&) = delete;
  GrammarVocabulary& operator=(const GrammarVocabulary&) = delete;

  int64_t vocab_size() const { return vocab_size_; }
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }
  // "byte_level", "byte_fallback" or "raw".
  std::string vocab_type() const;

  const VocabularyHandle& handle() const { return *handle_; }

 private:
  std::unique_ptr<VocabularyHandle> handle_;
  int64_t vocab_size_ = 0;
  std::vector<int32_t> eos_ids_;
};

}  // namespace fp8lm::structured
