// The weights' tensor maps for the persistent decode kernel's loader (weight_map.h).
#include "backend/cuda/persistent/weight_map.h"

#include <cudaTypedefs.h>

#include <string>

#include "backend/cuda/common/check.h"
#include "common/error.h"

namespace fp8lm::cuda::persistent {
namespace {

// The driver's tensor-map encoder, through the runtime (no link against the driver library).
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    FP8LM_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || f == nullptr)
      throw Error("persistent decode: the CUDA driver has no cuTensorMapEncodeTiled");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

}  // namespace

CUtensorMap weight_tensor_map(const DeviceLinear& l) {
  CUtensorMap map{};
  const int64_t bytes = row_bytes(l);
  const cuuint64_t dims[2] = {cuuint64_t(bytes / 8), cuuint64_t(l.n)};
  const cuuint64_t strides[1] = {cuuint64_t(bytes)};  // bytes from one row to the next
  const cuuint32_t box[2] = {cuuint32_t(l.page_steps * 8), 8};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = tensor_map_encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_UINT64, 2, const_cast<void*>(l.w), dims,
                                          strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                          CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw Error("persistent decode: cuTensorMapEncodeTiled refused the weight [" + std::to_string(l.n) + ", " +
                std::to_string(l.k) + "] (CUresult " + std::to_string(int(r)) + ")");
  return map;
}

}  // namespace fp8lm::cuda::persistent
