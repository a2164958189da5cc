// io/json_value.h: the value checks the checkpoint, tokenizer and request readers share.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "io/json_value.h"

namespace fp8lm::io {
namespace {

using nlohmann::json;

TEST(JsonValue, GivenMeansPresentAndNotNull) {
  const json obj = json::parse(R"({"a": 1, "b": null, "c": false, "d": 0, "e": ""})");
  EXPECT_EQ(json_given(obj, "a"), &obj["a"]);
  EXPECT_EQ(json_given(obj, "b"), nullptr);
  EXPECT_EQ(json_given(obj, "missing"), nullptr);
  // false, 0 and "" are given: only null means "not set".
  EXPECT_NE(json_given(obj, "c"), nullptr);
  EXPECT_NE(json_given(obj, "d"), nullptr);
  EXPECT_NE(json_given(obj, "e"), nullptr);
  EXPECT_EQ(json_given(json::array({1}), "a"), nullptr);
  EXPECT_EQ(json_given(json(3), "a"), nullptr);
}

TEST(JsonValue, HoldsIsTheJsonType) {
  EXPECT_TRUE(json_holds<int32_t>(json::parse("-3")));
  EXPECT_FALSE(json_holds<int32_t>(json::parse("3.0")));  // a float is not an integer field
  EXPECT_TRUE(json_holds<double>(json::parse("3")));
  EXPECT_FALSE(json_holds<bool>(json::parse("1")));
  EXPECT_FALSE(json_holds<std::string>(json::parse("null")));
  EXPECT_TRUE(json_holds<json>(json::parse("null")));
}

// Every boundary of every integral type, parsed from text as a reader meets it.
template <typename T>
void expect_boundaries() {
  using L = std::numeric_limits<T>;
  EXPECT_TRUE(json_fits<T>(json::parse(std::to_string(L::max()))));
  EXPECT_TRUE(json_fits<T>(json::parse(std::to_string(L::min()))));
  if constexpr (uint64_t(L::max()) < std::numeric_limits<uint64_t>::max()) {
    EXPECT_FALSE(json_fits<T>(json::parse(std::to_string(uint64_t(L::max()) + 1))));
  }
  if constexpr (L::is_signed && int64_t(L::min()) > std::numeric_limits<int64_t>::min()) {
    EXPECT_FALSE(json_fits<T>(json::parse(std::to_string(int64_t(L::min()) - 1))));
  }
  if constexpr (!L::is_signed) {
    EXPECT_FALSE(json_fits<T>(json::parse("-1")));
  }
}

TEST(JsonValue, FitsAtEveryIntegerBoundary) {
  expect_boundaries<int8_t>();
  expect_boundaries<uint8_t>();
  expect_boundaries<int32_t>();
  expect_boundaries<uint32_t>();
  expect_boundaries<int64_t>();
  expect_boundaries<uint64_t>();
  EXPECT_FALSE(json_fits<int64_t>(json::parse("18446744073709551615")));
}

TEST(JsonValue, CountsAreNonNegativeIntegersUpToTheBound) {
  EXPECT_TRUE(json_is_count(json::parse("0")));
  EXPECT_TRUE(json_is_count(json::parse("4294967280"), 0xFFFFFFF0LL));
  EXPECT_FALSE(json_is_count(json::parse("4294967281"), 0xFFFFFFF0LL));
  EXPECT_FALSE(json_is_count(json::parse("-1")));
  EXPECT_FALSE(json_is_count(json::parse("1.0")));
  EXPECT_FALSE(json_is_count(json::parse("18446744073709551615")));  // above int64 max
}

TEST(JsonValue, NamesReadAsEnglish) {
  EXPECT_STREQ(json_expected_name<uint32_t>(), "an integer");
  EXPECT_STREQ(json_expected_name<float>(), "a number");
  EXPECT_EQ(json_kind_name(json::parse("1")), "an integer");
  EXPECT_EQ(json_kind_name(json::parse("1.5")), "a number");
  EXPECT_EQ(json_kind_name(json::parse("[]")), "an array");
  EXPECT_EQ(json_kind_name(json::parse("null")), "null");
}

}  // namespace
}  // namespace fp8lm::io
