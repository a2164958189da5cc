#include "io/safetensors.h"

#include <functional>

#include "common/error.h"

namespace fp8lm::io {

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path)
    : path_(path), mapping_(path), header_(parse_safetensors_header(mapping_.bytes(), path.string())) {
  for (std::size_t i = 0; i < header_.tensors.size(); ++i) index_by_name_.emplace(header_.tensors[i].name, i);
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  const auto it = index_by_name_.find(name);
  return it == index_by_name_.end() ? nullptr : &header_.tensors[it->second];
}

const TensorInfo& SafetensorsFile::tensor(std::string_view name) const {
  if (const TensorInfo* info = find(name)) return *info;
  throw Error(path_.string() + ": no tensor named '" + std::string(name) + "'");
}

std::span<const std::byte> SafetensorsFile::bytes(const TensorInfo& tensor) const {
  // Only this file's own entries carry ranges known to lie inside its mapping.
  const std::span<const TensorInfo> own = header_.tensors;
  const std::less<const TensorInfo*> before;
  if (own.empty() || before(&tensor, own.data()) || !before(&tensor, own.data() + own.size()))
    throw Error(path_.string() + ": tensor '" + tensor.name + "' is not an entry of this file");
  return mapping_.bytes().subspan(header_.data_start() + tensor.begin, tensor.byte_size());
}

}  // namespace fp8lm::io
