// token string <-> id, with lookups by string_view (no temporary strings).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

namespace fp8lm::tokenizer {

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

using TokenMap = std::unordered_map<std::string, std::uint32_t, StringHash, std::equal_to<>>;

// Ids above this are refused: they would only size tables for no real model.
inline constexpr std::uint32_t kMaxTokenId = (1u << 24) - 1;

}  // namespace fp8lm::tokenizer
