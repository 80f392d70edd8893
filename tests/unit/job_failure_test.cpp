#include "common/slurm/job_failure.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <map>

#include "common/mps/errors.hpp"
#include "tests/unit/doubles.hpp"

namespace unilab::mps {
namespace {

using test::TempDir;

mode_t mode_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

TEST(PrologFailure, KeptReadAndClearedPerJobAndNode) {
  TempDir tmp;
  const std::string state = tmp / "state";
  EXPECT_FALSE(read_prolog_failure(state, geteuid(), "7", "n1"));  // no store yet
  keep_prolog_failure(state, geteuid(), "7", "n1", "MPS daemon did not answer within 15 s");
  EXPECT_EQ(read_prolog_failure(state, geteuid(), "7", "n1"), "MPS daemon did not answer within 15 s");
  EXPECT_FALSE(read_prolog_failure(state, geteuid(), "7", "n2"));  // another node's
  EXPECT_FALSE(read_prolog_failure(state, geteuid(), "70", "n1"));  // another job's
  clear_prolog_failure(state, geteuid(), "7", "n1");
  EXPECT_FALSE(read_prolog_failure(state, geteuid(), "7", "n1"));
  clear_prolog_failure(state, geteuid(), "7", "n1");  // missing is fine
}

TEST(PrologFailure, AllOfAJobsReasonsOnThisHostByNode) {
  TempDir tmp;
  const std::string state = tmp / "state";
  EXPECT_TRUE(read_job_prolog_failures(state, geteuid(), "7").empty());
  keep_prolog_failure(state, geteuid(), "7", "n1", "one");
  keep_prolog_failure(state, geteuid(), "7", "n1.x", "two");
  keep_prolog_failure(state, geteuid(), "70", "n1", "another job");
  EXPECT_EQ(read_job_prolog_failures(state, geteuid(), "7"),
            (std::map<std::string, std::string>{{"n1", "one"}, {"n1.x", "two"}}));
  ASSERT_EQ(chmod((state + "/prolog-failures/" + prolog_failure_file("7", "n1")).c_str(), 0666), 0);
  EXPECT_THROW(read_job_prolog_failures(state, geteuid(), "7"), CudaMpsError);
}

TEST(PrologFailure, OnlyTheOwnerCanReadItAndTheRecordStoreKeepsItsMode) {
  TempDir tmp;
  const std::string state = tmp / "state";
  keep_prolog_failure(state, geteuid(), "7", "n1", "why");
  EXPECT_EQ(mode_of(state), 0755u);  // tasks read the records there as the job user
  EXPECT_EQ(mode_of(state + "/prolog-failures"), 0700u);
  EXPECT_EQ(mode_of(state + "/prolog-failures/" + prolog_failure_file("7", "n1")), 0600u);
}

TEST(PrologFailure, AFileOthersCouldHaveWrittenIsNeverBelieved) {
  TempDir tmp;
  const std::string state = tmp / "state";
  keep_prolog_failure(state, geteuid(), "7", "n1", "why");
  const std::string file = state + "/prolog-failures/" + prolog_failure_file("7", "n1");
  ASSERT_EQ(chmod(file.c_str(), 0620), 0);
  EXPECT_THROW(read_prolog_failure(state, geteuid(), "7", "n1"), CudaMpsError);
  ASSERT_EQ(chmod(file.c_str(), 0600), 0);
  ASSERT_EQ(chmod((state + "/prolog-failures").c_str(), 0777), 0);
  EXPECT_THROW(read_prolog_failure(state, geteuid(), "7", "n1"), CudaMpsError);
}

TEST(PrologFailure, OneBoundedLine) {
  EXPECT_EQ(prolog_failure_line("a\nb\tc"), "a\\x0ab\\x09c");
  EXPECT_EQ(prolog_failure_line(std::string(1000, 'x')).size(), 400u);
  TempDir tmp;
  keep_prolog_failure(tmp / "s", geteuid(), "7", "n1", "first\nsecond");
  EXPECT_EQ(read_prolog_failure(tmp / "s", geteuid(), "7", "n1"), "first\\x0asecond");
}

TEST(PrologFailure, NodeNamesThatCouldEscapeTheDirectoryAreRefused) {
  TempDir tmp;
  EXPECT_THROW(keep_prolog_failure(tmp / "s", geteuid(), "7", "../x", "why"), CudaMpsError);
  EXPECT_THROW(read_prolog_failure(tmp / "s", geteuid(), "7", "a/b"), CudaMpsError);
}

TEST(PrologFailure, TheTaskMessageCarriesTheReason) {
  EXPECT_EQ(prolog_failure_message("7", "n1", "nvidia-smi reports GPU 0 without a UUID"),
            "no MPS daemon was started for job 7 on node n1: the job prolog failed there: nvidia-smi reports GPU 0 without a UUID");
}

}  // namespace
}  // namespace unilab::mps
