#include "backend/cuda/device_info.h"

#include <cuda_runtime_api.h>

#include <string>

namespace fp8lm::cuda {

DeviceList list_devices() {
  DeviceList out;
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    // cudaErrorInsufficientDriver is what a machine without any NVIDIA driver reports
    out.unavailable_reason = status == cudaErrorInsufficientDriver || status == cudaErrorNoDevice
                                 ? std::string("no NVIDIA driver or GPU found (") + cudaGetErrorString(status) + ")"
                                 : std::string(cudaGetErrorString(status));
    return out;
  }
  if (count == 0) out.unavailable_reason = "no CUDA device";
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    out.devices.push_back({i, prop.name, prop.major, prop.minor, prop.totalGlobalMem,
                           prop.multiProcessorCount});
  }
  return out;
}

}  // namespace fp8lm::cuda
