#include "io/safetensors_header.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <string_view>
#include <tuple>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace fp8lm::io {
namespace {

using nlohmann::json;

// The reference parser (serde_json) gives up at this nesting depth; a header
// nested deeper is rejected so that both readers agree.
constexpr std::size_t kMaxJsonDepth = 128;

// Position of the first byte that is not part of well-formed UTF-8 (no
// overlong forms, no surrogates, nothing above U+10FFFF), or nullopt. The
// reference checks the whole header before parsing it.
std::optional<std::size_t> first_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) { ++i; continue; }
    std::size_t length = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) length = 2;
    else if (c == 0xE0) { length = 3; lo = 0xA0; }
    else if (c == 0xED) { length = 3; hi = 0x9F; }  // excludes surrogates
    else if (c >= 0xE1 && c <= 0xEF) length = 3;
    else if (c == 0xF0) { length = 4; lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3) length = 4;
    else if (c == 0xF4) { length = 4; hi = 0x8F; }
    else return i;
    if (i + length > n || s[i + 1] < lo || s[i + 1] > hi) return i;
    for (std::size_t k = 2; k < length; ++k)
      if (s[i + k] < 0x80 || s[i + k] > 0xBF) return i;
    i += length;
  }
  return std::nullopt;
}

// A short rendering of a JSON value for error messages.
std::string describe(const json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return std::string(value.type_name()) + " " + text;
}

// Builds the header's JSON tree through nlohmann's SAX interface so that the
// points where nlohmann and the reference parser (serde_json) differ follow
// the reference:
//   * a repeated `__metadata__`, or a repeated `dtype` / `shape` /
//     `data_offsets` inside one tensor entry, is an error (nlohmann would keep
//     the last silently); any other repeated key keeps the last value, as
//     serde's maps do;
//   * nesting deeper than kMaxJsonDepth is an error;
//   * `-0` is a float, as in serde_json, so it is not a valid size or offset.
class HeaderTreeBuilder {
 public:
  explicit HeaderTreeBuilder(const std::string& origin) : origin_(origin) {}

  json take_root() { return std::move(root_); }

  bool null() { return add(json(nullptr)); }
  bool boolean(bool value) { return add(json(value)); }
  bool number_integer(json::number_integer_t value) {
    // nlohmann reports only literals written with '-' here.
    return value == 0 ? add(json(-0.0)) : add(json(value));
  }
  bool number_unsigned(json::number_unsigned_t value) { return add(json(value)); }
  bool number_float(json::number_float_t value, const json::string_t&) { return add(json(value)); }
  bool string(json::string_t& value) { return add(json(std::move(value))); }
  bool binary(json::binary_t&) { return fail("holds a binary value, which JSON has not"); }

  bool start_object(std::size_t) { return open(json::object()); }
  bool start_array(std::size_t) { return open(json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(json::string_t& name) {
    json& object = *open_containers_.back();
    if (object.contains(name) && is_struct_field(name))
      return fail("has a duplicate field '" + name + "'" + where());
    if (open_containers_.size() == 1) current_top_key_ = name;
    pending_key_ = std::move(name);
    return true;
  }

  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) {
    return fail("is not valid JSON (at byte " + std::to_string(position) + " of the header): " + e.what());
  }

 private:
  // Keys that the reference reads as fields of a struct, where a repeat is an error.
  bool is_struct_field(const std::string& name) const {
    if (open_containers_.size() == 1) return name == "__metadata__";
    if (open_containers_.size() == 2 && current_top_key_ != "__metadata__")
      return name == "dtype" || name == "shape" || name == "data_offsets";
    return false;
  }

  std::string where() const {
    return open_containers_.size() >= 2 ? " in tensor '" + current_top_key_ + "'" : "";
  }

  // Places a value in the open container; returns where it now lives. The
  // pointers stay valid: a container on the stack is never resized while one
  // of its children is open.
  json* place(json value) {
    if (open_containers_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    json& parent = *open_containers_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(value));
      return &parent.back();
    }
    json& slot = parent[pending_key_];
    slot = std::move(value);
    return &slot;
  }

  bool add(json value) {
    place(std::move(value));
    return true;
  }

  bool open(json empty_container) {
    if (open_containers_.size() + 1 >= kMaxJsonDepth)
      return fail("is nested deeper than " + std::to_string(kMaxJsonDepth - 1) + " levels" + where());
    open_containers_.push_back(place(std::move(empty_container)));
    return true;
  }

  bool close() {
    open_containers_.pop_back();
    return true;
  }

  [[noreturn]] bool fail(const std::string& what) const { throw Error(origin_ + ": header " + what); }

  const std::string& origin_;
  json root_;
  std::vector<json*> open_containers_;
  std::string pending_key_;
  std::string current_top_key_;
};

uint64_t read_u64_le(std::span<const std::byte> bytes) {
  uint64_t value = 0;
  for (std::size_t i = 0; i < 8; ++i) value |= uint64_t(std::to_integer<uint8_t>(bytes[i])) << (8 * i);
  return value;
}

// ---- turning the JSON tree into TensorInfo, with the reference's type rules

class EntryReader {
 public:
  EntryReader(const std::string& origin, const std::string& tensor)
      : context_(origin + ": tensor '" + tensor + "'") {}

  DType dtype(const json& value) const {
    if (value.is_string()) return parse_dtype(value.get_ref<const std::string&>(), context_);
    // serde also accepts an enum written as {"F32": null}.
    if (value.is_object() && value.size() == 1 && value.begin().value().is_null())
      return parse_dtype(value.begin().key(), context_);
    throw Error(context_ + ": 'dtype' must be a string, got " + describe(value));
  }

  std::vector<uint64_t> shape(const json& value) const {
    if (!value.is_array()) throw Error(context_ + ": 'shape' must be an array, got " + describe(value));
    std::vector<uint64_t> out;
    out.reserve(value.size());
    for (const json& dim : value) out.push_back(size_value(dim, "shape"));
    return out;
  }

  std::pair<uint64_t, uint64_t> offsets(const json& value) const {
    if (!value.is_array() || value.size() != 2)
      throw Error(context_ + ": 'data_offsets' must be an array of two integers, got " + describe(value));
    return {size_value(value[0], "data_offsets"), size_value(value[1], "data_offsets")};
  }

  const std::string& context() const { return context_; }

 private:
  uint64_t size_value(const json& value, const char* field) const {
    if (!value.is_number_unsigned())
      throw Error(context_ + ": '" + field + "' must hold non-negative integers, got " + describe(value));
    return value.get<uint64_t>();
  }

  std::string context_;
};

TensorInfo read_tensor_entry(const std::string& origin, const std::string& name, const json& entry) {
  const EntryReader reader(origin, name);
  TensorInfo info;
  info.name = name;
  std::pair<uint64_t, uint64_t> range;
  if (entry.is_object()) {
    for (const char* field : {"dtype", "shape", "data_offsets"})
      if (!entry.contains(field)) throw Error(reader.context() + ": missing field '" + field + "'");
    info.dtype = reader.dtype(entry["dtype"]);
    info.shape = reader.shape(entry["shape"]);
    range = reader.offsets(entry["data_offsets"]);
  } else if (entry.is_array() && entry.size() == 3) {
    // serde also reads a struct from a sequence of its fields, in order.
    info.dtype = reader.dtype(entry[0]);
    info.shape = reader.shape(entry[1]);
    range = reader.offsets(entry[2]);
  } else {
    throw Error(reader.context() + ": entry must be an object with dtype, shape and data_offsets, got " +
                describe(entry));
  }
  std::tie(info.begin, info.end) = range;
  return info;
}

std::map<std::string, std::string> read_metadata(const std::string& origin, const json& value) {
  if (!value.is_object())
    throw Error(origin + ": '__metadata__' must be an object of strings, got " + describe(value));
  std::map<std::string, std::string> out;
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string())
      throw Error(origin + ": '__metadata__' value of '" + key + "' must be a string, got " + describe(item));
    out.emplace(key, item.get<std::string>());
  }
  return out;
}

// The reference's invariant: sorted by data_offsets, the tensors tile the data
// buffer [0, size) exactly, and each one's length is its shape times its dtype.
void validate_layout(const std::string& origin, std::vector<TensorInfo>& tensors, uint64_t data_size) {
  // Sorted as the reference sorts (by offsets); the name only makes the
  // reported tensor deterministic when two share offsets.
  std::sort(tensors.begin(), tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t expected_begin = 0;
  for (const TensorInfo& t : tensors) {
    const std::string context = origin + ": tensor '" + t.name + "'";
    const std::string range = "[" + std::to_string(t.begin) + ", " + std::to_string(t.end) + "]";
    if (t.begin != expected_begin || t.end < t.begin)
      throw Error(context + ": invalid offset: data_offsets " + range + ", expected begin " +
                  std::to_string(expected_begin) +
                  " and end >= begin (sorted by offset, tensors must cover the data buffer "
                  "without gap or overlap)");
    uint64_t elements = 1;
    for (uint64_t dim : t.shape)
      if (__builtin_mul_overflow(elements, dim, &elements))
        throw Error(context + ": overflow computing the size of shape " + shape_text(t.shape));
    uint64_t bits = 0;
    if (__builtin_mul_overflow(elements, uint64_t(dtype_bits(t.dtype)), &bits))
      throw Error(context + ": overflow computing the size of shape " + shape_text(t.shape));
    if (bits % 8 != 0)
      throw Error(context + ": misaligned: shape " + shape_text(t.shape) + " of " +
                  std::string(dtype_name(t.dtype)) + " is " + std::to_string(bits) +
                  " bits, not a whole number of bytes");
    if (t.end - t.begin != bits / 8)
      throw Error(context + ": invalid shape, data type, or offset: shape " + shape_text(t.shape) + " of " +
                  std::string(dtype_name(t.dtype)) + " is " + std::to_string(bits / 8) +
                  " bytes, data_offsets " + range + " hold " + std::to_string(t.end - t.begin));
    expected_begin = t.end;
  }
  if (expected_begin != data_size)
    throw Error(origin + ": incomplete metadata, file not fully covered: the tensors cover " +
                std::to_string(expected_begin) + " bytes of a data buffer of " + std::to_string(data_size) +
                " bytes (the file is " + (expected_begin > data_size ? "truncated" : "longer than its tensors") +
                ")");
}

}  // namespace

std::string shape_text(const std::vector<uint64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}


uint64_t TensorInfo::element_count() const {
  uint64_t n = 1;
  for (uint64_t dim : shape) n *= dim;  // cannot overflow once the header is validated
  return n;
}

SafetensorsHeader parse_safetensors_header(std::span<const std::byte> file, const std::string& origin) {
  if (file.size() < 8)
    throw Error(origin + ": header too small: the file has " + std::to_string(file.size()) +
                " bytes, a safetensors file starts with an 8-byte header length");
  SafetensorsHeader header;
  header.header_size = read_u64_le(file.first(8));
  if (header.header_size > kMaxSafetensorsHeaderSize)
    throw Error(origin + ": header too large: the length field says " + std::to_string(header.header_size) +
                " bytes, the limit is " + std::to_string(kMaxSafetensorsHeaderSize));
  if (header.header_size > file.size() - 8)
    throw Error(origin + ": invalid header length: the header claims " + std::to_string(header.header_size) +
                " bytes but the file has only " + std::to_string(file.size() - 8) + " after the length field");

  const std::string_view text(reinterpret_cast<const char*>(file.data() + 8), header.header_size);
  if (const auto bad = first_invalid_utf8(text))
    throw Error(origin + ": header is not valid UTF-8 (byte " + std::to_string(*bad) + " of the header)");

  // Two inputs nlohmann accepts and the reference does not: a leading UTF-8
  // byte-order mark (nlohmann skips it) and a NUL byte (nlohmann stops there,
  // so "{}\0garbage" would pass). JSON allows a raw NUL nowhere.
  if (text.starts_with("\xEF\xBB\xBF"))
    throw Error(origin + ": header is not valid JSON (it starts with a UTF-8 byte-order mark)");
  if (const auto nul = text.find('\0'); nul != std::string_view::npos)
    throw Error(origin + ": header is not valid JSON (NUL byte at byte " + std::to_string(nul) + " of the header)");

  HeaderTreeBuilder builder(origin);
  json::sax_parse(text.begin(), text.end(), &builder);
  const json root = builder.take_root();
  if (!root.is_object()) throw Error(origin + ": header must be a JSON object, got " + describe(root));

  for (const auto& [key, value] : root.items()) {
    if (key == "__metadata__") {
      if (!value.is_null()) header.metadata = read_metadata(origin, value);
    } else {
      header.tensors.push_back(read_tensor_entry(origin, key, value));
    }
  }
  validate_layout(origin, header.tensors, file.size() - header.data_start());
  return header;
}

}  // namespace fp8lm::io
