#include "io/safetensors_writer.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <numeric>
#include <set>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "io/atomic_file.h"

namespace fp8lm::io {
namespace {

using OrderedJson = nlohmann::ordered_json;

// A JSON string literal as serde_json writes it (and nlohmann without
// ensure_ascii): UTF-8 kept, only '"', '\\' and control characters escaped.
std::string json_string(const std::string& text, const std::string& context) {
  try {
    return nlohmann::json(text).dump();
  } catch (const nlohmann::json::exception&) {
    throw Error(context + ": not valid UTF-8");
  }
}

uint64_t byte_size_of(const TensorToWrite& tensor, const std::string& context) {
  uint64_t bits = dtype_bits(tensor.dtype);
  for (uint64_t dim : tensor.shape)
    if (__builtin_mul_overflow(bits, dim, &bits)) throw Error(context + ": shape too large");
  if (bits % 8 != 0)
    throw Error(context + ": " + std::to_string(bits) + " bits of " + std::string(dtype_name(tensor.dtype)) +
                " are not a whole number of bytes");
  return bits / 8;
}

// Where each tensor goes: the reference's order, dtype descending then name,
// which also aligns every tensor to its element size.
struct PlannedTensor {
  const TensorToWrite* tensor;
  uint64_t begin;
  uint64_t end;
};

std::vector<PlannedTensor> plan_layout(std::span<const TensorToWrite> tensors, const std::string& origin) {
  std::vector<PlannedTensor> plan;
  std::set<std::string_view> names;
  for (const TensorToWrite& t : tensors) {
    const std::string context = origin + ": tensor '" + t.name + "'";
    if (t.name == "__metadata__") throw Error(context + ": the name is reserved for the metadata");
    if (!names.insert(t.name).second) throw Error(context + ": given twice");
    const uint64_t size = byte_size_of(t, context);
    if (!t.produce && t.data.size() != size)
      throw Error(context + ": shape and " + std::string(dtype_name(t.dtype)) + " need " + std::to_string(size) +
                  " bytes, the data has " + std::to_string(t.data.size()));
    plan.push_back({&t, 0, size});
  }
  std::sort(plan.begin(), plan.end(), [](const PlannedTensor& a, const PlannedTensor& b) {
    if (a.tensor->dtype != b.tensor->dtype) return a.tensor->dtype > b.tensor->dtype;
    return a.tensor->name < b.tensor->name;
  });
  uint64_t offset = 0;
  for (PlannedTensor& p : plan) {
    const uint64_t size = p.end;
    p.begin = offset;
    p.end = offset + size;
    offset = p.end;
  }
  return plan;
}

std::string header_for(const std::vector<PlannedTensor>& plan, const std::optional<SafetensorsMetadata>& metadata,
                       const std::string& origin) {
  std::string json = "{";
  if (metadata) {
    json += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : *metadata) {
      if (!first) json += ",";
      first = false;
      const std::string context = origin + ": metadata '" + key + "'";
      json += json_string(key, context) + ":" + json_string(value, context);
    }
    json += "}";
  }
  for (const PlannedTensor& p : plan) {
    if (json.size() > 1) json += ",";
    json += json_string(p.tensor->name, origin + ": tensor name") + ":{\"dtype\":\"";
    json += dtype_name(p.tensor->dtype);
    json += "\",\"shape\":[";
    for (std::size_t i = 0; i < p.tensor->shape.size(); ++i)
      json += (i ? "," : "") + std::to_string(p.tensor->shape[i]);
    json += "],\"data_offsets\":[" + std::to_string(p.begin) + "," + std::to_string(p.end) + "]}";
  }
  json += "}";
  // Spaces up to a multiple of 8, so that the data buffer starts 8-aligned.
  json.append((8 - json.size() % 8) % 8, ' ');

  std::string out(8, '\0');
  uint64_t length = json.size();
  for (std::size_t i = 0; i < 8; ++i, length >>= 8) out[i] = static_cast<char>(length & 0xFF);
  return out + json;
}

std::span<const std::byte> as_bytes(const std::string& text) {
  return std::as_bytes(std::span<const char>(text.data(), text.size()));
}

// Writes a complete file into `file` but does not commit it.
void write_contents(AtomicFile& file, std::span<const TensorToWrite> tensors,
                    const std::optional<SafetensorsMetadata>& metadata) {
  const std::string origin = file.destination().string();
  const std::vector<PlannedTensor> plan = plan_layout(tensors, origin);
  file.write(as_bytes(header_for(plan, metadata, origin)));
  std::vector<std::byte> buffer;
  for (const PlannedTensor& p : plan) {
    if (!p.tensor->produce) {
      file.write(p.tensor->data);
      continue;
    }
    buffer.assign(p.end - p.begin, std::byte{0});
    p.tensor->produce(buffer);
    file.write(buffer);
  }
  file.finish();
}

std::string shard_file_name(std::size_t index, std::size_t count) {
  std::array<char, 64> name{};
  std::snprintf(name.data(), name.size(), "model-%05zu-of-%05zu.safetensors", index + 1, count);
  return name.data();
}

// huggingface_hub's split_torch_state_dict_into_shards, tensor for tensor.
std::vector<std::vector<TensorToWrite>> split_into_shards(std::span<const TensorToWrite> tensors,
                                                          uint64_t max_shard_size, const std::string& origin) {
  std::vector<std::vector<TensorToWrite>> shards;
  std::vector<TensorToWrite> current;
  uint64_t current_size = 0;
  for (const TensorToWrite& t : tensors) {
    const uint64_t size = byte_size_of(t, origin + ": tensor '" + t.name + "'");
    if (size > max_shard_size) {
      shards.push_back({t});  // before the shard being filled, as the reference does
      continue;
    }
    if (current_size + size > max_shard_size) {
      shards.push_back(std::move(current));
      current.clear();
      current_size = 0;
    }
    current.push_back(t);
    current_size += size;
  }
  if (!current.empty() || shards.empty()) shards.push_back(std::move(current));
  return shards;
}

// model.safetensors, model-ddddd-of-ddddd.safetensors, either + ".index.json":
// the names huggingface_hub clears before it writes a checkpoint.
bool is_checkpoint_file_name(std::string_view name) {
  if (name.ends_with(".index.json")) name.remove_suffix(std::string_view(".index.json").size());
  if (name == "model.safetensors") return true;
  constexpr std::string_view pattern = "model-#####-of-#####.safetensors";
  if (name.size() != pattern.size()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const bool matches = pattern[i] == '#' ? (name[i] >= '0' && name[i] <= '9') : name[i] == pattern[i];
    if (!matches) return false;
  }
  return true;
}

// Files of an earlier checkpoint that this write did not replace.
void remove_stale_checkpoint_files(const std::filesystem::path& directory,
                                   const std::set<std::string>& written) {
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(directory, error)) {
    const std::string name = entry.path().filename().string();
    if (!is_checkpoint_file_name(name) || written.contains(name)) continue;
    if (!std::filesystem::remove(entry.path(), error) && error)
      throw Error(entry.path().string() + ": cannot remove this file of an earlier checkpoint (" + error.message() +
                  ")");
  }
  if (error) throw Error(directory.string() + ": cannot list the directory (" + error.message() + ")");
}

}  // namespace

std::string safetensors_header_bytes(std::span<const TensorToWrite> tensors,
                                     const std::optional<SafetensorsMetadata>& metadata,
                                     const std::string& origin) {
  return header_for(plan_layout(tensors, origin), metadata, origin);
}

void write_safetensors(const std::filesystem::path& path, std::span<const TensorToWrite> tensors,
                       const std::optional<SafetensorsMetadata>& metadata) {
  AtomicFile file(path);
  write_contents(file, tensors, metadata);
  file.commit();
}

ShardedWriteResult write_sharded_safetensors(const std::filesystem::path& directory,
                                             std::span<const TensorToWrite> tensors, uint64_t max_shard_size,
                                             const SafetensorsMetadata& metadata) {
  const std::vector<std::vector<TensorToWrite>> shards =
      split_into_shards(tensors, max_shard_size, directory.string());
  ShardedWriteResult result;
  for (const TensorToWrite& t : tensors) result.total_size += byte_size_of(t, directory.string());

  SafetensorsMetadata shard_metadata{{"format", "pt"}};
  if (shards.size() == 1) shard_metadata.insert(metadata.begin(), metadata.end());

  // Every file is complete on disk before the first one is renamed into place.
  std::vector<AtomicFile> files;
  OrderedJson weight_map = OrderedJson::object();
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const std::string name = shards.size() == 1 ? "model.safetensors" : shard_file_name(i, shards.size());
    files.emplace_back(directory / name);
    write_contents(files.back(), shards[i], shard_metadata);
    for (const TensorToWrite& t : shards[i]) weight_map[t.name] = name;
  }
  if (shards.size() > 1) {
    OrderedJson index_metadata = {{"total_size", result.total_size}};
    for (const auto& [key, value] : metadata) index_metadata[key] = value;
    const OrderedJson index = {{"metadata", index_metadata}, {"weight_map", weight_map}};
    files.emplace_back(directory / "model.safetensors.index.json");
    // Python's json.dump(index, indent=2): ASCII only, no final newline.
    files.back().write(as_bytes(index.dump(2, ' ', true)));
    files.back().finish();
    result.index = files.back().destination();
  }

  std::set<std::string> written;
  for (AtomicFile& file : files) {
    file.commit();
    written.insert(file.destination().filename().string());
    if (file.destination().extension() == ".safetensors") result.files.push_back(file.destination());
  }
  remove_stale_checkpoint_files(directory, written);
  return result;
}

}  // namespace fp8lm::io
