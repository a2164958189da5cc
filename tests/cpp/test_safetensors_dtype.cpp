// The dtype strings of safetensors (fp8-checkpoint-formats.md §1.3).
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "io/dtype.h"
#include "safetensors_test_util.h"

namespace fp8lm::io {
namespace {

// The reference's enum, in its declaration order, with bits per element.
const std::vector<std::pair<std::string, unsigned>> kReferenceDTypes = {
    {"BOOL", 8},        {"F4", 4},           {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"U8", 8},   {"I8", 8},
    {"F8_E5M2", 8},     {"F8_E4M3", 8},      {"F8_E8M0", 8}, {"F8_E4M3FNUZ", 8},          {"F8_E5M2FNUZ", 8},
    {"I16", 16},        {"U16", 16},         {"F16", 16},    {"BF16", 16},   {"I32", 32}, {"U32", 32},
    {"F32", 32},        {"C64", 64},         {"F64", 64},    {"I64", 64},    {"U64", 64},
};

TEST(SafetensorsDType, EveryReferenceStringInReferenceOrder) {
  ASSERT_EQ(all_dtypes().size(), kReferenceDTypes.size());
  for (std::size_t i = 0; i < kReferenceDTypes.size(); ++i) {
    const DType dtype = all_dtypes()[i];
    EXPECT_EQ(dtype_name(dtype), kReferenceDTypes[i].first);
    EXPECT_EQ(dtype_bits(dtype), kReferenceDTypes[i].second) << kReferenceDTypes[i].first;
    EXPECT_EQ(parse_dtype(kReferenceDTypes[i].first, "ctx"), dtype);
    if (i > 0) {
      EXPECT_LT(all_dtypes()[i - 1], dtype) << "the writer's layout order depends on this";
    }
  }
  EXPECT_EQ(parse_dtype("F8_E4M3", "ctx"), DType::kF8_E4M3);
  EXPECT_EQ(parse_dtype("F8_E5M2", "ctx"), DType::kF8_E5M2);
  EXPECT_EQ(parse_dtype("F8_E8M0", "ctx"), DType::kF8_E8M0);
}

TEST(SafetensorsDType, OtherSpellingsAreRejectedWithTheValidList) {
  for (const char* text : {"f32", "F8_E4M3FN", "F8_E4M3FNX", "bf16", "F32 ", " F32", "", "FLOAT"}) {
    EXPECT_FALSE(find_dtype(text).has_value()) << text;
    const std::string message = test::error_message([&] { parse_dtype(text, "model.safetensors: tensor 'w'"); });
    EXPECT_NE(message.find("model.safetensors: tensor 'w': unknown dtype '" + std::string(text) + "'"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("BOOL, F4, F6_E2M3"), std::string::npos) << message;
    EXPECT_NE(message.find("F8_E4M3"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace fp8lm::io
