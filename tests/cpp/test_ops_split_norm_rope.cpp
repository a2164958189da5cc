// Ops::split_norm_rope_qkv's default (backend/ops.h) is the op sequence it
// replaces in the model: split_columns, head_rms_norm on q and k (when both
// norms are given), rope_qk. The CPU backend fuses no linear and so has no
// split_columns; here a backend that forwards every op to cpu::CpuOps and
// splits columns on the host runs the default, and its q, k, v must equal,
// bit for bit, the explicit sequence run on a CpuOps directly. Weights differ
// between q and k, so a swapped or skipped norm fails, as does a missed rope.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/ops.h"
#include "common/error.h"
#include "cpp/test_util.h"
#include "spec/model_config.h"
#include "spec/rope.h"

namespace fp8lm {
namespace {

using backend::Tensor;
using backend::Weight;

// CpuOps for every op, plus split_columns of host float tensors.
class HostSplitOps final : public backend::Ops {
 public:
  explicit HostSplitOps(cpu::CpuOps& cpu) : cpu_(cpu) {}
  std::string name() const override { return "host-split"; }
  std::unique_ptr<Weight> upload_linear(const weights::LinearWeight& w) override { return cpu_.upload_linear(w); }
  std::unique_ptr<Weight> upload_vector(std::vector<float> v) override { return cpu_.upload_vector(std::move(v)); }
  std::unique_ptr<Weight> upload_embedding(const weights::LinearWeight& t) override {
    return cpu_.upload_embedding(t);
  }
  std::unique_ptr<backend::KvCache> make_kv_cache(const backend::KvCacheShape& shape,
                                                  std::vector<backend::KvLayerFormat> layers) override {
    return cpu_.make_kv_cache(shape, std::move(layers));
  }
  Tensor alloc(int64_t rows, int64_t cols) override { return cpu_.alloc(rows, cols); }
  void reset_scratch() override { cpu_.reset_scratch(); }
  void begin_step(const backend::StepInputs& step) override { cpu_.begin_step(step); }
  void embedding(const Weight& table, Tensor out) override { cpu_.embedding(table, out); }
  void rms_norm(Tensor x, const Weight& w, float eps, Tensor out, const Weight*) override {
    cpu_.rms_norm(x, w, eps, out);
  }
  void add_rms_norm(Tensor h, Tensor d, const Weight& w, float eps, Tensor out, const Weight*) override {
    cpu_.add_rms_norm(h, d, w, eps, out);
  }
  void head_rms_norm(Tensor x, int64_t hd, const Weight& w, float eps) override { cpu_.head_rms_norm(x, hd, w, eps); }
  void add(Tensor acc, Tensor x) override { cpu_.add(acc, x); }
  void linear(Tensor x, const Weight& w, Tensor y) override { cpu_.linear(x, w, y); }
  void rope_qk(Tensor q, Tensor k, int64_t hd, const RopeTable& rope) override { cpu_.rope_qk(q, k, hd, rope); }
  void silu_mul(Tensor gate, Tensor up, Tensor out) override { cpu_.silu_mul(gate, up, out); }
  void attention(Tensor q, Tensor k, Tensor v, Tensor out, const backend::AttentionParams& params,
                 backend::KvCache& cache, int layer) override {
    cpu_.attention(q, k, v, out, params, cache, layer);
  }
  void gather_rows(Tensor x, Tensor out) override { cpu_.gather_rows(x, out); }
  void to_host(Tensor x, std::span<float> out) override { cpu_.to_host(x, out); }
  void argmax_rows(Tensor x, std::span<int32_t> out) override { cpu_.argmax_rows(x, out); }

  void split_columns(Tensor x, std::span<const Tensor> parts) override {
    for (int64_t r = 0; r < x.rows; ++r) {
      const float* src = static_cast<const float*>(x.data) + r * x.cols;
      for (const Tensor& p : parts) {
        std::memcpy(static_cast<float*>(p.data) + r * p.cols, src, size_t(p.cols) * sizeof(float));
        src += p.cols;
      }
    }
  }

 private:
  cpu::CpuOps& cpu_;
};

struct Shape {
  int64_t rows = 3, nq = 4, nk = 2, hd = 64;
};

std::vector<float> normal_values(std::mt19937& rng, size_t n, float mean, float sd) {
  std::normal_distribution<float> d(mean, sd);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(OpsSplitNormRope, DefaultIsTheExplicitSequence) {
  const Shape s;
  ModelConfig config;
  config.head_dim = s.hd;
  config.rope_theta = 1000000.0;
  config.max_position_embeddings = 131072;
  const RopeTable rope(config);
  const int64_t qw = s.nq * s.hd, kw = s.nk * s.hd, ld = qw + 2 * kw;
  std::mt19937 rng(20240611);
  const std::vector<float> qkv = normal_values(rng, size_t(s.rows * ld), 0.0f, 2.0f);
  const std::vector<int32_t> ids(size_t(s.rows), 0);
  const std::vector<int64_t> positions = {0, 17, 100000};

  cpu::CpuOps cpu(2);
  HostSplitOps fused(cpu);
  const auto q_norm = cpu.upload_vector(normal_values(rng, size_t(s.hd), 1.0f, 0.25f));
  const auto k_norm = cpu.upload_vector(normal_values(rng, size_t(s.hd), 1.0f, 0.25f));
  cpu.begin_step({ids, positions, {}, {}});

  for (const bool norms : {false, true}) {
    SCOPED_TRACE(norms ? "with q/k norms" : "without norms");
    // The default, through a backend with split_columns.
    std::vector<float> in = qkv, q(size_t(s.rows * qw)), k(size_t(s.rows * kw)), v(size_t(s.rows * kw));
    fused.split_norm_rope_qkv({in.data(), s.rows, ld}, {q.data(), s.rows, qw}, {k.data(), s.rows, kw},
                              {v.data(), s.rows, kw}, s.hd, norms ? q_norm.get() : nullptr,
                              norms ? k_norm.get() : nullptr, 1e-6f, rope);
    EXPECT_TRUE(same_bits(in, qkv)) << "qkv must be left as it was";
    // The explicit sequence on the CPU backend.
    std::vector<float> eq(q.size()), ek(k.size()), ev(v.size());
    for (int64_t r = 0; r < s.rows; ++r) {
      const float* row = qkv.data() + r * ld;
      std::memcpy(eq.data() + r * qw, row, size_t(qw) * sizeof(float));
      std::memcpy(ek.data() + r * kw, row + qw, size_t(kw) * sizeof(float));
      std::memcpy(ev.data() + r * kw, row + qw + kw, size_t(kw) * sizeof(float));
    }
    const std::vector<float> split_q = eq;
    if (norms) {
      cpu.head_rms_norm({eq.data(), s.rows, qw}, s.hd, *q_norm, 1e-6f);
      cpu.head_rms_norm({ek.data(), s.rows, kw}, s.hd, *k_norm, 1e-6f);
    }
    cpu.rope_qk({eq.data(), s.rows, qw}, {ek.data(), s.rows, kw}, s.hd, rope);
    EXPECT_TRUE(same_bits(q, eq));
    EXPECT_TRUE(same_bits(k, ek));
    EXPECT_TRUE(same_bits(v, ev));
    EXPECT_FALSE(same_bits(q, split_q)) << "q was not transformed at all";
  }
}

TEST(OpsSplitNormRope, OneNormAloneIsRefused) {
  cpu::CpuOps cpu(1);
  HostSplitOps fused(cpu);
  ModelConfig config;
  config.head_dim = 8;
  const RopeTable rope(config);
  const auto norm = cpu.upload_vector(std::vector<float>(8, 1.0f));
  std::vector<float> buf(32);
  const Tensor t{buf.data(), 1, 8};
  test::expect_error(
      [&] { fused.split_norm_rope_qkv({buf.data(), 1, 24}, t, t, t, 8, norm.get(), nullptr, 1e-6f, rope); },
      "host-split: split_norm_rope_qkv takes both q/k norm weights or neither");
}

// The CPU backend's split_columns (which Ops::copy uses: an EAGLE-3 target's kept hidden states)
// hands each part its columns, and refuses parts that do not add up to the input.
TEST(OpsSplitNormRope, CpuSplitColumnsAndCopy) {
  cpu::CpuOps cpu(1);
  std::vector<float> x(2 * 5), a(2 * 2), b(2 * 3), whole(2 * 5);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i) + 0.5f;
  const Tensor parts[] = {{a.data(), 2, 2}, {b.data(), 2, 3}};
  cpu.split_columns({x.data(), 2, 5}, parts);
  EXPECT_EQ(a, (std::vector<float>{0.5f, 1.5f, 5.5f, 6.5f}));
  EXPECT_EQ(b, (std::vector<float>{2.5f, 3.5f, 4.5f, 7.5f, 8.5f, 9.5f}));
  cpu.copy({x.data(), 2, 5}, {whole.data(), 2, 5});
  EXPECT_EQ(whole, x);
  test::expect_error([&] { cpu.split_columns({x.data(), 2, 5}, std::span<const Tensor>(parts, 1)); },
                     "split_columns of 5 columns into parts of 2");
  test::expect_error([&] { cpu.copy({x.data(), 2, 5}, {whole.data(), 5, 2}); }, "copy of 2 x 5 into 5 x 2");
}

}  // namespace
}  // namespace fp8lm
