#include "common/mps/status.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "common/mps/errors.hpp"
#include "tests/unit/doubles.hpp"

namespace unilab::mps {
namespace {

using test::Doubles;
using test::make_record;
using test::TempDir;

class StatusTest : public ::testing::Test {
 protected:
  TempDir tmp;
  Doubles d;
  RecordStore store{tmp / "state", geteuid(), getegid(), 0700, 0600};

  void SetUp() override {
    d.host.smi_out = test::smi_csv(test::four_gpus());
    // An executable stand-in for nvidia-cuda-mps-control (doctor checks X_OK).
    test::write_text(tmp / "mps-control", "#!/bin/sh\nexit 0\n", 0755);
    d.tools.mps_control = tmp / "mps-control";
    d.host.mps_control = d.tools.mps_control;
  }

  DaemonRecord live_record(const std::string& name, pid_t pid, const std::string& uuid,
                           std::optional<std::string> job = std::nullopt) {
    test::make_dir(tmp / name, 0700);
    DaemonRecord r = make_record(name, 1000, "ws1", pid, 100 + static_cast<uint64_t>(pid), tmp / name, {uuid});
    r.boot_id = d.proc.boot;
    r.job_id = std::move(job);
    d.proc.add(pid, 1000, r.process_start_ticks);
    store.write(r);
    return r;
  }

  const DoctorCheck* check(const DoctorReport& rep, const std::string& name) {
    for (const auto& c : rep.checks) if (c.name == name) return &c;
    return nullptr;
  }
};

TEST_F(StatusTest, ListsGpusRecordsAndTheirLiveness) {
  auto a = live_record("a", 501, test::kUuid0);
  StatusQuery q;
  q.cuda_visible_devices = "2,0";
  HostStatus h = host_status(d.services, d.tools, store, q);
  EXPECT_TRUE(h.nvidia_smi_available);
  EXPECT_FALSE(h.diagnostic);
  ASSERT_EQ(h.gpus.size(), 2u);
  EXPECT_EQ(h.gpus[0].uuid, test::kUuid2);
  EXPECT_EQ(h.gpus[1].uuid, test::kUuid0);
  ASSERT_EQ(h.managed_daemons.size(), 1u);
  EXPECT_EQ(h.managed_daemons[0], a);
  ASSERT_EQ(h.daemon_states.size(), 1u);
  EXPECT_EQ(h.daemon_states[0]["live"], true);
  EXPECT_EQ(d.host.smi_calls, 1);
  EXPECT_FALSE(h.platform.empty());
  auto j = h.to_json();
  EXPECT_EQ(j["cuda_visible_devices"], "2,0");
  EXPECT_EQ(j["managed_daemons"].size(), 1u);
  EXPECT_EQ(j["compatible_topology_modes"].size(), 3u);
}

TEST_F(StatusTest, ALiveDaemonsMpsServersAreListedAsItsChildren) {
  auto a = live_record("a", 501, test::kUuid0);
  auto b = live_record("b", 601, test::kUuid1);
  // 501's children: its server (comm "nvidia-cuda-mps"), a server of
  // another uid, a zombie server and a client-side helper; 601 has none.
  d.proc.add(510, 1000, 900);
  d.proc.comms[510] = "nvidia-cuda-mps";
  d.proc.add(511, 2000, 901);
  d.proc.comms[511] = "nvidia-cuda-mps";
  d.proc.add(512, 1000, 902, 'Z');
  d.proc.comms[512] = "nvidia-cuda-mps";
  d.proc.add(513, 1000, 903);
  d.proc.comms[513] = "python3";
  d.proc.kids[501] = {510, 511, 512, 513};
  HostStatus h = host_status(d.services, d.tools, store, StatusQuery{});
  ASSERT_EQ(h.daemon_states.size(), 2u);
  EXPECT_EQ(h.daemon_states[0]["name"], "a");
  EXPECT_EQ(h.daemon_states[0]["mps_servers"], nlohmann::json::array({510}));
  EXPECT_EQ(h.daemon_states[1]["mps_servers"], nlohmann::json::array());
  EXPECT_EQ(mps_servers_of(a, d.proc), (std::vector<pid_t>{510}));
  // A daemon that is gone has no servers to show, and no key.
  d.proc.kill(501);
  EXPECT_TRUE(mps_servers_of(a, d.proc).empty());
  h = host_status(d.services, d.tools, store, StatusQuery{});
  EXPECT_FALSE(h.daemon_states[0].contains("mps_servers"));
  (void)b;
}

TEST_F(StatusTest, FailingNvidiaSmiSetsADiagnosticAndStillListsRecords) {
  live_record("a", 501, test::kUuid0);
  d.host.smi_exit = 9;
  d.host.smi_err_out = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n";
  HostStatus h = host_status(d.services, d.tools, store, StatusQuery{});
  EXPECT_FALSE(h.nvidia_smi_available);
  ASSERT_TRUE(h.diagnostic);
  EXPECT_NE(h.diagnostic->find("couldn't communicate"), std::string::npos) << *h.diagnostic;
  EXPECT_TRUE(h.gpus.empty());
  ASSERT_EQ(h.managed_daemons.size(), 1u);
  EXPECT_EQ(h.managed_daemons[0].name, "a");
  EXPECT_FALSE(h.to_json()["diagnostic"].is_null());
}

TEST_F(StatusTest, DiscoverFalseRunsNothing) {
  StatusQuery q;
  q.discover = false;
  HostStatus h = host_status(d.services, d.tools, store, q);
  EXPECT_TRUE(d.runner.commands.empty());
  EXPECT_FALSE(h.nvidia_smi_available);
  EXPECT_FALSE(h.diagnostic);
}

TEST_F(StatusTest, ControlPipesIncludeTheDefaultAndEveryRecordsPipe) {
  auto a = live_record("a", 501, test::kUuid0);
  auto b = live_record("b", 502, test::kUuid1);
  ASSERT_TRUE(test::bind_unix_socket(a.pipe_directory + "/control"));
  test::make_dir(tmp / "env-pipe", 0700);
  ASSERT_EQ(mkfifo((tmp / "env-pipe/control").c_str(), 0600), 0);
  StatusQuery q;
  q.pipe_directory_env = tmp / "env-pipe";
  HostStatus h = host_status(d.services, d.tools, store, q);
  std::map<std::string, ControlPipeStatus> by_path;
  for (const auto& p : h.control_pipes) by_path[p.path] = p;
  ASSERT_EQ(h.control_pipes.size(), 4u);
  EXPECT_EQ(h.control_pipes[0].path, "/tmp/nvidia-mps/control");
  EXPECT_TRUE(h.control_pipes[0].managed_names.empty());
  EXPECT_EQ(by_path[tmp / "env-pipe/control"].kind, "fifo");
  EXPECT_EQ(by_path[a.pipe_directory + "/control"].kind, "socket");
  EXPECT_EQ(by_path[a.pipe_directory + "/control"].managed_names, (std::vector<std::string>{"a"}));
  EXPECT_EQ(by_path[b.pipe_directory + "/control"].kind, "missing");
  EXPECT_EQ(by_path[b.pipe_directory + "/control"].managed_names, (std::vector<std::string>{"b"}));
  auto pj = by_path[a.pipe_directory + "/control"].to_json();
  EXPECT_EQ(pj["kind"], "socket");
}

TEST_F(StatusTest, ARecordAtTheDefaultPipeIsNotListedTwice) {
  DaemonRecord r = make_record("sys", 1000, "ws1", 0, 0, "/tmp/nvidia-mps", {test::kUuid0});
  r.state = RecordState::kStarting;
  store.write(r);
  HostStatus h = host_status(d.services, d.tools, store, StatusQuery{});
  ASSERT_EQ(h.control_pipes.size(), 1u);
  EXPECT_EQ(h.control_pipes[0].managed_names, (std::vector<std::string>{"sys"}));
}

TEST_F(StatusTest, JobFilterAndScope) {
  live_record("j1", 501, test::kUuid0, "1");
  live_record("j2", 502, test::kUuid1, "2");
  live_record("nojob", 503, test::kUuid2);
  StatusQuery q;
  q.job_id = "2";
  HostStatus h = host_status(d.services, d.tools, store, q);
  ASSERT_EQ(h.managed_daemons.size(), 1u);
  EXPECT_EQ(h.managed_daemons[0].name, "j2");
  q.job_id.reset();
  q.uid = 1001;
  EXPECT_TRUE(host_status(d.services, d.tools, store, q).managed_daemons.empty());
  q.uid = 1000;
  q.host = "ws1";
  EXPECT_EQ(host_status(d.services, d.tools, store, q).managed_daemons.size(), 3u);
}

TEST_F(StatusTest, RecordProblemsAreReportedNotFatal) {
  live_record("a", 501, test::kUuid0);
  test::write_text(store.root() + "/bad.json", "{", 0600);
  HostStatus h = host_status(d.services, d.tools, store, StatusQuery{});
  EXPECT_EQ(h.managed_daemons.size(), 1u);
  ASSERT_EQ(h.record_problems.size(), 1u);
  EXPECT_EQ(h.record_problems[0].file, "bad.json");
  // An untrusted store is a problem entry, not an exception.
  chmod(store.root().c_str(), 0777);
  h = host_status(d.services, d.tools, store, StatusQuery{});
  EXPECT_TRUE(h.managed_daemons.empty());
  ASSERT_EQ(h.record_problems.size(), 1u);
  EXPECT_EQ(h.record_problems[0].file, store.root());
}

// --- doctor ------------------------------------------------------------------------

TEST_F(StatusTest, DoctorIsOkOnAHealthyHost) {
  StatusQuery q;
  q.cuda_visible_devices = "1";
  DoctorReport rep = doctor(d.services, d.tools, store, std::nullopt, q);
  ASSERT_TRUE(check(rep, "nvidia-smi"));
  EXPECT_EQ(check(rep, "nvidia-smi")->status, CheckStatus::kOk);
  EXPECT_EQ(check(rep, "topology")->status, CheckStatus::kOk);
  EXPECT_EQ(check(rep, "mps-control")->status, CheckStatus::kOk);
  EXPECT_EQ(check(rep, "records")->status, CheckStatus::kOk);
  ASSERT_TRUE(rep.plan);
  EXPECT_EQ(rep.plan->topology_mode, TopologyMode::kSingle);
  EXPECT_EQ(rep.plan->gpus.at(0).uuid, test::kUuid1);
  // The default pipe check depends on this machine; it is never "fail".
  ASSERT_TRUE(check(rep, "default-pipe"));
  EXPECT_NE(check(rep, "default-pipe")->status, CheckStatus::kFail);
  EXPECT_TRUE(rep.ok());
  EXPECT_EQ(rep.to_json()["ok"], true);
  // Read-only: no daemon launched, nothing written.
  EXPECT_EQ(d.host.launches, 0);
  EXPECT_FALSE(test::exists(store.root()));
}

TEST_F(StatusTest, DoctorReadsTheSelectedGpusComputeModeAndNeverFailsForAnother) {
  auto gpus = test::four_gpus();
  gpus[1].compute_mode = "Exclusive_Process";
  gpus[2].compute_mode = "Prohibited";
  d.host.smi_out = test::smi_csv(gpus);
  StatusQuery q;
  q.cuda_visible_devices = "1";
  DoctorReport rep = doctor(d.services, d.tools, store, std::nullopt, q);
  ASSERT_TRUE(check(rep, "compute-mode"));
  EXPECT_EQ(check(rep, "compute-mode")->status, CheckStatus::kOk) << check(rep, "compute-mode")->detail;
  EXPECT_TRUE(rep.ok());
  q.cuda_visible_devices = "0";
  rep = doctor(d.services, d.tools, store, std::nullopt, q);
  EXPECT_EQ(check(rep, "compute-mode")->status, CheckStatus::kWarn) << "Default: NVIDIA recommends Exclusive_Process";
  EXPECT_TRUE(rep.ok());
  q.cuda_visible_devices = "2";
  rep = doctor(d.services, d.tools, store, std::nullopt, q);
  EXPECT_EQ(check(rep, "compute-mode")->status, CheckStatus::kFail);
  EXPECT_NE(check(rep, "compute-mode")->detail.find("Prohibited"), std::string::npos);
  EXPECT_FALSE(rep.ok());
}

TEST_F(StatusTest, DoctorFailsWhenNvidiaSmiFails) {
  d.host.smi_exit = 255;
  d.host.smi_err = "nvidia-smi: driver not loaded";
  DoctorReport rep = doctor(d.services, d.tools, store, std::nullopt, StatusQuery{});
  ASSERT_TRUE(check(rep, "nvidia-smi"));
  EXPECT_EQ(check(rep, "nvidia-smi")->status, CheckStatus::kFail);
  EXPECT_NE(check(rep, "nvidia-smi")->detail.find("driver not loaded"), std::string::npos);
  EXPECT_FALSE(rep.ok());
  EXPECT_FALSE(rep.plan);
  EXPECT_EQ(rep.to_json()["ok"], false);
}

TEST_F(StatusTest, DoctorFailsWhenMpsControlIsMissing) {
  d.tools.mps_control = tmp / "no-such-mps-control";
  DoctorReport rep = doctor(d.services, d.tools, store, std::string("0"), StatusQuery{});
  EXPECT_EQ(check(rep, "mps-control")->status, CheckStatus::kFail);
  EXPECT_NE(check(rep, "mps-control")->detail.find("no-such-mps-control"), std::string::npos);
  EXPECT_FALSE(rep.ok());
  // Not executable counts as missing.
  test::write_text(tmp / "not-exec", "x", 0644);
  d.tools.mps_control = tmp / "not-exec";
  // (root too: X_OK needs at least one execute bit.)
  EXPECT_EQ(check(doctor(d.services, d.tools, store, std::string("0"), StatusQuery{}), "mps-control")->status, CheckStatus::kFail);
}

TEST_F(StatusTest, DoctorFailsOnABadSelector) {
  DoctorReport rep = doctor(d.services, d.tools, store, std::nullopt, StatusQuery{});  // 4 GPUs, no selector
  EXPECT_EQ(check(rep, "topology")->status, CheckStatus::kFail);
  EXPECT_FALSE(rep.ok());
  rep = doctor(d.services, d.tools, store, std::string("per-gpu:0,3"), StatusQuery{});
  EXPECT_EQ(check(rep, "topology")->status, CheckStatus::kOk);
  EXPECT_EQ(rep.plan->topology_mode, TopologyMode::kPerGpu);
}

TEST_F(StatusTest, DoctorWarnsOnAStaleRecordAndNotesALiveOne) {
  auto stale = live_record("stale", 601, test::kUuid3);
  d.proc.kill(601);
  live_record("live", 602, test::kUuid0);
  DoctorReport rep = doctor(d.services, d.tools, store, std::string("0"), StatusQuery{});
  ASSERT_TRUE(check(rep, "daemon stale"));
  EXPECT_EQ(check(rep, "daemon stale")->status, CheckStatus::kWarn);
  EXPECT_NE(check(rep, "daemon stale")->detail.find("unilab-mps stop stale"), std::string::npos);
  ASSERT_TRUE(check(rep, "daemon live"));
  EXPECT_EQ(check(rep, "daemon live")->status, CheckStatus::kOk);
  EXPECT_NE(check(rep, "daemon live")->detail.find(test::kUuid0), std::string::npos);
  EXPECT_TRUE(rep.ok());  // warnings do not fail
  // The stale record is reported, not cleaned (doctor changes nothing).
  EXPECT_TRUE(store.read("stale"));
}

TEST_F(StatusTest, DoctorWarnsOnCorruptRecords) {
  live_record("a", 501, test::kUuid0);
  test::write_text(store.root() + "/broken.json", "[]", 0600);
  DoctorReport rep = doctor(d.services, d.tools, store, std::string("0"), StatusQuery{});
  EXPECT_EQ(check(rep, "records")->status, CheckStatus::kWarn);
  EXPECT_NE(check(rep, "records")->detail.find("broken.json"), std::string::npos);
  chmod(store.root().c_str(), 0777);
  rep = doctor(d.services, d.tools, store, std::string("0"), StatusQuery{});
  EXPECT_EQ(check(rep, "records")->status, CheckStatus::kFail);
}

TEST_F(StatusTest, DoctorReportsTheCallersPipeEnvironment) {
  StatusQuery q;
  q.pipe_directory_env = tmp / "nowhere";
  DoctorReport rep = doctor(d.services, d.tools, store, std::string("0"), q);
  ASSERT_TRUE(check(rep, "pipe-env"));
  EXPECT_NE(check(rep, "pipe-env")->detail.find("missing"), std::string::npos);
}

}  // namespace
}  // namespace unilab::mps
