// libFuzzer target for the tokenizer. Any input must either work or throw
// fp8lm::Error; any other exception, a crash, a leak or a hang is a bug.
//
// The first byte picks what the rest is:
//   even: a tokenizer.json text; whatever loads then encodes and decodes a
//         few fixed strings (all of its components run);
//   odd:  text for the shipped model's tokenizer (models/fp8lm-gutenberg-22m,
//         or $FP8LM_FUZZ_TOKENIZER): it is byte-level BPE without a
//         normalizer, so decode(encode(x)) must equal x, and streaming the ids
//         must give the same text as decoding them at once.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "io/json_file.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

using fp8lm::tokenizer::Tokenizer;

const Tokenizer* shipped() {
  static const std::unique_ptr<Tokenizer> tok = [] {
    const char* dir = std::getenv("FP8LM_FUZZ_TOKENIZER");
    return std::make_unique<Tokenizer>(Tokenizer::load(dir != nullptr ? dir : "models/fp8lm-gutenberg-22m"));
  }();
  return tok.get();
}

void fuzz_json(std::string_view text) {
  try {
    const Tokenizer tok = Tokenizer::from_json(fp8lm::io::parse_json(text, "fuzz.json"), "fuzz.json");
    for (const char* s : {"", "Hello world", "  a\tb\n\n 123 \xE2\x82\xAC \xF0\x9F\x98\x80 <s> </s>"}) {
      const auto ids = tok.encode(s, true);
      (void)tok.decode(ids, false);
      auto stream = tok.incremental_decoder(true);
      for (const auto id : ids) (void)stream.push(id);
      (void)stream.finish();
    }
    (void)tok.decode(std::vector<std::uint32_t>{0, 1, 2, 3, 1000000}, true);
  } catch (const fp8lm::Error&) {
  }
}

void fuzz_text(std::string_view text) {
  const Tokenizer& tok = *shipped();
  if (!fp8lm::tokenizer::utf8::is_valid(text)) {
    try {
      (void)tok.encode(text);
      std::abort();  // invalid UTF-8 must be refused
    } catch (const fp8lm::Error&) {
    }
    return;
  }
  const auto ids = tok.encode(text, false);
  if (tok.decode(ids) != text) std::abort();
  auto stream = tok.incremental_decoder(false);
  std::string streamed;
  for (const auto id : ids) streamed += stream.push(id);
  streamed += stream.finish();
  if (streamed != text) std::abort();
  // The text's bytes read as ids: unknown ones are skipped, never a crash.
  std::vector<std::uint32_t> raw;
  for (std::size_t i = 0; i + 1 < text.size(); i += 2)
    raw.push_back(static_cast<std::uint32_t>(static_cast<unsigned char>(text[i])) << 8 |
                  static_cast<unsigned char>(text[i + 1]));
  if (!fp8lm::tokenizer::utf8::is_valid(tok.decode(raw, true))) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) fuzz_json(rest);
  else fuzz_text(rest);
  return 0;
}
