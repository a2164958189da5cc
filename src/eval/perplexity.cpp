#include "eval/perplexity.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>

#include "common/error.h"
#include "common/thread_pool.h"

namespace fp8lm::eval {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// The KV blocks of one batch of windows, returned however the batch ends.
class BatchBlocks {
 public:
  BatchBlocks(engine::BlockAllocator& alloc, int64_t sequences, int64_t blocks_each) : alloc_(alloc) {
    std::optional<std::vector<int64_t>> got = alloc_.allocate(sequences * blocks_each);
    if (!got)
      throw Error("the KV cache is full: " + std::to_string(sequences) + " windows need " +
                  std::to_string(sequences * blocks_each) + " blocks, " + std::to_string(alloc_.num_free()) +
                  " are free");
    blocks_ = std::move(*got);
  }
  ~BatchBlocks() { alloc_.free(blocks_); }
  BatchBlocks(const BatchBlocks&) = delete;
  BatchBlocks& operator=(const BatchBlocks&) = delete;
  std::span<const int64_t> table(int64_t sequence, int64_t blocks_each) const {
    return std::span<const int64_t>(blocks_).subspan(size_t(sequence * blocks_each), size_t(blocks_each));
  }

 private:
  engine::BlockAllocator& alloc_;
  std::vector<int64_t> blocks_;
};

// Runs windows [first_window, first_window + count) of `tokens` through `rt`;
// `logits` receives [count × ctx, vocab].
void run_windows(engine::Runtime& rt, std::span<const int32_t> tokens, int64_t first_window, int64_t count,
                 int64_t ctx, std::vector<float>& logits) {
  const int64_t blocks_each = engine::blocks_for_tokens(ctx, rt.block_size());
  BatchBlocks blocks(rt.blocks(), count, blocks_each);
  std::vector<model::SequenceInput> batch;
  batch.reserve(size_t(count));
  for (int64_t s = 0; s < count; ++s)
    batch.push_back({tokens.subspan(size_t((first_window + s) * ctx), size_t(ctx)), 0, blocks.table(s, blocks_each),
                     true});
  rt.model().forward(batch, logits);
  const auto expected = size_t(count * ctx * rt.model().vocab_size());
  if (logits.size() != expected)
    throw Error("eval: the model returned " + std::to_string(logits.size()) + " logits, expected " +
                std::to_string(expected));
}

void check_kv_capacity(engine::Runtime& rt, int64_t ctx, int64_t batch, const char* which) {
  const int64_t need = batch * engine::blocks_for_tokens(ctx, rt.block_size());
  if (rt.blocks().num_total() < need)
    throw Error(std::string("eval: the ") + which + " model's KV cache holds " +
                std::to_string(rt.blocks().num_total() * rt.block_size()) + " tokens; " + std::to_string(batch) +
                " windows of " + std::to_string(ctx) + " need " + std::to_string(need * rt.block_size()) +
                " (--kv-cache-tokens)");
}

}  // namespace

Protocol parse_protocol(std::string_view n) {
  if (n == "all") return Protocol::kAll;
  if (n == "second-half") return Protocol::kSecondHalf;
  throw Error("--protocol: '" + std::string(n) + "' is not one of all, second-half");
}

std::string_view name(Protocol p) { return p == Protocol::kAll ? "all" : "second-half"; }

int64_t first_target(int64_t ctx, Protocol p) { return p == Protocol::kAll ? 1 : ctx / 2 + 1; }

int64_t default_ctx(const ModelConfig& config) { return std::min<int64_t>(config.max_position_embeddings, 2048); }

int64_t count_windows(int64_t num_tokens, int64_t ctx, int64_t context, Protocol p, int64_t limit) {
  if (ctx < 2) throw Error("--ctx: " + std::to_string(ctx) + " is too small (at least 2 tokens per window)");
  if (ctx > context)
    throw Error("--ctx: " + std::to_string(ctx) + " exceeds the model's context of " + std::to_string(context) +
                " tokens");
  if (first_target(ctx, p) >= ctx)
    throw Error("--ctx: a window of " + std::to_string(ctx) + " tokens scores no token under the " +
                std::string(name(p)) + " protocol");
  if (limit < 0) throw Error("--limit-windows: " + std::to_string(limit) + " is negative");
  const int64_t windows = num_tokens / ctx;
  if (windows == 0)
    throw Error("the data has " + std::to_string(num_tokens) + " tokens, fewer than one window of " +
                std::to_string(ctx) + " (a smaller --ctx helps)");
  return limit > 0 ? std::min(windows, limit) : windows;
}

int64_t kv_tokens_for(int64_t ctx, int batch, int block_size) {
  return int64_t(batch) * engine::blocks_for_tokens(ctx, block_size) * block_size;
}

std::vector<int32_t> tokenize_file(const tokenizer::Tokenizer& tok, const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw Error("--data: " + path.string() + ": no such file");
  if (std::filesystem::is_directory(path, ec)) throw Error("--data: " + path.string() + " is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("--data: " + path.string() + ": cannot be read");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw Error("--data: " + path.string() + ": read error");
  if (text.empty()) throw Error("--data: " + path.string() + " is empty");
  std::vector<uint32_t> ids;
  try {
    ids = tok.encode(text, /*add_special_tokens=*/true);
  } catch (const Error& e) {
    throw Error("--data: " + path.string() + ": " + e.what());
  }
  if (ids.empty()) throw Error("--data: " + path.string() + " gives no tokens");
  return std::vector<int32_t>(ids.begin(), ids.end());
}

double log_sum_exp(std::span<const float> logits) {
  if (logits.empty()) return -std::numeric_limits<double>::infinity();
  const double m = *std::max_element(logits.begin(), logits.end());
  if (!std::isfinite(m)) return m;
  double sum = 0;
  for (float x : logits) sum += std::exp(double(x) - m);
  return m + std::log(sum);
}

double token_nll(std::span<const float> logits, int32_t target) {
  if (target < 0 || size_t(target) >= logits.size())
    throw Error("eval: token id " + std::to_string(target) + " is outside the vocabulary of " +
                std::to_string(logits.size()));
  return log_sum_exp(logits) - double(logits[size_t(target)]);
}

namespace {

// KL(softmax(base) ‖ softmax(model)) given both log-sum-exps.
double kl_given_lse(std::span<const float> base, double lse_b, std::span<const float> model, double lse_m) {
  double kl = 0;
  for (size_t i = 0; i < base.size(); ++i) {
    const double lp = double(base[i]) - lse_b;
    const double lq = double(model[i]) - lse_m;
    kl += std::exp(lp) * (lp - lq);
  }
  return std::max(kl, 0.0);  // ≥ 0 mathematically; rounding may leave −1e−17
}

}  // namespace

double kl_divergence(std::span<const float> base, std::span<const float> model) {
  if (base.size() != model.size()) throw Error("eval: KL divergence of distributions of different sizes");
  return kl_given_lse(base, log_sum_exp(base), model, log_sum_exp(model));
}

int64_t argmax(std::span<const float> logits) {
  return int64_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

double quantile(std::vector<double>& values, double q) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(values.begin(), values.end());
  const double pos = std::clamp(q, 0.0, 1.0) * double(values.size() - 1);
  const auto lo = size_t(std::floor(pos));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (values[hi] - values[lo]) * (pos - double(lo));
}

PerplexityResult perplexity(engine::Runtime& model, std::span<const int32_t> tokens, const PerplexityOptions& options,
                            engine::Runtime* base, const std::function<void(const Progress&)>& progress) {
  const auto start = std::chrono::steady_clock::now();
  if (options.batch < 1) throw Error("--batch: " + std::to_string(options.batch) + " must be at least 1");
  if (options.threads < 1) throw Error("eval: threads must be at least 1");
  const int64_t vocab = model.model().vocab_size();
  int64_t context = model.config().max_position_embeddings;
  if (base != nullptr) {
    if (base->model().vocab_size() != vocab)
      throw Error("--kl-divergence-base: the base model's vocabulary has " +
                  std::to_string(base->model().vocab_size()) + " tokens, the model's " + std::to_string(vocab) +
                  ": they must share one tokenizer vocabulary");
    if (base->tokenizer().vocab_size() != model.tokenizer().vocab_size())
      throw Error("--kl-divergence-base: the base model's tokenizer has " +
                  std::to_string(base->tokenizer().vocab_size()) + " tokens, the model's " +
                  std::to_string(model.tokenizer().vocab_size()) + ": they must share one tokenizer vocabulary");
    context = std::min(context, base->config().max_position_embeddings);
  }
  PerplexityResult r;
  r.protocol = options.protocol;
  r.ctx = options.ctx > 0 ? options.ctx : default_ctx(model.config());
  r.file_tokens = int64_t(tokens.size());
  const int64_t ctx = r.ctx;
  r.windows = count_windows(r.file_tokens, ctx, context, options.protocol, options.limit_windows);
  const int64_t first = first_target(ctx, options.protocol);
  const int64_t scored = ctx - first;  // per window
  const int64_t batch = std::min<int64_t>(options.batch, r.windows);
  check_kv_capacity(model, ctx, batch, "evaluated");
  if (base != nullptr) check_kv_capacity(*base, ctx, batch, "base");

  ThreadPool pool(options.threads);
  std::vector<float> logits, base_logits;
  std::vector<double> nll(size_t(batch * scored)), base_nll, kld;
  std::vector<uint8_t> agree;
  std::vector<double> all_kld;
  if (base != nullptr) {
    base_nll.resize(nll.size());
    kld.resize(nll.size());
    agree.resize(nll.size());
    all_kld.reserve(size_t(r.windows * scored));
  }
  double nll_sum = 0, base_nll_sum = 0;
  int64_t agreements = 0;
  for (int64_t w0 = 0; w0 < r.windows; w0 += batch) {
    const int64_t count = std::min(batch, r.windows - w0);
    run_windows(model, tokens, w0, count, ctx, logits);
    if (base != nullptr) run_windows(*base, tokens, w0, count, ctx, base_logits);
    // Task i: window s = i / scored, target position t = first + i % scored, whose
    // prediction is the logits row of position t − 1. Each task owns its slots.
    pool.parallel_for(count * scored, [&](int64_t i, int) {
      const int64_t s = i / scored, t = first + i % scored;
      const int32_t target = tokens[size_t((w0 + s) * ctx + t)];
      const size_t row = size_t((s * ctx + t - 1) * vocab);
      const std::span<const float> m(logits.data() + row, size_t(vocab));
      if (target < 0 || target >= vocab)
        throw Error("eval: token id " + std::to_string(target) + " is outside the vocabulary of " +
                    std::to_string(vocab));
      const double lse_m = log_sum_exp(m);
      nll[size_t(i)] = lse_m - double(m[size_t(target)]);
      if (base != nullptr) {
        const std::span<const float> b(base_logits.data() + row, size_t(vocab));
        const double lse_b = log_sum_exp(b);
        base_nll[size_t(i)] = lse_b - double(b[size_t(target)]);
        kld[size_t(i)] = kl_given_lse(b, lse_b, m, lse_m);
        agree[size_t(i)] = argmax(b) == argmax(m) ? 1 : 0;
      }
    });
    // Summed in token order: the result does not depend on the thread count.
    for (int64_t i = 0; i < count * scored; ++i) {
      nll_sum += nll[size_t(i)];
      if (base != nullptr) {
        base_nll_sum += base_nll[size_t(i)];
        all_kld.push_back(kld[size_t(i)]);
        agreements += agree[size_t(i)];
      }
    }
    r.tokens_scored += count * scored;
    if (progress) {
      Progress p;
      p.windows_done = w0 + count;
      p.windows = r.windows;
      p.tokens_scored = r.tokens_scored;
      p.ppl = std::exp(nll_sum / double(r.tokens_scored));
      if (base != nullptr) p.base_ppl = std::exp(base_nll_sum / double(r.tokens_scored));
      p.seconds = seconds_since(start);
      progress(p);
    }
  }
  const auto n = double(r.tokens_scored);
  r.nll_mean = nll_sum / n;
  r.ppl = std::exp(r.nll_mean);
  if (base != nullptr) {
    KldResult k;
    k.base_nll_mean = base_nll_sum / n;
    k.base_ppl = std::exp(k.base_nll_mean);
    k.delta_ppl = r.ppl - k.base_ppl;
    k.delta_ppl_percent = 100.0 * k.delta_ppl / k.base_ppl;
    double kld_sum = 0;
    for (double v : all_kld) kld_sum += v;
    k.mean = kld_sum / n;
    k.max = *std::max_element(all_kld.begin(), all_kld.end());
    k.median = quantile(all_kld, 0.5);
    k.p99 = quantile(all_kld, 0.99);
    k.top1_agreement = double(agreements) / n;
    r.kld = k;
  }
  r.seconds = seconds_since(start);
  return r;
}

}  // namespace fp8lm::eval
