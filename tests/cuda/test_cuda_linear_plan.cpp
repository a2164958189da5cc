// The CUDA backend's plan per linear layer (src/backend/cuda/linear_plan.h):
// for every checkpoint fixture, the plans its linear layers get, as one golden
// table; the schemes the backend refuses, with their messages; the fuse
// policy. plan_linear and can_fuse are host code: no GPU is needed.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "backend/cuda/linear_plan.h"
#include "common/error.h"
#include "cpp/checkpoint_fixtures.h"
#include "cpp/test_util.h"
#include "io/model_spec.h"
#include "weights/linear_weight.h"

namespace fp8lm::cuda {
namespace {

using test::fp8_scheme;

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Scales of `layout` for an [n, k] weight, all 1 (the plan reads their layout, not their values).
std::vector<float> unit_scales(const ScaleLayout& layout, int64_t n, int64_t k) {
  switch (layout.granularity) {
    case Granularity::kTensor: return std::vector<float>(1, 1.0f);
    case Granularity::kChannel: return std::vector<float>(size_t(n), 1.0f);
    case Granularity::kBlock:
      return std::vector<float>(size_t(cdiv(n, layout.group_rows) * cdiv(k, layout.group_cols)), 1.0f);
    case Granularity::kGroup: return std::vector<float>(size_t(n * cdiv(k, layout.group_cols)), 1.0f);
    case Granularity::kToken: break;
  }
  return {};
}

// A host weight of `scheme` on [n, k]; `codes` must hold n × k bytes (BF16: 2 n k).
weights::LinearWeight host_weight(const LinearQuantScheme& scheme, int64_t n, int64_t k,
                                  const std::vector<uint8_t>& codes) {
  if (!scheme.quantized) return weights::high_precision(ElementType::kBF16, codes.data(), n, k);
  const float input_scale = scheme.activation == ActivationQuant::kStaticTensor ? 0.5f : 0.0f;
  return weights::fp8(codes.data(), n, k, scheme, unit_scales(scheme.weight_scales, n, k), input_scale);
}

std::string plan_of(const LinearQuantScheme& scheme, int64_t n, int64_t k) {
  const std::vector<uint8_t> codes(size_t(n * k * 2));
  return plan_linear(host_weight(scheme, n, k, codes)).describe();
}

// Every fixture's linear layers → the distinct plans they get (the BF16 lines:
// layers the checkpoint leaves unquantized, lm_head mostly). A change here
// means a scheme now runs other kernels on the GPU: say why in the commit.
TEST(CudaLinearPlan, FixtureTable) {
  const std::map<std::string, std::set<std::string>> expected = {
      {"ct_fp8_block_qwen3_moe",
       {"bf16 | cublaslt bf16",
        "w8a8 e4m3 w:block128x128 a:dynamic-group128 | m<=8 gemv | m>8 cublaslt block (m%4 rows gemv)"}},
      {"ct_fp8_dynamic_llama",
       {"bf16 | cublaslt bf16", "w8a8 e4m3 w:channel a:dynamic-token | m<=8 gemv | m>8 cublaslt outer-vector"}},
      {"ct_fp8_static_kv_qwen3", {"w8a8 e4m3 w:tensor a:static-tensor | m<=8 gemv | m>8 cublaslt tensor"}},
      {"fbgemm_fp8_llama",
       {"bf16 | cublaslt bf16",
        "w8a8 e4m3 w:channel a:dynamic-token ub=1200 | m<=8 gemv | m>8 cublaslt outer-vector"}},
      {"hf_fp8_block_llama",
       {"bf16 | cublaslt bf16",
        "w8a8 e4m3 w:block128x128 a:dynamic-group128 | m<=8 gemv | m>8 cublaslt block (m%4 rows gemv)"}},
      {"llama_bf16", {"bf16 | cublaslt bf16"}},
      {"mistral_bf16", {"bf16 | cublaslt bf16"}},
      {"mixtral_bf16", {"bf16 | cublaslt bf16"}},
      {"modelopt_fp8_llama",
       {"bf16 | cublaslt bf16", "w8a8 e4m3 w:tensor a:static-tensor | m<=8 gemv | m>8 cublaslt tensor"}},
      {"qwen2_bf16", {"bf16 | cublaslt bf16"}},
      {"qwen3_bf16", {"bf16 | cublaslt bf16"}},
      {"qwen3_moe_bf16", {"bf16 | cublaslt bf16"}},
  };
  std::map<std::string, std::set<std::string>> got;
  for (const std::string& name : test::checkpoint_fixture_names()) {
    const io::ModelSpec spec = io::read_model_spec(test::checkpoint_fixture(name));
    std::set<std::string>& plans = got[name];
    for (const io::LinearLayerSpec& l : spec.linears)
      plans.insert(plan_of(l.scheme, l.module.out_features, l.module.in_features));
  }
  EXPECT_EQ(got, expected);
}

// What cuBLASLt cannot take, and W8A16 / dynamic per-tensor, which no fixture has.
TEST(CudaLinearPlan, SchemesWithoutFixture) {
  EXPECT_EQ(plan_of(fp8_scheme(ScaleLayout::channel(), ActivationQuant::kNone), 256, 256),
            "w8a16 e4m3 w:channel | m<=16 gemv | m>16 dequantize + cublaslt bf16");
  EXPECT_EQ(plan_of(fp8_scheme(ScaleLayout::block(), ActivationQuant::kNone), 256, 256),
            "w8a16 e4m3 w:block128x128 | m<=16 gemv | m>16 dequantize + cublaslt bf16");
  EXPECT_EQ(plan_of(fp8_scheme(ScaleLayout::tensor(), ActivationQuant::kDynamicTensor), 256, 256),
            "w8a8 e4m3 w:tensor a:dynamic-tensor | m<=8 gemv | m>8 cublaslt tensor");
  EXPECT_EQ(plan_of(fp8_scheme(ScaleLayout::tensor(), ActivationQuant::kDynamicToken), 256, 256),
            "w8a8 e4m3 w:tensor a:dynamic-token | m<=8 gemv | m>8 cublaslt outer-vector");
  EXPECT_EQ(plan_of(fp8_scheme(ScaleLayout::channel(), ActivationQuant::kStaticTensor), 256, 256),
            "w8a8 e4m3 w:channel a:static-tensor | m<=8 gemv | m>8 cublaslt outer-vector");
  // k % 16 ≠ 0 (or n % 8 ≠ 0): off cuBLASLt's alignment, the GEMV 16 rows at a time.
  EXPECT_EQ(plan_of(fp8_scheme(ScaleLayout::channel(), ActivationQuant::kDynamicToken), 256, 264),
            "w8a8 e4m3 w:channel a:dynamic-token | m<=8 gemv | m>8 gemv x16 (cublaslt outer-vector: shape unaligned)");
  EXPECT_EQ(plan_of(fp8_scheme(ScaleLayout::block(), ActivationQuant::kDynamicGroup), 258, 256),
            "w8a8 e4m3 w:block128x128 a:dynamic-group128 | m<=8 gemv | m>8 gemv x16 (cublaslt block: shape unaligned)");
  // Scale pairings cuBLASLt has no mode for.
  EXPECT_EQ(plan_of(fp8_scheme(ScaleLayout::block(), ActivationQuant::kDynamicToken), 256, 256),
            "w8a8 e4m3 w:block128x128 a:dynamic-token | m<=8 gemv | m>8 gemv x16");
  EXPECT_EQ(plan_of(fp8_scheme(ScaleLayout::channel(), ActivationQuant::kDynamicGroup), 256, 256),
            "w8a8 e4m3 w:channel a:dynamic-group128 | m<=8 gemv | m>8 gemv x16");
}

TEST(CudaLinearPlan, PlanFields) {
  const std::vector<uint8_t> codes(256 * 256);
  const LinearPlan block =
      plan_linear(host_weight(fp8_scheme(ScaleLayout::block(), ActivationQuant::kDynamicGroup), 256, 256, codes));
  EXPECT_TRUE(block.fp8);
  EXPECT_EQ(block.gemv_max_rows, kGemvRowsW8A8);
  EXPECT_EQ(block.large_rows, LargeRows::kCublasFp8);
  EXPECT_EQ(block.gemm_mode, GemmScaleMode::kBlock);
  EXPECT_TRUE(block.gemm_cublas_block_scales);
  EXPECT_FALSE(block.gemm_channel_scales);
  EXPECT_EQ(block.x_layout, ActivationScaleLayout::kGroup128);
  // Unaligned: cuBLASLt is out, but its scale grid is still prepared (as before the plan).
  const LinearPlan unaligned =
      plan_linear(host_weight(fp8_scheme(ScaleLayout::tensor(), ActivationQuant::kDynamicToken), 256, 264,
                              std::vector<uint8_t>(256 * 264)));
  EXPECT_EQ(unaligned.large_rows, LargeRows::kGemvChunks);
  EXPECT_EQ(unaligned.gemm_mode, GemmScaleMode::kOuterVector);
  EXPECT_TRUE(unaligned.gemm_channel_scales);
  // The static scale is a device pointer: upload_linear fills it, the plan leaves it empty.
  const LinearPlan stat =
      plan_linear(host_weight(fp8_scheme(ScaleLayout::tensor(), ActivationQuant::kStaticTensor), 256, 256, codes));
  EXPECT_EQ(stat.act_quant.granularity, Granularity::kTensor);
  EXPECT_EQ(stat.act_quant.static_scale, nullptr);
  const LinearPlan bf16 = plan_linear(host_weight(LinearQuantScheme{}, 16, 16, std::vector<uint8_t>(512)));
  EXPECT_FALSE(bf16.fp8);
  EXPECT_EQ(bf16.gemv_max_rows, 0);
  EXPECT_EQ(bf16.large_rows, LargeRows::kCublasBf16);
}

// The measured CUTLASS ranges (linear_plan.cpp's kCutlassMeasured) reach the Llama-3.1-8B
// shapes and the per-token × per-channel pairing they were measured on, and nothing else: not
// another shape, not another pairing (block-scaled layers stay on cuBLASLt), not a layer with bias.
TEST(CudaLinearPlan, MeasuredCutlassRangesOnlyOnTheirShapes) {
#ifndef FP8LM_WITH_CUTLASS
  GTEST_SKIP() << "built without CUTLASS";
#else
  const LinearQuantScheme channel = fp8_scheme(ScaleLayout::channel(), ActivationQuant::kDynamicToken);
  const LinearQuantScheme block = fp8_scheme(ScaleLayout::block(), ActivationQuant::kDynamicGroup);
  const auto plan = [](const LinearQuantScheme& s, int64_t n, int64_t k) {
    return plan_linear(host_weight(s, n, k, std::vector<uint8_t>(size_t(n * k))));
  };
  const LinearPlan down = plan(channel, 4096, 14336);
  ASSERT_NE(down.cutlass_at(9), nullptr);
  EXPECT_EQ(down.cutlass_at(9)->config, CutlassFp8Config::kStreamK128x128);
  EXPECT_NE(down.cutlass_at(256), nullptr);
  EXPECT_EQ(down.cutlass_at(8), nullptr);  // the GEMV's rows
  EXPECT_EQ(down.cutlass_at(1024), nullptr);
  EXPECT_EQ(down.describe(),
            "w8a8 e4m3 w:channel a:dynamic-token | m<=8 gemv | m>8 cublaslt outer-vector | m in [9, 288] cutlass "
            "stream-k");
  const LinearPlan gate_up = plan(channel, 28672, 4096);
  ASSERT_NE(gate_up.cutlass_at(96), nullptr);
  EXPECT_EQ(gate_up.cutlass_at(96)->config, CutlassFp8Config::kPingpong64x128);
  EXPECT_EQ(gate_up.cutlass_at(97), nullptr);
  // Another shape; the measured shapes block-scaled; another pairing (per-tensor × per-tensor);
  // a bias: cuBLASLt everywhere.
  for (const LinearPlan& p : {plan(channel, 4096, 4000), plan(block, 6144, 4096), plan(block, 28672, 4096),
                              plan(block, 4096, 14336),
                              plan(fp8_scheme(ScaleLayout::tensor(), ActivationQuant::kDynamicTensor), 4096, 14336)}) {
    for (const int64_t m : {16, 64, 1024, 16384}) EXPECT_EQ(p.cutlass_at(m), nullptr) << m << ": " << p.describe();
  }
  EXPECT_EQ(plan(block, 6144, 4096).describe(),
            "w8a8 e4m3 w:block128x128 a:dynamic-group128 | m<=8 gemv | m>8 cublaslt block (m%4 rows gemv)");
  weights::LinearWeight with_bias = host_weight(channel, 4096, 14336, std::vector<uint8_t>(size_t(4096) * 14336));
  with_bias.bias.assign(4096, 0.5f);
  EXPECT_EQ(plan_linear(with_bias).cutlass_at(64), nullptr);
#endif
}

void expect_error(const weights::LinearWeight& w, const std::string& message) {
  try {
    plan_linear(w);
    ADD_FAILURE() << "no error; expected: " << message;
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

TEST(CudaLinearPlan, RefusedSchemes) {
  const std::vector<uint8_t> codes(256 * 256);
  LinearQuantScheme e5m2 = fp8_scheme(ScaleLayout::channel(), ActivationQuant::kDynamicToken);
  e5m2.weight_format = Fp8Format::kE5M2;
  expect_error(host_weight(e5m2, 256, 256, codes), "cuda ops: FP8 weights must be E4M3 (the tensor cores' format)");
  expect_error(host_weight(fp8_scheme(ScaleLayout::block(64, 128), ActivationQuant::kDynamicGroup), 256, 256, codes),
               "cuda ops: FP8 weight blocks of 64x128 are not supported (the CUDA backend runs 128x128)");
  expect_error(host_weight(fp8_scheme(ScaleLayout::group(128), ActivationQuant::kNone), 256, 256, codes),
               "cuda ops: FP8 weights with group scales are not supported on CUDA");
  LinearQuantScheme group64 = fp8_scheme(ScaleLayout::block(), ActivationQuant::kDynamicGroup);
  group64.activation_group = 64;
  expect_error(host_weight(group64, 256, 256, codes),
               "cuda ops: activation groups of 64 are not supported (the CUDA backend runs 1x128)");
  // weights::validate's own refusals come first, unchanged.
  weights::LinearWeight no_scale =
      host_weight(fp8_scheme(ScaleLayout::tensor(), ActivationQuant::kStaticTensor), 256, 256, codes);
  no_scale.input_scale = 0.0f;
  EXPECT_THROW(plan_linear(no_scale), Error);
}

TEST(CudaLinearPlan, CanFuse) {
  const std::vector<uint8_t> codes(512 * 256 * 2);
  const LinearQuantScheme token = fp8_scheme(ScaleLayout::channel(), ActivationQuant::kDynamicToken);
  const LinearQuantScheme token_tensor = fp8_scheme(ScaleLayout::tensor(), ActivationQuant::kDynamicToken);
  const LinearQuantScheme block = fp8_scheme(ScaleLayout::block(), ActivationQuant::kDynamicGroup);
  const LinearQuantScheme bf16{};
  using Parts = std::vector<weights::LinearWeight>;
  EXPECT_FALSE(can_fuse(Parts{host_weight(token, 256, 256, codes)}));  // one part: nothing to fuse
  EXPECT_TRUE(can_fuse(Parts{host_weight(bf16, 256, 256, codes), host_weight(bf16, 128, 256, codes)}));
  // Tensor and channel weight scales mix (tensor becomes channel rows).
  EXPECT_TRUE(can_fuse(Parts{host_weight(token, 256, 256, codes), host_weight(token_tensor, 128, 256, codes)}));
  EXPECT_TRUE(can_fuse(Parts{host_weight(block, 256, 256, codes), host_weight(block, 128, 256, codes)}));
  // Block scales need every part's n to be a multiple of 128.
  EXPECT_FALSE(can_fuse(Parts{host_weight(block, 256, 256, codes), host_weight(block, 192, 256, codes)}));
  // Block and non-block scales, other k, other element type, other activation quantization.
  EXPECT_FALSE(can_fuse(Parts{host_weight(block, 256, 256, codes), host_weight(token, 256, 256, codes)}));
  EXPECT_FALSE(can_fuse(Parts{host_weight(token, 256, 256, codes), host_weight(token, 256, 128, codes)}));
  EXPECT_FALSE(can_fuse(Parts{host_weight(bf16, 256, 256, codes), host_weight(token, 256, 256, codes)}));
  EXPECT_FALSE(can_fuse(Parts{host_weight(token, 256, 256, codes),
                              host_weight(fp8_scheme(ScaleLayout::channel(), ActivationQuant::kDynamicTensor), 256,
                                          256, codes)}));
  // Static input scales must be equal.
  const LinearQuantScheme stat = fp8_scheme(ScaleLayout::tensor(), ActivationQuant::kStaticTensor);
  Parts parts{host_weight(stat, 256, 256, codes), host_weight(stat, 256, 256, codes)};
  EXPECT_TRUE(can_fuse(parts));
  parts[1].input_scale = 0.25f;
  EXPECT_FALSE(can_fuse(parts));
}

}  // namespace
}  // namespace fp8lm::cuda
