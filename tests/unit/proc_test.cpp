#include "common/mps/proc.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>

#include "tests/unit/doubles.hpp"

namespace unilab::mps {
namespace {

using test::FakeProcReader;
using test::TempDir;

// A realistic stat line: pid (comm) state ppid pgrp session tty tpgid flags
// minflt cminflt majflt cmajflt utime stime cutime cstime priority nice
// num_threads itrealvalue starttime(22) vsize ...
std::string stat_line(const std::string& comm, char state, uint64_t start) {
  return "1234 (" + comm + ") " + std::string(1, state) + " 1 1234 1234 0 -1 4194560 120 0 0 0 3 1 0 0 20 0 1 0 " +
         std::to_string(start) + " 12345678 321 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 3 0 0 0 0 0\n";
}

TEST(ParseProcStat, ReadsStateAndStartTicks) {
  auto st = parse_proc_stat(stat_line("nvidia-cuda-mps", 'S', 987654321));
  ASSERT_TRUE(st);
  EXPECT_EQ(st->state, 'S');
  EXPECT_EQ(st->start_ticks, 987654321u);
  EXPECT_EQ(st->ppid, 1);
}

TEST(ParseProcStat, CountsFieldsAfterTheLastParenthesis) {
  // A hostile comm: spaces, ')' and fake fields inside the name.
  auto st = parse_proc_stat(stat_line("a) b) c) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 99", 'R', 42));
  ASSERT_TRUE(st);
  EXPECT_EQ(st->state, 'R');
  EXPECT_EQ(st->start_ticks, 42u);
  // The exact example from the design notes.
  auto st2 = parse_proc_stat("1234 (a) b) c) S 1 1234 1234 0 -1 4194560 120 0 0 0 3 1 0 0 20 0 1 0 5555 12345 321\n");
  ASSERT_TRUE(st2);
  EXPECT_EQ(st2->state, 'S');
  EXPECT_EQ(st2->start_ticks, 5555u);
  // Empty comm and a comm of only ')' also work.
  auto st3 = parse_proc_stat(stat_line(")", 'S', 7));
  ASSERT_TRUE(st3);
  EXPECT_EQ(st3->start_ticks, 7u);
}

TEST(ParseProcStat, ZombieState) {
  auto st = parse_proc_stat(stat_line("defunct", 'Z', 100));
  ASSERT_TRUE(st);
  EXPECT_EQ(st->state, 'Z');
}

TEST(ParseProcStat, MalformedTextIsNullopt) {
  EXPECT_FALSE(parse_proc_stat(""));
  EXPECT_FALSE(parse_proc_stat("1234 bash S 1 2 3"));                       // no parentheses
  EXPECT_FALSE(parse_proc_stat("1234 (bash) S 1 2 3 4 5\n"));               // truncated before field 22
  EXPECT_FALSE(parse_proc_stat("1234 (bash) SS 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 1 1\n"));  // state not one char
  EXPECT_FALSE(parse_proc_stat("1234 (bash) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 x5 1 1\n"));  // start not a number
  EXPECT_FALSE(parse_proc_stat("1234 (bash)"));
}

TEST(ParseProcStatusUid, ReadsTheRealUid) {
  EXPECT_EQ(parse_proc_status_uid("Name:\tbash\nState:\tS (sleeping)\nUid:\t1000\t0\t1000\t1000\nGid:\t100\t100\t100\t100\n"),
            1000u);
  EXPECT_EQ(parse_proc_status_uid("Uid:\t0\t0\t0\t0\n"), 0u);
  EXPECT_FALSE(parse_proc_status_uid("Name:\tbash\nGid:\t1\n"));
  EXPECT_FALSE(parse_proc_status_uid("Name:\tbash\nUid:\tabc\t0\n"));
  // "Uid:" must start a line: a name containing it is not the uid line.
  EXPECT_EQ(parse_proc_status_uid("Name:\txUid: 5\nUid:\t77\t77\t77\t77\n"), 77u);
}

// --- check_identity -----------------------------------------------------------

struct IdentityFixture : ::testing::Test {
  FakeProcReader proc;
  ProcessIdentity id{4242, 1000, "", 1001};
  void SetUp() override {
    id.boot_id = proc.boot;
    proc.add(4242, 1001, 1000);
  }
};

TEST_F(IdentityFixture, Live) { EXPECT_EQ(check_identity(id, proc), Liveness::kLive); }

TEST_F(IdentityFixture, Gone) {
  proc.kill(4242);
  EXPECT_EQ(check_identity(id, proc), Liveness::kGone);
  EXPECT_EQ(check_identity(ProcessIdentity{0, 1000, proc.boot, 1001}, proc), Liveness::kGone);
  EXPECT_EQ(check_identity(ProcessIdentity{-5, 1000, proc.boot, 1001}, proc), Liveness::kGone);
}

TEST_F(IdentityFixture, ZombieIsGone) {
  proc.add(4242, 1001, 1000, 'Z');
  EXPECT_EQ(check_identity(id, proc), Liveness::kGone);
  proc.add(4242, 1001, 1000, 'X');
  EXPECT_EQ(check_identity(id, proc), Liveness::kGone);
}

TEST_F(IdentityFixture, ReusedPidHasOtherStartTicks) {
  proc.add(4242, 1001, 1001);
  EXPECT_EQ(check_identity(id, proc), Liveness::kReused);
}

TEST_F(IdentityFixture, OtherUidIsReused) {
  proc.add(4242, 0, 1000);
  EXPECT_EQ(check_identity(id, proc), Liveness::kReused);
}

TEST_F(IdentityFixture, OtherBoot) {
  proc.boot = "another-boot";
  EXPECT_EQ(check_identity(id, proc), Liveness::kOtherBoot);
}

TEST(LivenessNames, AreStable) {
  EXPECT_EQ(to_string(Liveness::kLive), "live");
  EXPECT_EQ(to_string(Liveness::kGone), "gone");
  EXPECT_EQ(to_string(Liveness::kReused), "pid-reused");
  EXPECT_EQ(to_string(Liveness::kOtherBoot), "other-boot");
}

// --- SystemProcReader -----------------------------------------------------------

std::string slurp(const std::string& path) { return test::read_text(path); }

TEST(SystemProcReader, OwnProcessMatchesAnIndependentReading) {
  SystemProcReader reader;
  std::string text = slurp("/proc/self/stat");
  size_t close = text.rfind(')');
  ASSERT_NE(close, std::string::npos);
  std::istringstream rest(text.substr(close + 1));
  std::string tok;
  uint64_t field22 = 0;
  for (int field = 3; rest >> tok; ++field) {
    if (field == 22) {
      field22 = std::stoull(tok);
      break;
    }
  }
  ASSERT_GT(field22, 0u);
  auto st = reader.stat(getpid());
  ASSERT_TRUE(st);
  EXPECT_EQ(st->start_ticks, field22);
  EXPECT_EQ(st->uid, getuid());
  EXPECT_EQ(st->state, 'R');

  std::string boot = slurp("/proc/sys/kernel/random/boot_id");
  while (!boot.empty() && boot.back() == '\n') boot.pop_back();
  EXPECT_EQ(reader.boot_id(), boot);
  EXPECT_FALSE(reader.boot_id().empty());

  // The first variable of our own initial environment reads back.
  std::string env = slurp("/proc/self/environ");
  std::string first = env.substr(0, env.find('\0'));
  size_t eq = first.find('=');
  if (eq != std::string::npos && eq > 0) {
    EXPECT_EQ(reader.environ_value(getpid(), first.substr(0, eq)), first.substr(eq + 1));
  }
  EXPECT_FALSE(reader.environ_value(getpid(), "UNILAB_MPS_SURELY_NOT_SET_ANYWHERE"));

  // The identity of this very process is live, and the SystemSignaller-free
  // check agrees with a changed start time.
  ProcessIdentity me{getpid(), field22, boot, getuid()};
  EXPECT_EQ(check_identity(me, reader), Liveness::kLive);
  me.start_ticks += 1;
  EXPECT_EQ(check_identity(me, reader), Liveness::kReused);
}

TEST(SystemProcReader, ParentExeSelfAndTicksAreThisProcesssOwn) {
  SystemProcReader reader;
  auto st = reader.stat(getpid());
  ASSERT_TRUE(st);
  EXPECT_EQ(st->ppid, getppid());
  EXPECT_EQ(reader.self(), getpid());
  // /proc/self/exe is the test binary: the same file as its path.
  char path[4096];
  ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  ASSERT_GT(n, 0);
  path[n] = 0;
  ASSERT_TRUE(reader.exe(getpid()));
  EXPECT_EQ(reader.exe(getpid()), reader.file(path));
  EXPECT_NE(reader.exe(getpid()), reader.file("/bin/sh"));
  EXPECT_FALSE(reader.file("/no/such/file"));
  // A process started before now, in the same ticks.
  EXPECT_GE(reader.ticks_now(), st->start_ticks);
  EXPECT_LT(reader.ticks_now() - st->start_ticks, 100u * 3600);  // under an hour at 100 Hz
}

TEST(DescendantsOf, WalksChildrenWhoseStatNamesTheirParentAndTheRootsUser) {
  test::FakeProcReader proc;
  const ProcessIdentity root{100, 1, proc.boot, 1000};
  proc.add(100, 1000, 1);
  proc.add(101, 1000, 2);
  proc.add(102, 1000, 3);
  proc.add(103, 1000, 4);
  proc.add(104, 0, 5);
  proc.adopt(100, 101);
  proc.adopt(101, 102);
  proc.adopt(100, 103);
  proc.adopt(100, 104);
  proc.procs[103].ppid = 1;  // listed under 100, but now someone else's child (reused pid)
  std::vector<pid_t> got;
  for (const auto& d : descendants_of(root, proc)) got.push_back(d.pid);
  EXPECT_EQ(got, (std::vector<pid_t>{101, 102}));  // neither 103 (other parent) nor 104 (root)
}

TEST(SystemProcReader, NonexistentPidIsNullopt) {
  SystemProcReader reader;
  EXPECT_FALSE(reader.stat(0));
  EXPECT_FALSE(reader.stat(-1));
  EXPECT_FALSE(reader.stat(0x3fffffff));  // above pid_max
  EXPECT_FALSE(reader.environ_value(0, "PATH"));
}

class FakeProcRoot : public ::testing::Test {
 protected:
  TempDir tmp;
  void SetUp() override {
    test::make_dir(tmp / "777", 0755);
    test::write_text(tmp / "777/stat", "777 (my (weird) proc) S 1 777 777 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 31337 1 1\n");
    test::write_text(tmp / "777/status", "Name:\tweird\nUmask:\t0022\nState:\tS (sleeping)\nUid:\t4321\t4321\t4321\t4321\n");
    std::string env = std::string("CUDA_MPS_PIPE_DIRECTORY_OLD=/wrong") + '\0' + "CUDA_MPS_PIPE_DIRECTORY=/run/u/pipe" + '\0' +
                      "EMPTY=" + '\0' + "PATH=/bin" + '\0';
    test::write_text(tmp / "777/environ", env);
    test::make_dir(tmp / "sys", 0755);
    test::make_dir(tmp / "sys/kernel", 0755);
    test::make_dir(tmp / "sys/kernel/random", 0755);
    test::write_text(tmp / "sys/kernel/random/boot_id", "11111111-2222-3333-4444-555555555555\n");
  }
};

TEST_F(FakeProcRoot, ReadsStatStatusEnvironAndBootId) {
  SystemProcReader reader(tmp.path());
  auto st = reader.stat(777);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->start_ticks, 31337u);
  EXPECT_EQ(st->uid, 4321u);
  EXPECT_EQ(st->state, 'S');
  EXPECT_EQ(reader.boot_id(), "11111111-2222-3333-4444-555555555555");
  EXPECT_EQ(reader.environ_value(777, "CUDA_MPS_PIPE_DIRECTORY"), "/run/u/pipe");
  EXPECT_EQ(reader.environ_value(777, "PATH"), "/bin");
  EXPECT_EQ(reader.environ_value(777, "EMPTY"), "");
  EXPECT_FALSE(reader.environ_value(777, "CUDA_MPS"));  // a prefix of a key is not the key
  EXPECT_FALSE(reader.stat(778));
  EXPECT_EQ(check_identity(ProcessIdentity{777, 31337, "11111111-2222-3333-4444-555555555555", 4321}, reader), Liveness::kLive);
  EXPECT_EQ(check_identity(ProcessIdentity{777, 31337, "old-boot", 4321}, reader), Liveness::kOtherBoot);
}

TEST_F(FakeProcRoot, MissingStatusOrSymlinkedStatIsNotTrusted) {
  SystemProcReader reader(tmp.path());
  unlink((tmp / "777/status").c_str());
  EXPECT_FALSE(reader.stat(777));
  // A symlink where /proc/PID/stat should be is never followed.
  test::make_dir(tmp / "888", 0755);
  ASSERT_EQ(symlink((tmp / "777/stat").c_str(), (tmp / "888/stat").c_str()), 0);
  test::write_text(tmp / "888/status", "Uid:\t0\t0\t0\t0\n");
  EXPECT_FALSE(reader.stat(888));
}

TEST_F(FakeProcRoot, MissingBootIdIsEmptyAndIgnoredByTheCheck) {
  unlink((tmp / "sys/kernel/random/boot_id").c_str());
  SystemProcReader reader(tmp.path());
  EXPECT_EQ(reader.boot_id(), "");
  EXPECT_EQ(check_identity(ProcessIdentity{777, 31337, "any-boot", 4321}, reader), Liveness::kLive);
}

// --- SystemSignaller (a real child process, no privileges needed) ---------------

TEST(SystemSignaller, SignalsOnlyTheVerifiedProcess) {
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    for (;;) pause();
  }
  SystemProcReader reader;
  std::optional<ProcStat> st;
  for (int i = 0; i < 200 && !st; ++i) st = reader.stat(child);
  ASSERT_TRUE(st);
  ProcessIdentity id{child, st->start_ticks, reader.boot_id(), getuid()};
  SystemSignaller sig;

  ProcessIdentity wrong = id;
  wrong.start_ticks += 1;
  EXPECT_EQ(sig.send_verified(wrong, SIGTERM, reader), Liveness::kReused);
  // Still alive: nothing was sent.
  EXPECT_EQ(waitpid(child, nullptr, WNOHANG), 0);

  EXPECT_EQ(sig.send_verified(id, SIGTERM, reader), Liveness::kLive);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  // Reaped: gone now, and nothing is signalled.
  EXPECT_EQ(sig.send_verified(id, SIGKILL, reader), Liveness::kGone);
  EXPECT_EQ(sig.send_verified(ProcessIdentity{0, 1, "", 0}, SIGKILL, reader), Liveness::kGone);
}


// The one answer to "has this process ended", used by the identity check,
// the start's pid-file proof, the stop's sweep and the probe alike.
TEST(ProcessStateGone, ZombieAndBothDeadLettersAreGone) {
  for (char c : {'Z', 'X', 'x'}) EXPECT_TRUE(process_state_gone(c)) << c;
  for (char c : {'R', 'S', 'D', 'T', 't', 'I', 'W', 'P', 'K'}) EXPECT_FALSE(process_state_gone(c)) << c;
}

TEST(RunningStat, IsNulloptForAnEndedOrMissingProcess) {
  FakeProcReader proc;
  proc.add(10, 1000, 5, 'S');
  proc.add(11, 1000, 5, 'Z');
  proc.add(12, 1000, 5, 'X');
  proc.add(13, 1000, 5, 'x');
  ASSERT_TRUE(running_stat(proc, 10));
  EXPECT_EQ(running_stat(proc, 10)->uid, 1000u);
  for (pid_t p : {11, 12, 13, 14}) EXPECT_FALSE(running_stat(proc, p)) << p;
}

TEST(CheckIdentity, ADeadProcessOfEitherLetterIsGone) {
  FakeProcReader proc;
  for (char c : {'X', 'x'}) {
    proc.add(20, 1000, 5, c);
    EXPECT_EQ(check_identity({20, 5, proc.boot, 1000}, proc), Liveness::kGone) << c;
  }
}

}  // namespace
}  // namespace unilab::mps
