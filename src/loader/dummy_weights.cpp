#include "loader/dummy_weights.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/error.h"
#include "numerics/fp8_format.h"
#include "spec/model_tensors.h"

namespace fp8lm::loader {
namespace {

// ---- the counter-based generator --------------------------------------------
// Elements 4g..4g+3 of a tensor come from splitmix64's output number g for the
// tensor's key (Steele et al.'s finalizer over key + (g + 1)·gamma), 16 bits
// each: no state, so any element can be made by any thread in any order, with
// the same bits. Each 16-bit draw u indexes a table of normal quantiles,
// z_u = Φ⁻¹((u + ½) / 65536): a normal distribution at 65536 levels, |z| ≤ 4.17.

constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ULL;
constexpr size_t kLevels = 65536;

inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

inline uint64_t draws(uint64_t key, uint64_t group) { return mix64(key + (group + 1) * kGamma); }

inline uint32_t draw(uint64_t key, uint64_t i) { return uint32_t(draws(key, i >> 2) >> (16 * (i & 3))) & 0xFFFF; }

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : s) h = (h ^ uint8_t(c)) * 0x100000001b3ULL;
  return h;
}

// Each tensor's stream depends on the seed and its checkpoint name only, so a
// tensor has the same values whatever the scheme, order or thread count.
uint64_t tensor_key(uint64_t seed, std::string_view name) { return mix64(mix64(seed) ^ fnv1a(name)); }

// Φ⁻¹(p) for 0 < p < ½: Acklam's rational approximation (relative error
// 1.2e-9), then one Halley step on erfc (full double precision). The tables
// below round these to BF16/FP8, which no last-bit difference of a libm moves.
double normal_quantile_lower(double p) {
  static constexpr double a[] = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                                 1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
  static constexpr double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                                 6.680131188771972e+01,  -1.328068155288572e+01};
  static constexpr double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                                 -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
  static constexpr double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                                 3.754408661907416e+00};
  double x;
  if (p < 0.02425) {
    const double q = std::sqrt(-2.0 * std::log(p));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0);
  } else {
    const double q = p - 0.5, r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1.0);
  }
  const double e = 0.5 * std::erfc(-x / std::sqrt(2.0)) - p;
  const double u = e * std::sqrt(2.0 * 3.14159265358979323846) * std::exp(x * x / 2.0);
  return x - u / (1.0 + x * u / 2.0);
}

// z_u for every 16-bit draw, exactly symmetric (z_{65535−u} = −z_u), computed once.
const std::vector<double>& quantiles() {
  static const std::vector<double> z = [] {
    std::vector<double> v(kLevels);
    for (size_t u = 0; u < kLevels / 2; ++u) {
      v[u] = normal_quantile_lower((double(u) + 0.5) / double(kLevels));
      v[kLevels - 1 - u] = -v[u];
    }
    return v;
  }();
  return z;
}

// Value tables: draw → BF16 bits of sigma·z, and → FP8 code of z at the scale
// whose range is exactly the draw's (z = ±bound → ±fp8 max).
struct Tables {
  std::vector<uint16_t> bf16;
  std::vector<uint8_t> e4m3, e5m2;
  float e4m3_scale = 0.0f, e5m2_scale = 0.0f;

  explicit Tables(float s) : bf16(kLevels), e4m3(kLevels), e5m2(kLevels) {
    const std::vector<double>& z = quantiles();
    const double bound = dummy_weight_bound();
    for (size_t u = 0; u < kLevels; ++u) {
      bf16[u] = float_to_bf16(float(double(s) * z[u]));
      e4m3[u] = float_to_fp8(float(z[u] * (double(kE4M3Traits.max_finite) / bound)), Fp8Format::kE4M3);
      e5m2[u] = float_to_fp8(float(z[u] * (double(kE5M2Traits.max_finite) / bound)), Fp8Format::kE5M2);
    }
    e4m3_scale = float(double(s) * bound / double(kE4M3Traits.max_finite));
    e5m2_scale = float(double(s) * bound / double(kE5M2Traits.max_finite));
  }
  const uint8_t* fp8(Fp8Format f) const { return f == Fp8Format::kE4M3 ? e4m3.data() : e5m2.data(); }
  float scale(Fp8Format f) const { return f == Fp8Format::kE4M3 ? e4m3_scale : e5m2_scale; }
  // A small float tensor (a bias), as BF16 values like a checkpoint's.
  std::vector<float> floats(uint64_t key, int64_t count) const {
    std::vector<float> v(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) v[size_t(i)] = bf16_to_float(bf16[draw(key, uint64_t(i))]);
    return v;
  }
};

// One tensor to fill: `count` elements of `out` from `table` (2-byte or 1-byte entries).
struct Job {
  uint64_t key;
  void* out;
  int64_t count;
  const uint16_t* table16;  // BF16, or
  const uint8_t* table8;    // FP8 codes
};

template <typename T>
void fill_range(T* out, const T* table, uint64_t key, int64_t begin, int64_t end) {
  int64_t i = begin;
  for (; i < end && (i & 3) != 0; ++i) out[i] = table[draw(key, uint64_t(i))];
  for (; i + 4 <= end; i += 4) {
    const uint64_t h = draws(key, uint64_t(i) >> 2);
    out[i] = table[h & 0xFFFF];
    out[i + 1] = table[(h >> 16) & 0xFFFF];
    out[i + 2] = table[(h >> 32) & 0xFFFF];
    out[i + 3] = table[h >> 48];
  }
  for (; i < end; ++i) out[i] = table[draw(key, uint64_t(i))];
}

void fill(const Job& j, int64_t begin, int64_t end) {
  if (j.table16 != nullptr) fill_range(static_cast<uint16_t*>(j.out), j.table16, j.key, begin, end);
  else fill_range(static_cast<uint8_t*>(j.out), j.table8, j.key, begin, end);
}

// Every job cut into chunks, taken by the threads in turn; each thread's first
// write to a page also faults it in, so the allocation is parallel too.
void run_jobs(const std::vector<Job>& jobs, int threads) {
  constexpr int64_t kChunk = int64_t(1) << 18;
  struct Chunk {
    size_t job;
    int64_t begin, end;
  };
  std::vector<Chunk> chunks;
  for (size_t j = 0; j < jobs.size(); ++j)
    for (int64_t b = 0; b < jobs[j].count; b += kChunk) chunks.push_back({j, b, std::min(jobs[j].count, b + kChunk)});
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t c = next++; c < chunks.size(); c = next++) fill(jobs[chunks[c].job], chunks[c].begin, chunks[c].end);
  };
  const int n = std::max(1, std::min<int>(threads, int(chunks.size())));
  std::vector<std::thread> pool;
  for (int t = 1; t < n; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
}

// Uninitialized bytes (no zeroing pass: the generator writes every one).
std::shared_ptr<uint8_t> allocate(int64_t bytes) {
  return std::shared_ptr<uint8_t>(new uint8_t[size_t(bytes)], std::default_delete<uint8_t[]>());
}

class Builder {
 public:
  Builder(const DummyWeightOptions& o) : options_(o), tables_(o.sigma) {}

  // A [n, k] weight named `name` ("<module>.weight") in `scheme`'s storage.
  weights::LinearWeight weight(const std::string& name, int64_t n, int64_t k, const LinearQuantScheme& s) {
    const uint64_t key = tensor_key(options_.seed, name);
    if (!s.quantized) {
      std::shared_ptr<uint8_t> buf = allocate(2 * n * k);
      jobs_.push_back({key, buf.get(), n * k, tables_.bf16.data(), nullptr});
      weights::LinearWeight w = weights::high_precision(ElementType::kBF16, buf.get(), n, k);
      w.owner = std::move(buf);
      return w;
    }
    if (s.weight_format != Fp8Format::kE4M3 && s.weight_format != Fp8Format::kE5M2)
      throw Error("dummy weights: " + name + " has a weight format fp8lm cannot generate");
    std::shared_ptr<uint8_t> buf = allocate(n * k);
    jobs_.push_back({key, buf.get(), n * k, nullptr, tables_.fp8(s.weight_format)});
    const int64_t count = s.weight_scales.scale_rows(n) * s.weight_scales.scale_cols(k);
    std::vector<float> scales(size_t(count), tables_.scale(s.weight_format));
    const float input_scale = s.activation == ActivationQuant::kStaticTensor ? kDummyInputScale : 0.0f;
    weights::LinearWeight w = weights::fp8(buf.get(), n, k, s, std::move(scales), input_scale);
    w.owner = std::move(buf);
    return w;
  }

  weights::LinearWeight linear(const io::LinearLayerSpec& l) {
    weights::LinearWeight w = weight(l.weight_name, l.module.out_features, l.module.in_features, l.scheme);
    if (l.module.has_bias) {
      w.bias = tables_.floats(tensor_key(options_.seed, l.module.name + ".bias"), l.module.out_features);
      weights::validate(w);
    }
    return w;
  }

  void run(int threads) { run_jobs(jobs_, threads); }

 private:
  DummyWeightOptions options_;
  Tables tables_;
  std::vector<Job> jobs_;
};

}  // namespace

double dummy_weight_bound() { return -quantiles().front(); }

HostModelWeights dummy_host_weights(const io::ModelSpec& spec, const DummyWeightOptions& options) {
  check_supported(spec);
  if (!(options.sigma > 0.0f) || !std::isfinite(options.sigma))
    throw Error("dummy weights: sigma must be positive and finite, got " + std::to_string(options.sigma));
  const ModelConfig& c = spec.config;
  Builder b(options);
  HostModelWeights w;
  const bool fp8_embeddings = spec.quantization.fp8_embeddings;
  const LinearQuantScheme bf16;  // not quantized
  w.embedding = b.weight(std::string(kEmbedTokensWeight), c.vocab_size, c.hidden_size,
                         fp8_embeddings ? weights::per_row_embedding_scheme() : bf16);
  w.final_norm.assign(size_t(c.hidden_size), 1.0f);

  const LinearSpecs linears(spec);
  auto linear = [&](const std::string& name) { return b.linear(linears.at(name)); };
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    HostLayer l;
    l.input_norm.assign(size_t(c.hidden_size), 1.0f);
    l.post_attention_norm.assign(size_t(c.hidden_size), 1.0f);
    set_projections(l, c, i, linear);
    set_layer_vectors(l, c, i, [](const std::string&, int64_t size, bool norm) {
      return std::vector<float>(size_t(size), norm ? 1.0f : 0.0f);
    });
    w.layers.push_back(std::move(l));
  }
  if (c.tie_word_embeddings) w.lm_head = w.embedding;
  else if (fp8_embeddings)
    w.lm_head = b.weight(std::string(kLmHead) + ".weight", c.vocab_size, c.hidden_size, weights::per_row_embedding_scheme());
  else w.lm_head = linear(std::string(kLmHead));

  const int threads = options.threads > 0 ? options.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  b.run(threads);
  return w;  // no KV-cache scales: the runtime calibrates an FP8 cache (or uses 1.0)
}

}  // namespace fp8lm::loader
