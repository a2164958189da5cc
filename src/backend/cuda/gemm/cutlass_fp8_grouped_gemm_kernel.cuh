// The grouped CUTLASS FP8 GEMM's two configurations (cutlass_fp8_grouped_gemm.h), assembled from
// CUTLASS's collective builders for the ptr-array ("grouped") Hopper kernel, and what they share:
// the per-group arrays carved from the workspace and the kernel that fills them from the groups'
// row ranges on the device. Each configuration is instantiated in a file of its own
// (cutlass_fp8_grouped_gemm_<scales>.cu), so they compile in parallel.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/detail/blockwise_scale_layout.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/group_array_problem_shape.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/util/packed_stride.hpp>

#include <string>
#include <type_traits>

#include "backend/cuda/gemm/cutlass_fp8_grouped_gemm_configs.h"

namespace fp8lm::cuda::cutlass_grouped {

using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;  // per group: m, n, k
using TileShape = cute::Shape<cute::_128, cute::_128, cute::_128>;
using ClusterShape = cute::Shape<cute::_1, cute::_1, cute::_1>;
using ElementA = cutlass::float_e4m3_t;  // x
using LayoutA = cutlass::layout::RowMajor;
using ElementB = cutlass::float_e4m3_t;  // w [n, k] row-major = B [k, n] column-major
using LayoutB = cutlass::layout::ColumnMajor;
using ElementD = cutlass::bfloat16_t;
using LayoutD = cutlass::layout::RowMajor;
constexpr int kAlignAB = 16;  // elements: 16 bytes
constexpr int kAlignD = 8;

// kOuter: the plain FP8 ptr-array mainloop (its accumulators promoted to float32 every few K
// blocks), the scales in an epilogue-visitor tree whose broadcasts read a pointer per group and
// are a vector or a scalar as the call says (x per row or one, w per channel or one).
struct OuterConfig {
  static constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;
  using TokenScale = cutlass::epilogue::fusion::Sm90ColBroadcast<0, TileShape, float*, float,
                                                                 cute::Stride<bool, cute::_0, int64_t>>;
  using ChannelScale = cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape, float*, float,
                                                                   cute::Stride<cute::_0, bool, int64_t>>;
  using ScaledByToken = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, float, float, kRound>,
      cutlass::epilogue::fusion::Sm90AccFetch, TokenScale>;
  using ScaledOutput = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, ElementD, float, kRound>, ScaledByToken, ChannelScale>;

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD*, kAlignD, ElementD, LayoutD*,
      kAlignD, cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative, ScaledOutput>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, LayoutA*, kAlignAB, ElementB, LayoutB*, kAlignAB,
      float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative>::CollectiveOp;
  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;
};

// kBlock: CUTLASS's FP8 blockwise ptr-array mainloop, 1 × 128 groups of x and 128 × 128 blocks of
// w, both grids read K-major (fp8lm's own layouts); the epilogue only converts to BF16.
struct BlockConfig {
  using ScaleConfig =
      cutlass::detail::Sm90BlockwiseScaleConfig<1, 128, 128, cute::GMMA::Major::K, cute::GMMA::Major::K>;
  using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
  using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD*, kAlignD, ElementD, LayoutD*,
      kAlignD, cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, cute::tuple<LayoutA*, LayoutSFA*>, kAlignAB,
      ElementB, cute::tuple<LayoutB*, LayoutSFB*>, kAlignAB, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8Blockwise>::CollectiveOp;
  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;
};

// The per-group arrays CUTLASS reads (problem sizes, pointers, strides), carved from the front of
// the workspace; CUTLASS's own workspace follows.
template <class C>
struct GroupArrays {
  using StrideA = typename C::GemmKernel::InternalStrideA;
  using StrideB = typename C::GemmKernel::InternalStrideB;
  using StrideD = typename C::GemmKernel::InternalStrideD;
  ProblemShape::UnderlyingProblemShape* problems = nullptr;
  const ElementA** x = nullptr;
  const float** x_scale = nullptr;
  ElementD** y = nullptr;
  StrideA* sa = nullptr;
  StrideB* sb = nullptr;
  StrideD* sd = nullptr;
  void* rest = nullptr;

  // Carves from `base` (null: only counts); returns the bytes the arrays take.
  static size_t carve(int groups, char* base, GroupArrays& g) {
    size_t at = 0;
    auto take = [&](auto*& p, size_t each) {
      using T = std::remove_reference_t<decltype(*p)>;
      p = base ? reinterpret_cast<T*>(base + at) : nullptr;
      at += (each * size_t(groups) + 255) / 256 * 256;
    };
    take(g.problems, sizeof(*g.problems));
    take(g.x, sizeof(void*));
    take(g.x_scale, sizeof(void*));
    take(g.y, sizeof(void*));
    take(g.sa, sizeof(StrideA));
    take(g.sb, sizeof(StrideB));
    take(g.sd, sizeof(StrideD));
    g.rest = base ? base + at : nullptr;
    return at;
  }
};

// One thread per group: its rows' problem size and pointers (every group shares n, k and the
// packed strides).
template <class C>
__global__ void fill_group_arrays(CutlassFp8GroupedGemmArgs a, GroupArrays<C> g, typename GroupArrays<C>::StrideA sa,
                                  typename GroupArrays<C>::StrideB sb, typename GroupArrays<C>::StrideD sd) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= a.groups) return;
  const int64_t first = a.group_start[i], rows = a.group_start[i + 1] - first;
  g.problems[i] = cute::make_shape(int(rows), int(a.n), int(a.k));
  g.x[i] = reinterpret_cast<const ElementA*>(a.x + first * a.k);
  g.y[i] = static_cast<ElementD*>(a.y) + first * a.n;
  const int64_t k_blocks = (a.k + 127) / 128;
  g.x_scale[i] = a.scales == CutlassGroupedScales::kBlock ? a.x_scale + first * k_blocks
                 : a.x_scale_per_row                      ? a.x_scale + first
                                                          : a.x_scale;
  g.sa[i] = sa;
  g.sb[i] = sb;
  g.sd[i] = sd;
}

template <class C>
typename C::Gemm::Arguments arguments(const CutlassFp8GroupedGemmArgs& a, const GroupArrays<C>& g) {
  using Gemm = typename C::Gemm;
  typename Gemm::Arguments args;
  args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
  args.problem_shape = {a.groups, g.problems, nullptr};  // the sizes stay on the device
  [[maybe_unused]] auto** w = const_cast<const ElementB**>(reinterpret_cast<const ElementB* const*>(a.w));
  [[maybe_unused]] auto** w_scale = const_cast<const float**>(a.w_scale);
  if constexpr (std::is_same_v<C, BlockConfig>) {
    args.mainloop = {g.x, g.sa, w, g.sb, g.x_scale, nullptr, w_scale, nullptr};
    args.epilogue = {{}, nullptr, nullptr, g.y, g.sd};
    args.epilogue.thread.alpha = 1.0f;  // D = acc, rounded to BF16
    args.epilogue.thread.beta = 0.0f;
  } else {
    args.mainloop = {g.x, g.sa, w, g.sb};
    // The visitor tree's arguments nest as the tree does: children first, then the node's own.
    typename C::ScaledOutput::Arguments epilogue{
        {{}, {g.x_scale, 0.0f, {a.x_scale_per_row, cute::_0{}, int64_t(0)}}, {}},
        {w_scale, 0.0f, {cute::_0{}, a.w_scale_per_channel, int64_t(0)}},
        {}};
    args.epilogue = {epilogue, nullptr, nullptr, g.y, g.sd};
  }
  return args;
}

template <class C>
size_t workspace_bytes(const CutlassFp8GroupedGemmArgs& a) {
  GroupArrays<C> g;
  const size_t arrays = GroupArrays<C>::carve(a.groups, nullptr, g);
  return arrays + C::Gemm::get_workspace_size(arguments<C>(a, g));
}

template <class C>
void run(const CutlassFp8GroupedGemmArgs& a, void* workspace, cudaStream_t stream, const FailFn& fail) {
  GroupArrays<C> g;
  GroupArrays<C>::carve(a.groups, static_cast<char*>(workspace), g);
  using G = GroupArrays<C>;
  const auto sa = cutlass::make_cute_packed_stride(typename G::StrideA{}, cute::make_shape(1, int(a.k), 1));
  const auto sb = cutlass::make_cute_packed_stride(typename G::StrideB{}, cute::make_shape(int(a.n), int(a.k), 1));
  const auto sd = cutlass::make_cute_packed_stride(typename G::StrideD{}, cute::make_shape(1, int(a.n), 1));
  fill_group_arrays<C><<<unsigned((a.groups + 127) / 128), 128, 0, stream>>>(a, g, sa, sb, sd);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) fail(std::string("setup kernel: ") + cudaGetErrorString(e));
  const typename C::Gemm::Arguments args = arguments<C>(a, g);
  typename C::Gemm gemm;
  cutlass::Status st = C::Gemm::can_implement(args);
  if (st == cutlass::Status::kSuccess) st = gemm.initialize(args, g.rest, stream);
  if (st == cutlass::Status::kSuccess) st = gemm.run(stream);
  if (st != cutlass::Status::kSuccess) fail(std::string("CUTLASS: ") + cutlassGetStatusString(st));
}

}  // namespace fp8lm::cuda::cutlass_grouped
