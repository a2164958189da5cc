// The CUTLASS FP8 GEMM (cutlass_fp8_gemm.h): the argument checks every configuration shares,
// then the configuration's own plan and launch (cutlass_fp8_gemm_<config>.cu).
#include "backend/cuda/cutlass_fp8_gemm.h"

#include <climits>

#include "backend/cuda/cutlass_fp8_gemm_configs.h"
#include "backend/cuda/device_helpers.cuh"
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
    case CutlassFp8Config::kCooperative128x128:
      return {cutlass_fp8::cooperative_128x128_plan, cutlass_fp8::cooperative_128x128_run};
    case CutlassFp8Config::kStreamK128x128:
      return {cutlass_fp8::stream_k_128x128_plan, cutlass_fp8::stream_k_128x128_run};
    case CutlassFp8Config::kPingpong64x128:
      return {cutlass_fp8::pingpong_64x128_plan, cutlass_fp8::pingpong_64x128_run};
  }
  return {nullptr, nullptr};
}

// What both argument kinds need: TMA's rows (k a multiple of 16, n of 8, 16-byte aligned
// operands), sizes below 2^31, every pointer given. Empty where they hold.
template <class Args>
std::string check_operands(const Args& a) {
  if (a.m < 1 || a.n < 1 || a.k < 1) return "the shape must be positive";
  if (a.m > INT_MAX || a.n > INT_MAX || a.k > INT_MAX) return "every dimension must be below 2^31";
  if (a.k % 16 != 0) return "k = " + std::to_string(a.k) + " is not a multiple of 16";
  if (a.n % 8 != 0) return "n = " + std::to_string(a.n) + " is not a multiple of 8";
  if (a.x == nullptr || a.w == nullptr || a.y == nullptr || a.x_scale == nullptr || a.w_scale == nullptr)
    return "an operand or scale is null";
  if (!aligned16(a.x) || !aligned16(a.w) || !aligned16(a.y)) return "x, w and y must be 16-byte aligned";
  return {};
}

// Empty and the configuration's plan where the arguments are taken; else why not.
std::string check(const CutlassFp8GemmArgs& a, Plan& plan) {
  if (std::string why = check_operands(a); !why.empty()) return why;
  const Config c = config_of(a.config);
  if (c.plan == nullptr) return "unknown configuration " + std::to_string(int(a.config));
  plan = c.plan(a);
  if (!plan.implementable) return std::string("CUTLASS cannot implement it as ") + cutlass_fp8_config_name(a.config);
  return {};
}

std::string check(const CutlassFp8BlockGemmArgs& a, Plan& plan) {
  if (std::string why = check_operands(a); !why.empty()) return why;
  if (!aligned16(a.x_scale) || !aligned16(a.w_scale)) return "the scale grids must be 16-byte aligned";
  plan = cutlass_fp8::block_cooperative_128x128_plan(a);
  if (!plan.implementable) return "CUTLASS cannot implement it (block-scaled)";
  return {};
}

template <class Args>
std::string unsupported(const Args& a) {
  Plan plan;
  return check(a, plan);
}

template <class Args>
size_t workspace_bytes(const Args& a) {
  Plan plan;
  return check(a, plan).empty() ? plan.workspace_bytes : 0;
}

// Checks, sizes the workspace, and runs `launch` (the configuration's run); throws naming the call.
template <class Args, class Launch>
void checked_run(const Args& a, const std::string& what, void* workspace, size_t workspace_bytes, Launch launch) {
  const auto fail = [&](const std::string& why) {
    throw Error("cutlass fp8 gemm (" + what + ") m=" + std::to_string(a.m) + " n=" + std::to_string(a.n) +
                " k=" + std::to_string(a.k) + ": " + why);
  };
  Plan plan;
  if (const std::string why = check(a, plan); !why.empty()) fail(why);
  if (workspace_bytes < plan.workspace_bytes || (plan.workspace_bytes > 0 && workspace == nullptr))
    fail("needs a workspace of " + std::to_string(plan.workspace_bytes) + " bytes, got " +
         std::to_string(workspace_bytes));
  launch(cutlass_fp8::FailFn(fail));
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) fail(std::string("launch: ") + cudaGetErrorString(e));
}

}  // namespace

const char* cutlass_fp8_config_name(CutlassFp8Config c) {
  switch (c) {
    case CutlassFp8Config::kCooperative128x128: return "cooperative 128x128";
    case CutlassFp8Config::kStreamK128x128: return "stream-K 128x128";
    case CutlassFp8Config::kPingpong64x128: return "ping-pong 64x128";
  }
  return "unknown";
}

std::string cutlass_fp8_gemm_unsupported(const CutlassFp8GemmArgs& a) { return unsupported(a); }

size_t cutlass_fp8_gemm_workspace_bytes(const CutlassFp8GemmArgs& a) { return workspace_bytes(a); }

void cutlass_fp8_gemm(const CutlassFp8GemmArgs& a, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  checked_run(a, cutlass_fp8_config_name(a.config), workspace, workspace_bytes, [&](const cutlass_fp8::FailFn& fail) {
    config_of(a.config).run(a, workspace, stream, fail);
  });
}

std::string cutlass_fp8_block_gemm_unsupported(const CutlassFp8BlockGemmArgs& a) { return unsupported(a); }

size_t cutlass_fp8_block_gemm_workspace_bytes(const CutlassFp8BlockGemmArgs& a) { return workspace_bytes(a); }

void cutlass_fp8_block_gemm(const CutlassFp8BlockGemmArgs& a, void* workspace, size_t workspace_bytes,
                            cudaStream_t stream) {
  checked_run(a, "block-scaled", workspace, workspace_bytes, [&](const cutlass_fp8::FailFn& fail) {
    cutlass_fp8::block_cooperative_128x128_run(a, workspace, stream, fail);
  });
}

}  // namespace fp8lm::cuda
