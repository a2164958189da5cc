// Perplexity of a model on a text file, and how far a model's next-token
// distributions are from a base model's (KL divergence), as `fp8lm eval
// perplexity` reports them.
//
// The protocol (default `all`): the whole file tokenized as the tokenizer does
// by default (its special tokens added), cut into consecutive windows of `ctx`
// tokens from the start (a remainder shorter than ctx dropped); each window
// runs alone from position 0, the logits at position i predicting token i + 1;
// every token of a window but its first is scored. `second-half` is llama.cpp's
// `perplexity` scoring: only targets ctx/2 + 1 .. ctx − 1 of each window (without
// llama.cpp's replacing each window's first token by BOS). NLL of a token =
// −log softmax(logits)[token], from the float32 logits in double;
// PPL = exp(mean NLL over every scored token).
//
// With a base model, both run on the same windows and, per scored token,
// KL(P_base ‖ P_model) (natural log, double) is taken over the whole vocabulary:
// its mean, median, 99th percentile and maximum, the share of tokens where both
// models' argmax agree, and both perplexities.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/runtime.h"
#include "spec/model_config.h"
#include "tokenizer/tokenizer.h"

namespace fp8lm::eval {

enum class Protocol { kAll, kSecondHalf };

// "all" or "second-half"; anything else → fp8lm::Error listing both.
Protocol parse_protocol(std::string_view name);
std::string_view name(Protocol p);

// The first scored position of a window (the target index, ≥ 1): 1 for `all`,
// ctx/2 + 1 for `second-half`. Scored targets are [first_target, ctx).
int64_t first_target(int64_t ctx, Protocol p);

// The default window: the model's context (max_position_embeddings), at most 2048.
int64_t default_ctx(const ModelConfig& config);

// The windows `num_tokens` tokens give: num_tokens / ctx, at most `limit`
// (0 = no limit). Throws fp8lm::Error when ctx < 2, ctx > `context`, a window
// of ctx would score nothing under `p`, or the tokens do not fill one window
// (naming the token count).
int64_t count_windows(int64_t num_tokens, int64_t ctx, int64_t context, Protocol p, int64_t limit = 0);

// KV-cache capacity (tokens) for `batch` windows of `ctx` at once in blocks of `block_size`.
int64_t kv_tokens_for(int64_t ctx, int batch, int block_size);

// Reads `path` (UTF-8 text) and tokenizes it whole as the tokenizer does by
// default (special tokens added). Errors — missing, unreadable or empty file,
// invalid UTF-8 — name the file.
std::vector<int32_t> tokenize_file(const tokenizer::Tokenizer& tok, const std::filesystem::path& path);

// ---- per-token math (float32 logits, double arithmetic) --------------------
// log Σ exp(logits), stabilised by the maximum.
double log_sum_exp(std::span<const float> logits);
// −log softmax(logits)[target].
double token_nll(std::span<const float> logits, int32_t target);
// KL(P ‖ Q) with P = softmax(base), Q = softmax(model); ≥ 0 (0 exactly for equal logits).
double kl_divergence(std::span<const float> base, std::span<const float> model);
// Index of the largest logit (the first of equals).
int64_t argmax(std::span<const float> logits);
// The q-quantile (q ∈ [0, 1]) of `values` with linear interpolation between
// order statistics (numpy's default); `values` is reordered. Empty → NaN.
double quantile(std::vector<double>& values, double q);

struct PerplexityOptions {
  int64_t ctx = 0;  // 0 = default_ctx(model)
  Protocol protocol = Protocol::kAll;
  int batch = 1;                // windows per forward call
  int64_t limit_windows = 0;    // 0 = every window
  int threads = 1;              // for the log-softmax / KL of the logits
};

struct Progress {
  int64_t windows_done = 0, windows = 0, tokens_scored = 0;
  double ppl = 0, base_ppl = 0;  // running; base_ppl 0 without a base
  double seconds = 0;
};

struct KldResult {
  double base_nll_mean = 0, base_ppl = 0;
  double delta_ppl = 0, delta_ppl_percent = 0;  // model − base, and relative to base in %
  double mean = 0, median = 0, p99 = 0, max = 0;
  double top1_agreement = 0;  // share of scored tokens whose argmax both models share
};

struct PerplexityResult {
  int64_t ctx = 0, windows = 0, tokens_scored = 0, file_tokens = 0;
  Protocol protocol = Protocol::kAll;
  double nll_mean = 0, ppl = 0;
  double seconds = 0;
  std::optional<KldResult> kld;  // with a base model
};

// Scores `tokens` with `model` (and `base`, when not null, on the same windows).
// The runtimes' KV caches must hold kv_tokens_for(ctx, batch, block size)
// tokens; blocks are taken per batch and returned after it. The models must
// share a vocabulary size (fp8lm::Error otherwise). `progress` is called after
// every batch.
PerplexityResult perplexity(engine::Runtime& model, std::span<const int32_t> tokens, const PerplexityOptions& options,
                            engine::Runtime* base = nullptr,
                            const std::function<void(const Progress&)>& progress = {});

}  // namespace fp8lm::eval
