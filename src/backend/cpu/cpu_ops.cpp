#include "backend/cpu/cpu_ops.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <string_view>

#include "backend/cpu/attention.h"
#include "backend/cpu/kv_cache.h"
#include "backend/cpu/linear.h"
#include "backend/cpu/mla_attention.h"
#include "common/error.h"
#include "numerics/silu.h"

namespace fp8lm::cpu {
namespace {

// A linear weight or embedding table: the host description itself (the CPU
// computes where the loader put the data) and the plan decided at upload.
struct HostLinear final : backend::Weight {
  HostLinear(weights::LinearWeight weight, LinearPlan p) : w(std::move(weight)), plan(std::move(p)) {}
  weights::LinearWeight w;
  LinearPlan plan;
};

struct VectorWeight final : backend::Weight {
  explicit VectorWeight(std::vector<float> values) : v(std::move(values)) {}
  std::vector<float> v;
};

struct MlaUp final : backend::Weight {
  explicit MlaUp(MlaUpProjections p) : up(std::move(p)) {}
  MlaUpProjections up;
};

struct HostMoe final : backend::Weight {
  explicit HostMoe(MoeExperts e) : experts(std::move(e)) {}
  MoeExperts experts;
};

struct CpuKvCache final : backend::KvCache {
  CpuKvCache(const backend::KvCacheShape& s, std::vector<backend::KvLayerFormat> l) : cache(s, std::move(l)) {}
  const backend::KvCacheShape& shape() const override { return cache.shape(); }
  const backend::KvLayerFormat& layer_format(int layer) const override { return cache.layer_format(layer); }
  uint64_t bytes() const override { return cache.bytes(); }
  PagedKvCache cache;
};

template <typename T>
const T& as(const backend::Weight& w, const char* what) {
  const T* p = dynamic_cast<const T*>(&w);
  if (p == nullptr) throw Error(std::string("cpu ops: ") + what + " was not uploaded by the CPU backend");
  return *p;
}

float* f32(backend::Tensor t) { return static_cast<float*>(t.data); }

void require_shape(backend::Tensor t, int64_t rows, int64_t cols, const char* op) {
  if (t.rows != rows || t.cols != cols)
    throw Error(std::string("cpu ops: ") + op + " expects [" + std::to_string(rows) + ", " + std::to_string(cols) +
                "], got [" + std::to_string(t.rows) + ", " + std::to_string(t.cols) + "]");
}

// out = x · rsqrt(mean(x²) + eps) · w, the sum of squares in double (order-free to within float rounding).
void rms_row(const float* x, const float* w, int64_t n, float eps, float* out) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += double(x[i]) * double(x[i]);
  const float inv = 1.0f / std::sqrt(float(sum / double(n)) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = w[i] * (x[i] * inv);
}

// "linear bf16 1024x384": the plan's kind and the weight's [N, K], as the CUDA profile names them.
std::string linear_label(const weights::LinearWeight& w, const LinearPlan& plan) {
  const std::string kind = plan.path == LinearPlan::Path::kW8A8         ? "w8a8"
                           : plan.path == LinearPlan::Path::kWeightOnly ? "w8a16"
                                                                        : std::string(name(w.element));
  return "linear " + kind + " " + std::to_string(w.n) + "x" + std::to_string(w.k);
}

}  // namespace

class CpuOps::OpClock {
 public:
  using Clock = std::chrono::steady_clock;
  // `op` is read only while profiling.
  OpClock(CpuOps& ops, std::string_view op) : ops_(ops) {
    if (!ops_.profiling_) return;
    counted_ = true;
    if (ops_.open_clocks_++ > 0) return;  // inside another op: the time is that op's
    timing_ = true;
    op_ = op;
    start_ = Clock::now();
  }
  ~OpClock() {
    if (!counted_) return;
    --ops_.open_clocks_;
    if (!timing_) return;
    const double seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    auto& slot = ops_.profile_[{ops_.prefill_step_ ? "prefill" : "decode", op_}];
    slot.first += seconds;
    ++slot.second;
  }
  OpClock(const OpClock&) = delete;
  OpClock& operator=(const OpClock&) = delete;

 private:
  CpuOps& ops_;
  bool counted_ = false, timing_ = false;
  std::string op_;
  Clock::time_point start_;
};

std::vector<backend::OpProfileEntry> CpuOps::op_profile() {
  std::vector<backend::OpProfileEntry> out;
  for (const auto& [key, t] : profile_) out.push_back({key.first, key.second, t.first, t.second, false});
  return out;
}

CpuOps::CpuOps(int threads, KernelChoice kernels, bool pad_decode_batches)
    : pool_(threads), kernels_(kernels), pad_decode_batches_(pad_decode_batches) {}

std::string CpuOps::name() const { return "cpu (" + std::to_string(pool_.size()) + " threads)"; }

std::unique_ptr<backend::Weight> CpuOps::upload_linear(const weights::LinearWeight& w) {
  LinearPlan plan = plan_linear(w);  // validates
  return std::make_unique<HostLinear>(w, std::move(plan));
}

std::unique_ptr<backend::Weight> CpuOps::upload_vector(std::vector<float> values) {
  return std::make_unique<VectorWeight>(std::move(values));
}

std::unique_ptr<backend::Weight> CpuOps::upload_embedding(const weights::LinearWeight& table) {
  LinearPlan plan = plan_linear(table);  // validates
  if (table.is_fp8() && table.scale_layout.granularity != Granularity::kChannel)
    throw Error("cpu ops: an FP8 embedding table needs one scale per row");
  return std::make_unique<HostLinear>(table, std::move(plan));
}

std::unique_ptr<backend::Weight> CpuOps::upload_moe_experts(std::span<const weights::LinearWeight> gate,
                                                            std::span<const weights::LinearWeight> up,
                                                            std::span<const weights::LinearWeight> down) {
  return std::make_unique<HostMoe>(plan_moe_experts(gate, up, down));
}

std::string CpuOps::describe(const backend::Weight& w) const {
  const auto* linear = dynamic_cast<const HostLinear*>(&w);
  return linear != nullptr ? linear->plan.describe() : std::string();
}

std::unique_ptr<backend::KvCache> CpuOps::make_kv_cache(const backend::KvCacheShape& shape,
                                                        std::vector<backend::KvLayerFormat> layers) {
  return std::make_unique<CpuKvCache>(shape, std::move(layers));
}

std::unique_ptr<backend::Weight> CpuOps::upload_mla_up_projections(const weights::LinearWeight& kv_b, int num_heads,
                                                                   int64_t nope_dim, int64_t v_dim) {
  return std::make_unique<MlaUp>(make_mla_up_projections(kv_b, num_heads, nope_dim, v_dim));
}

void CpuOps::begin_step(const backend::StepInputs& step) {
  step_ = step;
  // The CUDA backend's rule: a step where some sequence takes more than one new token is a prefill.
  prefill_step_ = std::any_of(step.sequences.begin(), step.sequences.end(),
                              [](const backend::AttentionSequence& s) { return s.num_tokens > 1; });
}

backend::Tensor CpuOps::alloc(int64_t rows, int64_t cols) {
  if (rows < 0 || cols < 0) throw Error("cpu ops: negative tensor shape");
  if (next_scratch_ == scratch_.size()) scratch_.emplace_back();
  std::vector<float>& buf = scratch_[next_scratch_++];
  if (buf.size() < size_t(rows * cols)) buf.resize(size_t(rows * cols));
  return {buf.data(), rows, cols};
}

void CpuOps::embedding(const backend::Weight& table, std::span<const int32_t> ids, backend::Tensor out) {
  const OpClock clock(*this, "embedding");
  const weights::LinearWeight& t = as<HostLinear>(table, "embedding table").w;
  require_shape(out, int64_t(ids.size()), t.k, "embedding");
  const LinearKernels& kern = select_linear_kernels(kernels_);
  const int64_t width = int64_t(element_bytes(t.element));
  for (size_t r = 0; r < ids.size(); ++r) {
    if (ids[r] < 0 || ids[r] >= t.n)
      throw Error("token id " + std::to_string(ids[r]) + " is outside the vocabulary [0, " + std::to_string(t.n) + ")");
    float* dst = f32(out) + int64_t(r) * t.k;
    if (t.is_fp8()) {
      const auto* codes = static_cast<const uint8_t*>(t.data) + int64_t(ids[r]) * t.k;
      kern.fp8_to_float(codes, t.k, t.format(), t.scales[size_t(ids[r])], dst);
    } else {
      kern.to_float(static_cast<const std::byte*>(t.data) + int64_t(ids[r]) * t.k * width, t.element, t.k, dst);
    }
  }
}

void CpuOps::join_group(ThreadGroup& group, int rank) {
  if (rank < 0 || rank >= group.size())
    throw Error("cpu ops: rank " + std::to_string(rank) + " of a group of " + std::to_string(group.size()));
  group_ = &group;
  rank_ = rank;
}

void CpuOps::embedding_shard(const backend::Weight& table, int64_t vocab0, backend::Tensor out) {
  const weights::LinearWeight& t = as<HostLinear>(table, "embedding table").w;
  require_shape(out, int64_t(step_.ids.size()), t.k, "embedding_shard");
  // Ids of the shard looked up, the others given row 0 and then zeroed.
  shard_ids_.resize(step_.ids.size());
  for (size_t r = 0; r < step_.ids.size(); ++r) {
    const int64_t local = int64_t(step_.ids[r]) - vocab0;
    shard_ids_[r] = local >= 0 && local < t.n ? int32_t(local) : 0;
  }
  embedding(table, shard_ids_, out);
  for (size_t r = 0; r < step_.ids.size(); ++r) {
    const int64_t local = int64_t(step_.ids[r]) - vocab0;
    if (local < 0 || local >= t.n) std::fill_n(f32(out) + int64_t(r) * t.k, t.k, 0.0f);
  }
}

void CpuOps::all_reduce_sum(backend::Tensor x) {
  if (group_ == nullptr) throw_no_group("all_reduce_sum");
  const OpClock clock(*this, "all_reduce_sum");
  group_->all_reduce_sum(rank_, std::span<float>(f32(x), size_t(x.rows * x.cols)));
}

void CpuOps::all_gather_cols(backend::Tensor local, backend::Tensor out) {
  if (group_ == nullptr) throw_no_group("all_gather_cols");
  if (out.rows != local.rows) throw Error("cpu ops: all_gather_cols of " + std::to_string(local.rows) + " rows into " +
                                          std::to_string(out.rows));
  const OpClock clock(*this, "all_gather_cols");
  group_->all_gather_cols(rank_, std::span<const float>(f32(local), size_t(local.rows * local.cols)), local.rows,
                          local.cols, std::span<float>(f32(out), size_t(out.rows * out.cols)));
}

void CpuOps::rms_norm(backend::Tensor x, const backend::Weight& w, float eps, backend::Tensor out,
                      const backend::Weight* /*next: the CPU linear reads float activations*/) {
  const OpClock clock(*this, "rms_norm");
  const std::vector<float>& g = as<VectorWeight>(w, "norm weight").v;
  require_shape(out, x.rows, x.cols, "rms_norm");
  if (int64_t(g.size()) != x.cols) throw Error("cpu ops: rms_norm weight size does not match the row width");
  for (int64_t r = 0; r < x.rows; ++r) rms_row(f32(x) + r * x.cols, g.data(), x.cols, eps, f32(out) + r * x.cols);
}

void CpuOps::add_rms_norm(backend::Tensor h, backend::Tensor delta, const backend::Weight& w, float eps,
                          backend::Tensor out, const backend::Weight* /*next*/) {
  const OpClock clock(*this, "add_rms_norm");
  add(h, delta);
  rms_norm(h, w, eps, out);
}

void CpuOps::head_rms_norm(backend::Tensor x, int64_t head_dim, const backend::Weight& w, float eps) {
  const OpClock clock(*this, "head_rms_norm");
  const std::vector<float>& g = as<VectorWeight>(w, "head norm weight").v;
  if (head_dim <= 0 || x.cols % head_dim != 0 || int64_t(g.size()) != head_dim)
    throw Error("cpu ops: head_rms_norm over heads of " + std::to_string(head_dim) + " does not fit rows of " +
                std::to_string(x.cols));
  for (int64_t r = 0; r < x.rows; ++r)
    for (int64_t h = 0; h < x.cols / head_dim; ++h) {
      float* p = f32(x) + r * x.cols + h * head_dim;
      rms_row(p, g.data(), head_dim, eps, p);
    }
}

void CpuOps::add(backend::Tensor acc, backend::Tensor x) {
  const OpClock clock(*this, "add");
  require_shape(x, acc.rows, acc.cols, "add");
  float* a = f32(acc);
  const float* b = f32(x);
  for (int64_t i = 0; i < acc.rows * acc.cols; ++i) a[i] += b[i];
}

void CpuOps::split_columns(backend::Tensor x, std::span<const backend::Tensor> parts) {
  const OpClock clock(*this, "split_columns");
  int64_t width = 0;
  for (const backend::Tensor& p : parts) {
    require_shape(p, x.rows, p.cols, "split_columns part");
    width += p.cols;
  }
  if (width != x.cols)
    throw Error("cpu ops: split_columns of " + std::to_string(x.cols) + " columns into parts of " +
                std::to_string(width));
  int64_t col = 0;
  for (const backend::Tensor& p : parts) {
    for (int64_t r = 0; r < x.rows; ++r) std::copy_n(f32(x) + r * x.cols + col, p.cols, f32(p) + r * p.cols);
    col += p.cols;
  }
}

void CpuOps::linear(backend::Tensor x, const backend::Weight& w, backend::Tensor y) {
  const HostLinear& hl = as<HostLinear>(w, "linear weight");
  const OpClock clock(*this, profiling_ ? linear_label(hl.w, hl.plan) : std::string());
  require_shape(y, x.rows, hl.w.n, "linear output");
  cpu::linear({f32(x), size_t(x.rows * x.cols)}, x.rows, hl.w, hl.plan, {f32(y), size_t(y.rows * y.cols)}, &pool_,
              kernels_);
}

void CpuOps::rope_qk(backend::Tensor q, backend::Tensor k, int64_t head_dim, const RopeTable& rope) {
  const OpClock clock(*this, "rope_qk");
  this->rope(q, head_dim, step_.positions, rope);
  this->rope(k, head_dim, step_.positions, rope);
}

void CpuOps::rope(backend::Tensor x, int64_t head_dim, std::span<const int64_t> positions,
                  const RopeTable& rope) {
  const int64_t half = rope.rotary_dim() / 2;
  if (rope.rotary_dim() != head_dim || x.cols % head_dim != 0 || int64_t(positions.size()) != x.rows)
    throw Error("cpu ops: rope does not fit the tensor");
  std::vector<float> cos_t(static_cast<size_t>(half)), sin_t(static_cast<size_t>(half));
  for (int64_t r = 0; r < x.rows; ++r) {
    rope.cos_sin(positions[size_t(r)], cos_t.data(), sin_t.data());
    for (int64_t h = 0; h < x.cols / head_dim; ++h) {
      float* p = f32(x) + r * x.cols + h * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        // rotate_half: (x1, x2) → (x1·cos − x2·sin, x2·cos + x1·sin), as transformers' Llama.
        const float a = p[i], b = p[i + half];
        p[i] = a * cos_t[size_t(i)] - b * sin_t[size_t(i)];
        p[i + half] = b * cos_t[size_t(i)] + a * sin_t[size_t(i)];
      }
    }
  }
}

void CpuOps::silu_mul(backend::Tensor gate, backend::Tensor up, backend::Tensor out) {
  const OpClock clock(*this, "silu_mul");
  require_shape(up, gate.rows, gate.cols, "silu_mul");
  require_shape(out, gate.rows, gate.cols, "silu_mul");
  const float* g = f32(gate);
  const float* u = f32(up);
  float* o = f32(out);
  // The shared SiLU (numerics/silu.h): the same bits as the CUDA backend's fused kernel.
  for (int64_t i = 0; i < gate.rows * gate.cols; ++i) o[i] = silu_mul_f32(g[i], u[i]);
}

void CpuOps::moe(backend::Tensor x, backend::Tensor router_logits, const backend::Weight& experts,
                 const backend::MoeRouting& routing, backend::Tensor out) {
  const OpClock clock(*this, "moe");
  const MoeExperts& e = as<HostMoe>(experts, "MoE experts").experts;
  require_shape(x, x.rows, e.hidden, "moe input");
  require_shape(router_logits, x.rows, int64_t(e.gate.size()), "moe router logits");
  require_shape(out, x.rows, e.hidden, "moe output");
  std::span<const float> bias;
  if (routing.correction_bias != nullptr) {
    bias = as<VectorWeight>(*routing.correction_bias, "MoE correction bias").v;
    if (bias.size() != e.gate.size())
      throw Error("cpu ops: MoE correction bias of " + std::to_string(bias.size()) + " values for " +
                  std::to_string(e.gate.size()) + " experts");
  }
  cpu::moe({f32(x), size_t(x.rows * x.cols)}, x.rows,
           {f32(router_logits), size_t(router_logits.rows * router_logits.cols)}, e, routing, bias,
           {f32(out), size_t(out.rows * out.cols)}, &pool_, kernels_, moe_scratch_);
}

void CpuOps::attention(backend::Tensor q, backend::Tensor k, backend::Tensor v, backend::Tensor out,
                       std::span<const backend::AttentionSequence> sequences, const backend::AttentionParams& params,
                       backend::KvCache& cache, int layer) {
  const OpClock clock(*this, "attention");
  auto* c = dynamic_cast<CpuKvCache*>(&cache);
  if (c == nullptr) throw Error("cpu ops: the KV cache was not made by the CPU backend");
  require_shape(k, q.rows, int64_t(params.num_kv_heads) * params.head_dim, "attention k");
  require_shape(v, q.rows, int64_t(params.num_kv_heads) * params.head_dim, "attention v");
  require_shape(out, q.rows, int64_t(params.num_heads) * params.head_dim, "attention out");
  const bool fp8 = fp8_attention_ && c->cache.layer_format(layer).element == backend::KvElement::kE4M3;
  paged_attention(f32(q), f32(k), f32(v), f32(out), sequences, params, c->cache, layer, &pool_, fp8);
}

void CpuOps::rope_mla(backend::Tensor q, backend::Tensor k_pe, int64_t nope_dim, const RopeTable& rope,
                      bool interleaved) {
  const OpClock clock(*this, "rope_mla");
  require_shape(k_pe, q.rows, rope.rotary_dim(), "rope_mla k_pe");
  cpu::rope_mla(f32(q), q.cols, f32(k_pe), q.rows, nope_dim, step_.positions, rope, interleaved);
}

void CpuOps::mla_attention(backend::Tensor q, backend::Tensor latent, backend::Tensor k_pe, const backend::Weight& up,
                           backend::Tensor out, std::span<const backend::AttentionSequence> sequences,
                           const backend::MlaParams& params, backend::KvCache& cache, int layer) {
  const OpClock clock(*this, "mla_attention");
  if (fp8_attention_)
    throw Error("cpu ops: FP8 attention (--fp8-attention) is not implemented for multi-head latent attention");
  auto* c = dynamic_cast<CpuKvCache*>(&cache);
  if (c == nullptr) throw Error("cpu ops: the KV cache was not made by the CPU backend");
  require_shape(q, q.rows, int64_t(params.num_heads) * (params.nope_dim + params.rope_dim), "mla_attention q");
  require_shape(latent, q.rows, params.latent_dim, "mla_attention latent");
  require_shape(k_pe, q.rows, params.rope_dim, "mla_attention k_pe");
  require_shape(out, q.rows, int64_t(params.num_heads) * params.v_dim, "mla_attention out");
  cpu::mla_attention(f32(q), f32(latent), f32(k_pe), as<MlaUp>(up, "MLA up-projections").up, f32(out), sequences,
                     params, c->cache, layer, &pool_);
}

void CpuOps::gather_rows(backend::Tensor x, std::span<const int64_t> rows, backend::Tensor out) {
  const OpClock clock(*this, "gather_rows");
  require_shape(out, int64_t(rows.size()), x.cols, "gather_rows");
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= x.rows) throw Error("cpu ops: gather_rows index out of range");
    std::copy_n(f32(x) + rows[i] * x.cols, x.cols, f32(out) + int64_t(i) * x.cols);
  }
}

void CpuOps::to_host(backend::Tensor x, std::span<float> out) {
  const OpClock clock(*this, "to_host");
  if (out.size() != size_t(x.rows * x.cols)) throw Error("cpu ops: to_host size mismatch");
  std::copy_n(f32(x), x.rows * x.cols, out.data());
}

void CpuOps::argmax_rows(backend::Tensor x, std::span<int32_t> out) {
  const OpClock clock(*this, "argmax_rows");
  if (out.size() != size_t(x.rows)) throw Error("cpu ops: argmax_rows needs one output per row");
  for (int64_t r = 0; r < x.rows; ++r) {
    const float* row = f32(x) + r * x.cols;
    int32_t best = -1;
    for (int64_t i = 0; i < x.cols; ++i)
      if (!std::isnan(row[i]) && (best < 0 || row[i] > row[best])) best = int32_t(i);
    out[size_t(r)] = best;
  }
}

void CpuOps::sample_rows(backend::Tensor logits, std::span<const backend::RowSampling> rows,
                         std::span<int32_t> tokens) {
  const OpClock clock(*this, "sample_rows");
  if (rows.size() != size_t(logits.rows) || tokens.size() != size_t(logits.rows))
    throw Error("cpu ops: sample_rows of " + std::to_string(logits.rows) + " rows given " +
                std::to_string(rows.size()) + " row descriptions and " + std::to_string(tokens.size()) + " outputs");
  for (int64_t r = 0; r < logits.rows; ++r) {
    const float* row = f32(logits) + r * logits.cols;
    sample_row_.assign(row, row + logits.cols);
    tokens[size_t(r)] = row_sampler_.sample_or_none(sample_row_, rows[size_t(r)]);
  }
}

}  // namespace fp8lm::cpu
