#include "common/slurm/job.hpp"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "common/mps/errors.hpp"
#include "common/mps/gpu.hpp"
#include "common/mps/topology.hpp"
#include "tests/unit/doubles.hpp"

namespace unilab::mps {
namespace {

using namespace std::chrono_literals;
using test::Doubles;
using test::error_of;
using test::exists;
using test::TempDir;

Getenv env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* key) -> std::optional<std::string> {
    auto it = vars.find(key);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

const std::string kOpt = "SPANK__SLURM_SPANK_OPTION_unilab_mps_unilab_mps";
const std::string kThreads = "SPANK__SLURM_SPANK_OPTION_unilab_mps_unilab_mps_threads";
const std::string kMem = "SPANK__SLURM_SPANK_OPTION_unilab_mps_unilab_mps_mem";
const std::string kPriority = "SPANK__SLURM_SPANK_OPTION_unilab_mps_unilab_mps_priority";

// --- option and environment ---------------------------------------------------------

TEST(SpankOptionEnvName, MatchesSlurmsSpelling) {
  EXPECT_EQ(spank_option_env_name("unilab-mps"), kOpt);
  EXPECT_EQ(spank_option_env_name("unilab-mps-threads"), kThreads);
  EXPECT_EQ(spank_option_env_name("unilab-mps-mem"), kMem);
  EXPECT_EQ(spank_option_env_name("unilab-mps-priority"), kPriority);
}

TEST(JobRequestFromEnv, AutoThreadsSetNoDaemonDefaultAndOverrideTheSitesDefault) {
  PluginConfig cfg;
  cfg.default_threads = 25;
  auto r = job_request_from_env(env_of({{kOpt, "(null)"}, {kThreads, "auto"}}), cfg);
  EXPECT_TRUE(r->limits.active_thread_share_auto);
  EXPECT_FALSE(r->limits.active_thread_percentage);
  r = job_request_from_env(env_of({{kOpt, "(null)"}, {kThreads, "30"}}), cfg);
  EXPECT_FALSE(r->limits.active_thread_share_auto);
  EXPECT_THROW(job_request_from_env(env_of({{kOpt, "(null)"}, {kThreads, "Auto"}}), cfg), CudaMpsError);
}

TEST(AutoThreadShare, HundredOverTheTasksSharingAGpuRoundedDownCappedAtLeastOne) {
  EXPECT_EQ(auto_thread_share(1, 1, 1, std::nullopt), 100);  // one task, one GPU
  EXPECT_EQ(auto_thread_share(2, 1, 1, std::nullopt), 50);   // a learner and a collector on one GPU
  EXPECT_EQ(auto_thread_share(3, 1, 1, std::nullopt), 33);   // rounded down
  EXPECT_EQ(auto_thread_share(2, 1, 2, std::nullopt), 100);  // --gpus-per-task=1: a GPU each
  EXPECT_EQ(auto_thread_share(4, 1, 2, std::nullopt), 50);   // two tasks per GPU
  EXPECT_EQ(auto_thread_share(4, 2, 2, std::nullopt), 25);   // every task sees both GPUs
  EXPECT_EQ(auto_thread_share(3, 1, 2, std::nullopt), 50);   // uneven: rounded up sharers (2)
  EXPECT_EQ(auto_thread_share(300, 1, 1, std::nullopt), 1);  // at least 1
  EXPECT_EQ(auto_thread_share(1, 1, 1, 50.0), 50);           // capped by max_threads=
  EXPECT_EQ(auto_thread_share(3, 1, 1, 50.0), 33);
  EXPECT_EQ(auto_thread_share(0, 0, 0, 0.5), 1);             // degenerate inputs still give a valid share
}

TEST(JobRequestFromEnv, ClientPriorityIsNvidiasTwoLevels) {
  const PluginConfig cfg;
  EXPECT_FALSE(job_request_from_env(env_of({{kOpt, "(null)"}}), cfg)->limits.client_priority);
  EXPECT_FALSE(job_request_from_env(env_of({{kOpt, "(null)"}, {kPriority, "(null)"}}), cfg)->limits.client_priority);
  EXPECT_EQ(job_request_from_env(env_of({{kOpt, "(null)"}, {kPriority, "1"}}), cfg)->limits.client_priority,
            ClientPriority::kBelowNormal);
  EXPECT_EQ(job_request_from_env(env_of({{kOpt, "(null)"}, {kPriority, "normal"}}), cfg)->limits.client_priority,
            ClientPriority::kNormal);
  std::string e = error_of([&] { job_request_from_env(env_of({{kOpt, "(null)"}, {kPriority, "2"}}), cfg); });
  EXPECT_NE(e.find("invalid MPS client priority '2'"), std::string::npos) << e;
}

TEST(JobRequestFromEnv, AbsentOptionMeansNoMps) {
  EXPECT_FALSE(job_request_from_env(env_of({}), PluginConfig{}));
  // Limits alone do not ask for MPS.
  EXPECT_FALSE(job_request_from_env(env_of({{kThreads, "50"}}), PluginConfig{}));
}

TEST(JobRequestFromEnv, FlagWithoutValueIsAuto) {
  auto r = job_request_from_env(env_of({{kOpt, "(null)"}}), PluginConfig{});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->mode, JobMode::kAuto);
  EXPECT_FALSE(r->limits.active_thread_percentage);
  EXPECT_FALSE(r->limits.pinned_mem_limit);
  EXPECT_EQ(job_request_from_env(env_of({{kOpt, ""}}), PluginConfig{})->mode, JobMode::kAuto);
  EXPECT_EQ(job_request_from_env(env_of({{kOpt, "auto"}}), PluginConfig{})->mode, JobMode::kAuto);
}

TEST(JobRequestFromEnv, Multi) {
  EXPECT_EQ(job_request_from_env(env_of({{kOpt, "multi"}}), PluginConfig{})->mode, JobMode::kMulti);
}

TEST(JobRequestFromEnv, BadModeThrows) {
  std::string e = error_of([] { job_request_from_env(env_of({{kOpt, "many"}}), PluginConfig{}); });
  EXPECT_NE(e.find("many"), std::string::npos) << e;
}

TEST(JobRequestFromEnv, LimitsWithinTheSiteMaximum) {
  PluginConfig cfg;
  cfg.max_threads = 50;
  cfg.max_mem_bytes = 8ULL << 30;
  auto r = job_request_from_env(env_of({{kOpt, "(null)"}, {kThreads, "30"}, {kMem, "4G"}}), cfg);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->limits.active_thread_percentage, 30.0);
  EXPECT_EQ(r->limits.pinned_mem_limit, "4096M");
  EXPECT_THROW(job_request_from_env(env_of({{kOpt, "(null)"}, {kThreads, "60"}}), cfg), CudaMpsError);
  EXPECT_THROW(job_request_from_env(env_of({{kOpt, "(null)"}, {kMem, "9G"}}), cfg), CudaMpsError);
  EXPECT_THROW(job_request_from_env(env_of({{kOpt, "(null)"}, {kThreads, "lots"}}), cfg), CudaMpsError);
  // "(null)" limit values mean "not given".
  r = job_request_from_env(env_of({{kOpt, "multi"}, {kThreads, "(null)"}, {kMem, "(null)"}}), cfg);
  EXPECT_FALSE(r->limits.active_thread_percentage);
  EXPECT_FALSE(r->limits.pinned_mem_limit);
}

TEST(JobRequestFromEnv, DefaultThreadsApplyOnlyWhenTheUserGivesNone) {
  PluginConfig cfg;
  cfg.default_threads = 25;
  EXPECT_EQ(job_request_from_env(env_of({{kOpt, "(null)"}}), cfg)->limits.active_thread_percentage, 25.0);
  EXPECT_EQ(job_request_from_env(env_of({{kOpt, "(null)"}, {kThreads, "(null)"}}), cfg)->limits.active_thread_percentage, 25.0);
  EXPECT_EQ(job_request_from_env(env_of({{kOpt, "(null)"}, {kThreads, "70"}}), cfg)->limits.active_thread_percentage, 70.0);
}

TEST(JobContextFromEnv, ReadsWhatSlurmGivesAProlog) {
  auto j = job_context_from_env(env_of({{"SLURM_JOB_ID", "1234"},
                                        {"SLURM_JOB_UID", "1000"},
                                        {"SLURM_JOB_GID", "100"},
                                        {"SLURM_JOB_GPUS", "0,2"},
                                        {"SLURMD_NODENAME", "n2"},
                                        {"SLURM_CONF", "/etc/slurm/slurm.conf"}}));
  EXPECT_EQ(j.job_id, "1234");
  EXPECT_EQ(j.uid, 1000u);
  EXPECT_EQ(j.gid, 100u);
  EXPECT_EQ(j.job_gpus, "0,2");
  EXPECT_EQ(j.node, "n2");
  EXPECT_EQ(j.slurm_conf, "/etc/slurm/slurm.conf");
}

TEST(JobContextFromEnv, MissingOrBadVariablesAreNamed) {
  std::map<std::string, std::string> full = {{"SLURM_JOB_ID", "1234"}, {"SLURM_JOB_UID", "1000"}, {"SLURM_JOB_GID", "100"}};
  for (const char* key : {"SLURM_JOB_ID", "SLURM_JOB_UID", "SLURM_JOB_GID"}) {
    auto vars = full;
    vars.erase(key);
    std::string e = error_of([&] { job_context_from_env(env_of(vars)); });
    EXPECT_NE(e.find(key), std::string::npos) << e;
    vars[key] = "12x";
    e = error_of([&] { job_context_from_env(env_of(vars)); });
    EXPECT_NE(e.find(key), std::string::npos) << e;
    vars[key] = "";
    EXPECT_THROW(job_context_from_env(env_of(vars)), CudaMpsError);
  }
  // Without SLURMD_NODENAME: the host name; no GPUs is not an error here.
  auto j = job_context_from_env(env_of(full));
  EXPECT_EQ(j.node, current_host());
  EXPECT_FALSE(j.job_gpus);
  // A job id that is not a plain number cannot smuggle path characters in.
  full["SLURM_JOB_ID"] = "../../x";
  EXPECT_THROW(job_context_from_env(env_of(full)), CudaMpsError);
}

TEST(JobDaemonName, IsSafeOrRefused) {
  EXPECT_EQ(job_daemon_name("17", "n1", "gpu0"), "job17.n1.gpu0");
  EXPECT_EQ(job_daemon_name("17", "gpu-node-01", "multi"), "job17.gpu-node-01.multi");
  EXPECT_THROW(job_daemon_name("17", "n/1", "gpu0"), CudaMpsError);
  EXPECT_THROW(job_daemon_name("17", "n 1", "gpu0"), CudaMpsError);
}

// The run-dir entry: short whatever the node name, stable across versions
// (an upgraded epilog must find the entries of running jobs), one per node.
TEST(JobRunEntry, IsShortAndNamesJobGpuAndNodeTag) {
  EXPECT_EQ(job_run_entry("1234", "n1", "gpu0"), "1234.0.8KO");
  EXPECT_EQ(job_run_entry("1234", "n2", "gpu0"), "1234.0.PCa");
  EXPECT_EQ(job_run_entry("7", "n1", "multi"), "7.m.8KO");
  const std::string long_node(64, 'x');
  EXPECT_EQ(job_run_entry("4294967295", long_node, "gpu127").size(), 18u);
  EXPECT_THROW(job_run_entry("1", "n1", "gpu"), CudaMpsError);
  EXPECT_THROW(job_run_entry("1", "n1", "../x"), CudaMpsError);
}

TEST(JobRunEntry, SuffixIsFoundInBothLayoutsForThisJobAndNodeOnly) {
  EXPECT_EQ(job_run_entry_suffix("1234.0.8KO", "1234", "n1"), "gpu0");
  EXPECT_EQ(job_run_entry_suffix("1234.12.8KO", "1234", "n1"), "gpu12");
  EXPECT_EQ(job_run_entry_suffix("1234.m.8KO", "1234", "n1"), "multi");
  EXPECT_EQ(job_run_entry_suffix("job1234.n1.gpu3", "1234", "n1"), "gpu3");  // the earlier layout
  EXPECT_EQ(job_run_entry_suffix("job1234.n1.multi", "1234", "n1"), "multi");
  EXPECT_FALSE(job_run_entry_suffix("1234.0.PCa", "1234", "n1"));   // n2's
  EXPECT_FALSE(job_run_entry_suffix("12345.0.8KO", "1234", "n1"));  // another job
  EXPECT_FALSE(job_run_entry_suffix("1234.0.8KO", "123", "n1"));
  EXPECT_FALSE(job_run_entry_suffix("1234..8KO", "1234", "n1"));
  EXPECT_FALSE(job_run_entry_suffix("1234.x.8KO", "1234", "n1"));
  EXPECT_FALSE(job_run_entry_suffix("1234.0.8KOx", "1234", "n1"));
  EXPECT_FALSE(job_run_entry_suffix("job1234.n2.gpu3", "1234", "n1"));
}

// 107 bytes of sun_path less "/control_privileged", "/pipe", "/" and the
// longest entry (10-digit job id, 3-digit GRES index, tag): 64.
TEST(JobRunEntry, AnyRunDirOfUpTo64CharactersFits) { EXPECT_EQ(max_run_dir_length(), 64u); }

TEST(SlurmRecordStore, IsRootOwnedUnderStateDir) {
  PluginConfig cfg;
  cfg.state_dir = "/var/lib/x";
  EXPECT_EQ(slurm_record_store(cfg).root(), "/var/lib/x");
}

// --- compute_task_environment ------------------------------------------------------------

class FakeDeviceAccess final : public DeviceAccess {
 public:
  bool denied(const std::string& device) override { return denied_set.count(device) > 0; }
  std::set<std::string> denied_set;
};

// GRES order of the node: index, device, minor, UUID all disagree.
std::vector<NodeGpu> node_gpus() {
  return {NodeGpu{0, "/dev/nvidia3", 3, test::kUuid2, std::nullopt}, NodeGpu{1, "/dev/nvidia1", 1, test::kUuid3, std::nullopt},
          NodeGpu{2, "/dev/nvidia0", 0, test::kUuid1, std::nullopt}, NodeGpu{3, "/dev/nvidia2", 2, test::kUuid0, std::nullopt}};
}

class TaskEnvTest : public ::testing::Test {
 protected:
  test::FakeProcReader proc;
  FakeDeviceAccess devices;
  TaskContext task{"5", 1000, "n1", std::nullopt, std::nullopt, std::string("0-3")};

  DaemonRecord record(const std::string& suffix, std::vector<int> gres, const std::string& mode, pid_t pid) {
    auto nodes = node_gpus();
    std::vector<std::string> uuids;
    for (int i : gres) uuids.push_back(nodes[static_cast<size_t>(i)].uuid);
    DaemonRecord r = test::make_record("job5.n1." + suffix, 1000, "n1", pid, 100 + static_cast<uint64_t>(pid),
                                       "/run/unilab-mps/run/job5.n1." + suffix + "/pipe", uuids);
    r.boot_id = proc.boot;
    r.job_id = "5";
    r.slurm = SlurmBinding{"5", "n1", *kJobModeNames.lookup(mode), gres, nodes};
    proc.add(pid, 1000, r.process_start_ticks);
    return r;
  }
  std::vector<DaemonRecord> auto_records(std::vector<int> gres = {0, 1, 2, 3}) {
    std::vector<DaemonRecord> out;
    for (int i : gres) out.push_back(record("gpu" + std::to_string(i), {i}, "auto", 200 + i));
    return out;
  }
  std::vector<DaemonRecord> multi_records() { return {record("multi", {0, 1, 2, 3}, "multi", 300)}; }

  static std::string get(const TaskEnvironment& env, const std::string& key) {
    for (const auto& [k, v] : env.set) if (k == key) return v;
    return "<unset>";
  }
};

TEST_F(TaskEnvTest, UnconstrainedCvdHoldsGresIndices) {
  task.cuda_visible_devices = "2";
  auto env = compute_task_environment(auto_records(), task, devices, proc);
  EXPECT_EQ(get(env, "CUDA_VISIBLE_DEVICES"), test::kUuid1);  // GRES 2 -> minor 0 -> kUuid1
  EXPECT_EQ(env.daemon_name, "job5.n1.gpu2");
  EXPECT_EQ(get(env, "CUDA_MPS_PIPE_DIRECTORY"), "/run/unilab-mps/run/job5.n1.gpu2/pipe");
  EXPECT_EQ(get(env, "CUDA_MPS_LOG_DIRECTORY"), "/run/unilab-mps/run/job5.n1.gpu2/pipe-log");
  EXPECT_EQ(env.gres_indices, (std::vector<int>{2}));
  EXPECT_EQ(env.set.size(), 3u);
  EXPECT_EQ(get(env, "CUDA_MPS_CLIENT_PRIORITY"), "<unset>");  // only when the job asked
}

TEST_F(TaskEnvTest, AutoThreadsGiveEachTaskItsShareOfItsGpu) {
  auto records = auto_records();  // four GPUs, one daemon each
  for (auto& r : records) r.limits.active_thread_share_auto = true;
  task.cuda_visible_devices = "2";
  task.local_tasks = 8;  // two per GPU
  auto env = compute_task_environment(records, task, devices, proc);
  EXPECT_EQ(get(env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "50");
  task.site_max_threads = 40;
  env = compute_task_environment(records, task, devices, proc);
  EXPECT_EQ(get(env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "40");
  for (auto& r : records) r.limits.active_thread_share_auto = false;
  env = compute_task_environment(records, task, devices, proc);
  EXPECT_EQ(get(env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "<unset>");
}

TEST_F(TaskEnvTest, TheJobsClientPriorityReachesItsTasks) {
  auto records = auto_records();
  for (auto& r : records) r.limits.client_priority = ClientPriority::kBelowNormal;
  task.cuda_visible_devices = "2";
  auto env = compute_task_environment(records, task, devices, proc);
  EXPECT_EQ(get(env, "CUDA_MPS_CLIENT_PRIORITY"), "1");
  for (auto& r : records) r.limits.client_priority = ClientPriority::kNormal;
  env = compute_task_environment(records, task, devices, proc);
  EXPECT_EQ(get(env, "CUDA_MPS_CLIENT_PRIORITY"), "0");
}

TEST_F(TaskEnvTest, UnderConstraintTheDeviceFilesOverruleAMigUuidTheTaskMayNotOpen) {
  // Slurm before 23.11.4: with ConstrainDevices and --gpus-per-task=1 over MIG
  // slices every task's CUDA_VISIBLE_DEVICES named the first slice, while
  // each task's cgroup allowed only its own slice's capability files.
  auto records = auto_records({0, 1});
  for (auto& r : records) {
    r.slurm->node_gpus[0] = NodeGpu{0, "/dev/nvidia-caps/nvidia-cap13", 13, test::kMig0, test::mig_gpus()[4].mig};
    r.slurm->node_gpus[1] = NodeGpu{1, "/dev/nvidia-caps/nvidia-cap49", 49, test::kMig1, test::mig_gpus()[5].mig};
  }
  records[0].gpu_uuids = {test::kMig0};
  records[1].gpu_uuids = {test::kMig1};
  task.cuda_visible_devices = test::kMig0;
  devices.denied_set = {"/dev/nvidia-caps/nvidia-cap13", "/dev/nvidia2", "/dev/nvidia0"};  // task 1: only slice 1 (and GPU 3's file)
  auto env = compute_task_environment(records, task, devices, proc);
  EXPECT_EQ(env.daemon_name, "job5.n1.gpu1");
  EXPECT_EQ(get(env, "CUDA_VISIBLE_DEVICES"), test::kMig1);
  // The UUID of a slice the task may open stands as given.
  devices.denied_set = {"/dev/nvidia-caps/nvidia-cap49", "/dev/nvidia2", "/dev/nvidia0"};
  env = compute_task_environment(records, task, devices, proc);
  EXPECT_EQ(env.daemon_name, "job5.n1.gpu0");
  // Unconstrained (nothing denied): the mask decides, as before.
  devices.denied_set.clear();
  env = compute_task_environment(records, task, devices, proc);
  EXPECT_EQ(get(env, "CUDA_VISIBLE_DEVICES"), test::kMig0);
}

TEST_F(TaskEnvTest, ConstrainedCvdIsAPositionAmongTheAllowedDevices) {
  // Seen live: task 1 of `srun -n2 --gpus-per-task=1` with ConstrainDevices had
  // CUDA_VISIBLE_DEVICES=0 and SLURM_STEP_GPUS=0, but could open only GRES 1's device.
  devices.denied_set = {"/dev/nvidia3", "/dev/nvidia0", "/dev/nvidia2"};  // GRES 0, 2, 3
  task.cuda_visible_devices = "0";
  task.step_gpus = "0";
  auto env = compute_task_environment(auto_records(), task, devices, proc);
  EXPECT_EQ(env.gres_indices, (std::vector<int>{1}));
  EXPECT_EQ(get(env, "CUDA_VISIBLE_DEVICES"), test::kUuid3);
  EXPECT_EQ(env.daemon_name, "job5.n1.gpu1");

  // Two allowed devices: local 1 is the second allowed one in GRES order.
  devices.denied_set = {"/dev/nvidia3", "/dev/nvidia1"};  // GRES 0, 1 denied: allowed 2, 3
  task.cuda_visible_devices = "1";
  env = compute_task_environment(auto_records(), task, devices, proc);
  EXPECT_EQ(env.gres_indices, (std::vector<int>{3}));
  EXPECT_EQ(get(env, "CUDA_VISIBLE_DEVICES"), test::kUuid0);

  task.cuda_visible_devices = "2";  // beyond what the task may open
  std::string e = error_of([&] { compute_task_environment(auto_records(), task, devices, proc); });
  EXPECT_NE(e.find("exceeds"), std::string::npos) << e;
}

TEST_F(TaskEnvTest, WithoutCvdTheAllowedDevicesOrStepGpusDecide) {
  devices.denied_set = {"/dev/nvidia3", "/dev/nvidia1", "/dev/nvidia2"};
  EXPECT_EQ(compute_task_environment(auto_records(), task, devices, proc).daemon_name, "job5.n1.gpu2");
  devices.denied_set.clear();
  task.step_gpus = "3";
  EXPECT_EQ(compute_task_environment(auto_records(), task, devices, proc).daemon_name, "job5.n1.gpu3");
}

TEST_F(TaskEnvTest, TwoGpusInAutoModeNameTheOptionsThatFit) {
  task.cuda_visible_devices = "0,1";
  std::string e = error_of([&] { compute_task_environment(auto_records(), task, devices, proc); });
  EXPECT_NE(e.find("--unilab-mps=multi"), std::string::npos) << e;
  EXPECT_NE(e.find("--gpus-per-task=1"), std::string::npos) << e;
}

TEST_F(TaskEnvTest, MultiModeNeedsTheTaskToHoldAllTheGpus) {
  task.cuda_visible_devices = "1";
  std::string e = error_of([&] { compute_task_environment(multi_records(), task, devices, proc); });
  EXPECT_NE(e.find("--unilab-mps=multi"), std::string::npos) << e;
  EXPECT_NE(e.find("--gpus-per-task=1"), std::string::npos) << e;

  task.cuda_visible_devices = "3,0,2,1";
  auto env = compute_task_environment(multi_records(), task, devices, proc);
  EXPECT_EQ(env.daemon_name, "job5.n1.multi");
  // The task's own order is kept.
  EXPECT_EQ(get(env, "CUDA_VISIBLE_DEVICES"), join({test::kUuid0, test::kUuid2, test::kUuid1, test::kUuid3}, ","));
  EXPECT_EQ(get(env, "CUDA_MPS_PIPE_DIRECTORY"), "/run/unilab-mps/run/job5.n1.multi/pipe");
}

TEST_F(TaskEnvTest, UuidEntriesMapBackToTheirGresIndex) {
  // A nested step sees the already rewritten value, in any spelling.
  task.cuda_visible_devices = "7fdaf0a5179bf636d15ddaf243e3ff16";  // kUuid0 = GRES 3
  auto env = compute_task_environment(auto_records(), task, devices, proc);
  EXPECT_EQ(env.gres_indices, (std::vector<int>{3}));
  EXPECT_EQ(get(env, "CUDA_VISIBLE_DEVICES"), test::kUuid0);
  task.cuda_visible_devices = "GPU-00000000-0000-0000-0000-000000000000";
  std::string e = error_of([&] { compute_task_environment(auto_records(), task, devices, proc); });
  EXPECT_NE(e.find("not a GPU of node n1"), std::string::npos) << e;
}

TEST_F(TaskEnvTest, NoRecordsExplainsWhatToRequest) {
  task.job_gpus.reset();
  std::string e = error_of([&] { compute_task_environment({}, task, devices, proc); });
  EXPECT_NE(e.find("--gres"), std::string::npos) << e;
  task.job_gpus = "0,1";
  e = error_of([&] { compute_task_environment({}, task, devices, proc); });
  EXPECT_NE(e.find("sbatch/salloc"), std::string::npos) << e;
  // RunInJob: Slurm never called the plugin's job prolog; name the helper.
  task.prolog_runs_in_job = true;
  e = error_of([&] { compute_task_environment({}, task, devices, proc); });
  EXPECT_NE(e.find("PrologFlags=RunInJob"), std::string::npos) << e;
  EXPECT_NE(e.find("unilab-mps-prolog"), std::string::npos) << e;
}

TEST_F(TaskEnvTest, DeadDaemonIsAnError) {
  auto records = auto_records();
  proc.kill(records[2].pid);
  task.cuda_visible_devices = "2";
  std::string e = error_of([&] { compute_task_environment(records, task, devices, proc); });
  EXPECT_NE(e.find("no longer running"), std::string::npos) << e;
  // Another GPU's daemon still serves its task.
  task.cuda_visible_devices = "1";
  EXPECT_EQ(compute_task_environment(records, task, devices, proc).daemon_name, "job5.n1.gpu1");
}

TEST_F(TaskEnvTest, GpuOutsideTheJobIsAnError) {
  task.cuda_visible_devices = "3";
  std::string e = error_of([&] { compute_task_environment(auto_records({0, 1}), task, devices, proc); });
  EXPECT_NE(e.find("GRES index 3"), std::string::npos) << e;
  EXPECT_NE(e.find("not one of job 5"), std::string::npos) << e;
}

TEST_F(TaskEnvTest, GarbageCvdAndGpulessTasksAreErrors) {
  task.cuda_visible_devices = "gpu0";
  EXPECT_THROW(compute_task_environment(auto_records(), task, devices, proc), CudaMpsError);
  task.cuda_visible_devices.reset();
  task.job_gpus = "";
  task.step_gpus = "";
  std::string e = error_of([&] { compute_task_environment(auto_records(), task, devices, proc); });
  EXPECT_NE(e.find("no GPU"), std::string::npos) << e;
}

// --- prolog / epilog (real files, simulated NVIDIA host) ---------------------------------

class PrologTest : public ::testing::Test {
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
    // GRES order 3,1,0,2 on n1; nvidia-smi index->minor 0->2, 1->0, 2->3, 3->1.
    test::write_text(tmp / "gres.conf", "# test nodes\n"
                                        "NodeName=n1 Name=gpu Type=h200 File=" + tmp.path() + "/dev/nvidia[3,1,0,2]\n"
                                        "NodeName=n2 Name=gpu File=" + tmp.path() + "/dev/nvidia[0-1]\n");
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
    job = context("1234", "n1", "0,2");
  }

  JobContext context(const std::string& id, const std::string& node, const std::string& gpus) {
    JobContext j;
    j.job_id = id;
    j.uid = test::kOtherUid;
    j.gid = test::kOtherGid;
    j.job_gpus = gpus;
    j.node = node;
    return j;
  }

  std::vector<std::string> record_files() {
    std::vector<std::string> out;
    if (!exists(cfg.state_dir)) return out;
    for (const auto& f : test::dir_entries(cfg.state_dir)) if (f.ends_with(".json")) out.push_back(f);
    return out;
  }
  std::vector<std::string> run_entries() { return exists(cfg.run_dir) ? test::dir_entries(cfg.run_dir) : std::vector<std::string>{}; }
};

TEST_F(PrologTest, AutoStartsOneDaemonPerJobGpuWithTheRightUuid) {
  PrologOutcome out = run_job_prolog(d.services, cfg, job, JobRequest{});
  EXPECT_EQ(d.host.smi_calls, 1);
  EXPECT_EQ(d.runner.count_program(d.host.nvidia_smi), 1u);
  ASSERT_EQ(out.started.size(), 2u);
  EXPECT_TRUE(out.note.empty());

  const DaemonRecord& g0 = out.started[0];
  const DaemonRecord& g2 = out.started[1];
  EXPECT_EQ(g0.name, "job1234.n1.gpu0");
  EXPECT_EQ(g2.name, "job1234.n1.gpu2");
  EXPECT_EQ(g0.gpu_uuids, (std::vector<std::string>{test::kUuid2}));  // GRES 0 -> nvidia3 -> minor 3 -> index 2
  EXPECT_EQ(g2.gpu_uuids, (std::vector<std::string>{test::kUuid1}));  // GRES 2 -> nvidia0 -> minor 0 -> index 1
  EXPECT_EQ(g0.topology_mode, TopologyMode::kPerGpu);
  EXPECT_EQ(g0.uid, test::kOtherUid);
  EXPECT_EQ(g0.host, "n1");
  EXPECT_EQ(g0.job_id, "1234");
  ASSERT_TRUE(g0.slurm);
  EXPECT_EQ(g0.slurm->gres_indices, (std::vector<int>{0}));
  EXPECT_EQ(g0.slurm->mode, JobMode::kAuto);
  ASSERT_EQ(g0.slurm->node_gpus.size(), 4u);
  EXPECT_EQ(g0.slurm->node_gpus[1], (NodeGpu{1, tmp / "dev/nvidia1", 1, test::kUuid3, std::nullopt}));
  EXPECT_EQ(g0.pipe_directory, cfg.run_dir + "/1234.0.8KO/pipe");  // job_run_entry: short, the record keeps the full name
  EXPECT_EQ(g0.owned_directories, (std::vector<std::string>{cfg.run_dir + "/1234.0.8KO"}));

  // Each daemon was launched with its own GPU, as the job user.
  ASSERT_EQ(d.host.launch_commands.size(), 2u);
  // (at once: in either order) each with its daemon's pipe directory
  std::map<std::string, std::string> launched;  // pipe dir -> CUDA_VISIBLE_DEVICES
  for (const auto& c : d.host.launch_commands) {
    launched[test::env_value(c, "CUDA_MPS_PIPE_DIRECTORY").value_or("?")] = test::env_value(c, "CUDA_VISIBLE_DEVICES").value_or("?");
  }
  EXPECT_EQ(launched, (std::map<std::string, std::string>{{cfg.run_dir + "/1234.0.8KO/pipe", test::kUuid2},
                                                          {out.started[1].pipe_directory, test::kUuid1}}));
  for (const auto& c : d.host.launch_commands) {
    ASSERT_TRUE(c.credentials);
    EXPECT_EQ(c.credentials->uid, test::kOtherUid);
  }
  EXPECT_EQ(record_files(), (std::vector<std::string>{"job1234.n1.gpu0.json", "job1234.n1.gpu2.json"}));
  // World-readable records (the task path reads them as the user) in a root-owned dir.
  EXPECT_EQ(test::mode_of(cfg.state_dir + "/job1234.n1.gpu0.json") & 07777, 0644u);
  EXPECT_EQ(test::owner_of(cfg.state_dir), 0u);
  EXPECT_EQ(test::owner_of(cfg.run_dir + "/1234.0.8KO"), test::kOtherUid);

  // The task path works from these records alone.
  RecordStore store = slurm_record_store(cfg);
  auto recs = job_records(store, "1234", "n1", test::kOtherUid);
  ASSERT_EQ(recs.size(), 2u);
  FakeDeviceAccess devices;
  TaskContext task{"1234", test::kOtherUid, "n1", std::string("2"), std::nullopt, std::string("0,2")};
  auto env = compute_task_environment(recs, task, devices, d.proc);
  EXPECT_EQ(env.daemon_name, "job1234.n1.gpu2");
  EXPECT_EQ(env.set[0].second, test::kUuid1);
}

TEST_F(PrologTest, SingleGpuJobIsSingleGpuTopology) {
  PrologOutcome out = run_job_prolog(d.services, cfg, context("77", "n1", "3"), JobRequest{});
  ASSERT_EQ(out.started.size(), 1u);
  EXPECT_EQ(out.started[0].topology_mode, TopologyMode::kSingle);
  EXPECT_EQ(out.started[0].gpu_uuids, (std::vector<std::string>{test::kUuid0}));  // GRES 3 -> nvidia2 -> minor 2 -> index 0
}

TEST_F(PrologTest, MultiStartsOneDaemonForAllJobGpus) {
  JobRequest req;
  req.mode = JobMode::kMulti;
  req.limits.active_thread_percentage = 40;
  PrologOutcome out = run_job_prolog(d.services, cfg, job, req);
  EXPECT_EQ(d.host.smi_calls, 1);
  ASSERT_EQ(out.started.size(), 1u);
  const DaemonRecord& r = out.started[0];
  EXPECT_EQ(r.name, "job1234.n1.multi");
  EXPECT_EQ(r.gpu_uuids, (std::vector<std::string>{test::kUuid2, test::kUuid1}));
  EXPECT_EQ(r.topology_mode, TopologyMode::kSingleTaskMulti);
  EXPECT_EQ(r.slurm->gres_indices, (std::vector<int>{0, 2}));
  EXPECT_EQ(r.slurm->mode, JobMode::kMulti);
  EXPECT_EQ(r.limits.active_thread_percentage, 40.0);
  ASSERT_EQ(d.host.launches, 1);
  EXPECT_EQ(test::env_value(d.host.launch_commands[0], "CUDA_VISIBLE_DEVICES"), test::kUuid2 + "," + test::kUuid1);
  EXPECT_NE(std::find(d.host.received.begin(), d.host.received.end(), "set_default_active_thread_percentage 40"),
            d.host.received.end());
}

TEST_F(PrologTest, FailureOnTheSecondDaemonStopsTheFirstAndLeavesNothing) {
  d.host.launch_failures[2] = test::exited(1, "", "second daemon exploded\n");
  std::string e = error_of([&] { run_job_prolog(d.services, cfg, job, JobRequest{}); });
  EXPECT_NE(e.find("second daemon exploded"), std::string::npos) << e;
  EXPECT_EQ(d.host.launches, 2);
  EXPECT_EQ(d.host.quits, 1);  // the first daemon was asked to quit
  for (const auto& [pipe, pid] : d.host.daemons) EXPECT_FALSE(d.proc.alive(pid)) << pipe;
  EXPECT_TRUE(record_files().empty());
  EXPECT_TRUE(run_entries().empty());
}

TEST_F(PrologTest, NoGpuOnThisNodeStartsNothing) {
  PrologOutcome out = run_job_prolog(d.services, cfg, context("9", "n1", ""), JobRequest{});
  EXPECT_TRUE(out.started.empty());
  EXPECT_NE(out.note.find("no GPU"), std::string::npos) << out.note;
  EXPECT_TRUE(d.runner.commands.empty());
}

TEST_F(PrologTest, GresIndexBeyondGresConfIsAnError) {
  std::string e = error_of([&] { run_job_prolog(d.services, cfg, context("9", "n2", "0,3"), JobRequest{}); });
  EXPECT_NE(e.find("GRES index 3"), std::string::npos) << e;
  EXPECT_EQ(d.host.launches, 0);
}

TEST_F(PrologTest, NvidiaSmiFailureFailsTheProlog) {
  d.host.smi_exit = 9;
  d.host.smi_err_out = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n";
  std::string e = error_of([&] { run_job_prolog(d.services, cfg, job, JobRequest{}); });
  EXPECT_NE(e.find("couldn't communicate"), std::string::npos) << e;
  EXPECT_EQ(d.host.launches, 0);
  EXPECT_TRUE(record_files().empty());
}

TEST_F(PrologTest, AJobGpuInProhibitedModeOrWithMigFailsTheProlog) {
  // job GRES 0,2 on n1 = nvidia-smi 2 and 1 (see SetUp); nvidia-smi 3 is not the job's.
  auto gpus = test::four_gpus();
  gpus[3].compute_mode = "Prohibited";
  d.host.smi_out = test::smi_csv(gpus);
  PrologOutcome ok = run_job_prolog(d.services, cfg, job, JobRequest{});
  EXPECT_EQ(ok.started.size(), 2u) << "another job's GPU does not matter";
  run_job_epilog(d.services, cfg, job);
  const int launches = d.host.launches;

  gpus[2].compute_mode = "Prohibited";
  d.host.smi_out = test::smi_csv(gpus);
  std::string e = error_of([&] { run_job_prolog(d.services, cfg, job, JobRequest{}); });
  EXPECT_NE(e.find("GPU 2 (" + test::kUuid2), std::string::npos) << e;
  EXPECT_NE(e.find("Prohibited"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  EXPECT_EQ(d.host.launches, launches);
  EXPECT_TRUE(record_files().empty());

  // A whole GPU (File=/dev/nvidia0, GRES 2) whose MIG is enabled: its MIG
  // devices are the GPUs a job can be given, never the whole GPU.
  gpus[2].compute_mode = "Default";
  gpus = test::mig_gpus();
  d.host.smi_out = test::smi_csv(gpus);
  d.host.smi_list_out = test::smi_list(gpus);
  d.host.smi_table_out = test::smi_table(gpus);
  e = error_of([&] { run_job_prolog(d.services, cfg, context("1234", "n1", "2"), JobRequest{}); });
  EXPECT_NE(e.find("GPU 1 (" + test::kUuid1), std::string::npos) << e;
  EXPECT_NE(e.find("has MIG enabled: MPS runs on its MIG devices, one daemon each"), std::string::npos) << e;
  EXPECT_EQ(d.host.launches, launches);
}

// A node whose GPU 1 (minor 0) is cut into two MIG slices: gres.conf lists
// GPU 0 whole and the slices with MultipleFiles= (their capability files
// made with mknod, the driver's minors in the fake /proc/driver).
class MigPrologTest : public PrologTest {
 protected:
  static JobRequest multi_request() {
    JobRequest r;
    r.mode = JobMode::kMulti;
    return r;
  }
  void SetUp() override {
    PrologTest::SetUp();
    if (IsSkipped()) return;
    test::make_dir(tmp / "dev/caps", 0755);
    for (int m : {12, 13, 48, 49}) {
      std::string path = tmp / ("dev/caps/nvidia-cap" + std::to_string(m));
      ASSERT_EQ(mknod(path.c_str(), S_IFCHR | 0444, makedev(241, static_cast<unsigned>(m))), 0) << path;
    }
    const std::string dev = tmp.path() + "/dev";
    test::write_text(tmp / "gres.conf", "NodeName=n1 Name=gpu File=" + dev + "/nvidia2\n"
                                        "NodeName=n1 Name=gpu Type=3g.71gb MultipleFiles=" + dev + "/nvidia0," + dev +
                                        "/caps/nvidia-cap12," + dev + "/caps/nvidia-cap13\n"
                                        "NodeName=n1 Name=gpu Type=1g.18gb MultipleFiles=" + dev + "/nvidia0," + dev +
                                        "/caps/nvidia-cap[48-49]\n");
    const auto gpus = test::mig_gpus();
    d.host.smi_out = test::smi_csv(gpus);
    d.host.smi_list_out = test::smi_list(gpus);
    d.host.smi_table_out = test::smi_table(gpus);
    test::make_dir(cfg.tools.driver_proc + "/nvidia-caps", 0755);
    test::write_text(cfg.tools.driver_proc + "/nvidia-caps/mig-minors",
                     "config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\ngpu0/gi5/access 48\ngpu0/gi5/ci0/access 49\n");
  }
};

TEST_F(MigPrologTest, OneDaemonPerMigSliceWithItsMigUuidAndParentRecorded) {
  PrologOutcome out = run_job_prolog(d.services, cfg, context("77", "n1", "1-2"), JobRequest{});
  ASSERT_EQ(out.started.size(), 2u);
  // nvidia-smi three times: the query, then -L and the table (MIG is on).
  EXPECT_EQ(d.host.smi_calls, 3);
  EXPECT_EQ(out.started[0].gpu_uuids, (std::vector<std::string>{test::kMig0}));
  EXPECT_EQ(out.started[1].gpu_uuids, (std::vector<std::string>{test::kMig1}));
  std::set<std::string> launched;
  for (const auto& c : d.host.launch_commands) launched.insert(test::env_value(c, "CUDA_VISIBLE_DEVICES").value_or("?"));
  EXPECT_EQ(launched, (std::set<std::string>{test::kMig0, test::kMig1}));
  const NodeGpu& slice = out.started[1].slurm->node_gpus[2];
  EXPECT_EQ(slice.uuid, test::kMig1);
  EXPECT_EQ(slice.device, tmp / "dev/caps/nvidia-cap49");
  ASSERT_TRUE(slice.mig.has_value());
  EXPECT_EQ(slice.mig->parent_uuid, test::kUuid1);
  EXPECT_EQ(slice.mig->profile, "1g.18gb");
  // The record round-trips the slice.
  RecordStore store = slurm_record_store(cfg);
  EXPECT_EQ(store.read(out.started[1].name)->slurm->node_gpus[2], slice);
  // A task holding the slice's GRES index gets the MIG UUID and its daemon.
  TaskContext task;
  task.job_id = "77";
  task.uid = test::kOtherUid;
  task.node = "n1";
  task.cuda_visible_devices = "2";
  FakeDeviceAccess open_all;
  TaskEnvironment env = compute_task_environment(job_records(store, "77", "n1", test::kOtherUid), task, open_all, d.proc);
  EXPECT_EQ(env.daemon_name, out.started[1].name);
  EXPECT_EQ(env.set[0], (std::pair<std::string, std::string>{"CUDA_VISIBLE_DEVICES", test::kMig1}));
  EXPECT_TRUE(run_job_epilog(d.services, cfg, context("77", "n1", "1-2")).ok());
}

TEST_F(MigPrologTest, SlurmsMigUuidsInThePrologEnvironmentAreBelieved) {
  // AutoDetect=nvml: Slurm's prolog has the slice's UUID in CUDA_VISIBLE_DEVICES.
  test::write_text(tmp / "gres.conf", "AutoDetect=nvml\n");
  JobContext j = context("78", "n1", "3");
  j.cuda_visible_devices = test::kMig1;  // gres.conf order would say GRES 3 is MIG device 0 (GI 1)
  PrologOutcome out = run_job_prolog(d.services, cfg, j, JobRequest{});
  ASSERT_EQ(out.started.size(), 1u);
  EXPECT_EQ(out.started[0].gpu_uuids, (std::vector<std::string>{test::kMig1}));
  EXPECT_TRUE(std::any_of(out.warnings.begin(), out.warnings.end(),
                          [](const auto& w) { return w.find("GRES index 3 is " + test::kMig1 + " as Slurm says") != std::string::npos; }));
  EXPECT_TRUE(run_job_epilog(d.services, cfg, j).ok());
  // A UUID this node does not have: refused before anything starts.
  j.job_id = "79";
  j.cuda_visible_devices = "MIG-99999999-6f70-5b8c-9d0e-1f2a3b4c5d6e";
  const int launches = d.host.launches;
  std::string e = error_of([&] { run_job_prolog(d.services, cfg, j, JobRequest{}); });
  EXPECT_NE(e.find("which nvidia-smi does not list on this node"), std::string::npos) << e;
  EXPECT_EQ(d.host.launches, launches);
}

TEST_F(MigPrologTest, MultiCannotSpanMigSlices) {
  const int launches = d.host.launches;
  std::string e = error_of([&] { run_job_prolog(d.services, cfg, context("80", "n1", "1-2"), multi_request()); });
  EXPECT_NE(e.find("one daemon per MIG device; use --unilab-mps (one daemon per GPU or MIG slice)"), std::string::npos) << e;
  EXPECT_EQ(d.host.launches, launches);
  EXPECT_TRUE(record_files().empty());
  // One slice under =multi is one daemon on it, as any single GPU.
  PrologOutcome one = run_job_prolog(d.services, cfg, context("81", "n1", "2"), multi_request());
  ASSERT_EQ(one.started.size(), 1u);
  EXPECT_EQ(one.started[0].gpu_uuids, (std::vector<std::string>{test::kMig1}));
  EXPECT_TRUE(run_job_epilog(d.services, cfg, context("81", "n1", "2")).ok());
}

TEST_F(MigPrologTest, WithoutTheDriversMigMinorsTheSliceIsNotGuessed) {
  std::filesystem::remove(cfg.tools.driver_proc + "/nvidia-caps/mig-minors");
  std::string e = error_of([&] { run_job_prolog(d.services, cfg, context("82", "n1", "2"), JobRequest{}); });
  EXPECT_NE(e.find("mig-minors"), std::string::npos) << e;
  EXPECT_NE(e.find("driver_proc="), std::string::npos) << e;
  EXPECT_EQ(d.host.launches, 0);
}

TEST_F(PrologTest, MissingGresConfIsAnError) {
  cfg.gres_conf = tmp / "nope.conf";
  std::string e = error_of([&] { run_job_prolog(d.services, cfg, job, JobRequest{}); });
  EXPECT_NE(e.find("nope.conf"), std::string::npos) << e;
  EXPECT_EQ(d.host.smi_calls, 0);
}

TEST_F(PrologTest, ARequeuedJobReplacesWhatItsEarlierRunLeft) {
  PrologOutcome first = run_job_prolog(d.services, cfg, job, JobRequest{});
  ASSERT_EQ(first.started.size(), 2u);
  PrologOutcome second = run_job_prolog(d.services, cfg, job, JobRequest{});
  ASSERT_EQ(second.started.size(), 2u);
  EXPECT_FALSE(d.proc.alive(first.started[0].pid));
  EXPECT_FALSE(d.proc.alive(first.started[1].pid));
  EXPECT_TRUE(d.proc.alive(second.started[0].pid));
  EXPECT_EQ(record_files().size(), 2u);
  EXPECT_EQ(d.host.smi_calls, 2);  // one per prolog
}

TEST_F(PrologTest, EpilogStopsExactlyThisJobsRecordsOnThisNode) {
  auto mine = run_job_prolog(d.services, cfg, job, JobRequest{}).started;
  auto other_job = run_job_prolog(d.services, cfg, context("999", "n1", "1"), JobRequest{}).started;
  auto other_node = run_job_prolog(d.services, cfg, context("1234", "n2", "0"), JobRequest{}).started;
  ASSERT_EQ(mine.size(), 2u);
  ASSERT_EQ(other_job.size(), 1u);
  ASSERT_EQ(other_node.size(), 1u);
  EXPECT_EQ(other_node[0].gpu_uuids, (std::vector<std::string>{test::kUuid1}));  // n2: GRES 0 -> nvidia0 -> index 1

  EpilogOutcome out = run_job_epilog(d.services, cfg, job);
  EXPECT_TRUE(out.ok());
  EXPECT_TRUE(out.errors.empty());
  ASSERT_EQ(out.stopped.size(), 2u);
  for (const auto& s : out.stopped) EXPECT_EQ(s.outcome, StopOutcome::kQuit) << s.name;
  EXPECT_FALSE(d.proc.alive(mine[0].pid));
  EXPECT_FALSE(d.proc.alive(mine[1].pid));
  EXPECT_TRUE(d.proc.alive(other_job[0].pid));
  EXPECT_TRUE(d.proc.alive(other_node[0].pid));
  EXPECT_EQ(record_files(), (std::vector<std::string>{"job1234.n2.gpu0.json", "job999.n1.gpu1.json"}));
  EXPECT_EQ(run_entries(), (std::vector<std::string>{"1234.0.PCa", "999.1.8KO"}));

  // Idempotent.
  EpilogOutcome again = run_job_epilog(d.services, cfg, job);
  EXPECT_TRUE(again.ok());
  EXPECT_TRUE(again.stopped.empty());
  EXPECT_EQ(record_files().size(), 2u);
}

// Records and entries of the earlier layout (the entry named like the
// record: run_dir/job<ID>.<node>.gpuN, as code before job_run_entry wrote
// them for jobs still running at an upgrade): the task path trusts the
// record, and the epilog stops the recorded daemon and the orphaned one and
// removes everything.
TEST_F(PrologTest, RecordsAndEntriesOfTheEarlierLayoutAreTrustedAndCleaned) {
  RecordStore store = slurm_record_store(cfg);
  std::vector<DaemonRecord> legacy;
  for (int gres : {0, 2}) {
    StartRequest sr;
    sr.name = job_daemon_name("1234", "n1", "gpu" + std::to_string(gres));
    sr.uid = test::kOtherUid;
    sr.gid = test::kOtherGid;
    sr.host = "n1";
    sr.topology_mode = TopologyMode::kPerGpu;
    sr.gpu_uuids = {gres == 0 ? test::kUuid2 : test::kUuid1};
    sr.base_directory = cfg.run_dir;  // no directory_name: the entry is the record's name
    sr.job_id = "1234";
    sr.slurm = SlurmBinding{"1234", "n1", JobMode::kAuto, {gres}, {}};
    sr.start_timeout = 5s;
    legacy.push_back(start_daemon(d.services, cfg.tools, store, sr));
  }
  ASSERT_EQ(legacy[0].pipe_directory, cfg.run_dir + "/job1234.n1.gpu0/pipe");
  std::vector<std::string> problems;
  EXPECT_EQ(job_records(store, "1234", "n1", test::kOtherUid, &problems, cfg.run_dir).size(), 2u);
  EXPECT_TRUE(problems.empty()) << join(problems, "\n");
  store.remove(legacy[1].name);  // gpu2: an orphaned entry of the earlier layout

  EpilogOutcome out = run_job_epilog(d.services, cfg, job);
  EXPECT_TRUE(out.ok()) << join(out.errors, "\n");
  EXPECT_FALSE(d.proc.alive(legacy[0].pid));
  EXPECT_FALSE(d.proc.alive(legacy[1].pid));
  EXPECT_NE(join(out.warnings, "\n").find(cfg.run_dir + "/job1234.n1.gpu2 of job 1234 (no record)"), std::string::npos)
      << join(out.warnings, "\n");
  EXPECT_TRUE(record_files().empty());
  EXPECT_TRUE(run_entries().empty());
}

TEST_F(PrologTest, EpilogWithoutAStateDirIsFine) {
  EpilogOutcome out = run_job_epilog(d.services, cfg, job);
  EXPECT_TRUE(out.ok());
  EXPECT_TRUE(out.stopped.empty());
  EXPECT_TRUE(out.warnings.empty());
  EXPECT_TRUE(d.runner.commands.empty());
  EXPECT_FALSE(exists(cfg.state_dir));
}

TEST_F(PrologTest, EpilogCleansStaleRecordsWithAWarning) {
  auto mine = run_job_prolog(d.services, cfg, job, JobRequest{}).started;
  d.proc.kill(mine[0].pid);  // crashed daemon
  EpilogOutcome out = run_job_epilog(d.services, cfg, job);
  EXPECT_TRUE(out.ok());
  ASSERT_EQ(out.stopped.size(), 2u);
  std::map<std::string, StopOutcome> outcomes;
  for (const auto& s : out.stopped) outcomes[s.name] = s.outcome;
  EXPECT_EQ(outcomes["job1234.n1.gpu0"], StopOutcome::kStale);
  EXPECT_EQ(outcomes["job1234.n1.gpu2"], StopOutcome::kQuit);
  EXPECT_FALSE(out.warnings.empty());
  EXPECT_TRUE(record_files().empty());
  EXPECT_TRUE(run_entries().empty());
}

TEST_F(PrologTest, EpilogReportsADaemonThatSurvivesAndKeepsItsRecord) {
  auto mine = run_job_prolog(d.services, cfg, job, JobRequest{}).started;
  d.host.quit_ends_daemon = false;
  d.signaller.lethal = {};
  EpilogOutcome out = run_job_epilog(d.services, cfg, job);
  EXPECT_FALSE(out.ok());
  EXPECT_EQ(out.errors.size(), 2u);
  EXPECT_EQ(record_files().size(), 2u);
}

TEST_F(PrologTest, EpilogWarnsAboutThisJobsCorruptRecordsOnly) {
  run_job_prolog(d.services, cfg, job, JobRequest{});
  test::write_text(cfg.state_dir + "/job1234.n1.gpu9.json", "{", 0644);
  test::write_text(cfg.state_dir + "/job5.n1.gpu0.json", "{", 0644);
  EpilogOutcome out = run_job_epilog(d.services, cfg, job);
  EXPECT_TRUE(out.ok());
  EXPECT_EQ(out.stopped.size(), 2u);
  ASSERT_EQ(out.warnings.size(), 1u);
  EXPECT_NE(out.warnings[0].find("job1234.n1.gpu9.json"), std::string::npos) << out.warnings[0];
}

TEST_F(PrologTest, EpilogRefusesAnUntrustedStateDir) {
  auto mine = run_job_prolog(d.services, cfg, job, JobRequest{}).started;
  chmod(cfg.state_dir.c_str(), 0777);
  EpilogOutcome out = run_job_epilog(d.services, cfg, job);
  EXPECT_FALSE(out.ok());
  EXPECT_TRUE(out.stopped.empty());
  EXPECT_TRUE(d.proc.alive(mine[0].pid));
}

// Issue #10 (b): a record naming another directory than run_dir/<name> is
// reported and nothing it names is removed or signalled, even when the file
// itself passes (root's, 0644) and every other field agrees.
TEST_F(PrologTest, EpilogNeverRemovesOrSignalsWhatAForeignOwnedDirectoryRecordNames) {
  auto mine = run_job_prolog(d.services, cfg, job, JobRequest{}).started;
  ASSERT_EQ(mine.size(), 2u);
  test::make_dir(tmp / "rootdir", 0755);
  test::write_text(tmp / "rootdir/precious", "root's");
  DaemonRecord planted = mine[0];
  planted.owned_directories = {tmp / "rootdir"};
  test::write_text(cfg.state_dir + "/" + planted.name + ".json", planted.to_json().dump(), 0644);
  DaemonRecord piped = mine[1];
  piped.pipe_directory = tmp / "rootdir";
  test::write_text(cfg.state_dir + "/" + piped.name + ".json", piped.to_json().dump(), 0644);
  const size_t signals_before = d.signaller.requests.size();

  EpilogOutcome out = run_job_epilog(d.services, cfg, job);
  EXPECT_EQ(test::read_text(tmp / "rootdir/precious"), "root's");
  std::string all = join(out.warnings, "\n");
  EXPECT_NE(all.find("owned_directories [" + tmp.path() + "/rootdir] are not exactly " + cfg.run_dir + "/1234.0.8KO"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("pipe/log directories " + tmp.path() + "/rootdir"), std::string::npos) << all;
  // The daemons were found the prolog's way (run-dir entry, pid file + /proc), never through the planted records.
  for (const auto& [pid, sig] : d.signaller.requests) {
    (void)sig;
    EXPECT_TRUE(pid == mine[0].pid || pid == mine[1].pid) << pid;
  }
  (void)signals_before;
  EXPECT_TRUE(record_files().empty());
  EXPECT_TRUE(run_entries().empty());
}

// Issue #10 (b): a user's own file in the state dir is never a record.
TEST_F(PrologTest, EpilogIgnoresARecordFileTheUserOwns) {
  run_job_prolog(d.services, cfg, job, JobRequest{});
  test::make_dir(tmp / "rootdir", 0755);
  test::write_text(tmp / "rootdir/precious", "root's");
  DaemonRecord planted = job_records(*std::make_unique<RecordStore>(slurm_record_store(cfg)), "1234", "n1", job.uid)[0];
  planted.name = "job1234.n1.gpu3";
  planted.owned_directories = {tmp / "rootdir"};
  const std::string file = cfg.state_dir + "/job1234.n1.gpu3.json";
  test::write_text(file, planted.to_json().dump(), 0644);
  ASSERT_EQ(chown(file.c_str(), job.uid, job.gid), 0);
  EpilogOutcome out = run_job_epilog(d.services, cfg, job);
  EXPECT_EQ(test::read_text(tmp / "rootdir/precious"), "root's");
  std::string all = join(out.warnings, "\n");
  EXPECT_NE(all.find("owned by uid 65534, not uid 0"), std::string::npos) << all;
  // Group-writable (a root file anyone in the group could have rewritten): refused too.
  test::write_text(file, planted.to_json().dump(), 0664);
  ASSERT_EQ(chown(file.c_str(), 0, 0), 0);
  out = run_job_epilog(d.services, cfg, job);
  EXPECT_NE(join(out.warnings, "\n").find("writable by group or others"), std::string::npos) << join(out.warnings, "\n");
  EXPECT_EQ(test::read_text(tmp / "rootdir/precious"), "root's");
}

// Issue #10 (b): `state_dir=` or `run_dir=` made 1777 (root-owned, sticky):
// refused with the reason, nothing acted on.
TEST_F(PrologTest, AStickyWorldWritableStateOrRunDirIsRefused) {
  auto mine = run_job_prolog(d.services, cfg, job, JobRequest{}).started;
  ASSERT_EQ(chmod(cfg.state_dir.c_str(), 01777), 0);
  EpilogOutcome out = run_job_epilog(d.services, cfg, job);
  EXPECT_FALSE(out.ok());
  ASSERT_FALSE(out.errors.empty());
  EXPECT_NE(out.errors[0].find("sticky is not enough"), std::string::npos) << out.errors[0];
  EXPECT_TRUE(out.stopped.empty());
  EXPECT_TRUE(d.proc.alive(mine[0].pid));
  EXPECT_THROW(run_job_prolog(d.services, cfg, context("55", "n1", "1"), JobRequest{}), CudaMpsError);

  ASSERT_EQ(chmod(cfg.state_dir.c_str(), 0755), 0);
  ASSERT_EQ(chmod(cfg.run_dir.c_str(), 01777), 0);
  out = run_job_epilog(d.services, cfg, job);
  EXPECT_FALSE(out.ok());
  EXPECT_NE(join(out.errors, "\n").find(cfg.run_dir), std::string::npos) << join(out.errors, "\n");
  std::string e = error_of([&] { run_job_prolog(d.services, cfg, context("56", "n1", "1"), JobRequest{}); });
  EXPECT_NE(e.find("sticky is not enough"), std::string::npos) << e;
}

}  // namespace
}  // namespace unilab::mps
