// src/eval/perplexity: the per-token arithmetic (log-softmax, NLL, KL divergence,
// quantiles) against values worked out by hand, and the windowing rules.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "common/error.h"
#include "cpp/test_util.h"
#include "eval/perplexity.h"

namespace fp8lm::eval {
namespace {

using test::error_of;

TEST(EvalMath, LogSumExpIsStable) {
  const std::vector<float> big{1000.0f, 1000.0f};
  EXPECT_DOUBLE_EQ(log_sum_exp(big), 1000.0 + std::log(2.0));
  const std::vector<float> small{-1000.0f, -1000.0f, -1000.0f};
  EXPECT_DOUBLE_EQ(log_sum_exp(small), -1000.0 + std::log(3.0));
}

TEST(EvalMath, TokenNll) {
  const std::vector<float> uniform(4, 0.5f);
  EXPECT_DOUBLE_EQ(token_nll(uniform, 2), std::log(4.0));
  const std::vector<float> logits{0.0f, float(std::log(3.0))};  // p = 0.25, 0.75
  EXPECT_NEAR(token_nll(logits, 1), -std::log(0.75), 1e-7);
  EXPECT_NE(error_of([&] { token_nll(logits, 2); }).find("outside the vocabulary"), std::string::npos);
  EXPECT_NE(error_of([&] { token_nll(logits, -1); }).find("outside the vocabulary"), std::string::npos);
}

TEST(EvalMath, KlDivergence) {
  const std::vector<float> p{0.0f, float(std::log(3.0))};  // 0.25, 0.75
  const std::vector<float> q{3.0f, 3.0f};                  // 0.5, 0.5
  EXPECT_NEAR(kl_divergence(p, q), 0.25 * std::log(0.5) + 0.75 * std::log(1.5), 1e-7);
  EXPECT_NEAR(kl_divergence(q, p), 0.5 * std::log(2.0) + 0.5 * std::log(0.5 / 0.75), 1e-7);
  const std::vector<float> r{1.5f, -2.0f, 7.25f, 0.0f};
  EXPECT_EQ(kl_divergence(r, r), 0.0);  // exactly
  const std::vector<float> shifted{11.5f, 8.0f, 17.25f, 10.0f};  // same distribution
  EXPECT_NEAR(kl_divergence(r, shifted), 0.0, 1e-12);
  EXPECT_GE(kl_divergence(r, shifted), 0.0);
}

TEST(EvalMath, ArgmaxTakesTheFirstOfEquals) {
  const std::vector<float> v{1.0f, 3.0f, 3.0f, 2.0f};
  EXPECT_EQ(argmax(v), 1);
}

TEST(EvalMath, QuantileInterpolatesLikeNumpy) {
  std::vector<double> v{4.0, 1.0, 3.0, 2.0};
  EXPECT_DOUBLE_EQ(quantile(v, 0.5), 2.5);   // numpy.quantile([1,2,3,4], 0.5)
  EXPECT_DOUBLE_EQ(quantile(v, 0.99), 3.97);  // numpy.quantile([1,2,3,4], 0.99)
  EXPECT_DOUBLE_EQ(quantile(v, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(quantile(v, 1.0), 4.0);
  std::vector<double> one{7.0};
  EXPECT_DOUBLE_EQ(quantile(one, 0.99), 7.0);
  std::vector<double> none;
  EXPECT_TRUE(std::isnan(quantile(none, 0.5)));
}

TEST(EvalWindows, Protocols) {
  EXPECT_EQ(parse_protocol("all"), Protocol::kAll);
  EXPECT_EQ(parse_protocol("second-half"), Protocol::kSecondHalf);
  EXPECT_NE(error_of([] { parse_protocol("half"); }).find("'half'"), std::string::npos);
  EXPECT_EQ(first_target(1024, Protocol::kAll), 1);
  EXPECT_EQ(first_target(1024, Protocol::kSecondHalf), 513);  // llama.cpp: logits from n_ctx/2 on
  EXPECT_EQ(first_target(7, Protocol::kSecondHalf), 4);
}

TEST(EvalWindows, CountsFullWindowsOnly) {
  EXPECT_EQ(count_windows(10, 4, 16, Protocol::kAll), 2);
  EXPECT_EQ(count_windows(12, 4, 16, Protocol::kAll), 3);
  EXPECT_EQ(count_windows(12, 4, 16, Protocol::kAll, 2), 2);
  EXPECT_EQ(count_windows(12, 4, 16, Protocol::kAll, 9), 3);
  EXPECT_EQ(count_windows(16, 16, 16, Protocol::kAll), 1);
  EXPECT_EQ(count_windows(9, 3, 16, Protocol::kSecondHalf), 3);
}

TEST(EvalWindows, Errors) {
  EXPECT_NE(error_of([] { count_windows(10, 1, 16, Protocol::kAll); }).find("--ctx"), std::string::npos);
  EXPECT_NE(error_of([] { count_windows(100, 17, 16, Protocol::kAll); }).find("context of 16"), std::string::npos);
  EXPECT_NE(error_of([] { count_windows(100, 2, 16, Protocol::kSecondHalf); }).find("second-half"),
            std::string::npos);
  EXPECT_NE(error_of([] { count_windows(3, 4, 16, Protocol::kAll); }).find("3 tokens"), std::string::npos);
  EXPECT_NE(error_of([] { count_windows(10, 4, 16, Protocol::kAll, -1); }).find("--limit-windows"),
            std::string::npos);
}

TEST(EvalWindows, KvCacheHoldsWholeBlocksPerWindow) {
  EXPECT_EQ(kv_tokens_for(100, 3, 16), 3 * 7 * 16);
  EXPECT_EQ(kv_tokens_for(128, 1, 16), 128);
}

TEST(EvalData, ErrorsNameTheFile) {
  const auto tok = tokenizer::Tokenizer::load(std::filesystem::path(FP8LM_SOURCE_DIR) / "models" /
                                              "fp8lm-gutenberg-22m");
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "fp8lm_test_eval";
  std::filesystem::create_directories(dir);
  EXPECT_NE(error_of([&] { tokenize_file(tok, dir / "absent.txt"); }).find("absent.txt"), std::string::npos);
  std::ofstream(dir / "empty.txt").close();
  EXPECT_NE(error_of([&] { tokenize_file(tok, dir / "empty.txt"); }).find("empty.txt is empty"), std::string::npos);
  std::ofstream(dir / "bad.txt", std::ios::binary) << "caf\xe9 au lait";
  const std::string bad = error_of([&] { tokenize_file(tok, dir / "bad.txt"); });
  EXPECT_NE(bad.find("bad.txt"), std::string::npos) << bad;
  EXPECT_NE(bad.find("UTF-8"), std::string::npos) << bad;
  std::ofstream(dir / "good.txt", std::ios::binary) << "The keeper lit the lamp.";
  const std::vector<int32_t> ids = tokenize_file(tok, dir / "good.txt");
  std::vector<uint32_t> expected = tok.encode("The keeper lit the lamp.");
  EXPECT_EQ(ids, std::vector<int32_t>(expected.begin(), expected.end()));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fp8lm::eval
