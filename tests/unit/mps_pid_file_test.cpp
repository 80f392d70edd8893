#include "common/mps/mps_pid_file.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>

#include "common/mps/mps_control.hpp"
#include "tests/unit/doubles.hpp"

namespace unilab::mps {
namespace {

using namespace std::chrono_literals;
using test::TempDir;

TEST(ParseMpsPidFile, ReadsDigitsWithTrailingWhiteSpace) {
  EXPECT_EQ(parse_pid_file_text("4242"), 4242);
  EXPECT_EQ(parse_pid_file_text("4242\n"), 4242);
  EXPECT_EQ(parse_pid_file_text("4242 \t\n"), 4242);
}

TEST(ParseMpsPidFile, RefusesAnythingElse) {
  for (const char* t : {"", "\n", "0", "-5", "+5", "12x", "x12", " 12", "1 2", "99999999999999999999"}) {
    EXPECT_FALSE(parse_pid_file_text(t)) << '"' << t << '"';
  }
}

class PidFileTest : public ::testing::Test {
 protected:
  TempDir tmp;
  std::string pipe = tmp / "pipe";
  std::string file = pipe + "/" + kPidFileName;
  void SetUp() override { test::make_dir(pipe); }
};

TEST_F(PidFileTest, ReadsThePidAndSaysWhyNot) {
  std::string why;
  EXPECT_FALSE(read_mps_pid_file(pipe, geteuid(), &why));
  EXPECT_EQ(why, file + " does not exist");
  test::write_text(file, "junk\n");
  EXPECT_FALSE(read_mps_pid_file(pipe, geteuid(), &why));
  EXPECT_EQ(why, file + " holds no pid");
  test::write_text(file, "77\n");
  EXPECT_EQ(read_mps_pid_file(pipe, geteuid(), &why), 77);
}

TEST_F(PidFileTest, ADirectoryOthersMayWriteIsNotTrusted) {
  test::write_text(file, "77\n");
  chmod(pipe.c_str(), 0777);
  std::string why;
  EXPECT_FALSE(read_mps_pid_file(pipe, geteuid(), &why));
  EXPECT_FALSE(why.empty());
}

TEST_F(PidFileTest, AwaitLooksAgainUntilTheFileAppears) {
  test::FakeClock clock;
  std::vector<std::chrono::milliseconds> pauses;
  clock.on_sleep = [&](std::chrono::milliseconds p) {
    pauses.push_back(p);
    if (pauses.size() == 3) test::write_text(file, "88\n");
  };
  EXPECT_EQ(await_mps_pid_file(pipe, geteuid(), clock, clock.now() + 1000ms), 88);
  EXPECT_EQ(pauses, (std::vector<std::chrono::milliseconds>{1ms, 2ms, 4ms}));
}

TEST_F(PidFileTest, AwaitGivesUpAtTheDeadlineWithTheLastReason) {
  test::FakeClock clock;
  std::string why;
  EXPECT_FALSE(await_mps_pid_file(pipe, geteuid(), clock, clock.now() + 100ms, &why));
  EXPECT_EQ(clock.elapsed(), 100ms);
  EXPECT_EQ(why, file + " does not exist");
}

TEST_F(PidFileTest, AwaitLooksOnceEvenPastTheDeadline) {
  test::FakeClock clock;
  test::write_text(file, "99\n");
  EXPECT_EQ(await_mps_pid_file(pipe, geteuid(), clock, clock.now() - 1ms), 99);
  EXPECT_EQ(clock.sleeps, 0);
}

}  // namespace
}  // namespace unilab::mps
