// `fp8lm quantize --model IN --out OUT --scheme FP8_DYNAMIC|FP8|FP8_BLOCK`:
// post-training quantization of a BF16 checkpoint into the compressed-tensors
// format that vLLM, SGLang, transformers and fp8lm all load. FP8 (static
// activation scales) and --kv-cache-dtype fp8 calibrate on --calib FILE first,
// running the BF16 model on the CPU. Progress goes to stderr.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include "backend/factory/make_ops.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "cli/run_flags.h"
#include "common/error.h"
#include "io/load_overrides.h"
#include "loader/host_weights.h"
#include "quantize/compressed_tensors_writer.h"

namespace fp8lm::cli {
namespace {

struct QuantizeFlags {
  std::string model, out, scheme = "FP8_DYNAMIC", kv_cache_dtype, calib;
  int64_t calib_samples = 128;
  int64_t calib_seq_len = 512;
  std::vector<std::string> ignore;
};

std::string read_calibration_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("--calib: cannot read '" + path + "'");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    throw Error("--calib: '" + path + "' is empty: calibration needs text");
  return text;
}

// Everything about --out that would otherwise fail only after the whole
// quantization, when the result is moved into place: the path must not exist
// in any form (a dangling symbolic link included), its parent must be a
// writable directory, and it must not lie inside the input model.
// Returns the output directory's path ("dir/" as "dir").
std::filesystem::path check_output_path(const std::string& out_flag, const std::string& model) {
  namespace fs = std::filesystem;
  fs::path out(out_flag);
  if (!out.has_filename()) out = out.parent_path();  // "dir/" names dir
  if (out.empty() || out.filename() == "." || out.filename() == "..")
    throw Error("--out: '" + out_flag + "' does not name a new directory");
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(out, ec);
  if (fs::is_symlink(st)) {
    const fs::path target = fs::read_symlink(out, ec);
    throw Error("--out: '" + out_flag + "' is a symbolic link (to '" + target.string() + "'" +
                (fs::exists(out, ec) ? "" : ", which does not exist") +
                "); fp8lm quantize creates a new directory and never writes through or over a link");
  }
  if (fs::exists(st))
    throw Error("--out: '" + out_flag + "' already exists (fp8lm quantize never overwrites)");
  const fs::path parent = out.has_parent_path() ? out.parent_path() : fs::path(".");
  if (!fs::is_directory(parent, ec))
    throw Error("--out: the parent of '" + out_flag + "', '" + parent.string() + "', is not an existing directory");
  if (::access(parent.c_str(), W_OK | X_OK) != 0)
    throw Error("--out: cannot create '" + out_flag + "': directory '" + parent.string() + "' is not writable");
  const fs::path in = fs::weakly_canonical(model, ec);
  const fs::path dest = fs::weakly_canonical(out, ec);
  const auto [in_end, dest_it] = std::mismatch(in.begin(), in.end(), dest.begin(), dest.end());
  if (!in.empty() && in_end == in.end())
    throw Error("--out: '" + out_flag + "' is inside the input model directory '" + model + "'");
  return out;
}

void run(const QuantizeFlags& f, const RunFlags& rf) {
  quantize::QuantizeOptions o;
  o.preset = quantize::parse_preset(f.scheme);
  o.ignore = f.ignore;
  if (!f.kv_cache_dtype.empty()) {
    const KvCacheDType kv = io::parse_kv_cache_dtype(f.kv_cache_dtype);
    if (kv != KvCacheDType::kFP8E4M3 && kv != KvCacheDType::kAuto && kv != KvCacheDType::kBF16)
      throw Error("--kv-cache-dtype: quantize writes E4M3 KV-cache scales (fp8); '" + f.kv_cache_dtype +
                  "' has no checkpoint form");
    o.kv_cache_fp8 = kv == KvCacheDType::kFP8E4M3;
  }
  if (f.calib_samples <= 0) throw Error("--calib-samples: must be positive, got " + std::to_string(f.calib_samples));
  if (f.calib_seq_len < 2) throw Error("--calib-seq-len: must be at least 2, got " + std::to_string(f.calib_seq_len));
  const bool calibrate = quantize::needs_calibration(o.preset) || o.kv_cache_fp8;
  if (calibrate && f.calib.empty())
    throw Error(std::string(o.kv_cache_fp8 ? "--kv-cache-dtype fp8" : "--scheme FP8") +
                " calibrates static scales: give a text file with --calib FILE");
  const std::filesystem::path out = check_output_path(f.out, f.model);
  const std::string calib_text = calibrate ? read_calibration_file(f.calib) : std::string();

  const io::ModelSpec spec = io::read_model_spec(f.model);
  quantize::check_supported(spec, o);  // before calibrating, which may take a while
  std::optional<calibration::CalibrationStats> stats;
  if (calibrate) {
    const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(f.model);
    const int64_t len = std::min<int64_t>(f.calib_seq_len, spec.config.max_position_embeddings);
    const auto samples = calibration::calibration_samples(tok, calib_text, f.calib_samples, len);
    // Calibration runs on the CPU: the reference numerics, on any machine.
    const std::unique_ptr<backend::Ops> ops =
        backend::make_ops({.device = backend::Device::kCpu, .threads = rf.options().threads});
    ProgressBar loading("loading weights", "layers");
    const loader::HostModelWeights w = loader::load_host_weights(spec, [&](int i, int n) { loading.update(i, n); });
    model::LlamaModel m(spec.config, w, *ops);
    // Static input scales of MoE experts: every expert over every token (w outlives m here).
    if (quantize::needs_calibration(o.preset) && spec.config.is_moe()) m.observe_all_experts(w);
    ProgressBar bar("calibrating", "samples");
    stats = calibration::calibrate(m, *ops, samples,
                                   [&](size_t done, size_t total) { bar.update(int64_t(done), int64_t(total)); });
    std::fprintf(stderr, "fp8lm: calibrated on %lld samples, %lld tokens of %s\n",
                 static_cast<long long>(stats->samples), static_cast<long long>(stats->tokens), f.calib.c_str());
  }
  ProgressBar bar("writing", "tensors");
  const quantize::QuantizeSummary s = quantize::write_compressed_tensors(
      spec, out, o, stats ? &*stats : nullptr,
      [&](const std::string&, size_t done, size_t total) { bar.update(int64_t(done), int64_t(total)); });
  std::string kept;
  for (const std::string& k : s.kept) kept += (kept.empty() ? "" : ", ") + k;
  std::printf("wrote %s: %s, %zu linear layers in FP8 E4M3, kept in %s: %s%s; %.1f MiB of tensors\n", f.out.c_str(),
              std::string(quantize::name(o.preset)).c_str(), s.quantized.size(), std::string(name(spec.config.dtype)).c_str(),
              kept.empty() ? "none" : kept.c_str(), o.kv_cache_fp8 ? "; FP8 KV-cache scales" : "",
              double(s.tensor_bytes) / (1 << 20));
  if (!s.dropped.empty())
    std::printf("not written: %zu tensors of the multi-token-prediction layers (%s ...), which transformers and so "
                "LLM Compressor do not load\n",
                s.dropped.size(), s.dropped.front().c_str());
}

}  // namespace

void add_quantize_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "quantize", "Quantize a BF16 checkpoint to FP8 in the compressed-tensors format (LLM Compressor's presets)");
  auto f = std::make_shared<QuantizeFlags>();
  cmd->add_option("model,--model", f->model, "Input model directory (BF16 or float32)")->required();
  cmd->add_option("--out", f->out, "Output directory (must not exist)")->required();
  cmd->add_option("--scheme", f->scheme,
                  "FP8_DYNAMIC (per-channel weights, dynamic per-token activations; default), FP8 (per-tensor "
                  "weights, static activation scales: needs --calib), FP8_BLOCK (128x128 weight blocks, dynamic 1x128 "
                  "activation groups)");
  cmd->add_option("--kv-cache-dtype", f->kv_cache_dtype, "fp8: also write calibrated KV-cache scales (needs --calib)");
  cmd->add_option("--calib", f->calib, "Calibration text file (UTF-8)");
  cmd->add_option("--calib-samples", f->calib_samples, "Calibration sequences (default 128)");
  cmd->add_option("--calib-seq-len", f->calib_seq_len, "Tokens per calibration sequence (default 512)");
  cmd->add_option("--ignore", f->ignore, "Linear module kept in BF16: exact name or re:<regex> (repeatable); lm_head and MoE routers always, "
                  "an MoE layer's experts all or none");
  // Of the run flags only the threads: calibration runs on one CPU rank (the reference numerics),
  // so a device, a KV-cache size or ranks would be accepted and ignored.
  auto rf = std::make_shared<RunFlags>();
  add_threads_flag(cmd, *rf, " for calibration");
  cmd->callback([f, rf] { run(*f, *rf); });
}

}  // namespace fp8lm::cli
