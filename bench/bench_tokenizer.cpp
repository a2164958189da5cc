// Encode throughput of fp8lm's tokenizer, MB/s of UTF-8 text in, single
// thread, on wikitext-2's test split (~1.3 MB) encoded one line (paragraph)
// at a time without special tokens. tools/bench_hf_tokenizer.py measures
// Hugging Face `tokenizers` the same way for comparison.
//
//   build/bench/bench_tokenizer        (run from the repository root, or set
//   FP8LM_BENCH_TEXT and FP8LM_BENCH_HF_DIR)
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace {

namespace fs = std::filesystem;
using fp8lm::tokenizer::Tokenizer;

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

// The documents: the non-empty lines of the text file.
const std::vector<std::string>& documents() {
  static const std::vector<std::string> docs = [] {
    std::ifstream in(env_or("FP8LM_BENCH_TEXT", "../shared/data/wikitext-2-raw/wiki.test.raw"));
    std::vector<std::string> out;
    std::string line;
    while (std::getline(in, line))
      if (!line.empty()) out.push_back(line + "\n");
    return out;
  }();
  return docs;
}

void bench_encode(benchmark::State& state, const std::string& where) {
  const fs::path dir = where.starts_with("hf:") ? fs::path(env_or("FP8LM_BENCH_HF_DIR", "../shared/data/hf")) / where.substr(3)
                                                : fs::path(where);
  if (!fs::exists(dir / "tokenizer.json") || documents().empty()) {
    state.SkipWithError("tokenizer.json or the text is missing");
    return;
  }
  const Tokenizer tok = Tokenizer::load(dir);
  std::size_t bytes = 0, tokens = 0;
  for (const auto& d : documents()) bytes += d.size();
  for (auto _ : state) {
    tokens = 0;
    for (const auto& d : documents()) {
      auto ids = tok.encode(d, false);
      tokens += ids.size();
      benchmark::DoNotOptimize(ids.data());
    }
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
  state.counters["tokens"] = static_cast<double>(tokens);
}

}  // namespace

BENCHMARK_CAPTURE(bench_encode, gpt2, std::string("hf:openai-community__gpt2"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bench_encode, qwen3, std::string("hf:Qwen__Qwen3-4B"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bench_encode, tinyllama, std::string("hf:TinyLlama__TinyLlama_v1.1"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(bench_encode, gutenberg, std::string("models/fp8lm-gutenberg-22m"))->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
