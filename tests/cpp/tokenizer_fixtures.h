// The tokenizers the tests compare against Hugging Face: the fixture name and
// where its tokenizer.json lives (../shared/data/hf or the shipped model).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fp8lm::test {

struct TokenizerCase {
  std::string name;  // tests/fixtures/tokenizer/<name>.json
  std::string where;  // "hf:<repo>" or "repo:<dir>"
};

inline const std::vector<TokenizerCase>& tokenizer_cases() {
  static const std::vector<TokenizerCase> cases = {
      {"qwen3", "hf:Qwen__Qwen3-4B"},
      {"deepseek_v3", "hf:deepseek-ai__DeepSeek-V3"},
      {"gpt2", "hf:openai-community__gpt2"},
      {"phi2", "hf:microsoft__phi-2"},
      {"phi3", "hf:microsoft__Phi-3-mini-4k-instruct"},
      {"tinyllama", "hf:TinyLlama__TinyLlama_v1.1"},
      {"roberta", "hf:FacebookAI__roberta-base"},
      {"gutenberg", "repo:models/fp8lm-gutenberg-22m"},
  };
  return cases;
}

inline std::filesystem::path tokenizer_fixture_dir() {
  return std::filesystem::path(FP8LM_FIXTURE_DIR) / "tokenizer";
}

// The model directory holding tokenizer.json, or nullopt when it is absent.
inline std::optional<std::filesystem::path> tokenizer_dir(const TokenizerCase& c) {
  const auto colon = c.where.find(':');
  const std::string kind = c.where.substr(0, colon), rel = c.where.substr(colon + 1);
  const std::filesystem::path dir = kind == "hf" ? std::filesystem::path(FP8LM_SHARED_HF_DIR) / rel
                                                 : std::filesystem::path(FP8LM_FIXTURE_DIR) / ".." / ".." / rel;
  if (!std::filesystem::exists(dir / "tokenizer.json")) return std::nullopt;
  return dir;
}

inline nlohmann::json read_fixture_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

// The texts of a fixture, in the order of its cases.
inline std::vector<std::string> fixture_texts(const nlohmann::json& fixture) {
  std::vector<std::string> texts = read_fixture_json(tokenizer_fixture_dir() / "texts.json");
  for (const auto& t : fixture.at("extra_texts")) texts.push_back(t.get<std::string>());
  return texts;
}

}  // namespace fp8lm::test
