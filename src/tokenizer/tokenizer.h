// fp8lm's tokenizer: reads a Hugging Face tokenizer.json (BPE models, byte-level
// or SentencePiece style) and produces exactly the ids the `tokenizers`
// library produces; decodes ids back to text, also incrementally for streaming.
//
//   auto tok = fp8lm::tokenizer::Tokenizer::load("models/fp8lm-gutenberg-22m");
//   std::vector<std::uint32_t> ids = tok.encode("Hello", /*add_special_tokens=*/true);
//   std::string text = tok.decode(ids, /*skip_special_tokens=*/true);
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace fp8lm::tokenizer {

class AddedVocabulary;
class BpeModel;
class Normalizer;
class PreTokenizer;
class PostProcessor;
class Decoder;
class IncrementalDecoder;

struct SpecialToken {
  std::string content;
  std::uint32_t id;
};

class Tokenizer {
 public:
  // A model directory (tokenizer.json, and tokenizer_config.json when present)
  // or the path of a tokenizer.json (tokenizer_config.json beside it is read
  // when present). Throws fp8lm::Error naming the file and the JSON path of
  // anything missing, malformed or unsupported.
  static Tokenizer load(const std::filesystem::path& path);
  // From parsed JSON; `origin` names it in errors. `config` is the parsed
  // tokenizer_config.json, or null.
  static Tokenizer from_json(const nlohmann::json& tokenizer_json, const std::string& origin,
                             const nlohmann::json& config = nullptr);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Text (valid UTF-8, else fp8lm::Error) -> ids. add_special_tokens applies
  // the post-processor (BOS/EOS); special tokens written in the text are
  // always recognised, as in Hugging Face.
  std::vector<std::uint32_t> encode(std::string_view text, bool add_special_tokens = true) const;

  // encode(), or nullopt when the result would hold more than `max_tokens`
  // ids. Exact either way, and cheap for long texts: a text longer than
  // max_tokens × max_bytes_per_token() bytes is refused without being
  // tokenized, and tokenizing stops once the ids passed max_tokens.
  std::optional<std::vector<std::uint32_t>> encode_at_most(std::string_view text, bool add_special_tokens,
                                                           std::size_t max_tokens) const;

  // At most how many bytes of input text one id accounts for (through the
  // normalizer, pre-tokenizer, added tokens and model), so that a text of B
  // bytes has at least B / max_bytes_per_token() ids; nullopt when no such
  // bound holds (a step may delete text: Strip, Replace, whitespace
  // splitters, lstrip/rstrip added tokens, fused or dropped unknowns).
  std::optional<double> max_bytes_per_token() const { return max_bytes_per_token_; }

  // Ids -> text through the decoder chain; unknown ids are skipped, as in
  // Hugging Face. The result is always valid UTF-8.
  std::string decode(std::span<const std::uint32_t> ids, bool skip_special_tokens = false) const;

  // For streaming: emits text as soon as it is final, never broken UTF-8.
  IncrementalDecoder incremental_decoder(bool skip_special_tokens = false) const;

  std::optional<std::string> id_to_token(std::uint32_t id) const;
  std::optional<std::uint32_t> token_to_id(std::string_view token) const;
  bool is_special(std::uint32_t id) const;

  // Hugging Face's get_vocab_size(with_added_tokens).
  std::size_t vocab_size(bool with_added_tokens = true) const;

  // From tokenizer_config.json (bos_token, eos_token, pad_token, unk_token):
  // nullopt when the file or the entry is absent.
  const std::optional<SpecialToken>& bos() const { return bos_; }
  const std::optional<SpecialToken>& eos() const { return eos_; }
  const std::optional<SpecialToken>& pad() const { return pad_; }
  const std::optional<SpecialToken>& unk() const { return unk_; }

 private:
  Tokenizer();
  void encode_piece(std::string_view text, bool at_start, std::vector<std::uint32_t>& ids, std::size_t limit) const;
  // Appends the ids of `text` (no post-processing); false as soon as there
  // are more than `limit`.
  bool encode_ids(std::string_view text, std::vector<std::uint32_t>& ids, std::size_t limit) const;
  std::optional<double> bytes_per_token_bound() const;

  std::unique_ptr<AddedVocabulary> added_;
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<PostProcessor> post_processor_;
  std::unique_ptr<Decoder> decoder_;
  std::optional<SpecialToken> bos_, eos_, pad_, unk_;
  std::optional<double> max_bytes_per_token_;
};

// Streaming detokenizer. The concatenation of everything push() and finish()
// return equals tokenizer.decode(all pushed ids). Text is held back while it
// ends in U+FFFD, which is how an incomplete UTF-8 character (split across
// byte-level or <0xXX> tokens) shows in a decode.
class IncrementalDecoder {
 public:
  IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special_tokens);

  // The text that became final with this id (often empty).
  std::string push(std::uint32_t id);
  // Whatever is still held back (at the end of a stream).
  std::string finish();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  // ids_[0, context_) were emitted already and are kept as context, because
  // decoders look at neighbours (Strip and Metaspace treat the first token
  // specially); ids_[context_, end) are pending. prefix_ = decode(context).
  std::vector<std::uint32_t> ids_;
  std::size_t context_ = 0;
  std::string prefix_;
};

}  // namespace fp8lm::tokenizer
