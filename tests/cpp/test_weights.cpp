// The weights layer (src/weights): the one element-type enum and every mapping
// to the edge enums, exact conversions, LinearWeight's validation messages
// (the texts backends and the loader report), concatenation of fused parts and
// the one weight quantizer.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "weights/element_type.h"
#include "weights/element_type_maps.h"
#include "weights/linear_weight.h"
#include "cpp/test_util.h"
#include "weights/quantize_weight.h"

namespace fp8lm {
namespace {

using test::expect_error;
using test::fp8_scheme;

constexpr ElementType kAll[] = {ElementType::kF32, ElementType::kBF16, ElementType::kF16, ElementType::kE4M3,
                                ElementType::kE5M2};

TEST(ElementType, NamesWidthsAndFp8Subset) {
  const char* names[] = {"f32", "bf16", "f16", "e4m3", "e5m2"};
  const size_t bytes[] = {4, 2, 2, 1, 1};
  for (size_t i = 0; i < std::size(kAll); ++i) {
    EXPECT_EQ(name(kAll[i]), names[i]);
    EXPECT_EQ(element_bytes(kAll[i]), bytes[i]);
    EXPECT_EQ(is_fp8(kAll[i]), i >= 3) << names[i];
  }
  for (Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2}) EXPECT_EQ(fp8_format(element_type(f)), f);
  EXPECT_EQ(element_type(Fp8Format::kE5M2), ElementType::kE5M2);
  expect_error([] { fp8_format(ElementType::kBF16); }, "element type bf16 is not an FP8 format");
}

TEST(ElementType, EveryEdgeMapping) {
  // safetensors dtypes: the five element types both ways, nothing else.
  for (ElementType e : kAll) EXPECT_EQ(element_type(dtype(e)), e) << name(e);
  EXPECT_EQ(dtype(ElementType::kE4M3), io::DType::kF8_E4M3);
  EXPECT_EQ(dtype(ElementType::kF16), io::DType::kF16);
  int mapped = 0;
  for (io::DType d : io::all_dtypes()) mapped += element_type(d).has_value() ? 1 : 0;
  EXPECT_EQ(mapped, 5);
  EXPECT_FALSE(element_type(io::DType::kF8_E4M3FNUZ).has_value());
  EXPECT_FALSE(element_type(io::DType::kI8).has_value());

  EXPECT_EQ(element_type(ModelDType::kBF16), ElementType::kBF16);
  EXPECT_EQ(element_type(ModelDType::kF16), ElementType::kF16);
  EXPECT_EQ(element_type(ModelDType::kF32), ElementType::kF32);

  EXPECT_EQ(kv_element_type(KvCacheDType::kAuto), ElementType::kBF16);
  EXPECT_EQ(kv_element_type(KvCacheDType::kBF16), ElementType::kBF16);
  EXPECT_EQ(kv_element_type(KvCacheDType::kF32), ElementType::kF32);
  EXPECT_EQ(kv_element_type(KvCacheDType::kFP8E4M3), ElementType::kE4M3);
  EXPECT_EQ(kv_element_type(KvCacheDType::kFP8E5M2), ElementType::kE5M2);

  EXPECT_EQ(high_precision(ElementType::kF32), HighPrecision::kF32);
  EXPECT_EQ(high_precision(ElementType::kBF16), HighPrecision::kBF16);
  expect_error([] { high_precision(ElementType::kF16); }, "f16 is not a quantizer input");
  expect_error([] { high_precision(ElementType::kE4M3); }, "e4m3 is not a quantizer input");
}

TEST(ElementType, ExactConversions) {
  EXPECT_EQ(f16_to_float(0x3C00), 1.0f);
  EXPECT_EQ(f16_to_float(0xC000), -2.0f);
  EXPECT_EQ(f16_to_float(0x7BFF), 65504.0f);
  EXPECT_EQ(f16_to_float(0x0001), 0x1p-24f);
  EXPECT_EQ(f16_to_float(0x83FF), -1023.0f * 0x1p-24f);
  EXPECT_TRUE(std::signbit(f16_to_float(0x8000)));
  EXPECT_TRUE(std::isinf(f16_to_float(0x7C00)));
  EXPECT_TRUE(std::isnan(f16_to_float(0x7E00)));

  const uint16_t half[] = {0x3C00, 0xC000, 0x0001};
  const uint16_t bf16[] = {0x3F80, 0xC040, 0x0001};
  const float f32[] = {1.5f, -0.0f, 3e-40f};
  float out[3];
  to_float(half, ElementType::kF16, 3, out);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], 0x1p-24f);
  to_float(bf16, ElementType::kBF16, 3, out);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -3.0f);
  EXPECT_EQ(out[2], bf16_to_float(0x0001));
  to_float(f32, ElementType::kF32, 3, out);
  EXPECT_EQ(0, std::memcmp(out, f32, sizeof(f32)));
  const uint8_t codes[] = {0x38};
  expect_error([&] { to_float(codes, ElementType::kE4M3, 1, out); }, "e4m3 values need their scales");
}

// The messages test_cpu_linear and the loaders' callers rely on, from validate().
TEST(LinearWeight, ValidateNamesWhatIsWrong) {
  std::vector<uint16_t> bf16(8 * 16, 0x3F80);
  const weights::LinearWeight w = weights::high_precision(ElementType::kBF16, bf16.data(), 8, 16);
  EXPECT_FALSE(w.is_fp8());
  expect_error([&] { weights::high_precision(ElementType::kBF16, bf16.data(), 0, 16); },
               "linear: weight shape must be positive, got [0, 16]");
  expect_error([&] { weights::high_precision(ElementType::kBF16, nullptr, 8, 16); }, "weight [8, 16] has no data");
  expect_error([&] { weights::high_precision(ElementType::kE4M3, bf16.data(), 8, 16); }, "FP8 weights need scales");
  weights::LinearWeight with_bias = w;
  with_bias.bias.assign(3, 0.0f);
  expect_error([&] { weights::validate(with_bias); }, "bias has 3 values, expected N = 8");
  weights::LinearWeight hp_w8a8 = w;
  hp_w8a8.activation = ActivationQuant::kDynamicTensor;
  expect_error([&] { weights::validate(hp_w8a8); },
               "activation quantization 'dynamic-tensor' needs FP8 weights, but the weight is high precision");

  std::vector<uint8_t> codes(8 * 16, 0x38);
  const LinearQuantScheme channel = fp8_scheme(ScaleLayout::channel(), ActivationQuant::kDynamicToken);
  expect_error([&] { weights::fp8(codes.data(), 8, 16, channel, {1.0f, 2.0f}); },
               "linear: weight [8, 16] with channel scales needs 8 weight scales, got 2");
  expect_error([&] { weights::fp8(codes.data(), 8, 16, channel, std::vector<float>(8, NAN)); },
               "weight scale 0 is nan");
  expect_error([&] { weights::fp8(codes.data(), 8, 16, channel, std::vector<float>(8, -1.0f)); },
               "(must be finite and >= 0)");
  const LinearQuantScheme stat = fp8_scheme(ScaleLayout::tensor(), ActivationQuant::kStaticTensor);
  expect_error([&] { weights::fp8(codes.data(), 8, 16, stat, {1.0f}); }, "missing input_scale");
  LinearQuantScheme capped = channel;
  capped.activation_scale_upper_bound = -1.0f;
  expect_error([&] { weights::fp8(codes.data(), 8, 16, capped, std::vector<float>(8, 1.0f)); },
               "activation scale upper bound must be finite and >= 0");
  LinearQuantScheme zero_group = fp8_scheme(ScaleLayout::tensor(), ActivationQuant::kDynamicGroup);
  zero_group.activation_group = 0;
  expect_error([&] { weights::fp8(codes.data(), 8, 16, zero_group, {1.0f}); }, "activation group must be > 0");
  LinearQuantScheme odd_group = fp8_scheme(ScaleLayout::block(128, 128), ActivationQuant::kDynamicGroup);
  odd_group.activation_group = 96;
  expect_error([&] { weights::fp8(codes.data(), 8, 16, odd_group, {1.0f}); },
               "activation group 96 and weight scale block width 128 along K do not nest");
  LinearQuantScheme unquantized;
  expect_error([&] { weights::fp8(codes.data(), 8, 16, unquantized, {1.0f}); }, "not quantized");

  const weights::LinearWeight ok = weights::fp8(codes.data(), 8, 16, stat, {0.5f}, 0.25f);
  EXPECT_EQ(ok.element, ElementType::kE4M3);
  EXPECT_EQ(ok.format(), Fp8Format::kE4M3);
  EXPECT_EQ(ok.input_scale, 0.25f);
}

TEST(LinearWeight, KSegmentIsTheFinerScaleCell) {
  std::vector<uint8_t> codes(256 * 512, 0x38);
  auto segment = [&](ScaleLayout layout, ActivationQuant a, int64_t group) {
    LinearQuantScheme s = fp8_scheme(layout, a);
    s.activation_group = group;
    const int64_t count = layout.scale_rows(256) * layout.scale_cols(512);
    return weights::k_segment(weights::fp8(codes.data(), 256, 512, s, std::vector<float>(size_t(count), 1.0f)));
  };
  EXPECT_EQ(segment(ScaleLayout::channel(), ActivationQuant::kDynamicToken, 128), 0);
  EXPECT_EQ(segment(ScaleLayout::block(128, 128), ActivationQuant::kDynamicGroup, 128), 128);
  EXPECT_EQ(segment(ScaleLayout::block(128, 128), ActivationQuant::kDynamicGroup, 64), 64);
  EXPECT_EQ(segment(ScaleLayout::block(128, 128), ActivationQuant::kDynamicToken, 128), 128);
  EXPECT_EQ(segment(ScaleLayout::tensor(), ActivationQuant::kDynamicGroup, 32), 32);
}

TEST(LinearWeight, ResidentBytesAndEmbeddingScheme) {
  std::vector<float> f32(4 * 8, 1.0f);
  weights::LinearWeight w = weights::high_precision(ElementType::kF32, f32.data(), 4, 8);
  w.bias.assign(4, 0.0f);
  EXPECT_EQ(w.resident_bytes(), 4u * 8u * 4u + 4u * 4u);
  std::vector<uint8_t> codes(4 * 8, 0x38);
  const weights::LinearWeight q = weights::fp8(codes.data(), 4, 8, weights::per_row_embedding_scheme(),
                                               std::vector<float>(4, 1.0f));
  EXPECT_EQ(q.resident_bytes(), 4u * 8u + 4u * 4u);

  const LinearQuantScheme e = weights::per_row_embedding_scheme();
  EXPECT_TRUE(e.quantized);
  EXPECT_FALSE(e.weights_serialized);
  EXPECT_EQ(e.weight_format, Fp8Format::kE4M3);
  EXPECT_EQ(e.weight_scales, ScaleLayout::channel());
  EXPECT_EQ(e.activation, ActivationQuant::kNone);
}

// q/k/v parts of different scale granularity: the stack has one scale per output row (a tensor
// scale repeated), biases filled with zeros, and no elements of its own (a backend copies the
// parts' to their rows).
TEST(LinearWeight, StackRowsOfTensorAndChannelScales) {
  std::vector<uint8_t> a(2 * 4), b(3 * 4);
  for (size_t i = 0; i < a.size(); ++i) a[i] = uint8_t(i + 1);
  for (size_t i = 0; i < b.size(); ++i) b[i] = uint8_t(100 + i);
  LinearQuantScheme tensor = fp8_scheme(ScaleLayout::tensor(), ActivationQuant::kDynamicToken);
  LinearQuantScheme channel = fp8_scheme(ScaleLayout::channel(), ActivationQuant::kDynamicToken);
  weights::LinearWeight parts[] = {weights::fp8(a.data(), 2, 4, tensor, {0.5f}),
                                   weights::fp8(b.data(), 3, 4, channel, {1.0f, 2.0f, 3.0f})};
  parts[1].bias = {7.0f, 8.0f, 9.0f};
  const weights::LinearWeight f = weights::stack_rows(parts);
  EXPECT_EQ(f.n, 5);
  EXPECT_EQ(f.k, 4);
  EXPECT_EQ(f.element, ElementType::kE4M3);
  EXPECT_EQ(f.scale_layout, ScaleLayout::channel());
  EXPECT_EQ(f.scales, (std::vector<float>{0.5f, 0.5f, 1.0f, 2.0f, 3.0f}));
  EXPECT_EQ(f.bias, (std::vector<float>{0.0f, 0.0f, 7.0f, 8.0f, 9.0f}));
  EXPECT_EQ(f.activation, ActivationQuant::kDynamicToken);
  EXPECT_EQ(f.data, nullptr);
  EXPECT_EQ(f.owner, nullptr);
  weights::validate_layout(f);
  expect_error([&] { weights::validate(f); }, "weight [5, 4] has no data");
  weights::LinearWeight bad = f;
  bad.scales.pop_back();
  expect_error([&] { weights::validate_layout(bad); }, "needs 5 weight scales, got 4");

  // High precision: no scales, no bias when none has one.
  std::vector<float> x(2 * 3, 1.0f), y(1 * 3, 2.0f);
  const weights::LinearWeight hp[] = {weights::high_precision(ElementType::kF32, x.data(), 2, 3),
                                      weights::high_precision(ElementType::kF32, y.data(), 1, 3)};
  const weights::LinearWeight g = weights::stack_rows(hp);
  EXPECT_EQ(g.n, 3);
  EXPECT_EQ(g.element, ElementType::kF32);
  EXPECT_TRUE(g.scales.empty());
  EXPECT_TRUE(g.bias.empty());
  weights::validate_layout(g);

  const weights::LinearWeight mixed[] = {hp[0], parts[0]};
  expect_error([&] { weights::stack_rows(mixed); }, "different K or element types");
}

TEST(LinearWeight, StackRowsKeepsBlockScaleRows) {
  std::vector<uint8_t> a(128 * 256, 1), b(256 * 256, 2);
  const LinearQuantScheme block = fp8_scheme(ScaleLayout::block(128, 128), ActivationQuant::kDynamicGroup);
  const weights::LinearWeight parts[] = {weights::fp8(a.data(), 128, 256, block, {1.0f, 2.0f}),
                                         weights::fp8(b.data(), 256, 256, block, {3.0f, 4.0f, 5.0f, 6.0f})};
  const weights::LinearWeight f = weights::stack_rows(parts);
  EXPECT_EQ(f.scale_layout, ScaleLayout::block(128, 128));
  EXPECT_EQ(f.scales, (std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}));
  weights::validate_layout(f);
}

// The one weight quantizer: compressed-tensors' rule in the weight's dtype.
TEST(QuantizeWeight, CompressedTensorsRuleInTheWeightsDtype) {
  std::mt19937 gen(7);
  std::normal_distribution<float> d(0.0f, 0.05f);
  const int64_t n = 16, k = 256;
  std::vector<float> f(size_t(n * k));
  for (float& v : f) v = d(gen);
  std::vector<uint16_t> bf(f.size());
  for (size_t i = 0; i < f.size(); ++i) bf[i] = float_to_bf16(f[i]);
  for (ScaleLayout layout : {ScaleLayout::tensor(), ScaleLayout::channel(), ScaleLayout::block(128, 128)}) {
    const LinearQuantScheme s = fp8_scheme(layout, ActivationQuant::kNone);
    for (const MatrixView& view : {MatrixView::f32(f.data(), n, k), MatrixView::bf16(bf.data(), n, k)}) {
      const QuantSpec spec = weights::weight_quant_spec(s, view.dtype);
      EXPECT_EQ(spec.format, Fp8Format::kE4M3);
      EXPECT_EQ(spec.layout, layout);
      const QuantSpec want{Fp8Format::kE4M3, layout, ScaleRule::compressed_tensors(view.dtype)};
      const QuantizedMatrix got = weights::quantize_weight(view, s);
      const QuantizedMatrix ref = quantize_dynamic(view, want);
      EXPECT_EQ(got.codes, ref.codes);
      ASSERT_EQ(got.scales.size(), ref.scales.size());
      for (size_t i = 0; i < ref.scales.size(); ++i) EXPECT_EQ(got.scales[i], ref.scales[i]) << i;
      // Its result becomes a weight that owns the codes, valid as is.
      const weights::LinearWeight w = weights::from_quantized(got, s);
      EXPECT_NE(w.owner, nullptr);
      EXPECT_EQ(0, std::memcmp(w.data, got.codes.data(), got.codes.size()));
      EXPECT_EQ(w.scales, got.scales);
    }
  }
  // BF16 and float32 differ in the rule's arithmetic (scale rounded to BF16 first).
  EXPECT_NE(weights::weight_quant_spec(fp8_scheme(ScaleLayout::tensor(), ActivationQuant::kNone), HighPrecision::kBF16)
                .rule.arithmetic,
            HighPrecision::kF32);
  expect_error([&] { weights::quantize_weight(MatrixView::f32(f.data(), n, k), LinearQuantScheme{}); },
               "quantize_weight: the scheme is not quantized");
  LinearQuantScheme e5 = fp8_scheme(ScaleLayout::tensor(), ActivationQuant::kNone);
  const QuantizedMatrix e4 = weights::quantize_weight(MatrixView::f32(f.data(), n, k), e5);
  e5.weight_format = Fp8Format::kE5M2;
  expect_error([&] { weights::from_quantized(e4, e5); }, "is not in the scheme's weight format and layout");
}

}  // namespace
}  // namespace fp8lm
