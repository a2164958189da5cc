// A model directory's safetensors files: single or sharded with an index.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "io/checkpoint_files.h"
#include "io/safetensors_writer.h"
#include "safetensors_test_util.h"

namespace fp8lm::io {
namespace {

using test::safetensors_fixture;
using test::safetensors_manifest;

void copy_directory(const std::filesystem::path& from, const std::filesystem::path& to) {
  std::filesystem::copy(from, to, std::filesystem::copy_options::recursive | std::filesystem::copy_options::overwrite_existing);
}

void write_text(const std::filesystem::path& path, const std::string& text) {
  test::write_file(path, std::as_bytes(std::span(text.data(), text.size())));
}

TEST(CheckpointFiles, ShardedCheckpointWrittenByHuggingfaceHub) {
  const nlohmann::json& expected = safetensors_manifest()["sharded"];
  const CheckpointFiles checkpoint(safetensors_fixture("sharded"));
  EXPECT_TRUE(checkpoint.sharded());
  EXPECT_EQ(checkpoint.files().size(), 4u);

  std::vector<std::string> names;
  for (const auto& t : expected["tensors"]) names.push_back(t["name"]);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(checkpoint.tensor_names(), names);
  EXPECT_EQ(checkpoint.tensor_count(), names.size());

  for (const auto& t : expected["tensors"]) {
    const std::string name = t["name"];
    SCOPED_TRACE(name);
    EXPECT_EQ(dtype_name(checkpoint.tensor(name).dtype), t["dtype"].get<std::string>());
    EXPECT_EQ(checkpoint.tensor(name).shape, t["shape"].get<std::vector<uint64_t>>());
    EXPECT_EQ(test::to_vector(checkpoint.bytes(name)), test::from_hex(t["hex"]));
    EXPECT_EQ(checkpoint.file_of(name).path().filename().string(), expected["weight_map"][name].get<std::string>());
  }
  // The weight and its scale live in different shards (fp8-checkpoint-formats.md §1.6).
  EXPECT_NE(&checkpoint.file_of("model.layers.0.self_attn.q_proj.weight"),
            &checkpoint.file_of("model.layers.0.self_attn.q_proj.weight_scale"));

  EXPECT_EQ(checkpoint.find("nope"), nullptr);
  const std::string message = test::error_message([&] { checkpoint.bytes("nope"); });
  EXPECT_NE(message.find("no tensor named 'nope' in model-00001-of-00004.safetensors, "), std::string::npos)
      << message;
}

TEST(CheckpointFiles, SingleFileWinsOverAnIndex) {
  test::ScratchDir dir;
  copy_directory(safetensors_fixture("sharded"), dir.path());
  const std::vector<std::byte> data = test::from_hex("0102");
  write_safetensors(dir / "model.safetensors", std::vector<TensorToWrite>{{"only", DType::kBF16, {1}, data, {}}});
  const CheckpointFiles checkpoint(dir.path());
  EXPECT_FALSE(checkpoint.sharded());
  EXPECT_EQ(checkpoint.tensor_names(), std::vector<std::string>{"only"});
  EXPECT_EQ(test::to_vector(checkpoint.bytes("only")), data);
}

TEST(CheckpointFiles, TensorSetComesFromTheShards) {
  // An index that forgets a tensor does not hide it.
  test::ScratchDir dir;
  copy_directory(safetensors_fixture("sharded"), dir.path());
  write_text(dir / "model.safetensors.index.json",
             R"({"weight_map": {"lm_head.weight": "model-00004-of-00004.safetensors"}})");
  const CheckpointFiles checkpoint(dir.path());
  EXPECT_EQ(checkpoint.files().size(), 1u);
  EXPECT_NE(checkpoint.find("lm_head.weight"), nullptr);
}

TEST(CheckpointFiles, BrokenCheckpointsAreNamed) {
  for (const auto& [case_name, expected] : safetensors_manifest()["sharded_errors"].items()) {
    SCOPED_TRACE(case_name);
    const auto dir = safetensors_fixture("sharded_errors/" + case_name);
    const std::string message = test::error_message([&] { CheckpointFiles checkpoint(dir); });
    EXPECT_NE(message.find((dir / "model.safetensors.index.json").string() + ": "), std::string::npos) << message;
    EXPECT_NE(message.find(expected["fp8lm_message"].get<std::string>()), std::string::npos) << message;
  }
}

TEST(CheckpointFiles, MoreBrokenCheckpoints) {
  test::ScratchDir dir;
  auto open_error = [&] { return test::error_message([&] { CheckpointFiles checkpoint(dir.path()); }); };
  EXPECT_NE(open_error().find("no model.safetensors and no model.safetensors.index.json"), std::string::npos);

  copy_directory(safetensors_fixture("sharded"), dir.path());
  const auto index = dir / "model.safetensors.index.json";
  write_text(index, R"({"weight_map": {"a": 5}})");
  EXPECT_NE(open_error().find("weight_map entry for tensor 'a' must be a file name"), std::string::npos);
  write_text(index, R"({"weight_map": []})");
  EXPECT_NE(open_error().find("'weight_map' must be an object"), std::string::npos);
  write_text(index, R"({"metadata": {}})");
  EXPECT_NE(open_error().find("'weight_map' is missing"), std::string::npos);
  write_text(index, R"({"weight_map": {"a": "x.safetensors"}, "metadata": {"total_size": 1e999}})");
  EXPECT_NE(open_error().find(index.string() + ": not valid JSON"), std::string::npos);

  // The same tensor in two shards.
  write_text(index, R"({"weight_map": {"a": "model-00001-of-00004.safetensors", "b": "copy.safetensors"}})");
  std::filesystem::copy_file(dir / "model-00001-of-00004.safetensors", dir / "copy.safetensors");
  const std::string twice = open_error();
  EXPECT_NE(twice.find("tensor 'model.layers.0.self_attn.q_proj.weight' is in both"), std::string::npos) << twice;

  // A shard that is not a valid safetensors file names the shard.
  write_text(index, R"({"weight_map": {"a": "bad.safetensors"}})");
  write_text(dir / "bad.safetensors", "nonsense");
  EXPECT_NE(open_error().find((dir / "bad.safetensors").string() + ": "), std::string::npos);
}

}  // namespace
}  // namespace fp8lm::io
