#include "common/mps/safefs.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sys/resource.h>

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <thread>

#include "common/mps/errors.hpp"
#include "tests/unit/doubles.hpp"

namespace unilab::mps {
namespace {

using test::error_of;
using test::TempDir;

Fd open_dir(const std::string& path) { return Fd(open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)); }

// --- open_trusted_dir ---------------------------------------------------------

TEST(OpenTrustedDir, AcceptsTmpAndOurOwnPrivateDir) {
  TempDir tmp;
  EXPECT_TRUE(open_trusted_dir("/tmp", geteuid()));  // root-owned and sticky
  EXPECT_TRUE(open_trusted_dir("/", geteuid()));
  test::make_dir(tmp / "a", 0755);
  test::make_dir(tmp / "a/b", 0700);
  Fd fd = open_trusted_dir(tmp / "a/b", geteuid());
  ASSERT_TRUE(fd);
  struct stat st {};
  ASSERT_EQ(fstat(fd.get(), &st), 0);
  struct stat want {};
  ASSERT_EQ(stat((tmp / "a/b").c_str(), &want), 0);
  EXPECT_EQ(st.st_ino, want.st_ino);
  // Redundant slashes and "." are fine; ".." and relative paths are not.
  EXPECT_TRUE(open_trusted_dir(tmp.path() + "//a/./b/", geteuid()));
  EXPECT_THROW(open_trusted_dir(tmp.path() + "/a/../a", geteuid()), CudaMpsError);
  EXPECT_THROW(open_trusted_dir("tmp", geteuid()), CudaMpsError);
  EXPECT_THROW(open_trusted_dir("", geteuid()), CudaMpsError);
}

TEST(OpenTrustedDir, RefusesASymlinkComponentNamingIt) {
  TempDir tmp;
  test::make_dir(tmp / "real", 0700);
  test::make_dir(tmp / "real/inner", 0700);
  ASSERT_EQ(symlink((tmp / "real").c_str(), (tmp / "link").c_str()), 0);
  std::string e = error_of([&] { open_trusted_dir(tmp / "link/inner", geteuid()); });
  EXPECT_NE(e.find(tmp / "link"), std::string::npos) << e;
  EXPECT_NE(e.find("symlink"), std::string::npos) << e;
  // A symlink as the last component too.
  e = error_of([&] { open_trusted_dir(tmp / "link", geteuid()); });
  EXPECT_NE(e.find("symlink"), std::string::npos) << e;
}

TEST(OpenTrustedDir, RefusesAFileComponentAndAMissingOne) {
  TempDir tmp;
  test::write_text(tmp / "file", "x");
  EXPECT_THROW(open_trusted_dir(tmp / "file", geteuid()), CudaMpsError);
  std::string e = error_of([&] { open_trusted_dir(tmp / "missing/x", geteuid()); });
  EXPECT_NE(e.find("missing"), std::string::npos) << e;
}

TEST(OpenTrustedDir, RefusesGroupOrOtherWritableDirectories) {
  TempDir tmp;
  test::make_dir(tmp / "gw", 0770);
  std::string e = error_of([&] { open_trusted_dir(tmp / "gw", geteuid()); });
  EXPECT_NE(e.find(tmp / "gw"), std::string::npos) << e;
  EXPECT_NE(e.find("writable"), std::string::npos) << e;
  test::make_dir(tmp / "ow", 0703);
  EXPECT_THROW(open_trusted_dir(tmp / "ow", geteuid()), CudaMpsError);
  // Sticky is accepted only for root-owned dirs (like /tmp): ours is not, when we are not root.
  test::make_dir(tmp / "sticky", 01777);
  if (geteuid() != 0) {
    EXPECT_THROW(open_trusted_dir(tmp / "sticky", geteuid()), CudaMpsError);
  }
  // A dir below a loose one is refused too (every component is checked).
  test::make_dir(tmp / "gw/inner", 0700);
  EXPECT_THROW(open_trusted_dir(tmp / "gw/inner", geteuid()), CudaMpsError);
}

TEST(OpenTrustedDir, RefusesADirectoryOwnedByAnotherUser) {
  if (!test::is_root()) GTEST_SKIP() << "needs root to chown a directory to another uid";
  TempDir tmp;
  test::make_dir(tmp / "theirs", 0755);
  ASSERT_EQ(chown((tmp / "theirs").c_str(), test::kOtherUid, test::kOtherGid), 0);
  std::string e = error_of([&] { open_trusted_dir(tmp / "theirs", 1000); });
  EXPECT_NE(e.find("uid 65534"), std::string::npos) << e;
  EXPECT_NE(e.find(tmp / "theirs"), std::string::npos) << e;
  // The same dir is trusted for its owner.
  EXPECT_TRUE(open_trusted_dir(tmp / "theirs", test::kOtherUid));
}

// --- ensure_trusted_dir --------------------------------------------------------

TEST(EnsureTrustedDir, CreatesMissingComponentsWithTheMode) {
  TempDir tmp;
  Fd fd = ensure_trusted_dir(tmp / "x/y/z", geteuid(), geteuid(), getegid(), 0750);
  ASSERT_TRUE(fd);
  for (const char* p : {"x", "x/y", "x/y/z"}) {
    EXPECT_TRUE(S_ISDIR(test::mode_of(tmp / p))) << p;
    EXPECT_EQ(test::mode_of(tmp / p) & 07777, 0750u) << p;
  }
  // Existing components are accepted and keep their mode.
  test::make_dir(tmp / "keep", 0700);
  ensure_trusted_dir(tmp / "keep/new", geteuid(), geteuid(), getegid(), 0755);
  EXPECT_EQ(test::mode_of(tmp / "keep") & 07777, 0700u);
  EXPECT_EQ(test::mode_of(tmp / "keep/new") & 07777, 0755u);
}

TEST(EnsureTrustedDir, NeverCreatesThroughASymlink) {
  TempDir tmp;
  test::make_dir(tmp / "target", 0700);
  ASSERT_EQ(symlink((tmp / "target").c_str(), (tmp / "link").c_str()), 0);
  EXPECT_THROW(ensure_trusted_dir(tmp / "link/sub", geteuid(), geteuid(), getegid(), 0700), CudaMpsError);
  EXPECT_FALSE(test::exists(tmp / "target/sub"));
}

TEST(EnsureTrustedDir, ChownsNewComponentsWhenRoot) {
  if (!test::is_root()) GTEST_SKIP() << "needs root to create directories for another uid";
  TempDir tmp;
  ensure_trusted_dir(tmp / "state", test::kOtherUid, test::kOtherUid, test::kOtherGid, 0700);
  EXPECT_EQ(test::owner_of(tmp / "state"), test::kOtherUid);
}

// --- ensure_private_dir --------------------------------------------------------

TEST(EnsurePrivateDir, Creates0700AndReportsCreation) {
  TempDir tmp;
  umask(022);
  Fd parent = open_dir(tmp.path());
  bool created = false;
  Fd d = ensure_private_dir(parent.get(), "daemon", geteuid(), getegid(), &created);
  EXPECT_TRUE(d);
  EXPECT_TRUE(created);
  EXPECT_EQ(test::mode_of(tmp / "daemon") & 07777, 0700u);
  EXPECT_TRUE(S_ISDIR(test::mode_of(tmp / "daemon")));
  // A second call accepts it and says it existed.
  ensure_private_dir(parent.get(), "daemon", geteuid(), getegid(), &created);
  EXPECT_FALSE(created);
}

TEST(EnsurePrivateDir, RefusesAnExistingSymlink) {
  TempDir tmp;
  test::make_dir(tmp / "elsewhere", 0700);
  ASSERT_EQ(symlink((tmp / "elsewhere").c_str(), (tmp / "daemon").c_str()), 0);
  Fd parent = open_dir(tmp.path());
  std::string e = error_of([&] { ensure_private_dir(parent.get(), "daemon", geteuid(), getegid()); });
  EXPECT_NE(e.find("symlink"), std::string::npos) << e;
  EXPECT_TRUE(S_ISLNK(test::mode_of(tmp / "daemon")));
}

TEST(EnsurePrivateDir, RefusesAnExistingLooseDirectory) {
  TempDir tmp;
  test::make_dir(tmp / "daemon", 0755);
  Fd parent = open_dir(tmp.path());
  std::string e = error_of([&] { ensure_private_dir(parent.get(), "daemon", geteuid(), getegid()); });
  EXPECT_NE(e.find("755"), std::string::npos) << e;
  EXPECT_EQ(test::mode_of(tmp / "daemon") & 07777, 0755u);  // not silently "fixed"
}

TEST(EnsurePrivateDir, RefusesAnExistingFile) {
  TempDir tmp;
  test::write_text(tmp / "daemon", "x");
  Fd parent = open_dir(tmp.path());
  EXPECT_THROW(ensure_private_dir(parent.get(), "daemon", geteuid(), getegid()), CudaMpsError);
}

TEST(EnsurePrivateDir, RefusesUnsafeNames) {
  TempDir tmp;
  Fd parent = open_dir(tmp.path());
  for (const char* n : {"..", ".", "a/b", "", ".hidden"}) {
    EXPECT_THROW(ensure_private_dir(parent.get(), n, geteuid(), getegid()), CudaMpsError) << n;
  }
}

TEST(EnsurePrivateDir, RefusesAnExistingDirectoryOfAnotherUid) {
  if (!test::is_root()) GTEST_SKIP() << "needs root to chown a directory to another uid";
  TempDir tmp;
  test::make_dir(tmp / "daemon", 0700);
  ASSERT_EQ(chown((tmp / "daemon").c_str(), test::kOtherUid, test::kOtherGid), 0);
  Fd parent = open_dir(tmp.path());
  std::string e = error_of([&] { ensure_private_dir(parent.get(), "daemon", 1000, 1000); });
  EXPECT_NE(e.find("65534"), std::string::npos) << e;
}

TEST(EnsurePrivateDir, CreatesForTheTargetUserWhenRoot) {
  if (!test::is_root()) GTEST_SKIP() << "needs root to chown";
  TempDir tmp;
  Fd parent = open_dir(tmp.path());
  ensure_private_dir(parent.get(), "u", test::kOtherUid, test::kOtherGid);
  EXPECT_EQ(test::owner_of(tmp / "u"), test::kOtherUid);
  EXPECT_EQ(test::mode_of(tmp / "u") & 07777, 0700u);
}

// --- write_file_atomic / read_file_at -------------------------------------------

TEST(WriteFileAtomic, ReplacesContentAndLeavesNoTempFile) {
  TempDir tmp;
  Fd dir = open_dir(tmp.path());
  write_file_atomic(dir.get(), "rec.json", "first\n", 0600);
  EXPECT_EQ(test::read_text(tmp / "rec.json"), "first\n");
  EXPECT_EQ(test::mode_of(tmp / "rec.json") & 07777, 0600u);
  write_file_atomic(dir.get(), "rec.json", "second, longer content\n", 0644);
  EXPECT_EQ(test::read_text(tmp / "rec.json"), "second, longer content\n");
  EXPECT_EQ(test::mode_of(tmp / "rec.json") & 07777, 0644u);
  EXPECT_EQ(test::dir_entries(tmp.path()), (std::vector<std::string>{"rec.json"}));
  write_file_atomic(dir.get(), "empty", "", 0600);
  EXPECT_EQ(test::read_text(tmp / "empty"), "");
}

TEST(WriteFileAtomic, ReplacesAPlantedSymlinkInsteadOfWritingThroughIt) {
  TempDir tmp;
  test::write_text(tmp / "victim", "precious\n");
  ASSERT_EQ(symlink((tmp / "victim").c_str(), (tmp / "rec.json").c_str()), 0);
  Fd dir = open_dir(tmp.path());
  write_file_atomic(dir.get(), "rec.json", "record\n", 0600);
  EXPECT_EQ(test::read_text(tmp / "victim"), "precious\n");
  EXPECT_TRUE(S_ISREG(test::mode_of(tmp / "rec.json")));
  EXPECT_EQ(test::read_text(tmp / "rec.json"), "record\n");
}

TEST(WriteFileAtomic, FailureLeavesNoTempFile) {
  TempDir tmp;
  test::make_dir(tmp / "rec.json", 0700);
  test::write_text(tmp / "rec.json/keep", "x");  // rename over a non-empty dir fails
  Fd dir = open_dir(tmp.path());
  EXPECT_THROW(write_file_atomic(dir.get(), "rec.json", "data", 0600), CudaMpsError);
  EXPECT_EQ(test::dir_entries(tmp.path()), (std::vector<std::string>{"rec.json"}));
}

TEST(ReadFileAt, ReadsRegularFilesAndMissingIsNullopt) {
  TempDir tmp;
  test::write_text(tmp / "f", std::string("a\0b", 3));
  Fd dir = open_dir(tmp.path());
  EXPECT_EQ(read_file_at(dir.get(), "f"), std::string("a\0b", 3));
  EXPECT_FALSE(read_file_at(dir.get(), "missing"));
}

TEST(ReadFileAt, RefusesASymlink) {
  TempDir tmp;
  test::write_text(tmp / "target", "secret");
  ASSERT_EQ(symlink((tmp / "target").c_str(), (tmp / "link").c_str()), 0);
  Fd dir = open_dir(tmp.path());
  std::string e = error_of([&] { read_file_at(dir.get(), "link"); });
  EXPECT_NE(e.find("symlink"), std::string::npos) << e;
  // Also a dangling one.
  ASSERT_EQ(symlink((tmp / "nowhere").c_str(), (tmp / "dangling").c_str()), 0);
  EXPECT_THROW(read_file_at(dir.get(), "dangling"), CudaMpsError);
}

TEST(ReadFileAt, RefusesAFifoAndADirectory) {
  TempDir tmp;
  ASSERT_EQ(mkfifo((tmp / "fifo").c_str(), 0600), 0);
  test::make_dir(tmp / "dir", 0700);
  Fd dir = open_dir(tmp.path());
  std::string e = error_of([&] { read_file_at(dir.get(), "fifo"); });  // must not block either
  EXPECT_NE(e.find("not a regular file"), std::string::npos) << e;
  EXPECT_THROW(read_file_at(dir.get(), "dir"), CudaMpsError);
}

TEST(ReadFileAt, RefusesOversizedFiles) {
  TempDir tmp;
  test::write_text(tmp / "big", std::string(101, 'x'));
  test::write_text(tmp / "fits", std::string(100, 'x'));
  Fd dir = open_dir(tmp.path());
  std::string e = error_of([&] { read_file_at(dir.get(), "big", 100); });
  EXPECT_NE(e.find("larger"), std::string::npos) << e;
  EXPECT_EQ(read_file_at(dir.get(), "fits", 100)->size(), 100u);
}

// --- issue #10 (b), #12: the store and run dir themselves, record files ------------

TEST(OpenTrustedDir, AStickyWorldWritableLeafIsRefusedWhereItsEntriesAreTrusted) {
  if (!test::is_root()) GTEST_SKIP() << "needs root for a root-owned sticky directory";
  TempDir tmp;
  ASSERT_EQ(chmod(tmp.path().c_str(), 0755), 0);
  test::make_dir(tmp / "sticky", 01777);  // `state_dir=/tmp/unilab-mps` made 1777
  test::make_dir(tmp / "sticky/inner", 0755);
  // As an ancestor (like /tmp) it is fine, as the directory itself it is not.
  EXPECT_TRUE(open_trusted_dir(tmp / "sticky", 0));
  EXPECT_TRUE(open_trusted_dir(tmp / "sticky/inner", 0, Leaf::kPrivate));
  std::string e = error_of([&] { open_trusted_dir(tmp / "sticky", 0, Leaf::kPrivate); });
  EXPECT_NE(e.find(tmp / "sticky"), std::string::npos) << e;
  EXPECT_NE(e.find("sticky is not enough"), std::string::npos) << e;
  EXPECT_THROW(open_trusted_dir("/tmp", 0, Leaf::kPrivate), CudaMpsError);
  EXPECT_THROW(open_trusted_dir_if_exists(tmp / "sticky", 0, Leaf::kPrivate), CudaMpsError);
  EXPECT_THROW(ensure_trusted_dir(tmp / "sticky", 0, 0, 0, 0755), CudaMpsError);
  EXPECT_TRUE(ensure_trusted_dir(tmp / "sticky/new", 0, 0, 0, 0755));
}

TEST(OpenTrustedDirIfExists, MissingIsAnEmptyFdUntrustedStillThrows) {
  TempDir tmp;
  EXPECT_FALSE(open_trusted_dir_if_exists(tmp / "missing", geteuid()));
  EXPECT_FALSE(open_trusted_dir_if_exists(tmp / "missing/deeper", geteuid()));
  test::make_dir(tmp / "ok", 0700);
  EXPECT_TRUE(open_trusted_dir_if_exists(tmp / "ok", geteuid()));
  test::make_dir(tmp / "loose", 0777);
  EXPECT_THROW(open_trusted_dir_if_exists(tmp / "loose", geteuid()), CudaMpsError);
  ASSERT_EQ(symlink((tmp / "ok").c_str(), (tmp / "link").c_str()), 0);
  EXPECT_THROW(open_trusted_dir_if_exists(tmp / "link", geteuid()), CudaMpsError);
}

TEST(ReadOwnedFileAt, OnlyTheOwnersFileNotWritableByOthers) {
  TempDir tmp;
  Fd dir = open_dir(tmp.path());
  test::write_text(tmp / "mine", "ok", 0644);
  EXPECT_EQ(read_owned_file_at(dir.get(), "mine", geteuid()), "ok");
  EXPECT_FALSE(read_owned_file_at(dir.get(), "missing", geteuid()));
  std::string e = error_of([&] { read_owned_file_at(dir.get(), "mine", geteuid() + 1); });
  EXPECT_NE(e.find("owned by uid"), std::string::npos) << e;
  test::write_text(tmp / "gw", "x", 0664);
  e = error_of([&] { read_owned_file_at(dir.get(), "gw", geteuid()); });
  EXPECT_NE(e.find("writable by group or others"), std::string::npos) << e;
  test::write_text(tmp / "ow", "x", 0646);
  EXPECT_THROW(read_owned_file_at(dir.get(), "ow", geteuid()), CudaMpsError);
}

TEST(ReadUserFileTail, HardenedTailOfAUsersFile) {
  TempDir tmp;
  Fd dir = open_dir(tmp.path());
  std::string problem;
  EXPECT_TRUE(read_user_file_tail(dir.get(), "missing", geteuid(), 1024, 5, 400, &problem).empty());
  EXPECT_EQ(problem, "");
  test::write_text(tmp / "log", std::string(100000, 'a') + "\nx\x1b]0;title\x07y\n" + std::string(500, 'b') + "\n\nlast\n");
  auto lines = read_user_file_tail(dir.get(), "log", geteuid(), 4096, 5, 400);
  ASSERT_EQ(lines.size(), 3u);  // the 100000-byte line lies before the 4096 read: dropped as partial
  EXPECT_EQ(lines[0], "x\\x1b]0;title\\x07y");
  EXPECT_EQ(lines[1], std::string(400, 'b') + "...");
  EXPECT_EQ(lines[2], "last");
  EXPECT_TRUE(read_user_file_tail(dir.get(), "log", geteuid() + 1, 4096, 5, 400, &problem).empty());
  EXPECT_NE(problem.find("owned by uid"), std::string::npos) << problem;
  ASSERT_EQ(link((tmp / "log").c_str(), (tmp / "hard").c_str()), 0);
  EXPECT_TRUE(read_user_file_tail(dir.get(), "log", geteuid(), 4096, 5, 400, &problem).empty());
  EXPECT_NE(problem.find("links"), std::string::npos) << problem;
  ASSERT_EQ(mkfifo((tmp / "fifo").c_str(), 0600), 0);
  EXPECT_TRUE(read_user_file_tail(dir.get(), "fifo", geteuid(), 4096, 5, 400, &problem).empty());  // no hang
  EXPECT_NE(problem.find("not a regular file"), std::string::npos) << problem;
  ASSERT_EQ(symlink((tmp / "x").c_str(), (tmp / "sym").c_str()), 0);
  EXPECT_TRUE(read_user_file_tail(dir.get(), "sym", geteuid(), 4096, 5, 400, &problem).empty());
}

// --- remove_tree_at ---------------------------------------------------------------

TEST(RemoveTreeAt, RemovesNestedDirectoriesAndFiles) {
  TempDir tmp;
  test::make_dir(tmp / "t", 0700);
  test::make_dir(tmp / "t/a", 0700);
  test::make_dir(tmp / "t/a/b", 0500);  // not writable by its owner: still removable by us as parent owner
  test::write_text(tmp / "t/a/f", "1");
  test::write_text(tmp / "t/.hidden", "2");
  ASSERT_EQ(mkfifo((tmp / "t/a/log").c_str(), 0600), 0);
  ASSERT_TRUE(test::bind_unix_socket(tmp / "t/control"));
  Fd dir = open_dir(tmp.path());
  EXPECT_EQ(remove_tree_at(dir.get(), "t"), "");
  EXPECT_FALSE(test::exists(tmp / "t"));
  // Missing is success.
  EXPECT_EQ(remove_tree_at(dir.get(), "t"), "");
  // A plain file is removed too.
  test::write_text(tmp / "f", "x");
  EXPECT_EQ(remove_tree_at(dir.get(), "f"), "");
  EXPECT_FALSE(test::exists(tmp / "f"));
}

TEST(RemoveTreeAt, DoesNotFollowASymlinkToADirectoryOutside) {
  TempDir tmp;
  test::make_dir(tmp / "outside", 0700);
  test::write_text(tmp / "outside/keep", "precious");
  test::make_dir(tmp / "t", 0700);
  ASSERT_EQ(symlink((tmp / "outside").c_str(), (tmp / "t/evil").c_str()), 0);
  Fd dir = open_dir(tmp.path());
  EXPECT_EQ(remove_tree_at(dir.get(), "t"), "");
  EXPECT_FALSE(test::exists(tmp / "t"));
  EXPECT_EQ(test::read_text(tmp / "outside/keep"), "precious");
  // The symlink itself as the target: unlinked, not traversed.
  ASSERT_EQ(symlink((tmp / "outside").c_str(), (tmp / "top").c_str()), 0);
  EXPECT_EQ(remove_tree_at(dir.get(), "top"), "");
  EXPECT_FALSE(test::exists(tmp / "top"));
  EXPECT_EQ(test::read_text(tmp / "outside/keep"), "precious");
}

namespace {

// A scratch directory for deep trees: on tmpfs (/dev/shm) where there is
// one (a 20,000-level chain costs seconds of journal on a disk), removed by
// the code under test's own remover (std::filesystem cannot: its paths
// outgrow PATH_MAX and it keeps a descriptor per level).
class DeepDir {
 public:
  DeepDir() {
    std::string base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    std::string tmpl = base + "/umt-deep.XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp");
    path_ = tmpl;
    chmod(path_.c_str(), 0755);  // traversable by the other uid of the as-owner tests
  }
  ~DeepDir() {
    auto [parent, leaf] = split_parent(path_);
    Fd p(open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (p) remove_tree_at(p.get(), leaf);
  }
  std::string operator/(const std::string& rel) const { return path_ + "/" + rel; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Makes `depth` nested directories "d" below `top` (fd-relative: no path
// length limit), with `files` files in the deepest one, owned by `uid`:`gid`
// when given.
void make_chain(const std::string& top, int depth, int files = 0, std::optional<uid_t> uid = std::nullopt, gid_t gid = 0) {
  Fd cur(open(top.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(cur);
  if (uid) {
    ASSERT_EQ(fchown(cur.get(), *uid, gid), 0);
  }
  for (int i = 0; i < depth; ++i) {
    ASSERT_EQ(mkdirat(cur.get(), "d", 0700), 0) << "level " << i;
    cur = Fd(openat(cur.get(), "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(cur);
    if (uid) {
      ASSERT_EQ(fchown(cur.get(), *uid, gid), 0);
    }
  }
  for (int i = 0; i < files; ++i) {
    Fd f(openat(cur.get(), ("f" + std::to_string(i)).c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
    ASSERT_TRUE(f);
    if (uid) {
      ASSERT_EQ(fchown(f.get(), *uid, gid), 0);
    }
  }
}

size_t open_fds() { return test::dir_entries("/proc/self/fd").size(); }

// Lowers this process's soft fd limit for a scope.
class FdLimit {
 public:
  explicit FdLimit(rlim_t soft) {
    getrlimit(RLIMIT_NOFILE, &old_);
    rlimit l = old_;
    l.rlim_cur = soft;
    setrlimit(RLIMIT_NOFILE, &l);
  }
  ~FdLimit() { setrlimit(RLIMIT_NOFILE, &old_); }

 private:
  rlimit old_ {};
};

void chown_shallow(const std::string& path, uid_t uid, gid_t gid) {
  ASSERT_EQ(lchown(path.c_str(), uid, gid), 0);
  for (const auto& e : test::dir_entries(path)) ASSERT_EQ(lchown((path + "/" + e).c_str(), uid, gid), 0) << e;
}

}  // namespace

// Issue #10 (a): a deep chain is removed with a constant number of
// descriptors (the old recursion held one per level and gave up at EMFILE,
// or overflowed the stack on a deeper tree).
TEST(RemoveTreeAt, DeepChainWithFewDescriptors) {
  DeepDir tmp;
  test::make_dir(tmp / "t", 0700);
  make_chain(tmp / "t", 20000, 100);
  Fd dir = open_dir(tmp.path());
  const size_t before = open_fds();
  {
    FdLimit limit(before + 8);
    EXPECT_EQ(remove_tree_at(dir.get(), "t"), "");
  }
  EXPECT_FALSE(test::exists(tmp / "t"));
  EXPECT_EQ(open_fds(), before);
}

TEST(RemoveTreeAt, WideAndBushyTrees) {
  TempDir tmp;
  test::make_dir(tmp / "t", 0700);
  for (int i = 0; i < 50; ++i) {
    std::string sub = tmp / ("t/s" + std::to_string(i));
    test::make_dir(sub, i % 2 ? 0700 : 0500);
    make_chain(sub, 20, 0);
    for (int f = 0; f < 40; ++f) test::write_text(sub + "/f" + std::to_string(f), "x");
  }
  for (int f = 0; f < 2000; ++f) test::write_text(tmp / ("t/top" + std::to_string(f)), "");
  Fd dir = open_dir(tmp.path());
  EXPECT_EQ(remove_tree_at(dir.get(), "t"), "");
  EXPECT_FALSE(test::exists(tmp / "t"));
}

// A directory moved out of the tree while the walk is inside it: the walk
// may finish what it holds open, but going up through ".." it must notice
// it is no longer where it came from and never touch the new parent.
TEST(RemoveTreeAt, NeverClimbsOutOfTheTreeWhenADirectoryIsMovedAway) {
  for (int round = 0; round < 20; ++round) {
    DeepDir tmp;
    test::make_dir(tmp / "t", 0700);
    test::make_dir(tmp / "outside", 0700);
    test::write_text(tmp / "outside/keep", "precious");
    make_chain(tmp / "t", 3000);
    std::atomic<bool> done{false};
    std::thread mover([&] {
      std::this_thread::sleep_for(std::chrono::microseconds(200 * round));
      // t/d/d -> outside/moved, while the walk is (most likely) deep below it.
      rename((tmp / "t/d/d").c_str(), (tmp / "outside/moved").c_str());
      done = true;
    });
    Fd dir = open_dir(tmp.path());
    std::string e = remove_tree_at(dir.get(), "t");
    mover.join();
    EXPECT_EQ(e, "");
    EXPECT_FALSE(test::exists(tmp / "t"));
    ASSERT_EQ(test::read_text(tmp / "outside/keep"), "precious") << "round " << round;
  }
}

// Issue #10 (a), as root on a user's tree: the user's child removes the
// contents, root only the empty top; so nothing the user could not remove
// itself goes, whatever the tree holds.
TEST(RemoveTreeAsOwner, RootRemovesOnlyTheTopTheUserRemovesTheRest) {
  if (!test::is_root()) GTEST_SKIP() << "needs root to make trees of another uid";
  DeepDir tmp;
  test::make_dir(tmp / "t", 0700);
  make_chain(tmp / "t", 20000, 50, test::kOtherUid, test::kOtherGid);
  test::make_dir(tmp / "t/ro", 0700);
  test::write_text(tmp / "t/ro/f", "x");
  test::make_dir(tmp / "outside", 0755);
  test::write_text(tmp / "outside/keep", "precious");
  ASSERT_EQ(symlink((tmp / "outside").c_str(), (tmp / "t/evil").c_str()), 0);
  chown_shallow(tmp / "t/ro", test::kOtherUid, test::kOtherGid);
  ASSERT_EQ(lchown((tmp / "t/evil").c_str(), test::kOtherUid, test::kOtherGid), 0);
  ASSERT_EQ(chmod((tmp / "t/ro").c_str(), 0500), 0);  // the user's own read-only dir: the user may chmod it back
  Fd dir = open_dir(tmp.path());
  const size_t before = open_fds();
  EXPECT_EQ(remove_tree_as_owner(dir.get(), "t", test::kOtherUid, test::kOtherGid, std::chrono::seconds(60)), "");
  EXPECT_FALSE(test::exists(tmp / "t"));
  EXPECT_EQ(test::read_text(tmp / "outside/keep"), "precious");
  EXPECT_EQ(open_fds(), before);

  // Something in the tree the user may not remove (root's, in root's
  // directory) stays, and so does the top; the error says so.
  test::make_dir(tmp / "t", 0700);
  test::make_dir(tmp / "t/rootdir", 0755);
  test::write_text(tmp / "t/rootdir/rootfile", "root's");
  ASSERT_EQ(lchown((tmp / "t").c_str(), test::kOtherUid, test::kOtherGid), 0);
  std::string e = remove_tree_as_owner(dir.get(), "t", test::kOtherUid, test::kOtherGid, std::chrono::seconds(60));
  EXPECT_NE(e.find("uid 65534"), std::string::npos) << e;
  EXPECT_EQ(test::read_text(tmp / "t/rootdir/rootfile"), "root's");

  // A top that is not the user's is refused outright.
  ASSERT_EQ(lchown((tmp / "t").c_str(), 0, 0), 0);
  e = remove_tree_as_owner(dir.get(), "t", test::kOtherUid, test::kOtherGid, std::chrono::seconds(60));
  EXPECT_NE(e.find("not the daemon's uid"), std::string::npos) << e;
  EXPECT_TRUE(test::exists(tmp / "t/rootdir/rootfile"));
}

std::atomic<int> g_sigchld{0};

// The epilog's usual case: the daemon's tmpfs was just unmounted, its
// directory is empty. Root removes it at once, without forking a child
// (one process start per daemon saved), even with no time left for one.
TEST(RemoveTreeAsOwner, AnEmptyDirectoryNeedsNoChild) {
  if (!test::is_root()) GTEST_SKIP() << "needs root to make trees of another uid";
  TempDir tmp;
  test::make_dir(tmp / "t", 0700);
  ASSERT_EQ(lchown((tmp / "t").c_str(), test::kOtherUid, test::kOtherGid), 0);
  Fd dir = open_dir(tmp.path());
  struct sigaction count {}, old {};
  count.sa_handler = [](int) { g_sigchld.fetch_add(1); };
  sigemptyset(&count.sa_mask);
  ASSERT_EQ(sigaction(SIGCHLD, &count, &old), 0);
  g_sigchld = 0;
  const std::string e = remove_tree_as_owner(dir.get(), "t", test::kOtherUid, test::kOtherGid, std::chrono::milliseconds(0));
  const int children = g_sigchld.load();
  sigaction(SIGCHLD, &old, nullptr);
  EXPECT_EQ(e, "");
  EXPECT_FALSE(test::exists(tmp / "t"));
  EXPECT_EQ(children, 0) << "a child was forked for an empty directory";

  // Still the owner's only: an empty directory of another uid stays.
  test::make_dir(tmp / "t", 0700);
  EXPECT_NE(remove_tree_as_owner(dir.get(), "t", test::kOtherUid, test::kOtherGid, std::chrono::seconds(60)).find("not the daemon's uid"),
            std::string::npos);
  EXPECT_TRUE(test::exists(tmp / "t"));
}

TEST(RemoveTreeAsOwner, GivesUpAtTheDeadlineAndSaysSo) {
  if (!test::is_root()) GTEST_SKIP() << "needs root to make trees of another uid";
  DeepDir tmp;
  test::make_dir(tmp / "t", 0700);
  make_chain(tmp / "t", 5000, 0, test::kOtherUid, test::kOtherGid);
  Fd dir = open_dir(tmp.path());
  auto start = std::chrono::steady_clock::now();
  std::string e = remove_tree_as_owner(dir.get(), "t", test::kOtherUid, test::kOtherGid, std::chrono::milliseconds(1));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_NE(e.find("did not end within 1 ms"), std::string::npos) << e;
  // A second go with time enough finishes the job.
  EXPECT_EQ(remove_tree_as_owner(dir.get(), "t", test::kOtherUid, test::kOtherGid, std::chrono::seconds(60)), "");
  EXPECT_FALSE(test::exists(tmp / "t"));
}

// --- small helpers ---------------------------------------------------------------

TEST(IsSafeName, AcceptsOnlyPlainNames) {
  for (const char* ok : {"a", "gpu-7fdaf0a5", "job12.n1.gpu0", "A_b-c.d", "0"}) EXPECT_TRUE(is_safe_name(ok)) << ok;
  for (const char* bad : {"", ".", "..", ".hidden", "a/b", "a b", "a\nb", "x;rm", "ü", "a\\b", "$(id)"}) {
    EXPECT_FALSE(is_safe_name(bad)) << bad;
  }
  EXPECT_TRUE(is_safe_name(std::string(128, 'a')));
  EXPECT_FALSE(is_safe_name(std::string(129, 'a')));
}

TEST(SplitParent, SplitsAbsolutePaths) {
  EXPECT_EQ(split_parent("/a/b"), (std::pair<std::string, std::string>{"/a", "b"}));
  EXPECT_EQ(split_parent("/a/b/"), (std::pair<std::string, std::string>{"/a", "b"}));
  EXPECT_EQ(split_parent("/a"), (std::pair<std::string, std::string>{"/", "a"}));
  EXPECT_EQ(split_parent("/run/unilab-mps/run/job1.n1.gpu0/pipe"),
            (std::pair<std::string, std::string>{"/run/unilab-mps/run/job1.n1.gpu0", "pipe"}));
}

TEST(ListDir, SeesEntriesWithoutFollowing) {
  TempDir tmp;
  test::write_text(tmp / "b", "");
  test::make_dir(tmp / "a", 0700);
  ASSERT_EQ(symlink("/nonexistent", (tmp / "c").c_str()), 0);
  Fd dir = open_dir(tmp.path());
  EXPECT_EQ(list_dir(dir.get()), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(list_dir(dir.get()), (std::vector<std::string>{"a", "b", "c"}));  // repeatable on one fd
  struct stat st {};
  ASSERT_EQ(fstatat(dir.get(), "c", &st, AT_SYMLINK_NOFOLLOW), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));  // listed as the dangling link itself
}

TEST(FdHandle, ClosesAndMoves) {
  int raw = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(raw, 0);
  {
    Fd a(raw);
    Fd b(std::move(a));
    EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move)
    EXPECT_EQ(b.get(), raw);
  }
  EXPECT_EQ(fcntl(raw, F_GETFD), -1);  // closed by the destructor
}

}  // namespace
}  // namespace unilab::mps
