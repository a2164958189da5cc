// The element types of safetensors files, spelled exactly as in the header
// (docs: ../shared/docs/fp8-checkpoint-formats.md §1.3).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace fp8lm::io {

// Declared in the reference implementation's order ("increasing alignment"):
// the writer lays tensors out by this order, descending, so the order is part
// of the file format and must not change.
enum class DType : uint8_t {
  kBool,
  kF4,           // OCP MX FP4 (E2M1), two values per byte; shapes are logical (unpacked)
  kF6_E2M3,      // OCP MX FP6, sub-byte
  kF6_E3M2,      // OCP MX FP6, sub-byte
  kU8,
  kI8,
  kF8_E5M2,
  kF8_E4M3,      // E4M3FN: no infinities, NaN = S.1111.111
  kF8_E8M0,      // UE8M0 scale format: 2^(byte - 127)
  kF8_E4M3FNUZ,  // AMD variant: bias 8, single NaN 0x80, no -0
  kF8_E5M2FNUZ,  // AMD variant: bias 16, single NaN 0x80, no -0
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kC64,
  kF64,
  kI64,
  kU64,
};

// Every dtype, in declaration order.
std::span<const DType> all_dtypes();

// The exact header string: "F8_E4M3", "BF16", ...
std::string_view dtype_name(DType dtype);

// Bits per element: 4 (F4), 6 (F6_*), 8, 16, 32 or 64.
unsigned dtype_bits(DType dtype);

// The dtype spelled exactly `text` (case-sensitive), or nullopt.
std::optional<DType> find_dtype(std::string_view text);

// As find_dtype, but throws fp8lm::Error
//   "<context>: unknown dtype 'f32' (valid: BOOL, F4, ...)".
DType parse_dtype(std::string_view text, const std::string& context);

}  // namespace fp8lm::io
