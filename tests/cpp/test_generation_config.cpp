// generation_config.json as default sampling parameters (io/generation_config.h):
// the fields read, null and absent alike, and every bad value refused naming the
// file and the field.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "io/generation_config.h"

namespace fp8lm::test {
namespace {

std::filesystem::path folder_with(const std::string& json) {
  static int n = 0;
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("fp8lm_genconfig_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "generation_config.json") << json;
  return dir;
}

std::string error_reading(const std::string& json) {
  try {
    io::read_generation_config(folder_with(json));
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

TEST(GenerationConfig, FieldsAreReadNullAndAbsentAlike) {
  const io::GenerationDefaults g = io::read_generation_config(folder_with(
      R"({"bos_token_id": 1, "eos_token_id": [2, 7], "do_sample": true, "temperature": 0.6, "top_p": 0.9,
          "top_k": 20, "min_p": null, "repetition_penalty": 1.1, "transformers_version": "4.51"})"));
  ASSERT_FALSE(g.empty());
  EXPECT_EQ(g.do_sample, true);
  EXPECT_EQ(g.temperature, 0.6);
  EXPECT_EQ(g.top_p, 0.9);
  EXPECT_EQ(g.top_k, 20);
  EXPECT_FALSE(g.min_p.has_value());
  EXPECT_EQ(g.repetition_penalty, 1.1);
  EXPECT_EQ(g.eos_token_ids, (std::vector<int64_t>{2, 7}));
  EXPECT_EQ(g.describe(), "temperature 0.6, top_p 0.9, top_k 20, repetition_penalty 1.1");
  EXPECT_EQ(io::read_generation_config(folder_with(R"({"eos_token_id": 5})")).eos_token_ids, std::vector<int64_t>{5});
  EXPECT_EQ(io::read_generation_config(folder_with(R"({"do_sample": false, "temperature": 0.6})")).describe(),
            "greedy (do_sample false)");
  EXPECT_TRUE(io::read_generation_config(std::filesystem::temp_directory_path() / "fp8lm_no_such_dir").empty());
}

TEST(GenerationConfig, BadValuesAreNamed) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"temperature": -0.5})", "'temperature' is -0.5"},
      {R"({"top_p": 0})", "'top_p' is 0"},
      {R"({"top_p": 1.5})", "'top_p' is 1.5"},
      {R"({"min_p": 2})", "'min_p' is 2"},
      {R"({"repetition_penalty": 0})", "'repetition_penalty' is 0"},
      {R"({"top_k": -2})", "'top_k' is -2"},
      {R"({"top_k": 1.5})", "'top_k' must be an integer"},
      {R"({"do_sample": 1})", "'do_sample' must be a boolean"},
      {R"({"eos_token_id": [1, -3]})", "'eos_token_id' must be a token id or a list of them, found -3"},
      {R"({"eos_token_id": "eos"})", "'eos_token_id' must be a token id or a list of them, found a string"},
      {R"([1, 2])", "must hold a JSON object, not an array"},
      {R"({"temperature": 0.5,})", "generation_config.json"},
  };
  for (const auto& [json, named] : cases) {
    SCOPED_TRACE(json);
    const std::string e = error_reading(json);
    EXPECT_NE(e.find("generation_config.json"), std::string::npos) << e;
    EXPECT_NE(e.find(named), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace fp8lm::test
