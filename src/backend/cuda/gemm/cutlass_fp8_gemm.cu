// The CUTLASS FP8 GEMM (cutlass_fp8_gemm.h): the argument checks every configuration shares,
// then the configuration's own plan and launch (cutlass_fp8_gemm_<config>.cu).
#include "backend/cuda/gemm/cutlass_fp8_gemm.h"

#include <climits>

#include "backend/cuda/gemm/cutlass_fp8_gemm_configs.h"
#include "backend/cuda/common/device_helpers.cuh"
#include "common/error.h"

namespace fp8lm::cuda {
namespace {

using cutlass_fp8::Plan;

struct Config {
  Plan (*plan)(const CutlassFp8GemmArgs&);
  void (*run)(const CutlassFp8GemmArgs&, void*, cudaStream_t, const cutlass_fp8::FailFn&);
};

// Null functions for a value outside the enum (refused by name).
Config config_of(CutlassFp8Config c) {
  switch (c) {
    case CutlassFp8Config::kStreamK128x128:
      return {cutlass_fp8::stream_k_128x128_plan, cutlass_fp8::stream_k_128x128_run};
    case CutlassFp8Config::kPingpong64x128:
      return {cutlass_fp8::pingpong_64x128_plan, cutlass_fp8::pingpong_64x128_run};
  }
  return {nullptr, nullptr};
}

// Empty and the configuration's plan where the arguments are taken (TMA's rows: k a multiple of
// 16, n of 8, 16-byte aligned operands; sizes below 2^31; every pointer given); else why not.
std::string check(const CutlassFp8GemmArgs& a, Plan& plan) {
  if (a.m < 1 || a.n < 1 || a.k < 1) return "the shape must be positive";
  if (a.m > INT_MAX || a.n > INT_MAX || a.k > INT_MAX) return "every dimension must be below 2^31";
  if (a.k % 16 != 0) return "k = " + std::to_string(a.k) + " is not a multiple of 16";
  if (a.n % 8 != 0) return "n = " + std::to_string(a.n) + " is not a multiple of 8";
  if (a.x == nullptr || a.w == nullptr || a.y == nullptr || a.x_scale == nullptr || a.w_scale == nullptr)
    return "an operand or scale is null";
  if (!aligned16(a.x) || !aligned16(a.w) || !aligned16(a.y)) return "x, w and y must be 16-byte aligned";
  const Config c = config_of(a.config);
  if (c.plan == nullptr) return "unknown configuration " + std::to_string(int(a.config));
  plan = c.plan(a);
  if (!plan.implementable) return std::string("CUTLASS cannot implement it as ") + cutlass_fp8_config_name(a.config);
  return {};
}

}  // namespace

const char* cutlass_fp8_config_name(CutlassFp8Config c) {
  switch (c) {
    case CutlassFp8Config::kStreamK128x128: return "stream-K 128x128";
    case CutlassFp8Config::kPingpong64x128: return "ping-pong 64x128";
  }
  return "unknown";
}

std::string cutlass_fp8_gemm_unsupported(const CutlassFp8GemmArgs& a) {
  Plan plan;
  return check(a, plan);
}

size_t cutlass_fp8_gemm_workspace_bytes(const CutlassFp8GemmArgs& a) {
  Plan plan;
  return check(a, plan).empty() ? plan.workspace_bytes : 0;
}

// Checks, sizes the workspace, and runs the configuration; throws naming the call.
void cutlass_fp8_gemm(const CutlassFp8GemmArgs& a, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  const auto fail = [&](const std::string& why) {
    throw Error(std::string("cutlass fp8 gemm (") + cutlass_fp8_config_name(a.config) + ") m=" + std::to_string(a.m) +
                " n=" + std::to_string(a.n) + " k=" + std::to_string(a.k) + ": " + why);
  };
  Plan plan;
  if (const std::string why = check(a, plan); !why.empty()) fail(why);
  if (workspace_bytes < plan.workspace_bytes || (plan.workspace_bytes > 0 && workspace == nullptr))
    fail("needs a workspace of " + std::to_string(plan.workspace_bytes) + " bytes, got " +
         std::to_string(workspace_bytes));
  config_of(a.config).run(a, workspace, stream, cutlass_fp8::FailFn(fail));
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) fail(std::string("launch: ") + cudaGetErrorString(e));
}

}  // namespace fp8lm::cuda
