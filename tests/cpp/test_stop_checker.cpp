// Stop strings over streamed pieces: what is emitted, what is held back.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "engine/stop_checker.h"

namespace fp8lm::engine {
namespace {

struct Outcome {
  std::string text;  // everything emitted, finish() included
  bool stopped = false;
  std::string matched;
};

Outcome run(std::vector<std::string> stops, const std::vector<std::string>& pieces) {
  StopChecker checker(std::move(stops));
  Outcome out;
  for (const std::string& piece : pieces) {
    const StopChecker::Step step = checker.push(piece);
    out.text += step.text;
    if (step.stopped) {
      out.stopped = true;
      out.matched = step.matched;
    }
  }
  out.text += checker.finish();
  return out;
}

// Every way to cut `text` into single characters (bytes for ASCII) must give
// the same outcome as one piece: the result does not depend on the split.
std::vector<std::string> bytes_of(const std::string& text) {
  std::vector<std::string> pieces;
  for (const char c : text) pieces.emplace_back(1, c);
  return pieces;
}

TEST(StopChecker, NoStopStringsPassesEverythingThrough) {
  StopChecker checker({});
  EXPECT_EQ(checker.push("hello ").text, "hello ");
  EXPECT_EQ(checker.push("world").text, "world");
  EXPECT_EQ(checker.finish(), "");
}

TEST(StopChecker, NoMatchEmitsAllText) {
  const Outcome o = run({"STOP"}, {"a S", "TO", "p-less? ST", "OQ"});
  EXPECT_FALSE(o.stopped);
  EXPECT_EQ(o.text, "a STOp-less? STOQ");
}

TEST(StopChecker, MatchAcrossPiecesStopsAndDropsTheRest) {
  const Outcome o = run({"STOP"}, {"a S", "TO", "P and more"});
  EXPECT_TRUE(o.stopped);
  EXPECT_EQ(o.matched, "STOP");
  EXPECT_EQ(o.text, "a ");
}

TEST(StopChecker, StopSplitOverThreePieces) {
  StopChecker checker({"<|end|>"});
  EXPECT_EQ(checker.push("Done.<|").text, "Done.");
  EXPECT_EQ(checker.push("en").text, "");  // still a possible start
  const StopChecker::Step last = checker.push("d|> ignored");
  EXPECT_TRUE(last.stopped);
  EXPECT_EQ(last.text, "");
  EXPECT_EQ(checker.finish(), "");
  EXPECT_TRUE(checker.push("more").text.empty());
}

TEST(StopChecker, StopAtTheVeryStart) {
  const Outcome o = run({"###"}, {"###", "after"});
  EXPECT_TRUE(o.stopped);
  EXPECT_EQ(o.text, "");
}

TEST(StopChecker, HeldPrefixIsReleasedWhenItStopsMatching) {
  StopChecker checker({"abc"});
  EXPECT_EQ(checker.push("xab").text, "x");
  EXPECT_EQ(checker.push("d").text, "abd");
  EXPECT_EQ(checker.push("ab").text, "");
  EXPECT_EQ(checker.finish(), "ab");  // the sequence ended for another reason
}

TEST(StopChecker, SelfOverlappingStopString) {
  // "aab" inside "aaab": the first candidate start fails, a later one matches.
  const Outcome o = run({"aab"}, {"x", "a", "a", "a", "b", "y"});
  EXPECT_TRUE(o.stopped);
  EXPECT_EQ(o.text, "xa");
}

TEST(StopChecker, OverlappingStopStringsTheOneEndingFirstWins) {
  const Outcome one_piece = run({"abcd", "bc"}, {"xabcd"});
  const Outcome streamed = run({"abcd", "bc"}, bytes_of("xabcd"));
  EXPECT_EQ(one_piece.matched, "bc");
  EXPECT_EQ(one_piece.text, "xa");
  EXPECT_EQ(streamed.matched, one_piece.matched);
  EXPECT_EQ(streamed.text, one_piece.text);
}

TEST(StopChecker, SameEndTheLongestWins) {
  const Outcome o = run({"d", "cd"}, {"abcde"});
  EXPECT_EQ(o.matched, "cd");
  EXPECT_EQ(o.text, "ab");
}

TEST(StopChecker, OutcomeDoesNotDependOnTheSplit) {
  const std::vector<std::string> stops = {"\n\nUser:", "ENDING", "xyzzy"};
  const std::string text = "Some answer with an ENDIN and\n\nUse then \n\nUser: hi END";
  const Outcome whole = run(stops, {text});
  EXPECT_TRUE(whole.stopped);
  EXPECT_EQ(whole.text, "Some answer with an ENDIN and\n\nUse then ");
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    for (size_t cut2 = cut; cut2 <= text.size(); cut2 += 7) {
      const Outcome o = run(stops, {text.substr(0, cut), text.substr(cut, cut2 - cut), text.substr(cut2)});
      ASSERT_EQ(o.text, whole.text) << cut << " " << cut2;
      ASSERT_EQ(o.matched, whole.matched) << cut << " " << cut2;
    }
  }
  EXPECT_EQ(run(stops, bytes_of(text)).text, whole.text);
}

TEST(StopChecker, MultiByteStopStringAndText) {
  // "終わり" split mid-character: the partial bytes are held, never emitted.
  const std::string stop = "終わり";
  StopChecker checker({stop});
  const std::string text = "答えは42。終わりです";
  std::string emitted;
  bool stopped = false;
  for (const char c : text) {
    const StopChecker::Step step = checker.push(std::string(1, c));
    emitted += step.text;
    stopped = stopped || step.stopped;
  }
  EXPECT_TRUE(stopped);
  EXPECT_EQ(emitted, "答えは42。");
}

TEST(StopChecker, NeverSplitsACharacterEvenWithoutAStopPrefix) {
  StopChecker checker({"zz"});
  const std::string euro = "\xE2\x82\xAC";  // €
  EXPECT_EQ(checker.push("a\xE2").text, "a");
  EXPECT_EQ(checker.push("\x82").text, "");
  EXPECT_EQ(checker.push("\xAC").text, euro);
  EXPECT_EQ(checker.push("b\xF0\x9F").text, "b");
  EXPECT_EQ(checker.finish(), "");  // an unfinished character is dropped
}

TEST(StopChecker, StopSharingALeadByteWithText) {
  // "é" (C3 A9) and "ê" (C3 AA) share their first byte.
  const Outcome o = run({"é"}, {"cr\xC3", "\xAA", "pe caf\xC3", "\xA9 noir"});
  EXPECT_TRUE(o.stopped);
  EXPECT_EQ(o.text, "cr\xC3\xAApe caf");
}

TEST(StopChecker, BadStopStringsAreErrors) {
  EXPECT_THROW(StopChecker({""}), Error);
  EXPECT_THROW(StopChecker({"ok", "\xC3"}), Error);
  EXPECT_THROW(StopChecker({"\x80x"}), Error);
}

}  // namespace
}  // namespace fp8lm::engine
