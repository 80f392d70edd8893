#include "common/mps/private_fs.hpp"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/mps/mps_pid_file.hpp"
#include "common/mps/safefs.hpp"
#include "tests/unit/doubles.hpp"

namespace unilab::mps {
namespace {

TEST(MountInfo, ParsesPointsTypesAndEscapes) {
  const auto m = parse_mountinfo(
      "22 1 0:21 / /run rw,nosuid shared:5 - tmpfs tmpfs rw,size=1g\n"
      "90 22 0:50 / /run/unilab\\040mps/job1/pipe rw,nosuid,nodev - fuse.sshfs u@h:/ rw,user_id=1001,group_id=1001\n"
      "garbage line\n"
      "91 22 0:51 / relative rw - tmpfs tmpfs rw\n"
      "92 22 0:52 / /run/x rw no-dash-here tmpfs\n");
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].id, 22);
  EXPECT_EQ(m[0].point, "/run");
  EXPECT_EQ(m[0].fstype, "tmpfs");
  EXPECT_EQ(m[1].id, 90);
  EXPECT_EQ(m[1].point, "/run/unilab mps/job1/pipe");
  EXPECT_EQ(m[1].fstype, "fuse.sshfs");
  EXPECT_FALSE(m[0].fuse_user);
  EXPECT_EQ(m[1].fuse_user.value_or(0), 1001u);
}

TEST(MountInfo, FindsAMountAtOrBelowAPathOnly) {
  const std::vector<MountEntry> m = {{1, "/run", "tmpfs", std::nullopt}, {2, "/run/u/job1/pipe2", "fuse", std::nullopt}, {3, "/run/u/job2/log/x", "fuse.a", std::nullopt}};
  EXPECT_FALSE(mount_at_or_below(m, "/run/u/job1/pipe")) << "pipe2 is not below pipe";
  EXPECT_EQ(mount_at_or_below(m, "/run/u/job1/pipe2").value_or(""), "fuse on /run/u/job1/pipe2");
  EXPECT_EQ(mount_at_or_below(m, "/run/u/job2/log").value_or(""), "fuse.a on /run/u/job2/log/x");
  EXPECT_FALSE(mount_at_or_below(m, "/run/u/job2/pipe"));
  EXPECT_EQ(mount_at_or_below(m, "/run").value_or(""), "tmpfs on /run");
}

// A user's FUSE stacked on the daemon's directory (whose tmpfs root the
// user owns) lies on the way to pipe/ and log/: root's lookups would go to it.
TEST(MountInfo, FindsAUsersFuseMountAboveAPath) {
  std::vector<MountEntry> m = {{1, "/run", "tmpfs", std::nullopt}, {2, "/run/u/job1", "tmpfs", std::nullopt},
                               {3, "/run/u/job1", "fuse.sshfs", 1001}};
  EXPECT_EQ(mount_at_or_below(m, "/run/u/job1/pipe").value_or(""), "fuse.sshfs on /run/u/job1 (mounted by uid 1001)");
  m[2].fuse_user = 0;  // root's own FUSE (a site's) is where a path may lie
  EXPECT_FALSE(mount_at_or_below(m, "/run/u/job1/pipe"));
  EXPECT_FALSE(mount_at_or_below({{4, "/run/u", "fuse", 1001}}, "/run/u2/pipe")) << "not above: a sibling";
}

class MountedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::is_root()) GTEST_SKIP() << "needs root: mounts";
  }
  void TearDown() override {
    for (auto it = made_.rbegin(); it != made_.rend(); ++it) umount2(it->c_str(), MNT_DETACH);
  }
  // A small tmpfs on `path` (made first): root's stand-in for a user's FUSE.
  void mount_at(const std::string& path) {
    std::filesystem::create_directories(path);
    ASSERT_EQ(mount("tmpfs", path.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "size=1m"), 0) << path << ": " << std::strerror(errno);
    made_.push_back(path);
  }
  static int id_of(const std::string& point) {
    const auto mounts = read_mountinfo();
    for (const auto& m : mounts.value()) {
      if (m.point == point) return m.id;
    }
    return -1;
  }
  test::TempDir tmp;
  std::string root = std::filesystem::canonical(tmp.path()).string();
  std::vector<std::string> made_;
};

TEST_F(MountedTest, DetachesWhatIsMountedBelowButNotTheDaemonsOwnTmpfs) {
  mount_at(root + "/d");  // the daemon's own tmpfs: kept
  mount_at(root + "/d/pipe");
  mount_at(root + "/d/pipe/inner");  // goes with pipe
  mount_at(root + "/d/log");
  Fd parent(open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  const auto lines = detach_mounts_below(parent.get(), "d", root + "/d", read_mountinfo().value());
  ASSERT_EQ(lines.size(), 2u) << testing::PrintToString(lines);
  EXPECT_EQ(lines[0].rfind("detached tmpfs on " + root + "/d/pipe", 0), 0u) << lines[0];
  EXPECT_EQ(lines[1].rfind("detached tmpfs on " + root + "/d/log", 0), 0u) << lines[1];
  EXPECT_FALSE(mount_at_or_below(root + "/d/pipe"));
  EXPECT_FALSE(mount_at_or_below(root + "/d/log"));
  EXPECT_NE(id_of(root + "/d"), -1) << "the daemon's own tmpfs stays for unmount_private_fs";
}

TEST_F(MountedTest, AMountWithoutTheDaemonsTmpfsIsDetachedAtTheDirectoryItself) {
  mount_at(root + "/d");  // with dir_size=off nothing of ours is mounted: a non-tmpfs here is a user's
  Fd parent(open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  auto mounts = read_mountinfo().value();
  for (auto& m : mounts) {
    if (m.point == root + "/d") m.fstype = "fuse.sshfs";
  }
  const auto lines = detach_mounts_below(parent.get(), "d", root + "/d", mounts);
  ASSERT_EQ(lines.size(), 1u) << testing::PrintToString(lines);
  EXPECT_EQ(lines[0].rfind("detached fuse.sshfs on " + root + "/d", 0), 0u) << lines[0];
  EXPECT_EQ(id_of(root + "/d"), -1);
}

// mountinfo is read before the walk: a user may have changed the path since.
TEST_F(MountedTest, AStalePathDetachesNothingElsewhere) {
  mount_at(root + "/elsewhere/x");
  std::filesystem::create_directories(root + "/d");
  std::filesystem::create_directory_symlink(root + "/elsewhere", root + "/d/link");
  const int id = id_of(root + "/elsewhere/x");
  ASSERT_NE(id, -1);
  Fd parent(open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  // A symlink on the way: never followed.
  auto lines = detach_mounts_below(parent.get(), "d", root + "/d", {{id, root + "/d/link/x", "fuse", std::nullopt}});
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("cannot reach its mount point"), std::string::npos) << lines[0];
  // A path that leads to another mount than the one listed.
  mount_at(root + "/d/y");
  lines = detach_mounts_below(parent.get(), "d", root + "/d", {{id, root + "/d/y", "fuse", std::nullopt}});
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("no longer leads to that mount"), std::string::npos) << lines[0];
  EXPECT_EQ(id_of(root + "/elsewhere/x"), id) << "the mount elsewhere is untouched";
  EXPECT_NE(id_of(root + "/d/y"), -1);
}

TEST_F(MountedTest, RootReadsNothingInADirectoryWithAMountInIt) {
  mount_at(root + "/pipe");
  chmod((root + "/pipe").c_str(), 0700);
  std::ofstream(root + "/pipe/" + kPidFileName) << "4242\n";
  std::string why;
  EXPECT_FALSE(read_mps_pid_file(root + "/pipe", 0, &why));
  EXPECT_NE(why.find("tmpfs on " + root + "/pipe is mounted in the pipe directory; not looking into it"), std::string::npos) << why;
  std::ofstream(root + "/pipe/control.log") << "a line\n";
  std::string problem;
  EXPECT_TRUE(read_user_file_tail(root + "/pipe", "control.log", 0, 4096, 5, 400, &problem).empty());
  EXPECT_NE(problem.find("is mounted there; not reading it"), std::string::npos) << problem;
}

}  // namespace
}  // namespace unilab::mps
