// One CUTLASS FP8 GEMM configuration (cutlass_fp8_gemm.h), assembled from CUTLASS's collective
// builders: a tile shape, a cluster shape, a mainloop and epilogue schedule and a tile
// scheduler. The epilogue is an epilogue-visitor tree: the accumulator times the per-row (token)
// scale, then times the per-column (channel) scale, converted to BF16. Each configuration is
// instantiated in a file of its own (cutlass_fp8_gemm_<config>.cu), so they compile in parallel.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/util/packed_stride.hpp>

#include <string>

#include "backend/cuda/gemm/cutlass_fp8_gemm_configs.h"

namespace fp8lm::cuda::cutlass_fp8 {

// The operands every configuration shares.
struct Operands {
  using ElementA = cutlass::float_e4m3_t;  // x
  using LayoutA = cutlass::layout::RowMajor;
  using ElementB = cutlass::float_e4m3_t;  // w [n, k] row-major = B [k, n] column-major
  using LayoutB = cutlass::layout::ColumnMajor;
  using ElementD = cutlass::bfloat16_t;
  using LayoutD = cutlass::layout::RowMajor;
  static constexpr int kAlignAB = 16;  // elements: 16 bytes
  static constexpr int kAlignD = 8;

  // A GemmKernel's packed strides of x [m, k], w [n, k] and y [m, n] (all row-major as stored).
  template <class GemmKernel>
  struct Strides {
    typename GemmKernel::StrideA a;
    typename GemmKernel::StrideB b;
    typename GemmKernel::StrideD d;
    explicit Strides(const CutlassFp8GemmArgs& x)
        : a(cutlass::make_cute_packed_stride(typename GemmKernel::StrideA{}, cute::make_shape(int(x.m), int(x.k), 1))),
          b(cutlass::make_cute_packed_stride(typename GemmKernel::StrideB{}, cute::make_shape(int(x.n), int(x.k), 1))),
          d(cutlass::make_cute_packed_stride(typename GemmKernel::StrideD{}, cute::make_shape(int(x.m), int(x.n), 1))) {}
  };
};

// A configuration's plan (can CUTLASS implement the arguments, and with how much scratch) and
// launch, for a kernel type K with a Gemm and an arguments(a); the arguments are built once per call.
template <class K>
Plan plan_of(const CutlassFp8GemmArgs& a) {
  const typename K::Gemm::Arguments args = K::arguments(a);
  Plan p;
  p.implementable = K::Gemm::can_implement(args) == cutlass::Status::kSuccess;
  if (p.implementable) p.workspace_bytes = K::Gemm::get_workspace_size(args);
  return p;
}

// Runs what plan_of accepted; `fail` throws with the call's shape.
template <class K>
void run_of(const CutlassFp8GemmArgs& a, void* workspace, cudaStream_t stream, const FailFn& fail) {
  typename K::Gemm gemm;
  cutlass::Status st = gemm.initialize(K::arguments(a), workspace, stream);
  if (st == cutlass::Status::kSuccess) st = gemm.run(stream);
  if (st != cutlass::Status::kSuccess) fail(std::string("CUTLASS: ") + cutlassGetStatusString(st));
}

template <class TileShape, class ClusterShape, class KernelSchedule, class EpilogueSchedule, class TileScheduler>
struct Kernel : Operands {
  static constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

  // (acc · x_scale[row]) · w_scale[col]: the token scale is a column vector of D, the channel
  // scale a row vector.
  using TokenScale =
      cutlass::epilogue::fusion::Sm90ColBroadcast<0, TileShape, float, float, cute::Stride<cute::_1, cute::_0, int64_t>>;
  using ChannelScale =
      cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape, float, float, cute::Stride<cute::_0, cute::_1, int64_t>>;
  using ScaledByToken = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, float, float, kRound>,
      cutlass::epilogue::fusion::Sm90AccFetch, TokenScale>;
  using ScaledOutput = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, ElementD, float, kRound>, ScaledByToken, ChannelScale>;

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD, kAlignD, ElementD, LayoutD,
      kAlignD, EpilogueSchedule, ScaledOutput>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, LayoutA, kAlignAB, ElementB, LayoutB, kAlignAB,
      float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;
  using GemmKernel =
      cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop, Epilogue, TileScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

  static typename Gemm::Arguments arguments(const CutlassFp8GemmArgs& a) {
    const Strides<GemmKernel> st(a);
    // The visitor tree's arguments nest as the tree does: children first, then the node's own.
    typename ScaledOutput::Arguments epilogue{{{}, {a.x_scale, 0.0f, {}}, {}}, {a.w_scale, 0.0f, {}}, {}};
    return {cutlass::gemm::GemmUniversalMode::kGemm,
            {int(a.m), int(a.n), int(a.k), 1},
            {reinterpret_cast<const ElementA*>(a.x), st.a, reinterpret_cast<const ElementB*>(a.w), st.b},
            {epilogue, nullptr, st.d, static_cast<ElementD*>(a.y), st.d}};
  }
};

}  // namespace fp8lm::cuda::cutlass_fp8
