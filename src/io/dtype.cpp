#include "io/dtype.h"

#include <array>

#include "common/error.h"

namespace fp8lm::io {
namespace {

struct DTypeFacts {
  DType dtype;
  std::string_view name;
  unsigned bits;
};

// Indexed by the enum's value; a static_assert below keeps the two in step.
constexpr std::array<DTypeFacts, 22> kFacts = {{
    {DType::kBool, "BOOL", 8},
    {DType::kF4, "F4", 4},
    {DType::kF6_E2M3, "F6_E2M3", 6},
    {DType::kF6_E3M2, "F6_E3M2", 6},
    {DType::kU8, "U8", 8},
    {DType::kI8, "I8", 8},
    {DType::kF8_E5M2, "F8_E5M2", 8},
    {DType::kF8_E4M3, "F8_E4M3", 8},
    {DType::kF8_E8M0, "F8_E8M0", 8},
    {DType::kF8_E4M3FNUZ, "F8_E4M3FNUZ", 8},
    {DType::kF8_E5M2FNUZ, "F8_E5M2FNUZ", 8},
    {DType::kI16, "I16", 16},
    {DType::kU16, "U16", 16},
    {DType::kF16, "F16", 16},
    {DType::kBF16, "BF16", 16},
    {DType::kI32, "I32", 32},
    {DType::kU32, "U32", 32},
    {DType::kF32, "F32", 32},
    {DType::kC64, "C64", 64},
    {DType::kF64, "F64", 64},
    {DType::kI64, "I64", 64},
    {DType::kU64, "U64", 64},
}};

constexpr bool facts_follow_enum_order() {
  for (std::size_t i = 0; i < kFacts.size(); ++i)
    if (static_cast<std::size_t>(kFacts[i].dtype) != i) return false;
  return static_cast<std::size_t>(DType::kU64) + 1 == kFacts.size();
}
static_assert(facts_follow_enum_order(), "kFacts must list every DType in declaration order");

constexpr std::array<DType, kFacts.size()> all_in_order() {
  std::array<DType, kFacts.size()> out{};
  for (std::size_t i = 0; i < kFacts.size(); ++i) out[i] = kFacts[i].dtype;
  return out;
}
constexpr std::array<DType, kFacts.size()> kAll = all_in_order();

const DTypeFacts& facts(DType dtype) { return kFacts.at(static_cast<std::size_t>(dtype)); }

}  // namespace

std::span<const DType> all_dtypes() { return kAll; }

std::string_view dtype_name(DType dtype) { return facts(dtype).name; }

unsigned dtype_bits(DType dtype) { return facts(dtype).bits; }

std::optional<DType> find_dtype(std::string_view text) {
  for (const DTypeFacts& f : kFacts)
    if (f.name == text) return f.dtype;
  return std::nullopt;
}

DType parse_dtype(std::string_view text, const std::string& context) {
  if (const auto dtype = find_dtype(text)) return *dtype;
  std::string valid;
  for (const DTypeFacts& f : kFacts) {
    if (!valid.empty()) valid += ", ";
    valid += f.name;
  }
  throw Error(context + ": unknown dtype '" + std::string(text) + "' (valid: " + valid + ")");
}

}  // namespace fp8lm::io
