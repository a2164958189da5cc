// The framing between the server and its grammar workers (structured/compile_worker.h): frames
// over a socket pair both ways, their bounds, a peer gone (EPIPE, never SIGPIPE), deadlines and
// the stop descriptor; specs as bytes and back.
// The worker processes themselves run in tests/python/test_structured_outputs.py.
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "common/error.h"
#include "structured/compile_worker.h"

namespace fp8lm::structured {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct Pair {
  int fd[2] = {-1, -1};
  Pair() { EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fd), 0); }
  ~Pair() {
    for (int f : fd)
      if (f >= 0) ::close(f);
  }
  void close(int i) { ::close(std::exchange(fd[i], -1)); }
};

TEST(CompileWorkerFrames, RoundTripBothWaysWithAnyBytes) {
  Pair p;
  std::string big(3 << 20, '\0');  // larger than a socket's buffer: written while read
  for (size_t i = 0; i < big.size(); ++i) big[i] = char(i * 131);
  std::thread writer([&] {
    EXPECT_TRUE(write_frame(p.fd[0], ""));
    EXPECT_TRUE(write_frame(p.fd[0], std::string_view("C", 1), big));
  });
  std::string got;
  ASSERT_EQ(read_frame(p.fd[1], got, kMaxReplyFrame), FrameStatus::kOk);
  EXPECT_EQ(got, "");
  ASSERT_EQ(read_frame(p.fd[1], got, kMaxReplyFrame, Clock::now() + 10s), FrameStatus::kOk);
  writer.join();
  EXPECT_EQ(got, "C" + big);
}

TEST(CompileWorkerFrames, RefuseALengthOverTheBound) {
  Pair p;
  ASSERT_TRUE(write_frame(p.fd[0], std::string(100, 'x')));
  std::string got;
  EXPECT_EQ(read_frame(p.fd[1], got, 99), FrameStatus::kTooLarge);
}

TEST(CompileWorkerFrames, EndOfFileInAFrameIsClosed) {
  Pair p;
  const char partial[] = {10, 0, 0, 0, 'a', 'b'};  // 10 bytes announced, 2 sent
  ASSERT_EQ(::write(p.fd[0], partial, sizeof partial), ssize_t(sizeof partial));
  p.close(0);
  std::string got;
  EXPECT_EQ(read_frame(p.fd[1], got, 100, Clock::now() + 5s), FrameStatus::kClosed);
  Pair q;
  q.close(0);
  EXPECT_EQ(read_frame(q.fd[1], got, 100), FrameStatus::kClosed);
}

TEST(CompileWorkerFrames, ADeadlineOrTheStopDescriptorEndTheWait) {
  Pair p;
  std::string got;
  const auto t0 = Clock::now();
  EXPECT_EQ(read_frame(p.fd[1], got, 100, t0 + 50ms), FrameStatus::kTimedOut);
  EXPECT_GE(Clock::now() - t0, 50ms);
  EXPECT_EQ(read_frame(p.fd[1], got, 100, t0 - 1s), FrameStatus::kTimedOut);  // already past
  int stop[2];
  ASSERT_EQ(::pipe2(stop, O_CLOEXEC), 0);
  std::thread stopper([&] {
    std::this_thread::sleep_for(20ms);
    EXPECT_EQ(::write(stop[1], "x", 1), 1);
  });
  EXPECT_EQ(read_frame(p.fd[1], got, 100, Clock::now() + 60s, stop[0]), FrameStatus::kStopped);
  stopper.join();
  // A readable stop descriptor wins over data: a stopping server takes no more replies.
  ASSERT_TRUE(write_frame(p.fd[0], "late"));
  EXPECT_EQ(read_frame(p.fd[1], got, 100, std::nullopt, stop[0]), FrameStatus::kStopped);
  ::close(stop[0]);
  ::close(stop[1]);
}

TEST(CompileWorkerFrames, WritingToAPeerGoneFailsWithoutSigpipe) {
  // SIGPIPE at its default: a write() would end this process; send(MSG_NOSIGNAL) does not.
  struct sigaction old{}, dfl{};
  dfl.sa_handler = SIG_DFL;
  ASSERT_EQ(::sigaction(SIGPIPE, &dfl, &old), 0);
  Pair p;
  p.close(1);
  errno = 0;
  EXPECT_FALSE(write_frame(p.fd[0], "to nobody"));
  EXPECT_EQ(errno, EPIPE);
  ::sigaction(SIGPIPE, &old, nullptr);
}

TEST(CompileWorkerSpecs, EncodeAndDecodeEveryKindAndAnyBytes) {
  const std::string bytes("a\0b\xff\n", 5);
  for (const GrammarSpec& s :
       {GrammarSpec{GrammarSpec::Kind::kJsonObject, "", {}, true},
        GrammarSpec{GrammarSpec::Kind::kJsonSchema, R"({"type": "string"})", {}, false},
        GrammarSpec{GrammarSpec::Kind::kRegex, bytes, {}, true},
        GrammarSpec{GrammarSpec::Kind::kChoice, "", {"yes", "", bytes}, true},
        GrammarSpec{GrammarSpec::Kind::kGrammar, "root ::= \"a\"", {}, true},
        GrammarSpec{GrammarSpec::Kind::kStructuralTag, "{}", {}, false}}) {
    EXPECT_EQ(decode_spec(encode_spec(s)), s) << kind_name(s.kind);
  }
}

TEST(CompileWorkerSpecs, DecodeRefusesMalformedBytes) {
  const std::string good = encode_spec({GrammarSpec::Kind::kChoice, "t", {"a", "b"}, true});
  for (size_t n = 0; n < good.size(); ++n) EXPECT_THROW(decode_spec(good.substr(0, n)), Error) << n;  // every prefix
  EXPECT_THROW(decode_spec(good + "x"), Error);
  std::string bad_kind = good;
  bad_kind[0] = char(42);
  EXPECT_THROW(decode_spec(bad_kind), Error);
  std::string many = good;
  many[10] = char(0xff);  // the choice count's top byte (after kind, whitespace, 4 + 1 bytes of text)
  EXPECT_THROW(decode_spec(many), Error);
}

}  // namespace
}  // namespace fp8lm::structured
