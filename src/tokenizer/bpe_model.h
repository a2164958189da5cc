// The BPE model of tokenizer.json, both flavours: byte-level (GPT-2 style,
// the pre-tokenizer already spelled bytes as characters) and SentencePiece
// style (byte_fallback to <0xXX> tokens, unk_token, fuse_unk).
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/json_util.h"
#include "tokenizer/vocab.h"

namespace fp8lm::tokenizer {

class BpeModel {
 public:
  // `spec` is the "model" object; a type other than BPE is an error naming it.
  BpeModel(const nlohmann::json& spec, const JsonPath& at);

  // Appends the ids of one pre-tokenized word.
  void encode_word(std::string_view word, std::vector<std::uint32_t>& ids) const;

  std::optional<std::uint32_t> token_to_id(std::string_view token) const;
  // nullptr when the model has no token with this id.
  const std::string* id_to_token(std::uint32_t id) const;
  std::size_t vocab_size() const { return vocab_.size(); }
  std::uint32_t max_id() const { return id_to_token_.empty() ? 0 : static_cast<std::uint32_t>(id_to_token_.size() - 1); }

  // For Tokenizer::encode_at_most's lower bound on the token count: at most
  // how many bytes of a word one id stands for (a merged token spells the
  // bytes it covers; an unk token covers one character, <= 4 bytes).
  std::size_t max_bytes_per_id() const;
  // True when every byte of every word is covered by some id: unknown
  // characters get an unk id each (not fused) or byte-fallback ids, or, for
  // byte-level words, every byte's character is in the vocabulary.
  bool covers_every_byte(bool byte_level_words) const;

 private:
  struct Merge {
    std::uint32_t rank;
    std::uint32_t new_id;
  };
  static std::uint64_t pair_key(std::uint32_t a, std::uint32_t b) { return (std::uint64_t{a} << 32) | b; }

  void encode_uncached(std::string_view word, std::vector<std::uint32_t>& ids) const;
  void load_merges(const nlohmann::json& merges, const JsonPath& at);

  TokenMap vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  std::unordered_map<std::uint64_t, Merge> merges_;
  std::optional<std::uint32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  std::array<std::int64_t, 256> byte_ids_{};  // id of <0xXX>, or -1

  // Words repeat a lot in text: their ids are remembered (up to a bound, so
  // memory stays small on adversarial input). Guarded for concurrent encodes.
  static constexpr std::size_t kCacheCapacity = 200000;
  static constexpr std::size_t kMaxCachedWordBytes = 256;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<std::uint32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace fp8lm::tokenizer
