#include "common/slurm/job_logs.hpp"

#include <unistd.h>

#include <gtest/gtest.h>

#include "tests/unit/doubles.hpp"

namespace unilab::mps {
namespace {

using test::TempDir;

Getenv env_of(std::map<std::string, std::string> vars) {
  return [vars](const char* key) -> std::optional<std::string> {
    auto it = vars.find(key);
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
}

TEST(JobEndTest, DecodesTheEpilogEnvironmentAsSeenLive) {
  // Values seen in a 22.05 epilog: srun task `exit 3`; batch script killed by SIGKILL; success.
  JobEnd e = job_end_from_env(env_of({{"SLURM_JOB_EXIT_CODE", "768"}, {"SLURM_JOB_DERIVED_EC", "0"}}));
  EXPECT_TRUE(e.known);
  EXPECT_TRUE(e.failed);
  EXPECT_EQ(e.description, "exit code 3");
  e = job_end_from_env(env_of({{"SLURM_JOB_EXIT_CODE", "9"}, {"SLURM_JOB_DERIVED_EC", "0"}}));
  EXPECT_TRUE(e.failed);
  EXPECT_EQ(e.description, "killed by signal 9");
  e = job_end_from_env(env_of({{"SLURM_JOB_EXIT_CODE", "0"}, {"SLURM_JOB_DERIVED_EC", "0"}}));
  EXPECT_TRUE(e.known);
  EXPECT_FALSE(e.failed);
  e = job_end_from_env(env_of({{"SLURM_JOB_EXIT_CODE", "0"}, {"SLURM_JOB_DERIVED_EC", "512"}}));
  EXPECT_TRUE(e.failed);
  EXPECT_EQ(e.description, "a step ended with 2");
  e = job_end_from_env(env_of({}));
  EXPECT_FALSE(e.known);
  EXPECT_FALSE(e.failed);
  EXPECT_FALSE(job_end_from_env(env_of({{"SLURM_JOB_EXIT_CODE", "x"}})).known);
}

TEST(JobLogsTest, ErrorLines) {
  EXPECT_TRUE(log_line_shows_error("[2024-01-01 00:00:00.000 Control 1] Server 77 exited with status 1"));
  EXPECT_FALSE(log_line_shows_error("[2024-01-01 00:00:00.000 Control 1] Server 77 exited with status 0"));
  EXPECT_TRUE(log_line_shows_error("Failed to start server"));
  EXPECT_TRUE(log_line_shows_error("CUDA ERROR: out of memory"));
  EXPECT_FALSE(log_line_shows_error("[..] Cmd: get_server_list (uid=1000)"));
}

class LogTailTest : public ::testing::Test {
 protected:
  TempDir tmp;
  std::string log = tmp / "log";
  void SetUp() override { test::make_dir(log, 0700); }
  void write_log(const std::string& text) { test::write_text(log + "/control.log", text, 0600); }
};

TEST_F(LogTailTest, LastLinesPrintable) {
  std::string text;
  for (int i = 1; i <= 30; ++i) text += "line " + std::to_string(i) + "\n";
  text += "evil \x1b[2J\r\n";
  write_log(text);
  auto tail = read_daemon_log_tail(log, geteuid(), 3);
  ASSERT_EQ(tail.size(), 3u);
  EXPECT_EQ(tail[0], "line 29");
  EXPECT_EQ(tail[1], "line 30");
  EXPECT_EQ(tail[2], "evil \\x1b[2J");  // escaped, never copied raw into the slurmd log
}

TEST_F(LogTailTest, RefusesWhatTheDaemonUserDidNotWrite) {
  write_log("a\n");
  EXPECT_TRUE(read_daemon_log_tail(log, geteuid() + 1, 5).empty());  // not the daemon user's
  ASSERT_EQ(unlink((log + "/control.log").c_str()), 0);
  test::write_text(tmp / "secret", "secret\n", 0600);
  ASSERT_EQ(symlink((tmp / "secret").c_str(), (log + "/control.log").c_str()), 0);
  EXPECT_TRUE(read_daemon_log_tail(log, geteuid(), 5).empty());  // a planted symlink
  ASSERT_EQ(unlink((log + "/control.log").c_str()), 0);
  ASSERT_EQ(link((tmp / "secret").c_str(), (log + "/control.log").c_str()), 0);
  EXPECT_TRUE(read_daemon_log_tail(log, geteuid(), 5).empty());  // a hard link
  EXPECT_TRUE(read_daemon_log_tail(tmp / "missing", geteuid(), 5).empty());
}

TEST_F(LogTailTest, KeepsEveryDaemonOfAFailedJobAndOnlyTroubledOnesOtherwise) {
  write_log("[t Control 1] Cmd: get_server_list (uid=1)\n");
  std::string bad = tmp / "bad";
  test::make_dir(bad, 0700);
  test::write_text(bad + "/control.log", "[t Control 2] Server 9 exited with status 1\n", 0600);
  DaemonRecord a = test::make_record("job1.n1.gpu0", geteuid(), "n1", 1, 1, tmp / "p", {test::kUuid0});
  a.log_directory = log;
  DaemonRecord b = a;
  b.name = "job1.n1.gpu1";
  b.log_directory = bad;
  JobEnd failed{true, true, "exit code 3"};
  auto tails = job_log_tails_to_keep({a, b}, failed, 20);
  ASSERT_EQ(tails.size(), 2u);
  EXPECT_EQ(tails[0].reason, "the job failed: exit code 3");
  EXPECT_EQ(tails[0].log_file, log + "/control.log");
  tails = job_log_tails_to_keep({a, b}, JobEnd{true, false, "success"}, 20);
  ASSERT_EQ(tails.size(), 1u);
  EXPECT_EQ(tails[0].daemon, "job1.n1.gpu1");
  EXPECT_EQ(tails[0].reason, "its control.log reports a problem");
  EXPECT_EQ(job_log_tails_to_keep({a, b}, JobEnd{}, 20).size(), 1u);  // unknown end: only the troubled one
}

}  // namespace
}  // namespace unilab::mps
