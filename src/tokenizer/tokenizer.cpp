#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.h"
#include "io/json_file.h"
#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/decoder.h"
#include "tokenizer/json_util.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"

namespace fp8lm::tokenizer {

Tokenizer::Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

namespace {

// bos_token & co. are a string or an AddedToken object {"content": ...}.
std::optional<SpecialToken> config_token(const Tokenizer& tok, const nlohmann::json& config, const char* key,
                                         const JsonPath& at) {
  if (!json_has(config, key)) return std::nullopt;
  const auto& v = config.at(key);
  std::string content;
  if (v.is_string()) content = v.get<std::string>();
  else if (v.is_object()) content = json_string(v, "content", at / key);
  else (at / key).fail("must be a string or an object with \"content\"");
  const auto id = tok.token_to_id(content);
  if (!id) (at / key).fail("token '" + content + "' is not in the tokenizer's vocabulary");
  return SpecialToken{content, *id};
}

}  // namespace

Tokenizer Tokenizer::from_json(const nlohmann::json& j, const std::string& origin, const nlohmann::json& config) {
  const JsonPath root{origin, ""};
  if (!j.is_object()) root.fail("must be a JSON object");
  Tokenizer t;
  t.model_ = std::make_unique<BpeModel>(json_field(j, "model", root), root / "model");
  t.added_ = std::make_unique<AddedVocabulary>(j.contains("added_tokens") ? j.at("added_tokens") : nlohmann::json(),
                                               root / "added_tokens");
  auto section = [&](const char* key) -> const nlohmann::json& {
    static const nlohmann::json null_json;
    return j.contains(key) ? j.at(key) : null_json;
  };
  t.normalizer_ = make_normalizer(section("normalizer"), root / "normalizer");
  t.pre_tokenizer_ = make_pre_tokenizer(section("pre_tokenizer"), root / "pre_tokenizer");
  t.post_processor_ = make_post_processor(section("post_processor"), root / "post_processor");
  t.decoder_ = make_decoder(section("decoder"), root / "decoder");
  if (!config.is_null()) {
    const JsonPath cfg{origin + " (tokenizer_config.json)", ""};
    if (!config.is_object()) cfg.fail("must be a JSON object");
    t.bos_ = config_token(t, config, "bos_token", cfg);
    t.eos_ = config_token(t, config, "eos_token", cfg);
    t.pad_ = config_token(t, config, "pad_token", cfg);
    t.unk_ = config_token(t, config, "unk_token", cfg);
  }
  t.max_bytes_per_token_ = t.bytes_per_token_bound();
  return t;
}

Tokenizer Tokenizer::load(const std::filesystem::path& path) {
  // A path naming a .json file is the tokenizer.json itself; anything else is
  // taken as the model directory (so a missing one is reported by its file).
  const bool is_file = path.extension() == ".json" && !std::filesystem::is_directory(path);
  const std::filesystem::path file = is_file ? path : path / "tokenizer.json";
  const std::filesystem::path config_file = file.parent_path() / "tokenizer_config.json";
  const nlohmann::json j = io::read_json_file(file);
  nlohmann::json config;
  if (std::filesystem::exists(config_file)) config = io::read_json_file(config_file);
  return from_json(j, file.string(), config);
}

// Every step's bound multiplied: the normalizer can shrink text by
// max_shrink(); a pre-tokenizer that keeps_text() leaves at least as many
// bytes in its words; each id then covers at most max_bytes_per_id() bytes of
// a word (when the model covers every byte), and an added token its content.
std::optional<double> Tokenizer::bytes_per_token_bound() const {
  const double shrink = normalizer_ ? normalizer_->max_shrink() : 1.0;
  if (!std::isfinite(shrink)) return std::nullopt;
  if (pre_tokenizer_ && !pre_tokenizer_->keeps_text()) return std::nullopt;
  if (!model_->covers_every_byte(pre_tokenizer_ && pre_tokenizer_->byte_level())) return std::nullopt;
  double per_id = double(model_->max_bytes_per_id());
  for (const AddedToken& t : added_->tokens()) {
    if (t.lstrip || t.rstrip) return std::nullopt;  // they swallow any amount of whitespace
    per_id = std::max(per_id, double(t.content.size()));
  }
  return shrink * per_id;
}

void Tokenizer::encode_piece(std::string_view text, bool at_start, std::vector<std::uint32_t>& ids,
                             std::size_t limit) const {
  std::vector<PreToken> words{{std::string(text), at_start}};
  if (pre_tokenizer_) pre_tokenizer_->pre_tokenize(words);
  for (const auto& w : words) {
    if (ids.size() > limit) return;
    model_->encode_word(w.text, ids);
  }
}

bool Tokenizer::encode_ids(std::string_view text, std::vector<std::uint32_t>& ids, std::size_t limit) const {
  if (const std::size_t valid = utf8::valid_prefix_length(text); valid != text.size())
    throw Error("tokenizer: input text is not valid UTF-8 (at byte " + std::to_string(valid) + ")");
  ids.reserve(std::min(text.size() / 3, limit) + 4);
  // Added tokens are taken out first: those matched in the raw text, then,
  // after normalizing what is left, those matched in normalized text.
  for (const TextSpan& span : added_->split(text, false)) {
    if (ids.size() > limit) return false;
    if (span.id) {
      ids.push_back(*span.id);
      continue;
    }
    std::string piece(text.substr(span.start, span.end - span.start));
    if (normalizer_) normalizer_->normalize(piece);
    for (const TextSpan& inner : added_->split(piece, true)) {
      if (ids.size() > limit) return false;
      if (inner.id) ids.push_back(*inner.id);
      else
        encode_piece(std::string_view(piece).substr(inner.start, inner.end - inner.start),
                     span.start == 0 && inner.start == 0, ids, limit);
    }
  }
  return ids.size() <= limit;
}

std::vector<std::uint32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<std::uint32_t> ids;
  encode_ids(text, ids, std::numeric_limits<std::size_t>::max());
  if (add_special_tokens && post_processor_) ids = post_processor_->process(std::move(ids));
  return ids;
}

std::optional<std::vector<std::uint32_t>> Tokenizer::encode_at_most(std::string_view text, bool add_special_tokens,
                                                                    std::size_t max_tokens) const {
  // At least text.size() / bound ids: refused before any work. (In doubles:
  // an overestimate of max_tokens × bound only lets more through to the exact count.)
  if (max_bytes_per_token_ && double(text.size()) > double(max_tokens) * *max_bytes_per_token_ * (1.0 + 1e-9))
    return std::nullopt;
  std::vector<std::uint32_t> ids;
  // Post-processing only adds ids (BOS/EOS), so more than max_tokens before it is final.
  if (!encode_ids(text, ids, max_tokens)) return std::nullopt;
  if (add_special_tokens && post_processor_) ids = post_processor_->process(std::move(ids));
  if (ids.size() > max_tokens) return std::nullopt;
  return ids;
}

std::string Tokenizer::decode(std::span<const std::uint32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const std::uint32_t id : ids) {
    if (const AddedToken* added = added_->find(id)) {
      if (!(skip_special_tokens && added->special)) tokens.push_back(added->content);
    } else if (const std::string* token = model_->id_to_token(id)) {
      tokens.push_back(*token);
    }
  }
  if (decoder_) {
    decoder_->decode_chain(tokens);
    std::string out;
    for (const auto& t : tokens) out += t;
    return out;
  }
  std::string out;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0) out += ' ';
    out += tokens[i];
  }
  return utf8::lossy(out);
}

IncrementalDecoder Tokenizer::incremental_decoder(bool skip_special_tokens) const {
  return IncrementalDecoder(*this, skip_special_tokens);
}

std::optional<std::string> Tokenizer::id_to_token(std::uint32_t id) const {
  if (const AddedToken* added = added_->find(id)) return added->content;
  if (const std::string* token = model_->id_to_token(id)) return *token;
  return std::nullopt;
}

std::optional<std::uint32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const auto id = added_->token_to_id(token)) return id;
  return model_->token_to_id(token);
}

bool Tokenizer::is_special(std::uint32_t id) const {
  const AddedToken* added = added_->find(id);
  return added != nullptr && added->special;
}

std::size_t Tokenizer::vocab_size(bool with_added_tokens) const {
  std::size_t n = model_->vocab_size();
  if (with_added_tokens)
    for (const auto& t : added_->tokens())
      if (model_->id_to_token(t.id) == nullptr) ++n;
  return n;
}

}  // namespace fp8lm::tokenizer
