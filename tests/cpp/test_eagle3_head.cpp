// The EAGLE-3 head's forward (model/eagle3_head.h) on the CPU backend against speculators' own
// model class (Eagle3DraftModel, tools/make_eagle3_fixtures.py): the draft logits of every
// training-time-test step. The reference's step s at row j is a draft chain that starts at row j:
// the real context's rows 0 … j (step 0: the token at j + 1's slot with the target states of row
// j), then s drafted rows, each feeding the token the fixture gives and the head's own hidden
// state. Here each chain runs as a sequence of its own in a paged cache: one step over rows 0 … j,
// then s one-row steps.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "cpp/fixtures.h"
#include "io/eagle3_config_json.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "loader/eagle3_weights.h"
#include "model/eagle3_head.h"

namespace fp8lm {
namespace {

struct Fixture {
  std::vector<float> hidden;     // [rows, 3H]
  std::vector<int32_t> ids;      // [rows + steps − 1]
  std::vector<float> logits;     // [steps, rows, draft vocab]
  int rows = 0, steps = 0;
};

template <typename T>
std::vector<T> read_as(const io::SafetensorsFile& f, const std::string& name) {
  const std::span<const std::byte> b = f.bytes(name);
  std::vector<T> out(b.size() / sizeof(T));
  std::memcpy(out.data(), b.data(), b.size());
  return out;
}

Fixture read_fixture(const std::string& dir) {
  Fixture fx;
  const nlohmann::json c = io::read_json_file(dir + "/case.json");
  fx.rows = c["rows"].get<int>();
  fx.steps = c["steps"].get<int>();
  const io::SafetensorsFile in(dir + "/inputs.safetensors");
  fx.hidden = read_as<float>(in, "hidden_states");
  for (int64_t id : read_as<int64_t>(in, "input_ids")) fx.ids.push_back(int32_t(id));
  fx.logits = read_as<float>(io::SafetensorsFile(dir + "/logits.safetensors"), "logits");
  return fx;
}

class Eagle3Head : public ::testing::TestWithParam<const char*> {};

TEST_P(Eagle3Head, DraftLogitsEqualSpeculators) {
  const std::string dir = test::fixture_path(std::string("eagle3/") + GetParam());
  const io::Eagle3Checkpoint ck = io::read_eagle3_checkpoint(dir);
  const loader::Eagle3HostWeights w = loader::load_eagle3_host_weights(dir, ck);
  const Fixture fx = read_fixture(dir);
  cpu::CpuOps ops(1);
  model::Eagle3Head head(ck.config, w, ops);
  const int64_t h = ck.config.layer.hidden_size, vd = ck.config.draft_vocab_size;
  const int block_size = 4;
  const int64_t blocks = (fx.rows + fx.steps + block_size - 1) / block_size;
  double worst = 0.0, scale = 0.0;
  int near_ties = 0;
  for (int j = 0; j < fx.rows; ++j) {
    // A fresh cache for the chain that starts at row j.
    std::unique_ptr<backend::KvCache> cache =
        ops.make_kv_cache(head.kv_cache_shape(block_size, blocks), {backend::KvLayerFormat{ElementType::kF32}});
    std::vector<int64_t> table(static_cast<size_t>(blocks));
    for (int64_t b = 0; b < blocks; ++b) table[size_t(b)] = b;
    std::vector<float> carried;  // the hidden state row j hands to its next step
    for (int s = 0; s < fx.steps; ++s) {
      ops.reset_scratch();
      const bool first = s == 0;
      const int n = first ? j + 1 : 1;
      std::vector<int32_t> tokens(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) tokens[size_t(i)] = fx.ids[size_t(first ? i : j + s)];
      const model::SequenceInput seq{tokens, first ? 0 : j + s, table, true};
      // The CPU backend's activations are float32 host rows: the inputs are written in place.
      std::vector<backend::Tensor> input;
      if (first) {
        for (int a = 0; a < 3; ++a) {  // the three auxiliary states, columns a·H … of the fixture's rows
          input.push_back(ops.alloc(n, h));
          auto* in = static_cast<float*>(input.back().data);
          for (int r = 0; r < n; ++r)
            std::copy_n(fx.hidden.begin() + (int64_t(r) * 3 + a) * h, h, in + int64_t(r) * h);
        }
      } else {
        input.push_back(ops.alloc(1, h));
        std::copy(carried.begin(), carried.end(), static_cast<float*>(input.back().data));
      }
      const model::Eagle3Head::Output out = head.step({&seq, 1}, input, first, *cache);
      std::vector<float> logits(size_t(out.logits.rows * out.logits.cols)), hidden(size_t(out.hidden.rows * h));
      ops.to_host(out.logits, logits);
      ops.to_host(out.hidden, hidden);
      carried.assign(hidden.end() - h, hidden.end());
      const float* got = logits.data() + (int64_t(n) - 1) * vd;  // row j's (the chain's last row)
      const float* want = fx.logits.data() + (int64_t(s) * fx.rows + j) * vd;
      for (int64_t v = 0; v < vd; ++v) {
        worst = std::max(worst, std::fabs(double(got[v]) - double(want[v])));
        scale = std::max(scale, std::fabs(double(want[v])));
      }
      // The draft token equals the reference's argmax, but where the reference's two best are
      // closer than the bound below (a near tie either rounding may break).
      std::vector<float> sorted(want, want + vd);
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
      const double row_max = std::max(std::fabs(double(sorted[0])), 1e-30);
      if (double(sorted[0]) - double(sorted[1]) > 2 * 0x1p-8 * row_max)
        EXPECT_EQ(std::max_element(got, got + vd) - got, std::max_element(want, want + vd) - want)
            << "chain " << j << " step " << s;
      else
        ++near_ties;
    }
  }
  // The reference runs in float32; the backend rounds each op's output to BF16 as the served model
  // does (as the dense models' tests, test_model_logits.cpp): the same bound, 2^-8 of the largest
  // logit (measured: 1.3e-4 … 4.6e-4 of it).
  EXPECT_LE(worst, 0x1p-8 * scale) << "max |Δ| " << worst << " of max |logit| " << scale;
  EXPECT_LE(near_ties, fx.rows * fx.steps / 10) << "near ties";
  std::printf("%s: max |Δlogit| %.3g of max |logit| %.3g, %d near ties of %d rows\n", GetParam(), worst, scale,
              near_ties, fx.rows * fx.steps);
}

INSTANTIATE_TEST_SUITE_P(Speculators, Eagle3Head,
                         ::testing::Values("llama_basic", "llama_norm_before_residual", "llama_norm_output_fc_norm"));

}  // namespace
}  // namespace fp8lm
