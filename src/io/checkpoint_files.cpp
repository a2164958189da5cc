#include "io/checkpoint_files.h"

#include "common/error.h"
#include "io/json_file.h"

namespace fp8lm::io {
namespace {

// A shard must be a file beside the index: a name with a directory part could
// point anywhere on the machine.
bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

// exists() without the exception an unreadable directory would raise: the
// open that follows reports the real problem with the file's name.
bool file_exists(const std::filesystem::path& path) {
  std::error_code ignored;
  return std::filesystem::exists(path, ignored);
}

nlohmann::json read_index(const std::filesystem::path& index_path) {
  try {
    return read_json_file(index_path);
  } catch (const nlohmann::json::exception& e) {
    // read_json_file reports syntax errors itself; this catches the rest of
    // nlohmann's parse failures (e.g. a number too large for a double).
    throw Error(index_path.string() + ": not valid JSON: " + e.what());
  }
}

}  // namespace

CheckpointFiles::CheckpointFiles(const std::filesystem::path& model_dir) : directory_(model_dir) {
  const std::filesystem::path single = model_dir / kSingleFileName;
  const std::filesystem::path index = model_dir / kShardIndexName;
  if (file_exists(single)) {
    open_single(single);
  } else if (file_exists(index)) {
    open_shards(index);
  } else {
    throw Error(model_dir.string() + ": no " + kSingleFileName + " and no " + kShardIndexName +
                " (not a safetensors checkpoint directory)");
  }
}

void CheckpointFiles::open_single(const std::filesystem::path& file) {
  files_.push_back(std::make_unique<SafetensorsFile>(file));
  add_tensors_of(*files_.back());
}

void CheckpointFiles::open_shards(const std::filesystem::path& index_path) {
  sharded_ = true;
  const std::string origin = index_path.string();
  const nlohmann::json index = read_index(index_path);
  if (!index.is_object()) throw Error(origin + ": expected a JSON object");
  const auto weight_map = index.find("weight_map");
  if (weight_map == index.end()) throw Error(origin + ": required field 'weight_map' is missing");
  if (!weight_map->is_object())
    throw Error(origin + ": field 'weight_map' must be an object, got " + weight_map->type_name());

  // Shard name -> a tensor the index places there (for the error message).
  std::map<std::string, std::string> shards;
  for (const auto& [tensor, shard] : weight_map->items()) {
    if (!shard.is_string())
      throw Error(origin + ": weight_map entry for tensor '" + tensor + "' must be a file name, got " +
                  shard.type_name());
    const auto& shard_name = shard.get_ref<const std::string&>();
    if (!is_plain_file_name(shard_name))
      throw Error(origin + ": weight_map entry for tensor '" + tensor + "' names '" + shard_name +
                  "', which is not a file name in the index's directory");
    shards.emplace(shard_name, tensor);
  }

  std::map<std::string, const SafetensorsFile*> opened;
  for (const auto& [shard_name, some_tensor] : shards) {
    const std::filesystem::path shard_path = directory_ / shard_name;
    if (!file_exists(shard_path))
      throw Error(origin + ": shard '" + shard_name + "' (listed for tensor '" + some_tensor +
                  "') is missing: " + shard_path.string() + " does not exist");
    files_.push_back(std::make_unique<SafetensorsFile>(shard_path));
    opened.emplace(shard_name, files_.back().get());
    add_tensors_of(*files_.back());
  }

  for (const auto& [tensor, shard] : weight_map->items()) {
    const SafetensorsFile& file = *opened.at(shard.get<std::string>());
    if (file.find(tensor) == nullptr)
      throw Error(origin + ": weight_map places tensor '" + tensor + "' in " + shard.get<std::string>() +
                  ", but that shard has no such tensor");
  }
}

void CheckpointFiles::add_tensors_of(const SafetensorsFile& file) {
  for (const TensorInfo& info : file.tensors()) {
    const auto [it, inserted] = locations_.emplace(info.name, Location{&file, &info});
    if (!inserted)
      throw Error(directory_.string() + ": tensor '" + info.name + "' is in both " +
                  it->second.file->path().filename().string() + " and " + file.path().filename().string());
  }
}

std::vector<std::string> CheckpointFiles::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(locations_.size());
  for (const auto& entry : locations_) names.push_back(entry.first);
  return names;
}

const CheckpointFiles::Location& CheckpointFiles::locate(std::string_view name) const {
  const auto it = locations_.find(name);
  if (it != locations_.end()) return it->second;
  std::string files;
  for (const auto& file : files_) files += (files.empty() ? "" : ", ") + file->path().filename().string();
  throw Error(directory_.string() + ": no tensor named '" + std::string(name) + "' in " + files);
}

const TensorInfo* CheckpointFiles::find(std::string_view name) const {
  const auto it = locations_.find(name);
  return it == locations_.end() ? nullptr : it->second.info;
}

const TensorInfo& CheckpointFiles::tensor(std::string_view name) const { return *locate(name).info; }

const SafetensorsFile& CheckpointFiles::file_of(std::string_view name) const { return *locate(name).file; }

std::span<const std::byte> CheckpointFiles::bytes(std::string_view name) const {
  const Location& location = locate(name);
  return location.file->bytes(*location.info);
}

}  // namespace fp8lm::io
