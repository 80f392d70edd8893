// `status`, host and job view: host_status's job view (common/mps/status.cpp),
// the one text renderer, and `status --job` end to end through the command
// table with the plugin's state_dir= and nvidia_smi= from plugstack.conf.
#include <unistd.h>

#include <gtest/gtest.h>

#include "cli/commands.hpp"
#include "common/slurm/job.hpp"
#include "common/mps/status.hpp"
#include "tests/unit/doubles.hpp"

namespace unilab::mps {
namespace {

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

class JobViewTest : public ::testing::Test {
 protected:
  test::TempDir tmp;
  test::Doubles d;
  RecordStore store{tmp / "state", geteuid(), getegid(), 0700, 0600};

  void SetUp() override { d.host.smi_out = test::smi_csv(test::four_gpus()); }

  DaemonRecord job_record(const std::string& name, const std::string& job, const std::string& node, const std::string& uuid) {
    DaemonRecord r = test::make_record(name, geteuid(), node, 999999, 1, tmp / (name + "/pipe"), {uuid});
    r.job_id = job;
    store.write(r);
    return r;
  }

  StatusQuery job_query(const std::string& job, const std::string& node) {
    StatusQuery q;
    q.job_id = job;
    q.host = node;
    q.cuda_visible_devices = "0,1,2,3";         // the caller's: not the job's
    q.pipe_directory_env = tmp / "mine/pipe";   // the caller's: not the job's
    return q;
  }
};

TEST_F(JobViewTest, ShowsOnlyTheJobsDaemonsTheirGpusAndTheirPipes) {
  job_record("job7.n1.gpu1", "7", "n1", test::kUuid1);
  job_record("job7.n1.gpu3", "7", "n1", test::kUuid3);
  job_record("job8.n1.gpu0", "8", "n1", test::kUuid0);  // another job
  job_record("job7.n2.gpu2", "7", "n2", test::kUuid2);  // another node
  HostStatus h = host_status(d.services, d.tools, store, job_query("7", "n1"));
  ASSERT_EQ(h.managed_daemons.size(), 2u);
  ASSERT_EQ(h.gpus.size(), 2u);
  EXPECT_EQ(h.gpus[0].uuid, test::kUuid1);
  EXPECT_EQ(h.gpus[1].uuid, test::kUuid3);
  ASSERT_EQ(h.control_pipes.size(), 2u);
  EXPECT_EQ(h.control_pipes[0].path, tmp / "job7.n1.gpu1/pipe/control");
  EXPECT_EQ(h.control_pipes[1].path, tmp / "job7.n1.gpu3/pipe/control");
}

TEST_F(JobViewTest, GpusMatchInAnyUuidSpelling) {
  std::string upper = test::kUuid2;
  for (auto& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  job_record("job7.n1.gpu2", "7", "n1", upper.substr(4));  // no GPU- prefix, upper case
  HostStatus h = host_status(d.services, d.tools, store, job_query("7", "n1"));
  ASSERT_EQ(h.gpus.size(), 1u);
  EXPECT_EQ(h.gpus[0].uuid, test::kUuid2);
}

TEST_F(JobViewTest, AJobWithoutDaemonsRunsNoNvidiaSmi) {
  job_record("job8.n1.gpu0", "8", "n1", test::kUuid0);
  HostStatus h = host_status(d.services, d.tools, store, job_query("7", "n1"));
  EXPECT_TRUE(h.managed_daemons.empty());
  EXPECT_TRUE(h.gpus.empty());
  EXPECT_TRUE(h.control_pipes.empty());
  EXPECT_EQ(d.host.smi_calls, 0);
}

TEST_F(JobViewTest, HostViewStillShowsTheMaskedGpusAndTheCallersPipes) {
  StatusQuery q;
  q.cuda_visible_devices = "0,2";
  q.pipe_directory_env = tmp / "mine/pipe";
  HostStatus h = host_status(d.services, d.tools, store, q);
  ASSERT_EQ(h.gpus.size(), 2u);
  ASSERT_EQ(h.control_pipes.size(), 2u);
  EXPECT_EQ(h.control_pipes[0].path, "/tmp/nvidia-mps/control");
  EXPECT_EQ(h.control_pipes[1].path, tmp / "mine/pipe/control");
}

TEST(StatusRender, OneRendererForStatusAndChecks) {
  HostStatus h;
  h.gpus = {test::make_gpu(1, test::kUuid1, 0, "00000000:05:00.0")};
  DaemonRecord r = test::make_record("job7.n1.gpu1", 1000, "n1", 4242, 1, "/run/u/job7.n1.gpu1/pipe", {test::kUuid1});
  r.job_id = "7";
  r.limits.active_thread_percentage = 25;
  r.limits.pinned_mem_limit = "2048M";
  h.managed_daemons = {r};
  h.daemon_states = {{{"liveness", "live"}}};
  h.control_pipes = {{"/run/u/job7.n1.gpu1/pipe/control", "socket", {"job7.n1.gpu1"}}};
  std::string text = render_host_status(h, "job 7 on node n1", "/run/unilab-mps");
  EXPECT_EQ(text,
            "job 7 on node n1\n"
            "GPU   UUID                                      MINOR  NAME\n"
            "1     GPU-1b2c3d4e-0000-1111-2222-333344445555  0      NVIDIA H200\n"
            "daemons (1) in /run/unilab-mps\n"
            "  job7.n1.gpu1             pid 4242     live       single_gpu             GPU-1b2c3d4e-0000-1111-2222-333344445555 job 7\n"
            "                           pipe /run/u/job7.n1.gpu1/pipe\n"
            "                           limits active threads 25%, pinned memory 2048M per GPU\n"
            "control pipes:\n"
            "  /run/u/job7.n1.gpu1/pipe/control                             socket (managed: job7.n1.gpu1)\n");
  DoctorReport rep;
  rep.checks = {{"nvidia-smi", CheckStatus::kOk, "4 GPUs"}, {"daemon gpu-3c8a1d5e", CheckStatus::kFail, "x"}};
  EXPECT_EQ(rep.to_text(), "[ok  ] nvidia-smi     4 GPUs\n[fail] daemon gpu-3c8a1d5e x\nnot ready\n");
  EXPECT_EQ(render_checks(rep.checks) + "not ready\n", rep.to_text());
}

// `unilab-mps status --job` as root on a node whose plugstack.conf puts the
// records and nvidia-smi somewhere other than the defaults.
class StatusJobCommandTest : public ::testing::Test {
 protected:
  test::TempDir tmp;
  std::optional<std::string> old_conf, old_node;

  void SetUp() override {
    if (!test::is_root()) GTEST_SKIP() << "needs root: a root-owned Slurm record store";
    if (const char* v = getenv("SLURM_CONF")) old_conf = v;
    if (const char* v = getenv("SLURMD_NODENAME")) old_node = v;
    setenv("SLURM_CONF", (tmp / "slurm.conf").c_str(), 1);
    setenv("SLURMD_NODENAME", "n1", 1);
    test::write_text(tmp / "slurm.conf", "PlugStackConfig=" + tmp / "plugstack.conf" + "\nNodeName=n1 Gres=gpu:4\n");
    write_plugstack("state_dir=" + tmp / "state" + " nvidia_smi=" + tmp / "smi");
    test::write_text(tmp / "smi", "#!/bin/sh\n/bin/cat <<'EOF'\n" + test::smi_csv(test::four_gpus()) + "EOF\n", 0755);
    PluginConfig cfg;
    cfg.state_dir = tmp / "state";
    DaemonRecord r = test::make_record("job7.n1.gpu1", 0, "n1", 999999, 1, tmp / "run/job7.n1.gpu1/pipe", {test::kUuid1});
    r.job_id = "7";
    r.limits.pinned_mem_limit = "2048M";
    slurm_record_store(cfg).write(r);
  }
  void TearDown() override {
    if (old_conf) setenv("SLURM_CONF", old_conf->c_str(), 1); else unsetenv("SLURM_CONF");
    if (old_node) setenv("SLURMD_NODENAME", old_node->c_str(), 1); else unsetenv("SLURMD_NODENAME");
  }
  void write_plugstack(const std::string& args) {
    test::write_text(tmp / "plugstack.conf", "optional /nonexistent/unilab_mps.so " + args + "\n");
  }
  static std::string run(const std::vector<std::string>& argv) {
    ::testing::internal::CaptureStdout();
    try {
      cli::run_command(cli::parse_command_line(argv));
    } catch (...) {
      ::testing::internal::GetCapturedStdout();
      throw;
    }
    return ::testing::internal::GetCapturedStdout();
  }
};

TEST_F(StatusJobCommandTest, UsesThePluginsStateDirAndNvidiaSmiAndShowsOnlyTheJobsGpus) {
  std::string out = run({"status", "--job", "7"});
  EXPECT_TRUE(contains(out, "daemons (1) in " + tmp / "state\n")) << out;
  EXPECT_TRUE(contains(out, "job7.n1.gpu1")) << out;
  EXPECT_TRUE(contains(out, "limits pinned memory 2048M per GPU")) << out;
  EXPECT_TRUE(contains(out, "nvidia-smi " + tmp / "smi")) << out;
  EXPECT_TRUE(contains(out, "\n1     " + test::kUuid1)) << out;
  EXPECT_FALSE(contains(out, test::kUuid0)) << out;  // another GPU of the host
  EXPECT_FALSE(contains(out, "/tmp/nvidia-mps")) << out;
}

TEST_F(StatusJobCommandTest, AJobWithoutDaemonHereIsAnErrorNamingJobNodeAndDir) {
  std::string e = test::error_of([&] { run({"status", "--job", "8"}); });
  EXPECT_EQ(e.find('\n'), std::string::npos);
  EXPECT_TRUE(contains(e, "job 8 has no unilab-mps daemon on node n1 in " + tmp / "state")) << e;
  e = test::error_of([&] { run({"status", "--job", "7", "--node", "n2"}); });
  EXPECT_TRUE(contains(e, "job 7 has no unilab-mps daemon on node n2")) << e;
}

TEST_F(StatusJobCommandTest, WithoutAPluginLineItAsksForStateDir) {
  test::write_text(tmp / "plugstack.conf", "# nothing\n");
  std::string e = test::error_of([&] { run({"status", "--job", "7"}); });
  EXPECT_TRUE(contains(e, "cannot find the plugin's state_dir=")) << e;
  EXPECT_TRUE(contains(e, "pass --state-dir")) << e;
  std::string out = run({"status", "--job", "7", "--state-dir", tmp / "state", "--nvidia-smi", tmp / "smi"});
  EXPECT_TRUE(contains(out, "job7.n1.gpu1")) << out;
}

TEST_F(StatusJobCommandTest, FlagsOverrideThePluginLine) {
  write_plugstack("state_dir=" + tmp / "elsewhere" + " nvidia_smi=" + tmp / "smi");
  EXPECT_THROW(run({"status", "--job", "7"}), CudaMpsError);
  EXPECT_TRUE(contains(run({"status", "--job", "7", "--state-dir", tmp / "state"}), "job7.n1.gpu1"));
}

TEST_F(StatusJobCommandTest, NodeAndSlurmConfNeedJob) {
  EXPECT_THROW(run({"status", "--node", "n1"}), cli::UsageError);
}

}  // namespace
}  // namespace unilab::mps
