// The safetensors reader against the reference implementation (safetensors
// 0.8.0): the same bytes, shapes and dtypes for the files it wrote, and the
// same verdict on every malformed file of fixtures/safetensors/cases.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "safetensors_test_util.h"

namespace fp8lm::io {
namespace {

using test::from_hex;
using test::safetensors_fixture;
using test::safetensors_manifest;
using test::to_vector;

std::vector<uint64_t> shape_of(const nlohmann::json& shape) { return shape.get<std::vector<uint64_t>>(); }

std::optional<std::map<std::string, std::string>> metadata_of(const nlohmann::json& metadata) {
  if (metadata.is_null()) return std::nullopt;
  return metadata.get<std::map<std::string, std::string>>();
}

TEST(SafetensorsReader, FilesWrittenByTheReferenceReadBackExactly) {
  for (const auto& [file_name, expected] : safetensors_manifest()["valid"].items()) {
    SCOPED_TRACE(file_name);
    const SafetensorsFile file(safetensors_fixture("valid/" + file_name));
    EXPECT_EQ(file.metadata(), metadata_of(expected["metadata"]));
    ASSERT_EQ(file.tensors().size(), expected["tensors"].size());
    for (const auto& tensor : expected["tensors"]) {
      const std::string name = tensor["name"];
      SCOPED_TRACE(name);
      const TensorInfo& info = file.tensor(name);
      EXPECT_EQ(dtype_name(info.dtype), tensor["dtype"].get<std::string>());
      EXPECT_EQ(info.shape, shape_of(tensor["shape"]));
      EXPECT_EQ(info.begin, tensor["data_offsets"][0].get<uint64_t>());
      EXPECT_EQ(info.end, tensor["data_offsets"][1].get<uint64_t>());
      EXPECT_EQ(to_vector(file.bytes(info)), from_hex(tensor["hex"]));
      EXPECT_EQ(to_vector(file.bytes(name)), from_hex(tensor["hex"]));
    }
    // File order is data-offset order.
    for (std::size_t i = 1; i < file.tensors().size(); ++i)
      EXPECT_LE(file.tensors()[i - 1].end, file.tensors()[i].begin);
  }
}

TEST(SafetensorsReader, Fp8ScalarAndEmptyTensors) {
  const SafetensorsFile file(safetensors_fixture("valid/fp8_known.safetensors"));
  // torch's float8 casts of [0, 1, -1, 448, -448, 0.5, nan, 2^-9] and
  // [0, 1, -2, 57344, inf, -inf, 2^-16] (docs/numerics.md §1).
  const TensorInfo& e4m3 = file.tensor("layers.0.weight");
  EXPECT_EQ(e4m3.dtype, DType::kF8_E4M3);
  EXPECT_EQ(e4m3.shape, (std::vector<uint64_t>{2, 4}));
  EXPECT_EQ(to_vector(file.bytes(e4m3)), from_hex("0038b87efe307f01"));
  const TensorInfo& e5m2 = file.tensor("kv.e5m2");
  EXPECT_EQ(e5m2.dtype, DType::kF8_E5M2);
  EXPECT_EQ(to_vector(file.bytes(e5m2)), from_hex("003cc07b7cfc01"));

  const TensorInfo& scalar = file.tensor("layers.0.weight_scale");
  EXPECT_TRUE(scalar.shape.empty());
  EXPECT_EQ(scalar.element_count(), 1u);
  float scale = 0;
  std::memcpy(&scale, file.bytes(scalar).data(), sizeof scale);
  EXPECT_EQ(scale, 0.015625f);

  for (const char* name : {"empty.rows", "empty.middle", "empty.e4m3"}) {
    EXPECT_EQ(file.tensor(name).element_count(), 0u) << name;
    EXPECT_TRUE(file.bytes(name).empty()) << name;
  }
  EXPECT_EQ(file.metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
}

TEST(SafetensorsReader, SameVerdictAsTheReferenceOnEveryCase) {
  int accepted = 0, rejected = 0;
  for (const auto& [case_name, expected] : safetensors_manifest()["cases"].items()) {
    SCOPED_TRACE(case_name);
    const auto path = safetensors_fixture(expected["file"]);
    if (expected["reference"] == "accept") {
      ++accepted;
      try {
        const SafetensorsFile file(path);
        EXPECT_EQ(file.metadata(), metadata_of(expected["metadata"]));
        ASSERT_EQ(file.tensors().size(), expected["tensors"].size());
        for (const auto& [name, dtype_and_shape] : expected["tensors"].items()) {
          const TensorInfo* info = file.find(name);
          ASSERT_NE(info, nullptr) << name;
          EXPECT_EQ(dtype_name(info->dtype), dtype_and_shape[0].get<std::string>());
          EXPECT_EQ(info->shape, shape_of(dtype_and_shape[1]));
          EXPECT_EQ(file.bytes(*info).size(), info->byte_size());
        }
      } catch (const Error& e) {
        ADD_FAILURE() << "the reference accepts this file, fp8lm says: " << e.what();
      }
    } else {
      ++rejected;
      const std::string message = test::error_message([&] { SafetensorsFile file(path); });
      EXPECT_NE(message.find(path.string() + ": "), std::string::npos) << message;
      EXPECT_NE(message.find(expected["fp8lm_message"].get<std::string>()), std::string::npos)
          << message << "\n  reference: " << expected["reference_error"].get<std::string>();
      if (expected.contains("names_tensor")) {
        EXPECT_NE(message.find("tensor '" + expected["names_tensor"].get<std::string>() + "'"), std::string::npos)
            << message;
      }
    }
  }
  EXPECT_GE(accepted, 20);
  EXPECT_GE(rejected, 60);
}

// Every truncation and every single-byte change of a real file gives either a
// valid header or an fp8lm::Error, never a crash (the sanitizer build checks
// every read stays in bounds).
TEST(SafetensorsReader, EveryTruncationAndByteFlipIsHandled) {
  const std::vector<std::byte> file = test::file_bytes(safetensors_fixture("valid/fp8_known.safetensors"));
  int errors = 0;
  for (std::size_t length = 0; length < file.size(); ++length) {
    try {
      parse_safetensors_header(std::span(file).first(length), "cut");
    } catch (const Error&) {
      ++errors;
    }
  }
  EXPECT_EQ(errors, static_cast<int>(file.size()));  // every proper prefix is invalid
  std::vector<std::byte> changed = file;
  for (std::size_t i = 0; i < file.size(); i += 3) {
    for (std::byte value : {std::byte{0x00}, std::byte{0x22}, std::byte{0x5D}, std::byte{0x7D}, std::byte{0xFF}}) {
      changed[i] = value;
      try {
        const SafetensorsHeader header = parse_safetensors_header(changed, "flip");
        for (const TensorInfo& t : header.tensors) EXPECT_LE(header.data_start() + t.end, changed.size());
      } catch (const Error&) {
      }
    }
    changed[i] = file[i];
  }
}

TEST(SafetensorsReader, ForeignFilesNeedNoAlignment) {
  // The data buffer starts at an odd position; reading through memcpy works.
  const SafetensorsFile file(safetensors_fixture("cases/unaligned_data_start.safetensors"));
  const auto bytes = file.bytes("f");
  EXPECT_NE(reinterpret_cast<std::uintptr_t>(bytes.data()) % alignof(float), 0u);
  float values[2];
  ASSERT_EQ(bytes.size(), sizeof values);
  std::memcpy(values, bytes.data(), sizeof values);
  EXPECT_EQ(values[0], 1.5f);
  EXPECT_EQ(values[1], -2.25f);
}

TEST(SafetensorsReader, OpeningReadsOnlyTheHeader) {
  // A 64 MiB tensor in a sparse file: after opening, none of its pages is in
  // memory; asking for its span still reads nothing; touching it does.
  test::ScratchDir dir;
  const auto path = dir / "big.safetensors";
  const uint64_t size = 64ull << 20;
  std::string header = R"({"big":{"dtype":"U8","shape":[)" + std::to_string(size) + R"(],"data_offsets":[0,)" +
                       std::to_string(size) + "]}}";
  header.append((8 - header.size() % 8) % 8, ' ');
  {
    std::vector<std::byte> start(8);
    for (std::size_t i = 0; i < 8; ++i) start[i] = std::byte((header.size() >> (8 * i)) & 0xFF);
    for (char c : header) start.push_back(std::byte(static_cast<unsigned char>(c)));
    test::write_file(path, start);
    std::filesystem::resize_file(path, start.size() + size);
  }
  const SafetensorsFile file(path);
  const auto bytes = file.bytes("big");
  ASSERT_EQ(bytes.size(), size);

  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  // The first whole page of tensor data onwards, 1 MiB of it.
  const auto first = (reinterpret_cast<std::uintptr_t>(bytes.data()) + page - 1) / page * page;
  const std::size_t length = 1u << 20;
  std::vector<unsigned char> resident(length / page);
  auto resident_pages = [&] {
    EXPECT_EQ(::mincore(reinterpret_cast<void*>(first), length, resident.data()), 0);
    int count = 0;
    for (unsigned char r : resident) count += r & 1;
    return count;
  };
  EXPECT_EQ(resident_pages(), 0);
  for (std::size_t offset = 0; offset < length; offset += page) {
    const volatile std::byte* address = reinterpret_cast<const std::byte*>(first) + offset;
    static_cast<void>(*address);  // a real read: volatile
  }
  EXPECT_GT(resident_pages(), 0);
}

TEST(SafetensorsReader, ErrorsNameFileAndTensor) {
  const auto path = safetensors_fixture("valid/fp8_known.safetensors");
  const SafetensorsFile file(path);
  EXPECT_EQ(file.find("nope"), nullptr);
  EXPECT_EQ(test::error_message([&] { file.tensor("nope"); }), path.string() + ": no tensor named 'nope'");

  const SafetensorsFile other(safetensors_fixture("valid/no_metadata.safetensors"));
  EXPECT_NE(test::error_message([&] { file.bytes(other.tensors()[0]); }).find("is not an entry of this file"),
            std::string::npos);

  const auto missing = safetensors_fixture("valid/does_not_exist.safetensors");
  EXPECT_NE(test::error_message([&] { SafetensorsFile f(missing); }).find(missing.string() + ": cannot open file"),
            std::string::npos);
  EXPECT_NE(test::error_message([&] { SafetensorsFile f(safetensors_fixture("valid")); }).find("not a regular file"),
            std::string::npos);
}

}  // namespace
}  // namespace fp8lm::io
