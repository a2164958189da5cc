// Writing safetensors files byte for byte as the reference writer
// (`safetensors.torch.save_file`) does, and sharded checkpoints as
// `huggingface_hub.save_torch_state_dict` does
// (../shared/docs/fp8-checkpoint-formats.md §1.5, §1.6).
//
// Files are written under a temporary name in the target directory and renamed
// into place only when complete, so a failure (an exception, a full disk)
// never leaves a damaged file or touches the one already there.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "io/dtype.h"

namespace fp8lm::io {

using SafetensorsMetadata = std::map<std::string, std::string>;

struct TensorToWrite {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<uint64_t> shape;  // logical shape (F4/F6: elements, not bytes)
  // The tensor's bytes (little-endian, row-major), exactly shape x dtype long ...
  std::span<const std::byte> data;
  // ... or, when set, called once while the file is written to fill exactly
  // that many bytes, so that a producer (the quantizer) holds one output tensor
  // in memory at a time.
  std::function<void(std::span<std::byte> out)> produce;
};

// The bytes before the tensor data: the 8-byte length, the compact JSON
// (`__metadata__` first when given, then the tensors in layout order: dtype
// descending, then name), padded with spaces to a multiple of 8. Throws
// fp8lm::Error "<origin>: tensor '<name>': ..." for a repeated or reserved
// name, a byte count that does not match the shape, or invalid UTF-8.
// Metadata keys are written sorted (the reference writes them in hash order,
// so only with at most one key can any writer match it byte for byte).
std::string safetensors_header_bytes(std::span<const TensorToWrite> tensors,
                                     const std::optional<SafetensorsMetadata>& metadata,
                                     const std::string& origin);

// Writes one file: nothing, not even `__metadata__`, is added to what is given
// (transformers wants {"format": "pt"}: pass it).
void write_safetensors(const std::filesystem::path& path, std::span<const TensorToWrite> tensors,
                       const std::optional<SafetensorsMetadata>& metadata = std::nullopt);

// huggingface_hub's default maximum shard size ("5GB").
inline constexpr uint64_t kDefaultMaxShardSize = 5'000'000'000;

struct ShardedWriteResult {
  std::vector<std::filesystem::path> files;    // model.safetensors, or the shards in order
  std::optional<std::filesystem::path> index;  // model.safetensors.index.json when sharded
  uint64_t total_size = 0;                     // sum of the tensors' byte sizes
};

// Writes a checkpoint into `directory` as huggingface_hub's
// save_torch_state_dict does: tensors go to shards in the order given, a new
// shard starting when the next tensor would push the current one past
// `max_shard_size` (a tensor larger than that gets a shard of its own); one
// shard is `model.safetensors` with metadata {"format": "pt"} + `metadata`;
// several are `model-0000i-of-0000n.safetensors` with {"format": "pt"} plus
// `model.safetensors.index.json` ({"metadata": {"total_size", ...metadata},
// "weight_map"}). Every file appears only once all are complete; checkpoint
// files of that naming left over from an earlier write are then removed.
ShardedWriteResult write_sharded_safetensors(const std::filesystem::path& directory,
                                             std::span<const TensorToWrite> tensors,
                                             uint64_t max_shard_size = kDefaultMaxShardSize,
                                             const SafetensorsMetadata& metadata = {});

}  // namespace fp8lm::io
