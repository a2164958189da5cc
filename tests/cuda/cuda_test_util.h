// What every GPU test needs: whether this machine has a GPU this build runs on
// (sm_90a: a Hopper GPU), and a skip that says why not.
#pragma once

#include <gtest/gtest.h>

#include "backend/cuda/device_info.h"

namespace fp8lm::test {

inline bool have_hopper() {
  const cuda::DeviceList list = cuda::list_devices();
  return !list.devices.empty() && list.devices[0].runs_this_build();
}

}  // namespace fp8lm::test

// Skips the current test (reporting SKIPPED with the reason) without a Hopper GPU.
#define REQUIRE_HOPPER()           \
  if (!::fp8lm::test::have_hopper()) \
  GTEST_SKIP() << "no Hopper GPU: " << ::fp8lm::cuda::list_devices().unavailable_reason
