// The writer against the reference: byte-identical to safetensors.torch.save_file
// and huggingface_hub.save_torch_state_dict for the same tensors, and never
// damaging an existing file.
#include <gtest/gtest.h>

#include <cerrno>
#include <stdexcept>
#include <string>
#include <vector>

#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "safetensors_test_util.h"

namespace fp8lm::io {
namespace {

using test::file_bytes;
using test::from_hex;
using test::safetensors_fixture;
using test::safetensors_manifest;

// Tensors as the manifest lists them, in the order they were given to the
// reference writer; `storage` keeps their bytes.
std::vector<TensorToWrite> tensors_from_manifest(const nlohmann::json& tensors,
                                                 std::vector<std::vector<std::byte>>& storage) {
  std::vector<TensorToWrite> out;
  storage.reserve(tensors.size());
  for (const auto& t : tensors) {
    storage.push_back(from_hex(t["hex"]));
    out.push_back({t["name"], parse_dtype(t["dtype"].get<std::string>(), "manifest"),
                   t["shape"].get<std::vector<uint64_t>>(), storage.back(), {}});
  }
  return out;
}

TEST(SafetensorsWriter, ByteIdenticalToSaveFile) {
  for (const auto& [file_name, expected] : safetensors_manifest()["valid"].items()) {
    SCOPED_TRACE(file_name);
    std::vector<std::vector<std::byte>> storage;
    const auto tensors = tensors_from_manifest(expected["tensors"], storage);
    std::optional<SafetensorsMetadata> metadata;
    if (!expected["metadata"].is_null()) metadata = expected["metadata"].get<SafetensorsMetadata>();

    test::ScratchDir dir;
    write_safetensors(dir / file_name, tensors, metadata);
    const auto reference = file_bytes(safetensors_fixture("valid/" + file_name));
    EXPECT_EQ(file_bytes(dir / file_name), reference);

    const std::string header = safetensors_header_bytes(tensors, metadata, file_name);
    ASSERT_LE(header.size(), reference.size());
    EXPECT_EQ(header.size() % 8, 0u);
    EXPECT_EQ(std::memcmp(header.data(), reference.data(), header.size()), 0);
  }
}

TEST(SafetensorsWriter, EveryDtypeRoundTrips) {
  // F6_* cannot be written by the reference (torch has no such dtype); the
  // reader is the judge: what is written reads back the same.
  const SafetensorsFile source(safetensors_fixture("cases/every_dtype_string.safetensors"));
  std::vector<TensorToWrite> tensors;
  for (const TensorInfo& t : source.tensors()) tensors.push_back({t.name, t.dtype, t.shape, source.bytes(t), {}});
  test::ScratchDir dir;
  write_safetensors(dir / "all.safetensors", tensors, SafetensorsMetadata{{"format", "pt"}});
  const SafetensorsFile copy(dir / "all.safetensors");
  ASSERT_EQ(copy.tensors().size(), source.tensors().size());
  DType previous = DType::kU64;
  for (const TensorInfo& t : copy.tensors()) {
    EXPECT_LE(t.dtype, previous) << "layout order is dtype descending";
    previous = t.dtype;
    const TensorInfo& original = source.tensor(t.name);
    EXPECT_EQ(t.dtype, original.dtype);
    EXPECT_EQ(t.shape, original.shape);
    EXPECT_EQ(test::to_vector(copy.bytes(t)), test::to_vector(source.bytes(original)));
  }
}

TEST(SafetensorsWriter, ShardedByteIdenticalToHuggingfaceHub) {
  const nlohmann::json& expected = safetensors_manifest()["sharded"];
  std::vector<std::vector<std::byte>> storage;
  const auto tensors = tensors_from_manifest(expected["tensors"], storage);
  test::ScratchDir dir;
  const ShardedWriteResult result = write_sharded_safetensors(
      dir.path(), tensors, expected["max_shard_size"], expected["metadata"].get<SafetensorsMetadata>());
  EXPECT_EQ(dir.listing(), expected["files"].get<std::vector<std::string>>());
  for (const std::string name : expected["files"])
    EXPECT_EQ(file_bytes(dir / name), file_bytes(safetensors_fixture("sharded/" + name))) << name;
  EXPECT_EQ(result.files.size(), expected["files"].size() - 1);
  ASSERT_TRUE(result.index.has_value());
  EXPECT_EQ(*result.index, dir / "model.safetensors.index.json");
  EXPECT_EQ(result.total_size, 548u);
}

TEST(SafetensorsWriter, OneShardIsModelSafetensorsAndOldShardsGo) {
  const nlohmann::json& expected = safetensors_manifest()["sharded"];
  std::vector<std::vector<std::byte>> storage;
  const auto tensors = tensors_from_manifest(expected["tensors"], storage);
  test::ScratchDir dir;
  write_sharded_safetensors(dir.path(), tensors, 129);
  for (const char* other : {"notes.txt", "model.safetensors.backup", "model-1-of-2.safetensors"})
    test::write_file(dir / other, {});
  const ShardedWriteResult result = write_sharded_safetensors(dir.path(), tensors, kDefaultMaxShardSize,
                                                              {{"producer", "fixtures"}});
  EXPECT_EQ(dir.listing(), (std::vector<std::string>{"model-1-of-2.safetensors", "model.safetensors",
                                                      "model.safetensors.backup", "notes.txt"}));
  EXPECT_FALSE(result.index.has_value());
  const SafetensorsFile file(dir / "model.safetensors");
  EXPECT_EQ(file.metadata(), (SafetensorsMetadata{{"format", "pt"}, {"producer", "fixtures"}}));
  EXPECT_EQ(file.tensors().size(), tensors.size());
}

TEST(SafetensorsWriter, ProducedTensorsEqualGivenOnes) {
  const std::vector<std::byte> data = from_hex("0102030405060708");
  int calls = 0;
  const std::vector<TensorToWrite> given = {{"a", DType::kF32, {2}, data, {}}};
  const std::vector<TensorToWrite> produced = {{"a", DType::kF32, {2}, {}, [&](std::span<std::byte> out) {
                                                  ++calls;
                                                  ASSERT_EQ(out.size(), data.size());
                                                  std::copy(data.begin(), data.end(), out.begin());
                                                }}};
  test::ScratchDir dir;
  write_safetensors(dir / "given.safetensors", given);
  write_safetensors(dir / "produced.safetensors", produced);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(file_bytes(dir / "given.safetensors"), file_bytes(dir / "produced.safetensors"));
}

TEST(SafetensorsWriter, FailureNeverDamagesAnExistingFile) {
  test::ScratchDir dir;
  const std::vector<std::byte> old_data = from_hex("2a");
  write_safetensors(dir / "model.safetensors", std::vector<TensorToWrite>{{"old", DType::kU8, {1}, old_data, {}}});
  const auto before = file_bytes(dir / "model.safetensors");

  // The producer of the second tensor fails halfway through the write.
  const std::vector<std::byte> big(4096, std::byte{1});
  const std::vector<TensorToWrite> failing = {
      {"a", DType::kU8, {4096}, big, {}},
      {"b", DType::kU8, {4096}, {}, [](std::span<std::byte>) { throw std::runtime_error("disk on fire"); }}};
  EXPECT_THROW(write_safetensors(dir / "model.safetensors", failing), std::runtime_error);
  EXPECT_EQ(file_bytes(dir / "model.safetensors"), before);
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"model.safetensors"}) << "no temporary file left";

  // The same for a sharded write failing in its last shard: no shard of the
  // new checkpoint appears, the old one is whole.
  EXPECT_THROW(write_sharded_safetensors(dir.path(), failing, 4096), std::runtime_error);
  EXPECT_EQ(file_bytes(dir / "model.safetensors"), before);
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"model.safetensors"});

  // Invalid input is refused before anything is created.
  const std::vector<TensorToWrite> wrong_size = {{"w", DType::kF32, {2}, old_data, {}}};
  EXPECT_THROW(write_safetensors(dir / "model.safetensors", wrong_size), Error);
  EXPECT_EQ(file_bytes(dir / "model.safetensors"), before);
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"model.safetensors"});
}

// A full file system is named as such, whether the system said ENOSPC or EIO
// (a writeback that failed at fsync or close); other errors keep their name.
TEST(AtomicFile, AFullFileSystemIsNamed) {
  const std::string full = io::describe_write_error(EIO, 1 << 20, "/out");
  EXPECT_EQ(full.rfind("No space left on device: 1 MiB free on the file system of /out", 0), 0u) << full;
  EXPECT_NE(full.find("Input/output error"), std::string::npos) << full;
  const std::string nospc = io::describe_write_error(ENOSPC, 0, "/out");
  EXPECT_EQ(nospc, "No space left on device: 0 MiB free on the file system of /out");
  const std::string io_error = io::describe_write_error(EIO, 10ull << 30, "/out");
  EXPECT_EQ(io_error.rfind("Input/output error; 10240 MiB free", 0), 0u) << io_error;
}

TEST(SafetensorsWriter, InvalidInputIsNamed) {
  const std::vector<std::byte> one = from_hex("00");
  auto message = [](std::vector<TensorToWrite> tensors, std::optional<SafetensorsMetadata> metadata = {}) {
    return test::error_message([&] { safetensors_header_bytes(tensors, metadata, "out.safetensors"); });
  };
  EXPECT_EQ(message({{"w", DType::kF32, {2}, one, {}}}),
            "out.safetensors: tensor 'w': shape and F32 need 8 bytes, the data has 1");
  EXPECT_EQ(message({{"w", DType::kU8, {1}, one, {}}, {"w", DType::kU8, {1}, one, {}}}),
            "out.safetensors: tensor 'w': given twice");
  EXPECT_NE(message({{"__metadata__", DType::kU8, {1}, one, {}}}).find("reserved"), std::string::npos);
  EXPECT_NE(message({{"f4", DType::kF4, {3}, one, {}}}).find("tensor 'f4': 12 bits of F4"), std::string::npos);
  EXPECT_NE(message({{"bad\xff", DType::kU8, {1}, one, {}}}).find("not valid UTF-8"), std::string::npos);
  EXPECT_NE(message({}, SafetensorsMetadata{{"k", "\xc0"}}).find("metadata 'k"), std::string::npos);

  const std::vector<TensorToWrite> fine = {{"w", DType::kU8, {1}, one, {}}};
  const std::string nowhere = "/nonexistent-fp8lm-dir/model.safetensors";
  EXPECT_NE(test::error_message([&] { write_safetensors(nowhere, fine); }).find(nowhere + ": cannot create"),
            std::string::npos);
}

}  // namespace
}  // namespace fp8lm::io
