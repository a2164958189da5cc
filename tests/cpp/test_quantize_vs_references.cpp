// Quantized tensors against compressed-tensors (LLM Compressor's library) and
// vLLM's dynamic activation formulas: every FP8 byte and every scale bit, for
// every granularity, on every kernel table; dequantization against PyTorch.
#include <gtest/gtest.h>

#include "fixtures.h"
#include "numerics/quantize.h"

// A namespace of its own: the test program compiles as unity units.
namespace fp8lm::quantize_references {
namespace {

using test::read_array;

constexpr const char* kDir = "numerics";

ScaleLayout parse_layout(const nlohmann::json& j) {
  const std::string g = j["granularity"];
  if (g == "tensor") return ScaleLayout::tensor();
  if (g == "channel") return ScaleLayout::channel();
  if (g == "token") return ScaleLayout::token();
  if (g == "group") return ScaleLayout::group(j["group_cols"].get<int64_t>());
  if (g == "block") return ScaleLayout::block(j["group_rows"].get<int64_t>(), j["group_cols"].get<int64_t>());
  throw std::runtime_error("unknown granularity " + g);
}

ScaleRule parse_rule(const nlohmann::json& j, Fp8Format format) {
  const std::string preset = j["preset"];
  ScaleRule r;
  if (preset == "runtime" || preset == "static") r = ScaleRule::runtime(format);
  else if (preset == "vllm_group") r = ScaleRule::vllm_group();
  else if (preset == "compressed_tensors")
    r = ScaleRule::compressed_tensors(j["model_dtype"] == "bf16" ? HighPrecision::kBF16 : HighPrecision::kF32);
  else throw std::runtime_error("unknown rule preset " + preset);
  r.power_of_two = j.value("power_of_two", false);
  return r;
}

struct Case {
  nlohmann::json meta;
  std::vector<float> input_f32;
  std::vector<uint16_t> input_bf16;
  QuantSpec spec;

  MatrixView view() const {
    const int64_t rows = meta["rows"], cols = meta["cols"];
    return meta["input_dtype"] == "bf16" ? MatrixView::bf16(input_bf16.data(), rows, cols)
                                         : MatrixView::f32(input_f32.data(), rows, cols);
  }
};

std::vector<Case> load_cases() {
  std::vector<Case> cases;
  const nlohmann::json manifest = test::read_manifest(kDir);
  for (const auto& m : manifest["quantized"]) {
    Case c;
    c.meta = m;
    if (m["input_dtype"] == "bf16") c.input_bf16 = read_array<uint16_t>(kDir, m["input"]);
    else c.input_f32 = read_array<float>(kDir, m["input"]);
    c.spec.format = test::parse_format(m["format"]);
    c.spec.layout = parse_layout(m["layout"]);
    c.spec.rule = parse_rule(m["rule"], c.spec.format);
    cases.push_back(std::move(c));
  }
  return cases;
}

void expect_same_bytes(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                       const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i] && ++bad <= 5)
      ADD_FAILURE() << what << " code " << i << ": got 0x" << std::hex << int(got[i]) << " want 0x" << int(want[i]);
  EXPECT_EQ(bad, 0u) << what;
}

TEST(QuantizeVsReferences, CodesAndScalesBitExact) {
  const std::vector<Case> cases = load_cases();
  ASSERT_GE(cases.size(), 17u);
  for (const Case& c : cases) {
    const std::string name = c.meta["name"];
    const auto want_scales = read_array<float>(kDir, c.meta["scales"]);
    const auto want_codes = read_array<uint8_t>(kDir, c.meta["codes"]);
    for (KernelChoice k : test::usable_kernel_choices()) {
      const std::string what = name + " [" + test::kernel_name(k) + "]";
      QuantizedMatrix q = c.meta["rule"]["preset"] == "static"
                              ? quantize_static(c.view(), c.spec, want_scales, k)
                              : quantize_dynamic(c.view(), c.spec, k);
      ASSERT_EQ(q.scales.size(), want_scales.size()) << what;
      const std::vector<int64_t> shape = c.meta["scale_shape"];
      if (shape.size() == 2) {
        EXPECT_EQ(q.scale_rows, shape[0]) << what;
        EXPECT_EQ(q.scale_cols, shape[1]) << what;
      }
      for (size_t i = 0; i < want_scales.size(); ++i)
        EXPECT_EQ(test::bits(q.scales[i]), test::bits(want_scales[i]))
            << what << " scale " << i << ": " << q.scales[i] << " vs " << want_scales[i];
      expect_same_bytes(q.codes, want_codes, what);
    }
  }
}

TEST(QuantizeVsReferences, DequantizeMatchesTorch) {
  int checked = 0;
  for (const Case& c : load_cases()) {
    if (!c.meta.contains("dequant_f32")) continue;
    ++checked;
    const auto want_f32 = read_array<float>(kDir, c.meta["dequant_f32"]);
    const auto want_bf16 = read_array<uint16_t>(kDir, c.meta["dequant_bf16"]);
    QuantizedMatrix q = quantize_dynamic(c.view(), c.spec);
    q.codes = read_array<uint8_t>(kDir, c.meta["codes"]);  // dequantize torch's own codes
    q.scales = read_array<float>(kDir, c.meta["scales"]);
    for (KernelChoice k : test::usable_kernel_choices()) {
      const std::string what = std::string(c.meta["name"]) + " [" + test::kernel_name(k) + "]";
      const std::vector<float> f = dequantize_f32(q, k);
      const std::vector<uint16_t> b = dequantize_bf16(q, k);
      ASSERT_EQ(f.size(), want_f32.size()) << what;
      size_t bad = 0;
      for (size_t i = 0; i < f.size(); ++i) bad += test::bits(f[i]) != test::bits(want_f32[i]) || b[i] != want_bf16[i];
      EXPECT_EQ(bad, 0u) << what;
    }
  }
  EXPECT_EQ(checked, 6);
}

}  // namespace
}  // namespace fp8lm::quantize_references
