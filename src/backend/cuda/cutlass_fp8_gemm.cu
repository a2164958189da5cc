// The CUTLASS FP8 GEMM (cutlass_fp8_gemm.h). The kernel is assembled from CUTLASS's collective
// builders; the epilogue is an epilogue-visitor tree: the accumulator times the per-row
// (token) scale, then times the per-column (channel) scale, converted to BF16.
#include "backend/cuda/cutlass_fp8_gemm.h"

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/util/packed_stride.hpp>

#include <climits>

#include "backend/cuda/device_helpers.cuh"
#include "common/error.h"

namespace fp8lm::cuda {
namespace {

using namespace cute;
namespace fusion = cutlass::epilogue::fusion;

using ElementA = cutlass::float_e4m3_t;  // x
using LayoutA = cutlass::layout::RowMajor;
using ElementB = cutlass::float_e4m3_t;  // w [n, k] row-major = B [k, n] column-major
using LayoutB = cutlass::layout::ColumnMajor;
using ElementD = cutlass::bfloat16_t;
using LayoutD = cutlass::layout::RowMajor;
using TileShape = Shape<_128, _128, _128>;
using ClusterShape = Shape<_1, _2, _1>;
constexpr int kAlignAB = 16;  // elements: 16 bytes
constexpr int kAlignD = 8;
constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

// (acc · x_scale[row]) · w_scale[col]: the token scale is a column vector of D, the channel
// scale a row vector.
using TokenScale = fusion::Sm90ColBroadcast<0, TileShape, float, float, Stride<_1, _0, int64_t>>;
using ChannelScale = fusion::Sm90RowBroadcast<0, TileShape, float, float, Stride<_0, _1, int64_t>>;
using ScaledByToken =
    fusion::Sm90EVT<fusion::Sm90Compute<cutlass::multiplies, float, float, kRound>, fusion::Sm90AccFetch, TokenScale>;
using ScaledOutput =
    fusion::Sm90EVT<fusion::Sm90Compute<cutlass::multiplies, ElementD, float, kRound>, ScaledByToken, ChannelScale>;

using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD, kAlignD, ElementD, LayoutD, kAlignD,
    cutlass::epilogue::TmaWarpSpecializedCooperative, ScaledOutput>::CollectiveOp;
using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, LayoutA, kAlignAB, ElementB, LayoutB, kAlignAB, float,
    TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
    cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;
using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue,
                                                    cutlass::gemm::PersistentScheduler>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

typename Gemm::Arguments arguments(const CutlassFp8GemmArgs& a) {
  const int m = int(a.m), n = int(a.n), k = int(a.k);
  using StrideA = typename Gemm::GemmKernel::StrideA;
  using StrideB = typename Gemm::GemmKernel::StrideB;
  using StrideD = typename Gemm::GemmKernel::StrideD;
  const StrideA sa = cutlass::make_cute_packed_stride(StrideA{}, make_shape(m, k, 1));
  const StrideB sb = cutlass::make_cute_packed_stride(StrideB{}, make_shape(n, k, 1));
  const StrideD sd = cutlass::make_cute_packed_stride(StrideD{}, make_shape(m, n, 1));
  // The visitor tree's arguments nest as the tree does: children first, then the node's own.
  typename ScaledOutput::Arguments epilogue{{{}, {a.x_scale, 0.0f, {}}, {}}, {a.w_scale, 0.0f, {}}, {}};
  return {cutlass::gemm::GemmUniversalMode::kGemm,
          {m, n, k, 1},
          {reinterpret_cast<const ElementA*>(a.x), sa, reinterpret_cast<const ElementB*>(a.w), sb},
          {epilogue, nullptr, sd, static_cast<ElementD*>(a.y), sd}};
}

}  // namespace

std::string cutlass_fp8_gemm_unsupported(const CutlassFp8GemmArgs& a) {
  if (a.m < 1 || a.n < 1 || a.k < 1) return "the shape must be positive";
  if (a.m > INT_MAX || a.n > INT_MAX || a.k > INT_MAX) return "every dimension must be below 2^31";
  if (a.k % kAlignAB != 0) return "k = " + std::to_string(a.k) + " is not a multiple of 16";
  if (a.n % kAlignD != 0) return "n = " + std::to_string(a.n) + " is not a multiple of 8";
  if (a.x == nullptr || a.w == nullptr || a.y == nullptr || a.x_scale == nullptr || a.w_scale == nullptr)
    return "an operand or scale is null";
  if (!aligned16(a.x) || !aligned16(a.w) || !aligned16(a.y)) return "x, w and y must be 16-byte aligned";
  if (Gemm::can_implement(arguments(a)) != cutlass::Status::kSuccess) return "CUTLASS cannot implement it";
  return {};
}

size_t cutlass_fp8_gemm_workspace_bytes(const CutlassFp8GemmArgs& a) {
  return Gemm::get_workspace_size(arguments(a));
}

void cutlass_fp8_gemm(const CutlassFp8GemmArgs& a, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  const auto fail = [&](const std::string& what) {
    throw Error("cutlass fp8 gemm m=" + std::to_string(a.m) + " n=" + std::to_string(a.n) + " k=" + std::to_string(a.k) +
                ": " + what);
  };
  if (const std::string why = cutlass_fp8_gemm_unsupported(a); !why.empty()) fail(why);
  const typename Gemm::Arguments args = arguments(a);
  const size_t need = Gemm::get_workspace_size(args);
  if (workspace_bytes < need || (need > 0 && workspace == nullptr))
    fail("needs a workspace of " + std::to_string(need) + " bytes, got " + std::to_string(workspace_bytes));
  Gemm gemm;
  cutlass::Status st = gemm.initialize(args, workspace, stream);
  if (st == cutlass::Status::kSuccess) st = gemm.run(stream);
  if (st != cutlass::Status::kSuccess) fail(std::string("CUTLASS: ") + cutlassGetStatusString(st));
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) fail(std::string("launch: ") + cudaGetErrorString(e));
}

}  // namespace fp8lm::cuda
