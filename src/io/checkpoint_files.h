// The safetensors files of a Hugging Face model directory: `model.safetensors`,
// or the shards listed by `model.safetensors.index.json`
// (../shared/docs/fp8-checkpoint-formats.md §1.6). Opening reads the index and
// every shard's header, nothing else; tensor bytes come from the mappings when
// asked for.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/safetensors.h"

namespace fp8lm::io {

inline constexpr const char* kSingleFileName = "model.safetensors";
inline constexpr const char* kShardIndexName = "model.safetensors.index.json";

class CheckpointFiles {
 public:
  // As transformers does, `model.safetensors` wins when both it and an index
  // exist. Throws fp8lm::Error naming the directory, the index, the shard or
  // the tensor at fault: neither file present, a malformed index, a missing
  // shard, an index entry whose tensor is not in the shard it names, a tensor
  // present in two shards.
  explicit CheckpointFiles(const std::filesystem::path& model_dir);

  const std::filesystem::path& directory() const { return directory_; }
  bool sharded() const { return sharded_; }

  // The opened files: one, or the shards in file-name order.
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }

  // Every tensor of every file, by name. The tensor set is the files'; the
  // index is used only to find them (a tensor a shard holds but the index
  // forgot is still listed).
  std::vector<std::string> tensor_names() const;
  std::size_t tensor_count() const { return locations_.size(); }

  // nullptr when no file has the tensor.
  const TensorInfo* find(std::string_view name) const;
  // Throws fp8lm::Error "<dir>: no tensor named '<name>' in <files>".
  const TensorInfo& tensor(std::string_view name) const;
  // The file holding the tensor; throws as tensor() does.
  const SafetensorsFile& file_of(std::string_view name) const;
  // The tensor's bytes in its file's mapping (see SafetensorsFile::bytes).
  std::span<const std::byte> bytes(std::string_view name) const;

 private:
  struct Location {
    const SafetensorsFile* file;
    const TensorInfo* info;
  };

  void open_single(const std::filesystem::path& file);
  void open_shards(const std::filesystem::path& index_path);
  void add_tensors_of(const SafetensorsFile& file);
  const Location& locate(std::string_view name) const;

  std::filesystem::path directory_;
  bool sharded_ = false;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Location, std::less<>> locations_;
};

}  // namespace fp8lm::io
