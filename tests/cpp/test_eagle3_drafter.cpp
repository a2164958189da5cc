// The EAGLE-3 drafter on the CPU (cpp/eagle3_drafter_checks.h says what is checked), and a head
// for another target refused by name.
#include <gtest/gtest.h>

#include <string>

#include "common/error.h"
#include "cpp/eagle3_drafter_checks.h"

// A namespace of its own: the test program compiles as unity units.
namespace fp8lm::test::eagle3_drafter {
namespace {

using namespace eagle3_checks;

class Eagle3Drafter : public ::testing::TestWithParam<const char*> {
 protected:
  std::string dir() const { return fixture_path(std::string("eagle3/") + GetParam()); }
};

TEST_P(Eagle3Drafter, DraftsEqualSpeculatorsFromTheTargetsHiddenStates) {
  expect_drafts_of_reference(backend::Device::kCpu, dir(), /*tie=*/0.0);
}

TEST_P(Eagle3Drafter, GreedyOutputIsTheTargetsAndTheBatchIsEachRequestAlone) {
  expect_lossless_engine(backend::Device::kCpu, dir(), GetParam());
}

INSTANTIATE_TEST_SUITE_P(Layouts, Eagle3Drafter, ::testing::Values("llama_target_speculators", "llama_target_release"));

TEST(Eagle3DrafterLoad, AHeadForAnotherTargetIsRefusedByName) {
  engine::RuntimeOptions opt;
  opt.threads = 1;
  opt.kv_cache_tokens = 256;
  opt.load_tokenizer = false;
  // The small heads of test_eagle3_head.cpp read layers 1, 4 and 7 of a 64-wide target; the
  // fixture target has 2 layers of 128.
  auto rt = engine::Runtime::load(fixture_path("models/llama"), {}, opt);
  try {
    (void)engine::Eagle3Drafter::load(eagle3(fixture_path("eagle3/llama_basic"), 3), *rt, 4, 64);
    FAIL() << "a head of another width was loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("hidden states of width 64, the target's are 128 wide"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace fp8lm::test::eagle3_drafter
