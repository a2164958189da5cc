// FP8 casts against PyTorch's own bytes: all 65,536 bfloat16 patterns and
// ~270k float32 values (ties, subnormals, overflow, NaN, random patterns),
// both formats, saturating and plain-cast semantics, on every kernel table.
#include <gtest/gtest.h>

#include <cmath>

#include "fixtures.h"
#include "numerics/cast.h"

namespace fp8lm {
namespace {

using test::read_array;

constexpr const char* kDir = "numerics";

TEST(CastsVsTorch, EveryByteMatches) {
  const nlohmann::json manifest = test::read_manifest(kDir);
  ASSERT_EQ(manifest["casts"].size(), 8u);
  for (const auto& c : manifest["casts"]) {
    const Fp8Format format = test::parse_format(c["format"]);
    const Saturation sat = test::parse_saturation(c["saturation"]);
    const auto expected = read_array<uint8_t>(kDir, c["expected"]);
    const auto count = c["count"].get<size_t>();
    ASSERT_EQ(expected.size(), count);
    for (KernelChoice k : test::usable_kernel_choices()) {
      std::vector<uint8_t> got(count);
      if (c["input_dtype"] == "bf16") {
        const auto in = read_array<uint16_t>(kDir, c["input"]);
        cast_to_fp8(in, got, format, sat, k);
      } else {
        const auto in = read_array<float>(kDir, c["input"]);
        cast_to_fp8(in, got, format, sat, k);
      }
      size_t mismatches = 0;
      for (size_t i = 0; i < count; ++i) {
        if (got[i] != expected[i] && ++mismatches <= 5) {
          ADD_FAILURE() << c["expected"] << " [" << test::kernel_name(k) << "] element " << i
                        << ": got 0x" << std::hex << int(got[i]) << ", torch 0x" << int(expected[i]);
        }
      }
      EXPECT_EQ(mismatches, 0u) << c["expected"] << " with kernels " << test::kernel_name(k);
    }
  }
}

TEST(CastsVsTorch, DecodeEveryCode) {
  const nlohmann::json manifest = test::read_manifest(kDir);
  for (const auto& d : manifest["decodes"]) {
    const Fp8Format format = test::parse_format(d["format"]);
    const auto expected = read_array<float>(kDir, d["expected"]);
    ASSERT_EQ(expected.size(), 256u);
    std::vector<uint8_t> codes(256);
    for (int i = 0; i < 256; ++i) codes[size_t(i)] = uint8_t(i);
    for (KernelChoice k : test::usable_kernel_choices()) {
      std::vector<float> got(256);
      cast_from_fp8(codes, got, format, k);
      for (size_t i = 0; i < 256; ++i) {
        if (std::isnan(expected[i])) {
          // NaN payloads are not part of the contract; NaN-ness and sign are.
          EXPECT_TRUE(std::isnan(got[i])) << d["format"] << " code " << i;
          EXPECT_EQ(std::signbit(got[i]), std::signbit(expected[i])) << d["format"] << " code " << i;
        } else {
          EXPECT_EQ(test::bits(got[i]), test::bits(expected[i]))
              << d["format"] << " code " << i << " [" << test::kernel_name(k) << "]";
        }
      }
    }
  }
}

}  // namespace
}  // namespace fp8lm
