// Operating the plugin (#26): MPS server faults read from the daemon's logs
// and said once, the node's history journal, the metrics exposition.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/mps/mps_faults.hpp"
#include "common/mps/text.hpp"
#include "common/slurm/history.hpp"
#include "common/slurm/job.hpp"
#include "common/slurm/job_faults.hpp"
#include "common/slurm/metrics.hpp"
#include "tests/unit/doubles.hpp"

namespace unilab::mps {
namespace {

using test::TempDir;

// Lines a real daemon wrote (driver 580.159.04, MPS binary 13000, H200):
// a server started, a client connected, the server SIGKILLed.
const std::vector<std::string> kRealControlLog = {
    "[2026-12-04 18:34:01.969 Control  9091] Starting new server 9091 for user 0",
    "[2026-12-04 18:34:02.231 Control  9036] NEW SERVER 9091: Ready",
    "[2026-12-04 18:34:02.300 Control  9036] NEW CLIENT 9120 from user 0: Server already exists",
    "[2026-12-04 18:34:30.133 Control  9036] Server 9091 exited with status 0",
};

TEST(MpsFaultsTest, ReadsTheLinesARealDaemonWrites) {
  auto faults = scan_mps_log(kControlLog, kRealControlLog);
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_EQ(faults[0].kind, MpsFaultKind::kServerExited);
  EXPECT_EQ(faults[0].server, 9091);
  EXPECT_EQ(faults[0].exit_status, 0);
  EXPECT_EQ(faults[0].line, kRealControlLog[3]);
  EXPECT_EQ(faults[0].log, "control.log");
}

TEST(MpsFaultsTest, FatalLinesOfBothLogs) {
  auto control = scan_mps_log(kControlLog, {"[2026-12-04 18:40:00.000 Control  9036] Server encountered a fatal exception. Shutting down",
                                            "[2026-12-04 18:40:00.001 Control  9036] Server 9091 exited with status 1"});
  // The exit that ends a fatal exception is that one fault, with its server.
  ASSERT_EQ(control.size(), 1u);
  EXPECT_EQ(control[0].kind, MpsFaultKind::kFatalException);
  EXPECT_EQ(control[0].server, 9091);
  EXPECT_EQ(control[0].exit_status, 1);
  auto server = scan_mps_log(kServerLog, {"[2026-12-04 18:40:00.000 Server  9091] Server has started",
                                          "[2026-12-04 18:40:01.000 Server  9091] Server is handling a fatal GPU error."});
  ASSERT_EQ(server.size(), 1u);
  EXPECT_EQ(server[0].kind, MpsFaultKind::kFatalGpuError);
  EXPECT_EQ(server[0].server, 9091);
  EXPECT_FALSE(server[0].client) << "no client line before it";
  // The same words in the other log are not that log's fault.
  EXPECT_TRUE(scan_mps_log(kServerLog, {kRealControlLog[3]}).empty());
  EXPECT_TRUE(scan_mps_log(kControlLog, {server[0].line}).empty());
  // A server line without a pid is no server exit.
  EXPECT_TRUE(scan_mps_log(kControlLog, {"[x] Server exited with status 1"}).empty());
}

// What driver 580's daemon and server wrote on an H200 when one of two
// clients made an illegal memory access (tests/gpu/mps_fault_check.sh):
// one fault, naming the server and the client that hit it; the control
// log's only "exited" line is the server's end at the final quit.
TEST(MpsFaultsTest, WhatARealServerWroteForAnIllegalAddress) {
  const std::string dir = std::string(UNILAB_MPS_TEST_FIXTURES) + "/mps-fault-h200/";
  std::vector<std::string> server_lines, control_lines;
  const std::string server_text = test::read_text(dir + "server.log"), control_text = test::read_text(dir + "control.log");
  for (auto l : split_lines(server_text)) server_lines.emplace_back(l);
  for (auto l : split_lines(control_text)) control_lines.emplace_back(l);
  ASSERT_GT(server_lines.size(), 50u);
  auto server = scan_mps_log(kServerLog, server_lines);
  ASSERT_EQ(server.size(), 1u);
  EXPECT_EQ(server[0].kind, MpsFaultKind::kFatalGpuError);
  EXPECT_EQ(server[0].server, 530);
  EXPECT_EQ(server[0].client, 511);
  EXPECT_EQ(server[0].line, "[2026-12-04 19:53:22.702 Server   530] Server is handling a fatal GPU error.");
  JobFault jf{"job1.n1.gpu0", "n1", {test::kUuid0}, "/run/x/log", server[0], 1, "task-exit"};
  EXPECT_NE(fault_message("1", "n1", jf).find("; the client process that hit it: 511;"), std::string::npos);
  auto control = scan_mps_log(kControlLog, control_lines);
  ASSERT_EQ(control.size(), 1u);
  EXPECT_EQ(control[0].kind, MpsFaultKind::kServerExited);
  EXPECT_EQ(control[0].line, "[2026-12-04 19:53:32.486 Control   502] Server 530 exited with status 0");
  // The epilog, which stops the daemon with that quit, does not count it.
  EXPECT_FALSE(kEpilogFaultKinds.count(control[0].kind));
}

TEST(MpsFaultsTest, KeyIsTheOccurrence) {
  auto a = scan_mps_log(kControlLog, {kRealControlLog[3]});
  auto b = scan_mps_log(kControlLog, {kRealControlLog[3]});
  auto c = scan_mps_log(kControlLog, {"[2026-12-04 18:35:30.133 Control  9036] Server 9091 exited with status 0"});
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].key(), b[0].key());
  EXPECT_NE(a[0].key(), c[0].key());
  EXPECT_EQ(a[0].key().size(), 16u);
  EXPECT_EQ(MpsFault::from_json(a[0].to_json()), a[0]);
}

class FaultLogTest : public ::testing::Test {
 protected:
  TempDir tmp;
  PluginConfig cfg;
  void SetUp() override {
    if (!test::is_root()) GTEST_SKIP() << "needs root: the fault files are root's";
    cfg.state_dir = tmp / "state";
    test::make_dir(cfg.state_dir, 0755);
  }
  DaemonRecord daemon(const std::string& name, const std::vector<std::string>& control_lines) {
    const std::string base = tmp / name;
    test::make_dir(base, 0700);
    DaemonRecord r = test::make_record(name, 0, "n1", 100, 1, base + "/pipe", {test::kUuid0});
    r.log_directory = base + "/log";
    r.job_id = "77";
    test::make_dir(r.log_directory, 0700);
    test::write_text(r.log_directory + "/control.log", join(control_lines, "\n") + "\n", 0600);
    return r;
  }
};

TEST_F(FaultLogTest, ServersStartedAndFaultsFromTheLogs) {
  DaemonRecord r = daemon("d1", kRealControlLog);
  DaemonLogScan scan = scan_daemon_logs(r.log_directory, 0);
  EXPECT_EQ(scan.servers_started, 1);
  ASSERT_EQ(scan.faults.size(), 1u);
  // A log that is a symlink (the user's to make) is not read.
  ASSERT_EQ(rename((r.log_directory + "/control.log").c_str(), (tmp / "elsewhere.log").c_str()), 0);
  ASSERT_EQ(symlink((tmp / "elsewhere.log").c_str(), (r.log_directory + "/control.log").c_str()), 0);
  scan = scan_daemon_logs(r.log_directory, 0);
  EXPECT_EQ(scan.servers_started, -1);
  EXPECT_TRUE(scan.faults.empty());
}

TEST_F(FaultLogTest, EachFaultIsSaidOnce) {
  DaemonRecord r = daemon("job77.n1.gpu0", kRealControlLog);
  auto first = note_job_faults(cfg, {r}, kTaskExitFaultKinds, "task-exit", 1000);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].daemon, r.name);
  EXPECT_EQ(first[0].noted_by, "task-exit");
  EXPECT_EQ(first[0].node, "n1");
  EXPECT_TRUE(note_job_faults(cfg, {r}, kTaskExitFaultKinds, "task-exit", 1001).empty());
  EXPECT_TRUE(note_job_faults(cfg, {r}, kTaskExitFaultKinds, "epilog", 1002).empty());
  auto kept = recorded_job_faults(cfg, {r.name});
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0].fault, first[0].fault);
  EXPECT_EQ(test::owner_of(cfg.state_dir + "/faults"), 0u);
  // The message names job, node, daemon, GPU, the line and the log.
  const std::string m = fault_message("77", "n1", kept[0]);
  for (const std::string& part : {std::string("job 77 node n1"), r.name, test::kUuid0, kRealControlLog[3], r.log_directory + "/control.log"}) {
    EXPECT_NE(m.find(part), std::string::npos) << part << " not in " << m;
  }
  // A new line later in the job is a new fault.
  test::write_text(r.log_directory + "/control.log",
                   join(kRealControlLog, "\n") + "\n[2026-12-04 18:36:00.000 Control  9036] Server 9200 exited with status 1\n", 0600);
  EXPECT_EQ(note_job_faults(cfg, {r}, kTaskExitFaultKinds, "task-exit", 1003).size(), 1u);
  EXPECT_EQ(recorded_job_faults(cfg, {r.name}).size(), 2u);
  EXPECT_TRUE(recorded_job_faults(cfg, {"job78.n1.gpu0"}).empty());
  remove_job_faults(cfg, {r.name});
  EXPECT_TRUE(recorded_job_faults(cfg, {r.name}).empty());
}

TEST_F(FaultLogTest, TheEpilogDoesNotTakeItsOwnTeardownForAFault) {
  // A server exit first seen by the epilog may be the stop's own: only the
  // fatal lines count there.
  DaemonRecord r = daemon("d2", kRealControlLog);
  EXPECT_TRUE(note_job_faults(cfg, {r}, kEpilogFaultKinds, "epilog", 1000).empty());
  DaemonRecord f = daemon("d3", {"[2026-12-04 18:40:00.000 Control  9036] Server encountered a fatal exception. Shutting down"});
  EXPECT_EQ(note_job_faults(cfg, {f}, kEpilogFaultKinds, "epilog", 1000).size(), 1u);
}

TEST_F(FaultLogTest, ConcurrentHooksSayAFaultOnce) {
  // Every task of a node exits at once: each hook scans, one says it.
  DaemonRecord r = daemon("d4", kRealControlLog);
  std::vector<pid_t> kids;
  for (int i = 0; i < 8; ++i) {
    pid_t pid = fork();
    if (pid == 0) _exit(static_cast<int>(note_job_faults(cfg, {r}, kTaskExitFaultKinds, "task-exit", 1000).size()));
    kids.push_back(pid);
  }
  int said = 0;
  for (pid_t pid : kids) {
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFEXITED(status));
    said += WEXITSTATUS(status);
  }
  EXPECT_EQ(said, 1);
  EXPECT_EQ(recorded_job_faults(cfg, {r.name}).size(), 1u);
}

TEST_F(FaultLogTest, AControlDaemonThatIsGoneIsAFaultOnce) {
  DaemonRecord r = daemon("d6", {"[2026-12-04 18:34:01.969 Control  9091] Starting new server 9091 for user 0"});
  test::FakeProcReader proc;
  proc.add(r.pid, r.uid, r.process_start_ticks);
  EXPECT_TRUE(note_job_faults(cfg, {r}, kTaskExitFaultKinds, "task-exit", 1000, nullptr, nullptr, &proc).empty())
      << "the daemon runs";
  proc.kill(r.pid);
  EXPECT_TRUE(note_job_faults(cfg, {r}, kTaskExitFaultKinds, "task-exit", 1000).empty()) << "no /proc given: not looked at";
  EXPECT_TRUE(note_job_faults(cfg, {r}, kEpilogFaultKinds, "epilog", 1000, nullptr, nullptr, &proc).empty())
      << "the epilog's stop says it as 'stale'";
  auto gone = note_job_faults(cfg, {r}, kTaskExitFaultKinds, "task-exit", 1001, nullptr, nullptr, &proc);
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].fault.kind, MpsFaultKind::kDaemonGone);
  const std::string m = fault_message("77", "n1", gone[0]);
  EXPECT_NE(m.find("its MPS control daemon is gone"), std::string::npos) << m;
  EXPECT_NE(m.find("daemon pid 100 (start tick 1) no longer runs; see " + r.log_directory + "/control.log"), std::string::npos) << m;
  EXPECT_TRUE(note_job_faults(cfg, {r}, kTaskExitFaultKinds, "task-exit", 1002, nullptr, nullptr, &proc).empty()) << "said once";
  // A process that took the daemon's pid (another start time) is not the daemon.
  DaemonRecord reused = daemon("d7", {});
  proc.add(reused.pid, reused.uid, reused.process_start_ticks + 500);
  auto r2 = note_job_faults(cfg, {reused}, kTaskExitFaultKinds, "task-exit", 1003, nullptr, nullptr, &proc);
  ASSERT_EQ(r2.size(), 1u);
  EXPECT_EQ(r2[0].fault.kind, MpsFaultKind::kDaemonGone);
}

// The wait(2) status of a child that exits with `code` or, with `sig`,
// is killed by that signal.
static int real_wait_status(int code, int sig) {
  pid_t pid = fork();
  if (pid == 0) {
    rlimit none{0, 0};
    setrlimit(RLIMIT_CORE, &none);
    if (sig) {
      signal(sig, SIG_DFL);  // not a sanitizer's handler
      raise(sig);
    }
    _exit(code);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

TEST_F(FaultLogTest, ATaskKilledWithItsJobDoesNotCallTheTeardownAFault) {
  // A time limit or scancel kills the tasks and, where the daemon runs in
  // the job's cgroup, the daemon and its servers too: the task's exit hook
  // then finds them gone. Seen in run_e2e's cgroup time-limit job.
  DaemonRecord r = daemon("d8", {"[t Control 1] Server 4242 exited with status 0"});
  test::FakeProcReader proc;  // the daemon's pid is not in it: gone
  for (int sig : {SIGTERM, SIGKILL, SIGINT, SIGHUP}) {
    const int st = real_wait_status(0, sig);
    ASSERT_TRUE(WIFSIGNALED(st));
    EXPECT_EQ(&task_exit_fault_kinds(st), &kEpilogFaultKinds) << strsignal(sig);
    EXPECT_TRUE(note_job_faults(cfg, {r}, task_exit_fault_kinds(st), "task-exit", 1000, nullptr, nullptr, &proc).empty())
        << strsignal(sig);
  }
  // A task that exits (with any code) or crashes while the job runs reports them.
  EXPECT_EQ(&task_exit_fault_kinds(real_wait_status(0, 0)), &kTaskExitFaultKinds);
  EXPECT_EQ(&task_exit_fault_kinds(real_wait_status(SIGTERM, 0)), &kTaskExitFaultKinds) << "exit code 15 is no signal";
  EXPECT_EQ(&task_exit_fault_kinds(real_wait_status(0, SIGABRT)), &kTaskExitFaultKinds) << "a crash";
  EXPECT_EQ(&task_exit_fault_kinds(std::nullopt), &kTaskExitFaultKinds) << "no status: as a task that exited";
  auto said = note_job_faults(cfg, {r}, task_exit_fault_kinds(real_wait_status(1, 0)), "task-exit", 1001, nullptr, nullptr, &proc);
  ASSERT_EQ(said.size(), 2u) << "a killed task's silence consumed nothing";
  EXPECT_EQ(said[0].fault.kind, MpsFaultKind::kDaemonGone);
  EXPECT_EQ(said[1].fault.kind, MpsFaultKind::kServerExited);
}

TEST_F(FaultLogTest, AUserFillingTheLogGetsABoundedNumberOfFaults) {
  std::vector<std::string> lines;
  for (int i = 0; i < 100; ++i) lines.push_back(fmt::format("[t Control 1] Server {} exited with status 1", 1000 + i));
  DaemonRecord r = daemon("d5", lines);
  EXPECT_EQ(note_job_faults(cfg, {r}, kTaskExitFaultKinds, "task-exit", 1000).size(), kMaxFaultsPerDaemon);
  EXPECT_TRUE(note_job_faults(cfg, {r}, kTaskExitFaultKinds, "task-exit", 1001).empty());
  EXPECT_EQ(recorded_job_faults(cfg, {r.name}).size(), kMaxFaultsPerDaemon);
}

// ---------------------------------------------------------------------------
// History

nlohmann::json entry(const std::string& job, double stopped_at, const std::string& pad = "") {
  HistoryEntry e;
  e.job_id = job;
  e.user = "alice";
  e.node = "n1";
  e.daemon = "job" + job + ".n1.gpu0";
  e.gpu_uuids = {test::kUuid0};
  e.started_at = stopped_at - 10;
  e.stopped_at = stopped_at;
  e.stop_outcome = "quit";
  e.stop_ms = 12;
  e.stop_detail = pad;
  e.stopped_by = "epilog";
  e.servers_started = 1;
  return e.to_json();
}

class HistoryTest : public ::testing::Test {
 protected:
  TempDir tmp;
  std::string path = tmp / "log/history.jsonl";
  void SetUp() override {
    if (!test::is_root()) GTEST_SKIP() << "needs root: the journal is root's";
  }
};

TEST_F(HistoryTest, AppendsAndReadsBack) {
  ASSERT_EQ(append_history(path, 1 << 20, {entry("1", 100), entry("2", 200)}), "");
  ASSERT_EQ(append_history(path, 1 << 20, {entry("3", 300)}), "");
  EXPECT_EQ(test::mode_of(tmp / "log") & 07777, 0755u);
  EXPECT_EQ(test::mode_of(path) & 07777, 0644u);
  HistoryRead r = read_history(path);
  EXPECT_EQ(r.problem, "");
  EXPECT_EQ(r.bad_lines, 0u);
  ASSERT_EQ(r.entries.size(), 3u);
  EXPECT_EQ(r.entries[2]["job"], "3");
  EXPECT_EQ(r.entries[0]["stop"]["outcome"], "quit");
  EXPECT_EQ(select_history(r.entries, "2", std::nullopt).size(), 1u);
  EXPECT_EQ(select_history(r.entries, std::nullopt, 200.0).size(), 2u);
  EXPECT_EQ(select_history(r.entries, "2", 250.0).size(), 0u);
  const std::string text = render_history(r.entries);
  EXPECT_NE(text.find("job1.n1.gpu0"), std::string::npos) << text;
  EXPECT_NE(text.find(test::kUuid0), std::string::npos) << text;
}

TEST_F(HistoryTest, RotatesSoItHoldsAtMostTwiceTheBound) {
  const unsigned long long max = 64 << 10;
  const std::string pad(900, 'x');
  for (int i = 0; i < 400; ++i) ASSERT_EQ(append_history(path, max, {entry(std::to_string(i), i, pad)}), "");
  struct stat a {}, b {};
  ASSERT_EQ(stat(path.c_str(), &a), 0);
  ASSERT_EQ(stat((path + ".1").c_str(), &b), 0);
  EXPECT_LE(static_cast<unsigned long long>(a.st_size), max);
  EXPECT_LE(static_cast<unsigned long long>(b.st_size), max);
  HistoryRead r = read_history(path);
  EXPECT_EQ(r.bad_lines, 0u);
  ASSERT_FALSE(r.entries.empty());
  // The newest are kept, oldest first, with no gap between the two files.
  EXPECT_EQ(r.entries.back()["job"], "399");
  for (size_t i = 1; i < r.entries.size(); ++i) {
    EXPECT_EQ(std::stoi(r.entries[i]["job"].get<std::string>()), std::stoi(r.entries[i - 1]["job"].get<std::string>()) + 1);
  }
}

TEST_F(HistoryTest, ConcurrentEpilogsInterleaveWholeLines) {
  const int writers = 6, each = 40;
  std::vector<pid_t> kids;
  for (int w = 0; w < writers; ++w) {
    pid_t pid = fork();
    if (pid == 0) {
      for (int i = 0; i < each; ++i) {
        if (!append_history(path, 1 << 30, {entry(fmt::format("{}", w * 1000 + i), i, std::string(3000, 'a' + w))}).empty()) _exit(1);
      }
      _exit(0);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  HistoryRead r = read_history(path);
  EXPECT_EQ(r.bad_lines, 0u);
  EXPECT_EQ(r.entries.size(), static_cast<size_t>(writers * each));
}

TEST_F(HistoryTest, AFullDiskLeavesNoHalfLine) {
  ASSERT_EQ(append_history(path, 1 << 20, {entry("1", 100)}), "");
  struct stat before {};
  ASSERT_EQ(stat(path.c_str(), &before), 0);
  // A file size limit just past the current size: the next write is cut
  // short, as on a full disk.
  pid_t pid = fork();
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    rlimit lim{static_cast<rlim_t>(before.st_size + 100), static_cast<rlim_t>(before.st_size + 100)};
    setrlimit(RLIMIT_FSIZE, &lim);
    const std::string e = append_history(path, 1 << 20, {entry("2", 200, std::string(5000, 'y'))});
    _exit(e.find("cannot write") != std::string::npos && e.find(path) != std::string::npos ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the failed write must say why, naming the journal";
  struct stat after {};
  ASSERT_EQ(stat(path.c_str(), &after), 0);
  EXPECT_EQ(after.st_size, before.st_size) << "the partial line was not cut off";
  HistoryRead r = read_history(path);
  EXPECT_EQ(r.bad_lines, 0u);
  EXPECT_EQ(r.entries.size(), 1u);
  // And the next epilog, with room again, appends as before.
  EXPECT_EQ(append_history(path, 1 << 20, {entry("3", 300)}), "");
  EXPECT_EQ(read_history(path).entries.size(), 2u);
}

TEST_F(HistoryTest, RefusesAJournalRootDidNotMake) {
  test::make_dir(tmp / "log", 0755);
  // A symlink in its place: not followed.
  ASSERT_EQ(symlink((tmp / "target").c_str(), path.c_str()), 0);
  EXPECT_NE(append_history(path, 1 << 20, {entry("1", 1)}), "");
  EXPECT_FALSE(test::exists(tmp / "target"));
  unlink(path.c_str());
  // Another user's file.
  test::write_text(path, "", 0644);
  ASSERT_EQ(chown(path.c_str(), test::kOtherUid, test::kOtherGid), 0);
  EXPECT_NE(append_history(path, 1 << 20, {entry("1", 1)}).find("not root's own regular file"), std::string::npos);
  unlink(path.c_str());
  // A directory others may write.
  ASSERT_EQ(chmod((tmp / "log").c_str(), 0777), 0);
  EXPECT_NE(append_history(path, 1 << 20, {entry("1", 1)}), "");
  EXPECT_FALSE(test::exists(path));
}

TEST_F(HistoryTest, LinesThatAreNoEntriesAreCountedNotShown) {
  ASSERT_EQ(append_history(path, 1 << 20, {entry("1", 100)}), "");
  nlohmann::json wrong = entry("2", 200);
  wrong["job"] = 2;  // a number where the job id is a string
  ASSERT_EQ(append_history(path, 1 << 20, {wrong, {{"a", 1}}}), "");
  int fd = open(path.c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "not json\n", 9), 9);
  close(fd);
  HistoryRead r = read_history(path);
  EXPECT_EQ(r.entries.size(), 1u);
  EXPECT_EQ(r.bad_lines, 3u);
  EXPECT_NO_THROW(render_history(r.entries));
}

TEST(HistorySinceTest, Forms) {
  const double now = 1800000000;
  EXPECT_EQ(parse_since("1733300000", now), 1733300000.0);
  EXPECT_EQ(parse_since("2026-12-04", now), 1796342400.0);
  EXPECT_EQ(parse_since("2026-12-04T18:30", now), 1796342400.0 + 18 * 3600 + 30 * 60);
  EXPECT_EQ(parse_since("2026-12-04T18:30:15Z", now), 1796342400.0 + 18 * 3600 + 30 * 60 + 15);
  EXPECT_EQ(parse_since("90m", now), now - 5400);
  EXPECT_EQ(parse_since("12h", now), now - 43200);
  EXPECT_EQ(parse_since("7d", now), now - 7 * 86400);
  for (const char* bad : {"", "yesterday", "7w", "-5m", "2026-13-45", "2026-12-04 18:30", "1e9", "m", "12345678901234"}) {
    EXPECT_FALSE(parse_since(bad, now)) << bad;
  }
}

TEST(HistoryEntryTest, FromARecordAndItsStop) {
  DaemonRecord r = test::make_record("job9.n1.gpu1", 1000, "n1", 55, 1, "/run/x/pipe", {test::kUuid1});
  r.job_id = "9";
  r.slurm = SlurmBinding{"9", "n1", JobMode::kAuto, {1}, {}};
  r.limits.active_thread_percentage = 50;
  StopReport rep;
  rep.outcome = StopOutcome::kTerminated;
  rep.took = std::chrono::milliseconds(321);
  JobFault f{"job9.n1.gpu1", "n1", {test::kUuid1}, "/run/x/log", scan_mps_log(kControlLog, {kRealControlLog[3]})[0], 5, "task-exit"};
  JobFault other = f;
  other.daemon = "job9.n1.gpu2";
  nlohmann::json j = history_entry(r, rep, "", "alice", "epilog", 2e9, 3, {f, other}).to_json();
  EXPECT_EQ(j["job"], "9");
  EXPECT_EQ(j["user"], "alice");
  EXPECT_EQ(j["uid"], 1000);
  EXPECT_EQ(j["node"], "n1");
  EXPECT_EQ(j["gpus"], nlohmann::json::array({test::kUuid1}));
  EXPECT_EQ(j["mode"], "auto");
  EXPECT_EQ(j["limits"]["active_thread_percentage"], 50);
  EXPECT_EQ(j["started_at"], 1.7e9);
  EXPECT_EQ(j["stopped_at"], 2e9);
  EXPECT_EQ(j["stop"]["outcome"], "terminated");
  EXPECT_EQ(j["stop"]["took_ms"], 321);
  EXPECT_EQ(j["servers_started"], 3);
  ASSERT_EQ(j["faults"].size(), 1u) << "only this daemon's faults";
  EXPECT_EQ(j["faults"][0]["kind"], "server-exited");
  // A daemon that could not be stopped is an error line, with why.
  nlohmann::json e = history_entry(r, std::nullopt, "survived SIGKILL", "alice", "epilog", 2e9, -1, {}).to_json();
  EXPECT_EQ(e["stop"]["outcome"], "error");
  EXPECT_EQ(e["stop"]["detail"], "survived SIGKILL");
}

// ---------------------------------------------------------------------------
// Metrics

class MetricsTest : public ::testing::Test {
 protected:
  TempDir tmp;
  test::FakeProcReader proc;
  PluginConfig cfg;
  void SetUp() override {
    if (!test::is_root()) GTEST_SKIP() << "needs root: a root-owned record store";
    cfg.state_dir = tmp / "state";
  }
};

TEST_F(MetricsTest, LabelsEachDaemonByJobUserAndGpu) {
  RecordStore store = slurm_record_store(cfg);
  DaemonRecord a = test::make_record("job5.n1.gpu0", 1000, "n1", 300, 42, tmp / "a/pipe", {test::kUuid0, test::kUuid1});
  a.job_id = "5";
  a.slurm = SlurmBinding{"5", "n1", JobMode::kMulti, {0, 1}, {}};
  a.limits.active_thread_percentage = 25;
  a.limits.pinned_mem_limit = "8192M";
  a.limits.client_priority = ClientPriority::kBelowNormal;
  store.write(a);
  DaemonRecord b = test::make_record("job6.n1.gpu2", 1001, "n1", 400, 43, tmp / "b/pipe", {test::kUuid2});
  b.job_id = "6";
  b.slurm = SlurmBinding{"6", "n1", JobMode::kAuto, {2}, {}};
  store.write(b);
  DaemonRecord elsewhere = test::make_record("job7.n2.gpu0", 1002, "n2", 500, 44, tmp / "c/pipe", {test::kUuid3});
  elsewhere.job_id = "7";
  elsewhere.slurm = SlurmBinding{"7", "n2", JobMode::kAuto, {0}, {}};
  store.write(elsewhere);
  // The task-exit hook, which does not know its node, finds the job's.
  EXPECT_EQ(job_nodes_in_store(store, "5", 1000), std::vector<std::string>{"n1"});
  EXPECT_EQ(job_nodes_in_store(store, "7", 1002), std::vector<std::string>{"n2"});
  EXPECT_TRUE(job_nodes_in_store(store, "5", 1001).empty()) << "another user's job";
  // a runs with one server and two clients (one of another user's is not
  // its client); b's process is gone.
  proc.add(300, 1000, 42);
  proc.add(301, 1000, 50);
  proc.adopt(300, 301);
  proc.comms[301] = "nvidia-cuda-mps-server";
  for (pid_t c : {310, 311, 312}) {
    proc.add(c, c == 312 ? 1001 : 1000, 60);
    proc.set_environ(c, "CUDA_MPS_PIPE_DIRECTORY", a.pipe_directory);
  }
  const std::string text = node_metrics(proc, cfg, "n1", [](uid_t u) { return u == 1000 ? "al\"ice" : std::to_string(u); });
  const std::string la = fmt::format("{{job=\"5\",user=\"al\\\"ice\",node=\"n1\",daemon=\"job5.n1.gpu0\",gpu_uuid=\"{}\"}}", test::kUuid1);
  const std::string lb = fmt::format("{{job=\"6\",user=\"1001\",node=\"n1\",daemon=\"job6.n1.gpu2\",gpu_uuid=\"{}\"}}", test::kUuid2);
  for (const std::string& want : {std::string("unilab_mps_daemons{node=\"n1\"} 2\n"), "unilab_mps_daemon_up" + la + " 1\n",
                                  "unilab_mps_servers" + la + " 1\n", "unilab_mps_bound_processes" + la + " 2\n",
                                  "unilab_mps_active_thread_percentage" + la + " 25\n",
                                  "unilab_mps_pinned_memory_limit_bytes" + la + " 8589934592\n",
                                  "unilab_mps_client_priority" + la + " 1\n", "unilab_mps_daemon_up" + lb + " 0\n",
                                  "unilab_mps_daemon_start_time_seconds" + lb + " 1700000000\n", "unilab_mps_faults" + lb + " 0\n",
                                  std::string("# TYPE unilab_mps_daemon_up gauge\n"),
                                  std::string("# UNIT unilab_mps_daemon_start_time_seconds seconds\n")}) {
    EXPECT_NE(text.find(want), std::string::npos) << want << " not in\n" << text;
  }
  EXPECT_EQ(text.find("job7"), std::string::npos) << "another node's daemon";
  EXPECT_EQ(text.find("unilab_mps_active_thread_percentage" + lb), std::string::npos) << "b set no share";
  EXPECT_TRUE(text.ends_with("\n# EOF\n"));
  // Each family's samples follow its own header, once.
  EXPECT_EQ(text.find("# HELP unilab_mps_daemon_up"), text.rfind("# HELP unilab_mps_daemon_up"));
}

TEST(MetricLabelTest, Escapes) {
  EXPECT_EQ(metric_label_value("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  EXPECT_EQ(metric_label_value("plain"), "plain");
}

}  // namespace
}  // namespace unilab::mps
