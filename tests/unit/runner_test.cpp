#include "common/runner.hpp"

#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>

#include "tests/unit/doubles.hpp"

namespace unilab::mps {
namespace {

using namespace std::chrono_literals;

Command sh(const std::string& script) {
  Command c;
  c.argv = {"/bin/sh", "-c", script};
  c.env = {"PATH=/usr/bin:/bin"};
  c.timeout = 10s;
  return c;
}

TEST(SystemRunner, CapturesOutputAndExitCode) {
  SystemRunner r;
  CommandResult res = r.run(sh("echo out; echo err >&2; exit 3"));
  EXPECT_EQ(res.exit_code, 3);
  EXPECT_EQ(res.out, "out\n");
  EXPECT_EQ(res.err, "err\n");
  EXPECT_FALSE(res.ok());
  EXPECT_EQ(res.describe(), "exit 3");
  EXPECT_EQ(res.first_output_line(), "err");
  EXPECT_TRUE(r.run(sh("exit 0")).ok());
}

TEST(SystemRunner, EnvironmentIsExactlyWhatWasGiven) {
  setenv("UNILAB_MPS_TEST_CANARY", "leaked", 1);
  SystemRunner r;
  Command c = sh("env");
  c.env = {"PATH=/bin", "ONLY=this"};
  CommandResult res = r.run(c);
  unsetenv("UNILAB_MPS_TEST_CANARY");
  ASSERT_TRUE(res.ok()) << res.describe();
  EXPECT_EQ(res.out.find("leaked"), std::string::npos) << res.out;
  EXPECT_NE(res.out.find("ONLY=this"), std::string::npos) << res.out;
  EXPECT_EQ(res.out.find("HOME="), std::string::npos) << res.out;
}

TEST(SystemRunner, StdinIsTheGivenBufferOrEmpty) {
  SystemRunner r;
  Command c = sh("cat");
  c.stdin_data = "quit\n";
  EXPECT_EQ(r.run(c).out, "quit\n");
  // Without data, stdin is at EOF at once (cat must not hang).
  EXPECT_EQ(r.run(sh("cat")).out, "");
}

TEST(SystemRunner, FdsAboveTwoAreClosedInTheChild) {
  int fd = open("/dev/null", O_RDONLY);  // deliberately without O_CLOEXEC
  ASSERT_GE(fd, 3);
  SystemRunner r;
  CommandResult res = r.run(sh("ls /proc/self/fd"));
  close(fd);
  ASSERT_TRUE(res.ok()) << res.describe();
  // 0, 1, 2 and the fd ls itself opens to read the directory.
  std::istringstream lines(res.out);
  std::string line;
  int above_two = 0;
  while (std::getline(lines, line)) above_two += !line.empty() && std::stoi(line) > 3;
  EXPECT_EQ(above_two, 0) << res.out;
}

TEST(SystemRunner, ExecErrorsNameTheProgram) {
  SystemRunner r;
  Command c;
  c.argv = {"/nonexistent/unilab/tool"};
  CommandResult res = r.run(c);
  EXPECT_NE(res.exec_error.find("/nonexistent/unilab/tool"), std::string::npos) << res.exec_error;
  EXPECT_FALSE(res.ok());
  c.argv = {"sh"};  // no PATH lookup, ever
  res = r.run(c);
  EXPECT_NE(res.exec_error.find("not an absolute path"), std::string::npos) << res.exec_error;
  c.argv = {};
  EXPECT_FALSE(r.run(c).exec_error.empty());
}

TEST(SystemRunner, TimeoutKillsTheChild) {
  SystemRunner r;
  Command c = sh("sleep 30");
  c.timeout = 200ms;
  auto start = std::chrono::steady_clock::now();
  CommandResult res = r.run(c);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_TRUE(res.timed_out);
  EXPECT_FALSE(res.ok());
}

TEST(SystemRunner, ADaemonizingChildDoesNotKeepUsWaiting) {
  SystemRunner r;
  auto start = std::chrono::steady_clock::now();
  CommandResult res = r.run(sh("sleep 3 & echo started"));  // the background sleep keeps stdout open
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2500ms);
  EXPECT_TRUE(res.ok()) << res.describe();
  EXPECT_EQ(res.out, "started\n");
}

TEST(SystemRunner, KilledBySignal) {
  SystemRunner r;
  CommandResult res = r.run(sh("kill -9 $$"));
  EXPECT_EQ(res.term_signal, 9);
  EXPECT_EQ(res.describe(), "killed by signal 9");
}

TEST(SystemRunner, DropsToTheRequestedUserWhenRoot) {
  SystemRunner r;
  Command c;
  c.argv = {"/bin/sh", "-c", "id -u; id -g; id -G"};
  c.env = {"PATH=/usr/bin:/bin"};
  c.credentials = Credentials{test::kOtherUid, test::kOtherGid};
  if (!test::is_root()) c.credentials = Credentials{geteuid() + 1, getegid()};
  CommandResult res = r.run(c);
  if (!test::is_root()) {
    EXPECT_NE(res.exec_error.find("only root"), std::string::npos) << res.exec_error;
    return;
  }
  ASSERT_TRUE(res.ok()) << res.describe() << res.err;
  std::istringstream lines(res.out);
  std::string uid, gid, groups;
  std::getline(lines, uid);
  std::getline(lines, gid);
  std::getline(lines, groups);
  EXPECT_EQ(uid, "65534");
  EXPECT_EQ(gid, "65534");
  EXPECT_EQ(groups.find(" 0"), std::string::npos) << "root's groups leaked: " << groups;
  EXPECT_NE(groups.rfind("0", 0), 0u) << groups;
}

TEST(CommandResult, FirstOutputLinePrefersStderrAndSkipsBlankLines) {
  CommandResult r;
  r.out = "\n\nstdout line\n";
  EXPECT_EQ(r.first_output_line(), "stdout line");
  r.err = "\n  \nstderr line \r\nmore";
  EXPECT_EQ(r.first_output_line(), "stderr line");
}

TEST(SystemClock, MovesForward) {
  SystemClock c;
  auto a = c.now();
  c.sleep_for(1ms);
  EXPECT_GT(c.now(), a);
  EXPECT_GT(c.wall_seconds(), 1.6e9);
}

}  // namespace
}  // namespace unilab::mps
