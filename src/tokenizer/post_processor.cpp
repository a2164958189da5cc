#include "tokenizer/post_processor.h"

namespace fp8lm::tokenizer {

namespace {

// Ids before and after the sequence: Roberta, Bert and simple templates.
class WrapProcessor final : public PostProcessor {
 public:
  WrapProcessor(std::vector<std::uint32_t> before, std::vector<std::uint32_t> after)
      : before_(std::move(before)), after_(std::move(after)) {}
  std::vector<std::uint32_t> process(std::vector<std::uint32_t> ids) const override {
    std::vector<std::uint32_t> out;
    out.reserve(before_.size() + ids.size() + after_.size());
    out.insert(out.end(), before_.begin(), before_.end());
    out.insert(out.end(), ids.begin(), ids.end());
    out.insert(out.end(), after_.begin(), after_.end());
    return out;
  }

 private:
  std::vector<std::uint32_t> before_, after_;
};

class SequenceProcessor final : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> parts) : parts_(std::move(parts)) {}
  std::vector<std::uint32_t> process(std::vector<std::uint32_t> ids) const override {
    for (const auto& p : parts_) ids = p->process(std::move(ids));
    return ids;
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

// ["<s>", 0] as Roberta and Bert write their tokens.
std::uint32_t token_pair_id(const nlohmann::json& spec, std::string_view key, const JsonPath& at) {
  const auto& pair = json_field(spec, key, at);
  if (!pair.is_array() || pair.size() != 2 || !pair[0].is_string()) (at / key).fail("must be [token, id]");
  return json_id(pair[1], (at / key)[1]);
}

std::unique_ptr<PostProcessor> make_template(const nlohmann::json& spec, const JsonPath& at) {
  const auto& single = json_field(spec, "single", at);
  if (!single.is_array()) (at / "single").fail("must be an array");
  const nlohmann::json no_specials = nlohmann::json::object();
  const auto& specials = json_has(spec, "special_tokens") ? spec.at("special_tokens") : no_specials;
  if (!specials.is_object()) (at / "special_tokens").fail("must be an object");
  std::vector<std::uint32_t> before, after;
  bool seen_sequence = false;
  for (std::size_t i = 0; i < single.size(); ++i) {
    const JsonPath here = (at / "single")[i];
    const auto& piece = single[i];
    if (json_has(piece, "Sequence")) {
      if (seen_sequence) here.fail("the single template holds the sequence twice");
      seen_sequence = true;
      continue;
    }
    if (!json_has(piece, "SpecialToken")) here.fail("must be {\"Sequence\": ...} or {\"SpecialToken\": ...}");
    const std::string name = json_string(piece.at("SpecialToken"), "id", here / "SpecialToken");
    if (!specials.contains(name)) here.fail("special token '" + name + "' is not in special_tokens");
    const JsonPath st = at / "special_tokens" / name;
    const auto& ids = json_field(specials.at(name), "ids", st);
    if (!ids.is_array()) (st / "ids").fail("must be an array");
    for (std::size_t k = 0; k < ids.size(); ++k)
      (seen_sequence ? after : before).push_back(json_id(ids[k], (st / "ids")[k]));
  }
  if (!seen_sequence) (at / "single").fail("the template has no {\"Sequence\": ...}");
  return std::make_unique<WrapProcessor>(std::move(before), std::move(after));
}

}  // namespace

std::unique_ptr<PostProcessor> make_post_processor(const nlohmann::json& spec, const JsonPath& at) {
  if (spec.is_null()) return nullptr;
  const std::string type = json_type(spec, at);
  if (type == "TemplateProcessing") return make_template(spec, at);
  if (type == "RobertaProcessing" || type == "BertProcessing")
    return std::make_unique<WrapProcessor>(std::vector<std::uint32_t>{token_pair_id(spec, "cls", at)},
                                           std::vector<std::uint32_t>{token_pair_id(spec, "sep", at)});
  if (type == "ByteLevel") return std::make_unique<WrapProcessor>(std::vector<std::uint32_t>{}, std::vector<std::uint32_t>{});
  if (type == "Sequence") {
    const auto& list = json_field(spec, "processors", at);
    if (!list.is_array()) (at / "processors").fail("must be an array");
    std::vector<std::unique_ptr<PostProcessor>> parts;
    for (std::size_t i = 0; i < list.size(); ++i)
      if (auto p = make_post_processor(list[i], (at / "processors")[i])) parts.push_back(std::move(p));
    return std::make_unique<SequenceProcessor>(std::move(parts));
  }
  (at / "type").fail("unsupported post_processor type '" + type + "'");
}

}  // namespace fp8lm::tokenizer
