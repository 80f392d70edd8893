// common/slurm/node_probe.cpp: the real probe's guards, on real files and this very process.
#include "common/slurm/node_probe.hpp"

#include <sys/stat.h>

#include <gtest/gtest.h>

#include "common/mps/errors.hpp"
#include "tests/unit/doubles.hpp"

namespace unilab::mps {
namespace {

// The real probe's guards, on real files and this very process.
TEST(SystemNodeProbeTest, ReadsRootFilesOnlyWhenOnlyRootCanWriteThem) {
  test::TempDir tmp;
  SystemNodeProbe probe;
  std::string problem;
  test::write_text(tmp / "pid", "4242\n", 0644);
  auto text = probe.read_root_file(tmp / "pid", problem);
  if (geteuid() == 0) {
    EXPECT_EQ(text.value_or(""), "4242\n") << problem;
    EXPECT_EQ(problem, "");
  } else {
    EXPECT_FALSE(text);
    EXPECT_NE(problem.find("owned by uid " + std::to_string(geteuid())), std::string::npos) << problem;
  }
  chmod((tmp / "pid").c_str(), 0666);
  EXPECT_FALSE(probe.read_root_file(tmp / "pid", problem));
  EXPECT_NE(problem.find("mode 666: not a file only root can write"), std::string::npos) << problem;
  ASSERT_EQ(symlink((tmp / "pid").c_str(), (tmp / "link").c_str()), 0);
  EXPECT_FALSE(probe.read_root_file(tmp / "link", problem));
  EXPECT_EQ(problem, tmp / "link" + " is a symlink");
  // A FIFO would block an ifstream forever; here it is refused at once.
  ASSERT_EQ(mkfifo((tmp / "fifo").c_str(), 0644), 0);
  EXPECT_FALSE(probe.read_root_file(tmp / "fifo", problem));
  EXPECT_EQ(problem, tmp / "fifo" + " is not a regular file");
  EXPECT_FALSE(probe.read_root_file(tmp / "missing", problem));
  EXPECT_EQ(problem, "");
}

TEST(SystemNodeProbeTest, KnowsAProcessesUidAndTheFileItRuns) {
  SystemNodeProbe probe;
  EXPECT_EQ(probe.process_uid(getpid()), geteuid());
  auto exe = probe.process_exe(getpid());
  ASSERT_TRUE(exe);
  EXPECT_TRUE(probe.process_runs(getpid(), *exe));
  EXPECT_FALSE(probe.process_runs(getpid(), "/bin/sh"));
  EXPECT_FALSE(probe.process_uid(-5));
}

}  // namespace
}  // namespace unilab::mps
