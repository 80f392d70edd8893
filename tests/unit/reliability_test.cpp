// Reliability and security cases of docs/RELIABILITY.md whose logic is
// pure enough for doubles: the epilog never trusts a record that disagrees
// with the job (corrupt, other schema, other uid or host), still finds and
// stops the job's daemon through its pid file + /proc, and a crash between
// launch and the final record leaves an orphan that epilog and doctor find.
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "common/mps/errors.hpp"
#include "common/slurm/job.hpp"
#include "common/mps/mps_control.hpp"
#include "common/mps/status.hpp"
#include "tests/unit/doubles.hpp"

namespace unilab::mps {
namespace {

using namespace std::chrono_literals;
using test::Doubles;
using test::error_of;
using test::exists;
using test::TempDir;

class RecoveryTest : public ::testing::Test {
 protected:
  TempDir tmp;
  Doubles d;
  PluginConfig cfg;
  JobContext job;

  void SetUp() override {
    if (!test::is_root()) GTEST_SKIP() << "needs root: mknod GPU device files and a root-owned record store";
    test::make_dir(tmp / "dev", 0755);
    for (int m = 0; m < 4; ++m) {
      std::string path = tmp / ("dev/nvidia" + std::to_string(m));
      ASSERT_EQ(mknod(path.c_str(), S_IFCHR | 0666, makedev(195, static_cast<unsigned>(m))), 0) << path;
    }
    test::write_text(tmp / "gres.conf", "NodeName=n1 Name=gpu File=" + tmp.path() + "/dev/nvidia[0-3]\n");
    d.host.smi_out = test::smi_csv(test::four_gpus());
    cfg.state_dir = tmp / "state";
    cfg.run_dir = tmp / "run";
    cfg.history = tmp / "log/history.jsonl";  // never the host's /var/log
    cfg.gres_conf = tmp / "gres.conf";
    cfg.contain = "off";  // containment has its own tests (containment_test.cpp)
    cfg.dir_size.reset();  // the private tmpfs needs root: its own e2e case
    cfg.tools = d.tools;
    cfg.start_timeout = 5s;
    cfg.stop_timeout = 5s;
    job.job_id = "77";
    job.uid = test::kOtherUid;
    job.gid = test::kOtherGid;
    job.job_gpus = "0,1";
    job.node = "n1";
  }

  std::string record_path(const std::string& name) { return cfg.state_dir + "/" + name + ".json"; }
  std::vector<std::string> entries(const std::string& dir) { return exists(dir) ? test::dir_entries(dir) : std::vector<std::string>{}; }
  size_t quits_to(const std::string& pipe) {
    size_t n = 0;
    for (const auto& c : d.runner.with_stdin("quit -t 2\n")) n += test::env_value(c, "CUDA_MPS_PIPE_DIRECTORY") == pipe;
    return n;
  }
};

TEST_F(RecoveryTest, JobDaemonNamesAreExact) {
  EXPECT_TRUE(is_job_daemon_name("job77.n1.gpu0", "77", "n1"));
  EXPECT_TRUE(is_job_daemon_name("job77.n1.gpu12", "77", "n1"));
  EXPECT_TRUE(is_job_daemon_name("job77.n1.multi", "77", "n1"));
  EXPECT_FALSE(is_job_daemon_name("job77.n1.x.gpu0", "77", "n1"));  // node n1.x
  EXPECT_FALSE(is_job_daemon_name("job777.n1.gpu0", "77", "n1"));
  EXPECT_FALSE(is_job_daemon_name("job77.n1.gpu", "77", "n1"));
  EXPECT_FALSE(is_job_daemon_name("job77.n1.gpu0x", "77", "n1"));
  EXPECT_FALSE(is_job_daemon_name("job77.n10.gpu0", "77", "n1"));
}

TEST_F(RecoveryTest, CorruptRecordIsNeverUsedButTheDaemonIsStillStopped) {
  auto started = run_job_prolog(d.services, cfg, job, JobRequest{}).started;
  ASSERT_EQ(started.size(), 2u);
  test::write_text(record_path("job77.n1.gpu0"), "{\"schema_version\": 1, \"name\": \"job77", 0644);  // truncated
  EpilogOutcome out = run_job_epilog(d.services, cfg, job);
  EXPECT_TRUE(out.ok());
  EXPECT_FALSE(d.proc.alive(started[0].pid));
  EXPECT_FALSE(d.proc.alive(started[1].pid));
  EXPECT_EQ(quits_to(started[0].pipe_directory), 1u);  // stopped through its own pipe, as its user
  EXPECT_TRUE(d.signaller.requests.empty());
  EXPECT_TRUE(entries(cfg.state_dir).empty());
  EXPECT_TRUE(entries(cfg.run_dir).empty());
  std::string all;
  for (const auto& w : out.warnings) all += w + "\n";
  EXPECT_NE(all.find("not trusted: invalid JSON"), std::string::npos) << all;
  EXPECT_NE(all.find("pid " + std::to_string(started[0].pid)), std::string::npos) << all;
}

TEST_F(RecoveryTest, OldSchemaRecordIsNeverUsed) {
  auto started = run_job_prolog(d.services, cfg, job, JobRequest{}).started;
  std::string text = test::read_text(record_path("job77.n1.gpu1"));
  auto pos = text.find("\"schema_version\": 1");
  ASSERT_NE(pos, std::string::npos);
  text.replace(pos, 19, "\"schema_version\": 0");
  test::write_text(record_path("job77.n1.gpu1"), text, 0644);
  EpilogOutcome out = run_job_epilog(d.services, cfg, job);
  EXPECT_TRUE(out.ok());
  EXPECT_FALSE(d.proc.alive(started[1].pid));
  EXPECT_TRUE(entries(cfg.state_dir).empty());
  std::string all;
  for (const auto& w : out.warnings) all += w + "\n";
  EXPECT_NE(all.find("schema version 0 is not supported"), std::string::npos) << all;
}

TEST_F(RecoveryTest, RecordNamingAnotherUidSignalsNothingOfThatUid) {
  auto started = run_job_prolog(d.services, cfg, job, JobRequest{}).started;
  // The record now claims a root process that really exists with those
  // start ticks: trusting it would quit/kill a root process.
  DaemonRecord forged = started[0];
  forged.uid = 0;
  forged.pid = 4242;
  forged.process_start_ticks = 99;
  d.proc.add(4242, 0, 99);
  RecordStore store = slurm_record_store(cfg);
  store.write(forged);
  EpilogOutcome out = run_job_epilog(d.services, cfg, job);
  EXPECT_TRUE(out.ok());
  EXPECT_TRUE(d.proc.alive(4242));
  for (const auto& [pid, sig] : d.signaller.requests) EXPECT_NE(pid, 4242) << sig;
  for (const auto& c : d.runner.commands) {
    if (c.credentials) {
      EXPECT_EQ(c.credentials->uid, test::kOtherUid);  // every front end ran as the job user
    }
  }
  EXPECT_FALSE(d.proc.alive(started[0].pid));  // the job's real daemon, found through /proc
  EXPECT_TRUE(entries(cfg.state_dir).empty());
  std::string all;
  for (const auto& w : out.warnings) all += w + "\n";
  EXPECT_NE(all.find("names uid 0, not the job's uid"), std::string::npos) << all;
}

TEST_F(RecoveryTest, RecordNamingAnotherHostIsNotTrusted) {
  auto started = run_job_prolog(d.services, cfg, job, JobRequest{}).started;
  DaemonRecord other = started[1];
  other.host = "n2";
  RecordStore store = slurm_record_store(cfg);
  store.write(other);
  EpilogOutcome out = run_job_epilog(d.services, cfg, job);
  EXPECT_TRUE(out.ok());
  EXPECT_FALSE(d.proc.alive(started[1].pid));
  std::string all;
  for (const auto& w : out.warnings) all += w + "\n";
  EXPECT_NE(all.find("names host 'n2', not node n1"), std::string::npos) << all;
  // The task path never binds a task to it either.
  EXPECT_EQ(job_records(store, "77", "n1", test::kOtherUid).size(), 0u);
}

TEST_F(RecoveryTest, CrashBetweenLaunchAndFinalRecordLeavesAnOrphanTheEpilogStops) {
  // The prolog "dies" right after `-d`: the "starting" record is all there is.
  d.host.on_launch = [&](const Command&) { throw std::runtime_error("prolog killed"); };
  JobContext one = job;
  one.job_gpus = "2";
  EXPECT_THROW(run_job_prolog(d.services, cfg, one, JobRequest{}), std::runtime_error);
  d.host.on_launch = nullptr;
  // What the launch would have done: the daemon runs, pid file written.
  Command launch = d.host.launch_commands.back();
  d.host.launch_commands.clear();
  d.host.launches = 0;
  ASSERT_EQ(d.host.handle(launch).exit_code, 0);
  const std::string pipe = cfg.run_dir + "/77.2.8KO/pipe";
  pid_t orphan = d.host.daemons.at(pipe);
  RecordStore store = slurm_record_store(cfg);
  auto rec = store.read("job77.n1.gpu2");
  ASSERT_TRUE(rec);
  EXPECT_EQ(rec->state, RecordState::kStarting);
  EXPECT_EQ(rec->pid, 0);

  auto found = recover_starting_identity(*rec, d.proc);
  ASSERT_TRUE(found);
  EXPECT_EQ(found->pid, orphan);

  EpilogOutcome out = run_job_epilog(d.services, cfg, one);
  EXPECT_TRUE(out.ok());
  ASSERT_EQ(out.stopped.size(), 1u);
  EXPECT_EQ(out.stopped[0].pid, orphan);
  EXPECT_EQ(out.stopped[0].outcome, StopOutcome::kQuit);
  EXPECT_FALSE(d.proc.alive(orphan));
  EXPECT_TRUE(entries(cfg.state_dir).empty());
  EXPECT_TRUE(entries(cfg.run_dir).empty());
}

TEST_F(RecoveryTest, PidFileIsAcceptedOnlyForTheJobUidAndExactlyThatPipe) {
  auto started = run_job_prolog(d.services, cfg, job, JobRequest{}).started;
  RecordStore store = slurm_record_store(cfg);
  store.remove("job77.n1.gpu0");  // record lost
  const std::string pipe = started[0].pipe_directory;
  // The user rewrites the pid file: first a root process, then one of theirs
  // that is not an MPS daemon of this pipe.
  d.proc.add(5001, 0, 11);
  d.proc.environ[5001]["CUDA_MPS_PIPE_DIRECTORY"] = pipe;
  test::write_text(pipe + "/" + kPidFileName, "5001\n");
  DaemonRecord probe = started[0];
  probe.state = RecordState::kStarting;
  probe.pid = 0;
  EXPECT_FALSE(recover_starting_identity(probe, d.proc));
  d.proc.add(5002, test::kOtherUid, 12);
  d.proc.environ[5002]["CUDA_MPS_PIPE_DIRECTORY"] = pipe + "/../other";
  test::write_text(pipe + "/" + kPidFileName, "5002\n");
  EXPECT_FALSE(recover_starting_identity(probe, d.proc));

  EpilogOutcome out = run_job_epilog(d.services, cfg, job);
  EXPECT_TRUE(out.ok());
  EXPECT_TRUE(d.proc.alive(5001));
  EXPECT_TRUE(d.proc.alive(5002));
  for (const auto& [pid, sig] : d.signaller.requests) {
    EXPECT_NE(pid, 5001) << sig;
    EXPECT_NE(pid, 5002) << sig;
  }
  EXPECT_TRUE(entries(cfg.run_dir).empty());  // the leftover entry is removed all the same
}

TEST_F(RecoveryTest, RecordPidNamingAnotherProcessWhileTheDaemonRunsSignalsOnlyTheDaemon) {
  auto started = run_job_prolog(d.services, cfg, job, JobRequest{}).started;
  DaemonRecord wrong = started[0];
  wrong.pid = 5100;  // a live process of the same user, not the daemon
  wrong.process_start_ticks = 1;
  d.proc.add(5100, test::kOtherUid, 2);
  slurm_record_store(cfg).write(wrong);
  EpilogOutcome out = run_job_epilog(d.services, cfg, job);
  EXPECT_TRUE(out.ok());
  EXPECT_TRUE(d.proc.alive(5100));
  for (const auto& [pid, sig] : d.signaller.requests) EXPECT_NE(pid, 5100) << sig;
  EXPECT_FALSE(d.proc.alive(started[0].pid));
  EXPECT_EQ(quits_to(started[0].pipe_directory), 1u);
  EXPECT_TRUE(entries(cfg.run_dir).empty());
  EXPECT_TRUE(entries(cfg.state_dir).empty());
}

TEST_F(RecoveryTest, EpilogWhereNoPrologRanAndTwiceAreNoOps) {
  EpilogOutcome out = run_job_epilog(d.services, cfg, job);
  EXPECT_TRUE(out.ok());
  EXPECT_TRUE(out.warnings.empty());
  EXPECT_TRUE(d.runner.commands.empty());
  run_job_prolog(d.services, cfg, job, JobRequest{});
  EXPECT_TRUE(run_job_epilog(d.services, cfg, job).ok());
  size_t before = d.runner.commands.size();
  out = run_job_epilog(d.services, cfg, job);
  EXPECT_TRUE(out.ok());
  EXPECT_TRUE(out.stopped.empty());
  EXPECT_TRUE(out.warnings.empty());
  EXPECT_EQ(d.runner.commands.size(), before);
}

TEST_F(RecoveryTest, RequeuedPrologClearsAnOrphanOfTheEarlierRun) {
  auto first = run_job_prolog(d.services, cfg, job, JobRequest{}).started;
  slurm_record_store(cfg).remove("job77.n1.gpu1");  // lost record of a live daemon
  PrologOutcome second = run_job_prolog(d.services, cfg, job, JobRequest{});
  ASSERT_EQ(second.started.size(), 2u);
  EXPECT_FALSE(d.proc.alive(first[1].pid));
  std::string all;
  for (const auto& w : second.warnings) all += w + "\n";
  EXPECT_NE(all.find("pid " + std::to_string(first[1].pid)), std::string::npos) << all;
}

// --- the task path when the prolog failed --------------------------------------------

class NoDevices final : public DeviceAccess {
 public:
  bool denied(const std::string&) override { return false; }
};

TEST(TaskWithoutRecords, AnSrunAllocationWithGpusPointsAtTheProlog) {
  test::FakeProcReader proc;
  NoDevices devices;
  // srun-created allocation: SLURM_STEP_GPUS, no SLURM_JOB_GPUS.
  TaskContext task{"9", 1000, "n1", std::string("0"), std::string("0"), std::nullopt};
  std::string e = error_of([&] { compute_task_environment({}, task, devices, proc); });
  EXPECT_EQ(e.find("needs GPUs"), std::string::npos) << e;
  EXPECT_NE(e.find("prolog failed"), std::string::npos) << e;
  EXPECT_NE(e.find("sbatch/salloc"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  // A user-exported CUDA_VISIBLE_DEVICES alone is no GPU of the job.
  task.step_gpus.reset();
  e = error_of([&] { compute_task_environment({}, task, devices, proc); });
  EXPECT_NE(e.find("needs GPUs"), std::string::npos) << e;
}

// --- doctor ----------------------------------------------------------------------------

TEST(DoctorOrphan, ReportsTheDaemonOfAStartingRecord) {
  TempDir tmp;
  Doubles d;
  d.host.smi_out = test::smi_csv(test::four_gpus());
  RecordStore store{tmp / "state", geteuid(), getegid(), 0700, 0600};
  test::make_dir(tmp / "pipe", 0700);
  DaemonRecord r = test::make_record("crashed", geteuid(), "ws1", 0, 0, tmp / "pipe", {test::kUuid0});
  r.state = RecordState::kStarting;
  r.boot_id = d.proc.boot;
  store.write(r);
  StatusQuery q;
  q.uid = geteuid();
  q.host = "ws1";
  auto find = [](const DoctorReport& rep) -> const DoctorCheck* {
    for (const auto& c : rep.checks) if (c.name == "daemon crashed") return &c;
    return nullptr;
  };
  // No daemon: a stale start.
  const DoctorReport none = doctor(d.services, d.tools, store, std::string("0"), q);
  ASSERT_TRUE(find(none));
  EXPECT_NE(find(none)->detail.find("crashed while starting"), std::string::npos) << find(none)->detail;
  // A daemon runs there: an orphan, with its pid and the command that stops it.
  d.proc.add(6100, geteuid(), 5);
  d.proc.environ[6100]["CUDA_MPS_PIPE_DIRECTORY"] = tmp / "pipe";
  test::write_text(tmp / ("pipe/" + std::string(kPidFileName)), "6100\n");
  const DoctorReport rep = doctor(d.services, d.tools, store, std::string("0"), q);
  ASSERT_TRUE(find(rep));
  EXPECT_EQ(find(rep)->status, CheckStatus::kWarn);
  EXPECT_NE(find(rep)->detail.find("orphan: pid 6100"), std::string::npos) << find(rep)->detail;
  EXPECT_NE(find(rep)->detail.find("unilab-mps stop crashed"), std::string::npos) << find(rep)->detail;
  EXPECT_TRUE(d.signaller.requests.empty());  // doctor changes nothing
}

}  // namespace
}  // namespace unilab::mps
