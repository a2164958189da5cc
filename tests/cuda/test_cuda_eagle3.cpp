// The EAGLE-3 drafter on the GPU (cpp/eagle3_drafter_checks.h says what is checked): the target's
// hidden states kept through Ops::copy (also in recorded decode and verify steps, whose replays
// must leave the scratch arena past their outputs), the head's steps on the CUDA backend.
#include <gtest/gtest.h>

#include <string>

#include "cpp/eagle3_drafter_checks.h"
#include "cuda/cuda_test_util.h"

// A namespace of its own: the test program compiles as unity units.
namespace fp8lm::test::cuda_eagle3 {
namespace {

using namespace eagle3_checks;

class CudaEagle3Drafter : public ::testing::TestWithParam<const char*> {
 protected:
  std::string dir() const { return fixture_path(std::string("eagle3/") + GetParam()); }
};

TEST_P(CudaEagle3Drafter, DraftsEqualSpeculatorsFromTheTargetsHiddenStates) {
  REQUIRE_HOPPER();
  expect_drafts_of_reference(backend::Device::kCuda, dir(), /*tie=*/0.05);
}

TEST_P(CudaEagle3Drafter, GreedyOutputIsTheTargetsAndTheBatchIsEachRequestAlone) {
  REQUIRE_HOPPER();
  expect_lossless_engine(backend::Device::kCuda, dir(), GetParam());
}

INSTANTIATE_TEST_SUITE_P(Layouts, CudaEagle3Drafter,
                         ::testing::Values("llama_target_speculators", "llama_target_release"));

}  // namespace
}  // namespace fp8lm::test::cuda_eagle3
