// What CUDA devices this process can use; an empty list (with the reason) when
// there is no driver or no GPU, so CPU-only machines keep working.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace fp8lm::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int compute_major = 0;
  int compute_minor = 0;
  size_t total_memory = 0;
  int multiprocessors = 0;
  // FP8 tensor cores (and the sm_90a code this build carries) need Hopper.
  bool runs_this_build() const { return compute_major == 9 && compute_minor == 0; }
};

struct DeviceList {
  std::vector<DeviceInfo> devices;
  std::string unavailable_reason;  // set when devices is empty
};

DeviceList list_devices();

}  // namespace fp8lm::cuda
