#include "cli/bench_common.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <utility>

#include "io/atomic_file.h"
#include "backend/paged_kv_types.h"
#include "common/error.h"

namespace fp8lm::cli {

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

int online_cpus() { return std::max(1, int(sysconf(_SC_NPROCESSORS_ONLN))); }

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const size_t start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? std::string() : line.substr(start);
  }
  return "unknown";
}

// /proc/loadavg's first three fields ("0.52 0.58 0.59"): how busy the machine was.
std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  if (!(in >> a >> b >> c)) return "unknown";
  return a + " " + b + " " + c;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// The weights' scheme in words: "BF16" or "FP8 <scheme> (n of m linear layers)".
std::string weight_description(const engine::Runtime& rt) {
  size_t quantized = 0;
  std::string scheme;
  for (const io::LinearLayerSpec& l : rt.spec().linears)
    if (l.scheme.quantized && quantized++ == 0) scheme = l.scheme.describe();
  if (quantized == 0) return std::string(name(rt.config().dtype));
  // The tied lm_head counts as a linear layer, as in the load summary.
  const size_t linears = rt.spec().linears.size() + (rt.config().tie_word_embeddings ? 1 : 0);
  return "FP8 " + scheme + " (" + std::to_string(quantized) + " of " + std::to_string(linears) + " linear layers)";
}

// "4.29T", "4.29TB/s", "800G", "4.29e12": bytes per second.
double parse_bandwidth(const std::string& text, const char* flag) {
  auto bad = [&](const std::string& why) {
    return Error(std::string(flag) + ": '" + text + "' " + why + " (bytes per second: 4.29T, 4.29TB/s, 800G, 4.29e12)");
  };
  double v = 0.0;
  size_t used = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    throw bad("is not a number");
  }
  std::string unit = text.substr(used);
  if (unit.size() >= 2 && unit.compare(unit.size() - 2, 2, "/s") == 0) unit.resize(unit.size() - 2);
  if (!unit.empty() && unit.back() == 'B') unit.pop_back();
  static const std::pair<const char*, double> kUnits[] = {{"", 1.0}, {"k", 1e3}, {"K", 1e3}, {"M", 1e6},
                                                           {"G", 1e9}, {"T", 1e12}};
  double scale = 0.0;
  for (const auto& [name, factor] : kUnits)
    if (unit == name) scale = factor;
  if (scale == 0.0) throw bad("has an unknown unit '" + text.substr(used) + "'");
  v *= scale;
  if (!(v > 0) || !std::isfinite(v)) throw bad("is not above 0");
  return v;
}

nlohmann::json embedding_json(const EmbeddingTable& e) {
  return {{"bytes", e.bytes}, {"rows", e.rows}, {"tied", e.tied}};
}

uint64_t kv_cache_bytes_per_token(engine::Runtime& rt) {
  return backend::kv_bytes_per_token(rt.kv_cache().shape(), rt.kv_formats());
}

// B deterministic prompts of I ids drawn uniformly from the vocabulary, never a
// special token or an end-of-sequence id.
std::vector<std::vector<int32_t>> synthetic_prompts(const engine::Runtime& rt, int64_t batch, int64_t input_len) {
  // A model without a tokenizer (--load-format dummy) draws from the whole vocabulary.
  const bool tok = rt.has_tokenizer();
  const auto vocab = int64_t(std::min<uint64_t>(uint64_t(rt.config().vocab_size),
                                                tok ? uint64_t(rt.tokenizer().vocab_size(true)) : UINT64_MAX));
  std::vector<uint8_t> usable(static_cast<size_t>(vocab), 1);
  for (int64_t id = 0; tok && id < vocab; ++id)
    if (rt.tokenizer().is_special(uint32_t(id))) usable[size_t(id)] = 0;
  for (int32_t id : rt.eos_ids())
    if (id >= 0 && id < vocab) usable[size_t(id)] = 0;
  std::vector<int32_t> pool;
  for (int64_t id = 0; id < vocab; ++id)
    if (usable[size_t(id)]) pool.push_back(int32_t(id));
  if (pool.empty()) throw Error("bench: the vocabulary has no ordinary (non-special) token to build prompts from");
  std::mt19937_64 rng(0x66703862656e6368ULL);  // fixed: the same prompts every run
  std::uniform_int_distribution<size_t> pick(0, pool.size() - 1);
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(batch),
                                           std::vector<int32_t>(static_cast<size_t>(input_len)));
  for (auto& p : prompts)
    for (int32_t& t : p) t = pool[pick(rng)];
  return prompts;
}

void check_positive(const char* flag, int64_t v) {
  if (v <= 0) throw Error(std::string(flag) + ": " + std::to_string(v) + " must be at least 1");
}

void add_length_flags(CLI::App* cmd, int64_t& input_len, int64_t& output_len, const std::string& each) {
  cmd->add_option("--input-len", input_len, "Prompt tokens per " + each + " (default 128)");
  cmd->add_option("--output-len", output_len, "Tokens generated per " + each + ", EOS ignored (default 128)");
}

void check_lengths(int64_t input_len, int64_t output_len) {
  check_positive("--input-len", input_len);
  check_positive("--output-len", output_len);
}

void add_json_file_flag(CLI::App* cmd, std::string& file, const std::string& what) {
  cmd->add_option("--json", file, "Also write " + what + " and the configuration to this JSON file");
}

std::string model_dir_name(const std::string& model) {
  std::filesystem::path model_path = std::filesystem::path(model).lexically_normal();
  if (model_path.filename().empty()) model_path = model_path.parent_path();  // "models/m/" → "models/m"
  return model_path.filename().string();
}

RunDescription describe_run(const ModelFlags& mf, const RunFlags& rf, const engine::RuntimeOptions& options,
                            const engine::Runtime& rt) {
  RunDescription d;
  d.model_name = model_dir_name(mf.model);
  d.weights = weight_description(rt);
  const KvCacheDType kv = rt.spec().kv_cache().dtype == KvCacheDType::kAuto ? KvCacheDType::kBF16
                                                                             : rt.spec().kv_cache().dtype;
  d.kv_cache_dtype = std::string(name(kv));
  auto or_null = [](const std::string& v) { return v.empty() ? nlohmann::json(nullptr) : nlohmann::json(v); };
  d.shared = {{"model", d.model_name},
              {"model_path", mf.model},
              {"quantization", or_null(mf.quantization)},
              {"weights", d.weights},
              {"kv_cache_dtype_flag", or_null(mf.kv_cache_dtype)},
              {"kv_cache_dtype", d.kv_cache_dtype},
              {"backend", rt.backend_name()},
              {"device", options.device == backend::Device::kCuda ? "cuda" : "cpu"},
              {"cpu_kernels", rf.kernels},
              {"threads", options.threads},
              {"tensor_parallel_size", options.tensor_parallel_size}};
  return d;
}

void write_json_file(const std::string& path, const nlohmann::json& results) {
  const std::string text = results.dump(2) + "\n";
  io::AtomicFile file(path);
  file.write(std::as_bytes(std::span(text.data(), text.size())));
  file.finish();
  file.commit();
}

}  // namespace fp8lm::cli
