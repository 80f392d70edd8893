// Each row of the `doctor --node` table, run alone over hand-built facts.
#include <set>
#include <stdexcept>

#include <gtest/gtest.h>

#include "common/mps/check_status.hpp"
#include "common/slurm/job.hpp"
#include "common/slurm/node_doctor.hpp"
#include "common/slurm/slurm_series.hpp"
#include "tests/unit/doubles.hpp"

namespace unilab::mps {
namespace {

FileFacts dir(uid_t uid, mode_t mode) {
  FileFacts f;
  f.exists = f.is_dir = true;
  f.uid = uid;
  f.mode = mode;
  return f;
}

// The facts of a ready node, written out by hand (no gather step).
NodeFacts ready_facts() {
  NodeFacts f;
  f.host = "host2";
  f.node = "gpu02";
  f.node_candidates = {"gpu02"};
  f.conf.path = "/etc/slurm/slurm.conf";
  f.conf.files = {"/etc/slurm/slurm.conf"};
  f.plugstack_path = "/etc/slurm/plugstack.conf";
  f.plugin_dirs = {"/usr/lib/slurm"};
  f.stack.files = {"/etc/slurm/plugstack.conf"};
  PlugstackEntry e;
  e.file = "/etc/slurm/plugstack.conf";
  e.line = 1;
  e.kind = "optional";
  e.path = "unilab_mps.so";
  e.resolved = "/usr/lib/slurm/unilab_mps.so";
  f.stack.entries = {e};
  f.plugin_lines = {e};
  FileFacts so;
  so.exists = so.is_regular = true;
  so.mode = 0644;
  f.plugin_file = so;
  f.plugin_config = PluginConfig{};
  f.slurmd_pid_file = "/run/slurmd.pid";
  f.slurmd_pid_text = "42\n";
  f.slurmd_pid = 42;
  f.slurmd_name = "slurmd";
  f.slurmd_started = 1000;
  f.slurmd_exe = "/usr/sbin/slurmd";
  f.slurm_version = parse_slurm_version("slurm 22.05.8\n");
  f.state_dir_chain = {{"/", dir(0, 0755)}, {"/run", dir(0, 0755)}, {"/run/unilab-mps", dir(0, 0755)}};
  f.run_dir_chain = {{"/", dir(0, 0755)}, {"/run", dir(0, 0755)}, {"/run/unilab-mps", dir(0, 0755)},
                     {"/run/unilab-mps/run", dir(0, 0755)}};
  f.history_dir_chain = {{"/", dir(0, 0755)}, {"/var", dir(0, 0755)}, {"/var/log", dir(0, 0755)},
                         {"/var/log/unilab-mps", dir(0, 0755)}};
  f.history_dir_chain.back().facts.free_bytes = 1ULL << 30;
  f.history_file = FileFacts{};
  f.history_file.exists = f.history_file.is_regular = true;
  f.history_file.mode = 0644;
  f.history_file.nlink = 1;
  f.history_file.size = 100 << 10;
  f.nvidia_smi_executable = f.mps_control_executable = true;
  f.gpus = test::four_gpus();
  for (auto& g : *f.gpus) g.compute_mode = "Exclusive_Process";  // as NVIDIA recommends for MPS
  f.nvidia.tools = f.config.tools;
  f.nvidia.nvidia_smi_executable = true;
  f.nvidia.discovery = GpuDiscovery{*f.gpus, std::nullopt};
  f.gres_path = "/etc/slurm/gres.conf";
  f.gres = GresConf{};
  f.gres->gpus = {{{"/dev/nvidia2"}, ""}};
  for (const auto& g : *f.gpus) {
    GresGpuMapping m;
    m.gres_index = static_cast<int>(f.gpu_entries.size());
    m.device = "/dev/nvidia" + std::to_string(g.minor_number);
    m.minor = g.minor_number;
    m.gpu = g;
    f.gpu_entries.push_back(m);
  }
  f.cgroup_v1_mounted = true;
  return f;
}

const NodeCheck& row(const std::string& id) {
  for (const auto& r : node_checks()) {
    if (r.id == id) return r;
  }
  throw std::runtime_error("no row " + id);
}

CheckResult run_check(const std::string& id, const NodeFacts& f) {
  auto r = row(id).run(f);
  if (!r) return {CheckStatus::kSkip, "<no line>"};
  return *r;
}

bool has(const CheckResult& r, const std::string& text) { return r.detail.find(text) != std::string::npos; }

TEST(CheckStatusTest, OneStringTableBothWays) {
  for (auto s : {CheckStatus::kOk, CheckStatus::kWarn, CheckStatus::kFail, CheckStatus::kSkip}) {
    EXPECT_EQ(check_status_from_string(to_string(s)), s) << to_string(s);
  }
  EXPECT_EQ(to_string(CheckStatus::kOk), "ok");
  EXPECT_EQ(to_string(CheckStatus::kWarn), "warn");
  EXPECT_EQ(to_string(CheckStatus::kFail), "fail");
  EXPECT_EQ(to_string(CheckStatus::kSkip), "skip");
  EXPECT_EQ(check_status_from_string("pass"), std::nullopt);
  DoctorCheck c{"x", CheckStatus::kFail, "d"};
  EXPECT_EQ(c.to_json()["status"], "fail");
}

TEST(NodeChecksTest, EveryRowPassesOnAReadyNode) {
  const NodeFacts f = ready_facts();
  for (const auto& r : node_checks()) {
    auto res = r.run(f);
    if (res) {
      EXPECT_EQ(res->status, CheckStatus::kOk) << r.id << ": " << res->detail;
    }
  }
}

TEST(NodeChecksTest, TableIdsAreUniqueAndDependOnEarlierRows) {
  std::set<std::string> seen;
  for (const auto& r : node_checks()) {
    for (const char* dep : r.depends_on) {
      if (dep) {
        EXPECT_TRUE(seen.count(dep)) << r.id << " needs " << dep << ", which is not an earlier row";
      }
    }
    EXPECT_TRUE(seen.insert(r.id).second) << r.id;
  }
}

TEST(NodeChecksTest, SlurmConf) {
  NodeFacts f = ready_facts();
  f.conf_error = "cannot read /etc/slurm/slurm.conf; set SLURM_CONF or --slurm-conf";
  EXPECT_EQ(run_check("slurm.conf", f).status, CheckStatus::kFail);
  f = ready_facts();
  f.conf.problems = {"/etc/slurm/x.conf: cannot read this included file"};
  EXPECT_EQ(run_check("slurm.conf", f).status, CheckStatus::kWarn);
}

TEST(NodeChecksTest, SlurmConfFromTheConfiglessCache) {
  NodeFacts f = ready_facts();
  f.options.slurm_conf_location = SlurmConfLocation{"/run/slurm/conf/slurm.conf", "configless cache", "/var/spool/slurmd/conf-cache", ""};
  f.conf.files = {"/run/slurm/conf/slurm.conf"};
  f.plugstack_path = "/run/slurm/conf/plugstack.conf";
  f.stack.files = {"/run/slurm/conf/plugstack.conf"};
  CheckResult r = run_check("slurm.conf", f);
  EXPECT_EQ(r.status, CheckStatus::kOk);
  EXPECT_TRUE(has(r, "configless cache: /run/slurm/conf -> /var/spool/slurmd/conf-cache")) << r.detail;
  EXPECT_EQ(run_check("plugstack", f).status, CheckStatus::kOk);
  // An absolute PlugStackConfig is read on the node as it is, not from the cache.
  f.conf.values["plugstackconfig"] = f.plugstack_path = "/etc/slurm/plugstack.conf";
  f.stack.files = {"/etc/slurm/plugstack.conf"};
  r = run_check("plugstack", f);
  EXPECT_EQ(r.status, CheckStatus::kWarn);
  EXPECT_TRUE(has(r, "PlugStackConfig=/etc/slurm/plugstack.conf is read on this node as it is")) << r.detail;
  f.stack.files.clear();
  r = run_check("plugstack", f);
  EXPECT_EQ(r.status, CheckStatus::kFail);
  EXPECT_TRUE(has(r, "not from the files slurmctld ships")) << r.detail;
  // slurmd rewrites its cache at every reconfigure: a newer cached
  // plugstack.conf is a warning there, a newer plugin file still a failure.
  f.conf.values.erase("plugstackconfig");
  f.watched = {{"/run/slurm/conf/plugstack.conf", {}}};
  f.watched[0].facts.exists = true;
  f.watched[0].facts.mtime = *f.slurmd_started + 60;
  r = run_check("slurmd", f);
  EXPECT_EQ(r.status, CheckStatus::kWarn);
  EXPECT_TRUE(has(r, "slurmd rewrote its configless cache since")) << r.detail;
  f.watched.push_back({"/usr/lib/slurm/unilab_mps.so", f.watched[0].facts});
  EXPECT_EQ(run_check("slurmd", f).status, CheckStatus::kFail);
  // Not configless: the same PlugStackConfig is just the file to read.
  f = ready_facts();
  f.conf.values["plugstackconfig"] = "/etc/slurm/plugstack.conf";
  EXPECT_EQ(run_check("plugstack", f).status, CheckStatus::kOk);
}

TEST(NodeChecksTest, Node) {
  NodeFacts f = ready_facts();
  f.node_candidates = {"a", "b"};
  EXPECT_TRUE(has(run_check("node", f), "several Slurm nodes (a,b)"));
  f.node_candidates.clear();
  EXPECT_EQ(run_check("node", f).status, CheckStatus::kWarn);
  f.options.node = "gpu02";
  EXPECT_TRUE(has(run_check("node", f), "(given)"));
}

TEST(NodeChecksTest, PlugstackAndPluginLine) {
  NodeFacts f = ready_facts();
  f.stack.problems = {"x:3: 'bogus' is not required"};
  EXPECT_EQ(run_check("plugstack", f).status, CheckStatus::kWarn);
  f.stack.files.clear();
  EXPECT_EQ(run_check("plugstack", f).status, CheckStatus::kFail);
  f = ready_facts();
  f.plugin_lines.push_back(f.plugin_lines.front());
  EXPECT_TRUE(has(run_check("plugin-listed", f), "listed 2 times"));
  f.plugin_lines.clear();
  EXPECT_EQ(run_check("plugin-listed", f).status, CheckStatus::kFail);
  EXPECT_EQ(row("plugin-file").run(f), std::nullopt);  // no line: nothing to look at
  EXPECT_EQ(row("plugin-args").run(f), std::nullopt);
}

TEST(NodeChecksTest, PluginFileAndArgs) {
  NodeFacts f = ready_facts();
  f.plugin_file->mode = 0664;
  EXPECT_EQ(run_check("plugin-file", f).status, CheckStatus::kFail);
  f.plugin_file->mode = 0644;
  f.plugin_file->uid = 1000;
  EXPECT_TRUE(has(run_check("plugin-file", f), "owned by uid 1000"));
  f.plugin_lines.front().resolved.clear();
  EXPECT_TRUE(has(run_check("plugin-file", f), "not in PluginDir (/usr/lib/slurm)"));
  f = ready_facts();
  f.plugin_config.reset();
  f.plugin_args_error = "unknown plugin argument 'colour'";
  EXPECT_TRUE(has(run_check("plugin-args", f), "unknown plugin argument 'colour'"));
}

TEST(NodeChecksTest, Slurmd) {
  NodeFacts f = ready_facts();
  f.watched = {{"/etc/slurm/plugstack.conf", FileFacts{true, false, false, true, 0, 0644, 1100}}};
  EXPECT_TRUE(has(run_check("slurmd", f), "restart slurmd"));
  f.watched.front().facts.mtime = 1000.05;  // within the clock-tick slack
  EXPECT_EQ(run_check("slurmd", f).status, CheckStatus::kOk);
  f.slurmd_name = "bash";
  EXPECT_TRUE(has(run_check("slurmd", f), "pid 42 (bash)"));
  f.slurmd_pid_text.reset();
  EXPECT_TRUE(has(run_check("slurmd", f), "no pid file /run/slurmd.pid"));
}

TEST(NodeChecksTest, SlurmVersion) {
  NodeFacts f = ready_facts();
  EXPECT_TRUE(has(run_check("slurm-version", f), "Slurm 22.05.8 (series 22.05) from /usr/sbin/slurmd -V"));
  f.slurm_version.reset();
  f.slurmd_version_output = "slurmd: error: x\nmore";
  EXPECT_TRUE(has(run_check("slurm-version", f), "said 'slurmd: error: x'"));
  EXPECT_EQ(run_check("slurm-version", f).status, CheckStatus::kWarn);
  f.slurmd_exe.reset();  // slurmd not running, or its /proc/PID/exe not readable (not root)
  EXPECT_EQ(run_check("slurm-version", f).status, CheckStatus::kWarn);
  EXPECT_TRUE(has(run_check("slurm-version", f), "no running slurmd to ask"));
}

TEST(NodeChecksTest, StateAndRunDirUseThePluginsTrustRule) {
  NodeFacts f = ready_facts();
  f.state_dir_chain[1].facts.mode = 0775;
  EXPECT_TRUE(has(run_check("state-dir", f), "refusing /run: writable by group or others"));
  f = ready_facts();
  f.run_dir_chain[3].facts.uid = 1000;
  EXPECT_TRUE(has(run_check("run-dir", f), "owned by uid 1000, expected root;"));
  f = ready_facts();
  f.state_dir_chain[1].facts = dir(0, 01777);  // a root-owned sticky ancestor is fine, a sticky leaf is not
  EXPECT_EQ(run_check("state-dir", f).status, CheckStatus::kOk);
  f.state_dir_chain[2].facts = dir(0, 01777);
  EXPECT_EQ(run_check("state-dir", f).status, CheckStatus::kFail);
  f = ready_facts();
  f.state_dir_chain[2].facts.mode = 0700;
  EXPECT_TRUE(has(run_check("state-dir", f), "must traverse it"));
  f.state_dir_chain[2].facts = FileFacts{};
  EXPECT_TRUE(has(run_check("state-dir", f), "does not exist yet"));
}

TEST(NodeChecksTest, HistoryIsRootsAndBounded) {
  NodeFacts f = ready_facts();
  CheckResult r = run_check("history", f);
  EXPECT_EQ(r.status, CheckStatus::kOk) << r.detail;
  EXPECT_TRUE(has(r, "/var/log/unilab-mps/history.jsonl: 100 KiB of history_max=4096 KiB (rotated: 0 KiB); at most 8192 KiB on disk"))
      << r.detail;
  f.plugin_config->history.reset();
  f.config.history.reset();
  EXPECT_TRUE(has(run_check("history", f), "history=off"));
  f = ready_facts();
  f.history_dir_chain[3].facts.mode = 0777;
  EXPECT_EQ(run_check("history", f).status, CheckStatus::kFail);
  f = ready_facts();
  f.history_file.uid = 1000;
  EXPECT_TRUE(has(run_check("history", f), "is not root's own file (uid 1000"));
  f = ready_facts();
  f.history_rotated = f.history_file;
  f.history_rotated.is_symlink = true;
  EXPECT_TRUE(has(run_check("history", f), "history.jsonl.1 is a symlink"));
  f = ready_facts();
  f.history_file.nlink = 2;
  EXPECT_EQ(run_check("history", f).status, CheckStatus::kFail) << "a hard link to another file";
  f = ready_facts();
  f.history_dir_chain.back().facts.read_only_fs = true;
  EXPECT_TRUE(has(run_check("history", f), "read-only file system"));
  f = ready_facts();
  f.history_file.size = 40ULL << 20;
  r = run_check("history", f);
  EXPECT_EQ(r.status, CheckStatus::kWarn);
  EXPECT_TRUE(has(r, "larger than history_max=")) << r.detail;
  f = ready_facts();
  f.history_dir_chain.back().facts.free_bytes = 1 << 20;
  r = run_check("history", f);
  EXPECT_EQ(r.status, CheckStatus::kWarn);
  EXPECT_TRUE(has(r, "only 1024 KiB free")) << r.detail;
  f = ready_facts();
  f.history_dir_chain.pop_back();
  f.history_dir_chain.push_back({"/var/log/unilab-mps", FileFacts{}});
  EXPECT_TRUE(has(run_check("history", f), "the first MPS job's epilog creates it"));
}

TEST(NodeChecksTest, Tools) {
  NodeFacts f = ready_facts();
  f.gpus.reset();
  f.nvidia.discovery.reset();
  f.gpus_error = "nvidia-smi failed";
  f.nvidia.discovery_error = "nvidia-smi failed";
  EXPECT_EQ(run_check("nvidia-smi", f).status, CheckStatus::kFail);
  EXPECT_TRUE(has(run_check("nvidia-smi", f), "nvidia-smi failed"));
  f.nvidia.nvidia_smi_executable = f.nvidia_smi_executable = false;
  EXPECT_TRUE(has(run_check("nvidia-smi", f), "missing or not executable"));
  f.mps_control_executable = false;
  EXPECT_EQ(run_check("mps-control", f).status, CheckStatus::kFail);
  f.plugin_config.reset();
  EXPECT_TRUE(has(run_check("mps-control", f), "(plugin default"));
}

TEST(NodeChecksTest, GresAndGpuMap) {
  NodeFacts f = ready_facts();
  f.gpu_entries[1].gpu = f.gpu_entries[0].gpu;
  EXPECT_TRUE(has(run_check("gpu-map", f), "GRES 0,1 are the same GPU"));
  EXPECT_TRUE(has(run_check("gpu-unlisted", f), (*f.gpus)[1].uuid));
  f = ready_facts();
  f.gpu_entries[2].gpu.reset();
  f.gpu_entries[2].problem = "minor 3 matches no GPU";
  EXPECT_TRUE(has(run_check("gpu-map", f), "1 of 4 GPU(s)"));
  f.gpu_entries.clear();
  EXPECT_TRUE(has(run_check("gpu-map", f), "no GPU for node gpu02"));
  f.gres.reset();
  f.gres_error = "cannot read /etc/slurm/gres.conf; set gres_conf= in plugstack.conf";
  EXPECT_EQ(run_check("gres.conf", f).status, CheckStatus::kFail);
  EXPECT_EQ(run_check("gres.conf", f).detail, f.gres_error);
}

TEST(NodeChecksTest, DefaultPipeDevShmPrologHelper) {
  NodeFacts f = ready_facts();
  f.default_pipe = SocketState::kListening;
  EXPECT_EQ(run_check("default-pipe", f).status, CheckStatus::kFail);
  f.default_pipe = SocketState::kRefused;
  EXPECT_EQ(run_check("default-pipe", f).status, CheckStatus::kWarn);
  f.conf.values["jobcontainertype"] = "job_container/tmpfs";
  EXPECT_TRUE(has(run_check("dev-shm", f), "(Slurm 22.05 always does)"));
  f.job_container_dirs = "/tmp";
  EXPECT_EQ(run_check("dev-shm", f).status, CheckStatus::kOk);
  EXPECT_EQ(row("prolog-helper").run(f), std::nullopt);
  f.conf.values["prolog"] = "/usr/sbin/unilab-mps-prolog";
  EXPECT_EQ(run_check("prolog-helper", f).status, CheckStatus::kWarn);
}

// PrologFlags=RunInJob: Slurm calls no SPANK job_prolog/job_epilog, so both
// helpers must be configured, directly or through a wrapper script.
TEST(NodeChecksTest, RunInJobNeedsBothHelpers) {
  NodeFacts f = ready_facts();
  f.slurm_version = parse_slurm_version("slurm 24.11.5\n");
  f.conf.values["prologflags"] = "RunInJob";
  CheckResult r = run_check("prolog-helper", f);
  EXPECT_EQ(r.status, CheckStatus::kFail);
  EXPECT_TRUE(has(r, "Prolog= (unilab-mps-prolog) and Epilog= (unilab-mps-epilog)")) << r.detail;
  f.conf.values["prolog"] = "/etc/slurm/prolog.sh";
  f.prolog_script = "#!/bin/sh\nexec /usr/sbin/unilab-mps-prolog --config /etc/slurm/unilab-mps.args\n";
  r = run_check("prolog-helper", f);
  EXPECT_EQ(r.status, CheckStatus::kFail);
  EXPECT_FALSE(has(r, "Prolog= (unilab-mps-prolog)")) << r.detail;
  EXPECT_TRUE(has(r, "Epilog= (unilab-mps-epilog)")) << r.detail;
  f.conf.values["epilog"] = "/usr/sbin/unilab-mps-epilog";
  EXPECT_EQ(run_check("prolog-helper", f).status, CheckStatus::kOk);
  // The same helpers without RunInJob: the prolog helper doubles the plugin's.
  f.conf.values["prologflags"] = "Contain";
  EXPECT_EQ(run_check("prolog-helper", f).status, CheckStatus::kWarn);
  f.plugin_lines.clear();
  EXPECT_EQ(row("prolog-helper").run(f), std::nullopt);
}

// ------------------------------------------------------------ root cause once

TEST(RunNodeChecksTest, AFailedOrSkippedDependencySkipsTheRow) {
  static int runs = 0;
  const std::vector<NodeCheck> table = {
      {"a", {}, [](const NodeFacts&) -> std::optional<CheckResult> { return CheckResult{CheckStatus::kFail, "broken"}; }},
      {"b", {"a"}, [](const NodeFacts&) -> std::optional<CheckResult> { ++runs; return CheckResult{}; }},
      {"c", {"b"}, [](const NodeFacts&) -> std::optional<CheckResult> { ++runs; return CheckResult{}; }},
      {"n", {}, [](const NodeFacts&) -> std::optional<CheckResult> { return std::nullopt; }},
      {"d", {"n"}, [](const NodeFacts&) -> std::optional<CheckResult> { return CheckResult{CheckStatus::kWarn, "w"}; }},
      {"e", {"n", "d"}, [](const NodeFacts&) -> std::optional<CheckResult> { return CheckResult{}; }},
  };
  auto out = run_node_checks(NodeFacts{}, table);
  ASSERT_EQ(out.size(), 5u);  // n wrote no line
  EXPECT_EQ(runs, 0);
  EXPECT_EQ(out[1].status, CheckStatus::kSkip);
  EXPECT_EQ(out[1].detail, "skipped: needs a");
  EXPECT_EQ(out[2].detail, "skipped: needs b");
  EXPECT_EQ(out[3].status, CheckStatus::kWarn);  // a dependency without a line does not stop a row
  EXPECT_EQ(out[4].status, CheckStatus::kOk);    // nor does a warning
}

// ------------------------------------------------------------ Slurm series

TEST(SlurmVersionTest, ParsesWhatSlurmdPrints) {
  auto v = parse_slurm_version("slurm 22.05.8\n");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->series(), "22.05");
  EXPECT_EQ(v->to_string(), "22.05.8");
  v = parse_slurm_version("slurm-wlm 24.11.5\n");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->to_string(), "24.11.5");
  EXPECT_TRUE(parse_slurm_version("slurm 24.05.0-0rc1"));
  EXPECT_FALSE(parse_slurm_version("slurmd: error: cannot read config"));
  EXPECT_FALSE(parse_slurm_version("bash 5.1.16"));
  EXPECT_FALSE(parse_slurm_version("slurm 24"));
  EXPECT_FALSE(has_run_in_job(*parse_slurm_version("slurm 23.11.10")));
  EXPECT_TRUE(has_run_in_job(*parse_slurm_version("slurm 24.05.0")));
  EXPECT_FALSE(has_cgroup_v2_plugin(*parse_slurm_version("slurm 21.08.8")));
  EXPECT_TRUE(has_cgroup_v2_plugin(*parse_slurm_version("slurm 22.05.0")));
  EXPECT_FALSE(has_cgroup_plugin_disabled(*parse_slurm_version("slurm 23.11.1")));
  EXPECT_TRUE(has_cgroup_plugin_disabled(*parse_slurm_version("slurm 24.11.5")));
}

NodeFacts on_series(const char* version) {
  NodeFacts f = ready_facts();
  f.slurm_version = parse_slurm_version(version);
  return f;
}

TEST(SlurmSeriesChecksTest, PrologFlagsRunInJob) {
  NodeFacts f = on_series("slurm 22.05.8");
  f.conf.values["prologflags"] = "Contain";
  EXPECT_TRUE(has(run_check("prolog-flags", f), "daemons start on every node at allocation"));  // Contain implies Alloc
  f.conf.values["prologflags"] = "RunInJob";
  CheckResult r = run_check("prolog-flags", f);
  EXPECT_EQ(r.status, CheckStatus::kFail);
  EXPECT_TRUE(has(r, "RunInJob exists from Slurm 24.05 on, and Slurm 22.05.8 stops with 'PrologFlags invalid'")) << r.detail;
  // 24.05 to 25.05: Slurm's multi-node GRES bug with RunInJob (fixed in 25.11.0).
  f = on_series("slurm 24.11.5");
  f.conf.values["prologflags"] = "RunInJob";
  r = run_check("prolog-flags", f);
  EXPECT_EQ(r.status, CheckStatus::kWarn);
  EXPECT_TRUE(has(r, "multi-node --unilab-mps jobs fail there")) << r.detail;
  EXPECT_TRUE(has(r, "; and the extern step can start the Epilog as the job's user")) << r.detail;
  // 24.05: the multi-node bug only (its x11 cleanup runs for x11 jobs only).
  f = on_series("slurm 24.05.8");
  f.conf.values["prologflags"] = "RunInJob";
  r = run_check("prolog-flags", f);
  EXPECT_EQ(r.status, CheckStatus::kWarn);
  EXPECT_TRUE(has(r, "multi-node --unilab-mps jobs fail there")) << r.detail;
  EXPECT_FALSE(has(r, "as the job's user")) << r.detail;
  // 25.11.0 to 25.11.3: the user-epilog race only.
  for (const char* v : {"slurm 25.11.0", "slurm 25.11.3"}) {
    f = on_series(v);
    f.conf.values["prologflags"] = "RunInJob";
    r = run_check("prolog-flags", f);
    EXPECT_EQ(r.status, CheckStatus::kWarn) << v;
    EXPECT_TRUE(has(r, "can start the Epilog as the job's user (its x11 cleanup races the fork; fixed in 25.11.4)")) << r.detail;
    EXPECT_FALSE(has(r, "multi-node")) << r.detail;
  }
  for (const char* v : {"slurm 25.11.4", "slurm 26.05.0"}) {
    f = on_series(v);
    f.conf.values["prologflags"] = "RunInJob";
    EXPECT_EQ(run_check("prolog-flags", f).status, CheckStatus::kOk) << v;
  }
  // x11 jobs: 25.11.4 to 25.11.7 carry half of the fix; 26.05.0 all of it.
  for (const char* v : {"slurm 25.11.4", "slurm 25.11.7"}) {
    f = on_series(v);
    f.conf.values["prologflags"] = "RunInJob,X11";
    r = run_check("prolog-flags", f);
    EXPECT_EQ(r.status, CheckStatus::kWarn) << v;
    EXPECT_TRUE(has(r, "the extern step of an x11 job can still start the Epilog as the job's user")) << r.detail;
    EXPECT_TRUE(has(r, "upgrade to 26.05.0")) << r.detail;
  }
  f = on_series("slurm 26.05.0");
  f.conf.values["prologflags"] = "RunInJob,X11";
  EXPECT_EQ(run_check("prolog-flags", f).status, CheckStatus::kOk);
  f.slurm_version.reset();  // unknown release: no guess
  EXPECT_EQ(run_check("prolog-flags", f).status, CheckStatus::kOk);
}

TEST(SlurmSeriesChecksTest, CgroupPlugin) {
  NodeFacts f = on_series("slurm 22.05.8");
  EXPECT_TRUE(has(run_check("cgroup-plugin", f), "CgroupPlugin=autodetect: cgroup v1 at /sys/fs/cgroup"));
  f.cgroup_conf = SlurmConf{};
  f.cgroup_conf->values["cgroupplugin"] = "disabled";
  EXPECT_TRUE(has(run_check("cgroup-plugin", f), "exists from Slurm 24.05 on, not in Slurm 22.05.8"));
  f.slurm_version = parse_slurm_version("slurm 24.11.5");
  EXPECT_EQ(run_check("cgroup-plugin", f).status, CheckStatus::kWarn);
  f.cgroup_conf->values["cgroupplugin"] = "cgroup/v2";  // v1 host
  EXPECT_TRUE(has(run_check("cgroup-plugin", f), "holds the cgroup v1 hierarchies"));
  f.slurm_version = parse_slurm_version("slurm 21.08.8");
  EXPECT_TRUE(has(run_check("cgroup-plugin", f), "exists from Slurm 22.05 on"));
  f = on_series("slurm 24.11.5");
  f.cgroup_v1_mounted = false;
  f.cgroup_v2_mounted = true;
  f.cgroup_conf = SlurmConf{};
  f.cgroup_conf->values["cgroupplugin"] = "cgroup/v1";
  EXPECT_TRUE(has(run_check("cgroup-plugin", f), "is cgroup v2 only"));
  f.cgroup_conf_error = "cannot read /etc/slurm/cgroup.conf";
  EXPECT_EQ(run_check("cgroup-plugin", f).detail, f.cgroup_conf_error);
}

TEST(SlurmSeriesChecksTest, CgroupV1IsDeprecatedFrom2505) {
  NodeFacts f = on_series("slurm 24.11.5");  // a v1 host, autodetect
  EXPECT_EQ(run_check("cgroup-plugin", f).status, CheckStatus::kOk);
  for (const char* v : {"slurm 25.05.0", "slurm 26.05.5"}) {
    f = on_series(v);
    CheckResult r = run_check("cgroup-plugin", f);
    EXPECT_EQ(r.status, CheckStatus::kWarn) << v;
    EXPECT_TRUE(has(r, "runs cgroup v1, which Slurm")) << r.detail;
    EXPECT_TRUE(has(r, "PrologFlags=RunInJob")) << r.detail;
  }
  f = on_series("slurm 26.05.5");  // a v2 host
  f.cgroup_v1_mounted = false;
  f.cgroup_v2_mounted = true;
  EXPECT_EQ(run_check("cgroup-plugin", f).status, CheckStatus::kOk);
}

// The plugin's defaults (start_timeout 15 s, stop_timeout 10 s): the prolog
// takes at most 30 + 15 + 12 + 45 = 102 s, the epilog 12 + 10 = 22 s.
TEST(JobHookBoundTest, SumsTheBoundsOfTheSteps) {
  PluginConfig cfg;
  EXPECT_EQ(prolog_bound(cfg).total, std::chrono::seconds(102));
  EXPECT_EQ(prolog_bound(cfg).parts, "nvidia-smi 30 s + start_timeout 15 s + a failed start's stop 12 s + the wait for the job's cgroup 45 s");
  EXPECT_EQ(epilog_bound(cfg).total, std::chrono::seconds(22));
  cfg.start_timeout = std::chrono::milliseconds(2500);
  cfg.stop_timeout = std::chrono::seconds(60);
  EXPECT_EQ(prolog_bound(cfg).total, std::chrono::milliseconds(30000 + 2500 + 62000 + 32500));
  EXPECT_EQ(epilog_bound(cfg).parts, "the stops 62 s + the kill of held processes 60 s");
}

TEST(SlurmSeriesChecksTest, HookTimeoutsAgainstThePluginsBounds) {
  NodeFacts f = on_series("slurm 24.11.5");
  CheckResult r = run_check("hook-timeouts", f);
  EXPECT_EQ(r.status, CheckStatus::kOk);
  EXPECT_TRUE(has(r, "prolog without a limit (no timeout set), the plugin's own bound 102 s")) << r.detail;
  f.conf.values["prologepilogtimeout"] = "60";  // both hooks before 25.05
  r = run_check("hook-timeouts", f);
  EXPECT_EQ(r.status, CheckStatus::kWarn);
  EXPECT_TRUE(has(r, "PrologEpilogTimeout=60 s is shorter than the longest the plugin's prolog can take, 102 s (nvidia-smi 30 s")) << r.detail;
  EXPECT_FALSE(has(r, "epilog can take")) << r.detail;
  EXPECT_TRUE(has(r, "slurmd kills a hook that runs longer and drains the node")) << r.detail;
  f.conf.values["prologtimeout"] = "300";  // unknown before 25.05: slurmd stops
  r = run_check("hook-timeouts", f);
  EXPECT_EQ(r.status, CheckStatus::kFail);
  EXPECT_TRUE(has(r, "slurm.conf sets PrologTimeout, which Slurm 24.11.5 does not know (25.05 added it)")) << r.detail;
  // 25.05+: the split keys win, PrologEpilogTimeout is their default.
  f.slurm_version = parse_slurm_version("slurm 26.05.5");
  f.conf.values["epilogtimeout"] = "10";
  r = run_check("hook-timeouts", f);
  EXPECT_EQ(r.status, CheckStatus::kWarn);
  EXPECT_TRUE(has(r, "EpilogTimeout=10 s is shorter than the longest the plugin's epilog can take, 22 s")) << r.detail;
  EXPECT_FALSE(has(r, "prolog can take")) << r.detail;
  f.conf.values["epilogtimeout"] = "0";  // slurmd: 0 waits without a limit
  r = run_check("hook-timeouts", f);
  EXPECT_EQ(r.status, CheckStatus::kOk) << r.detail;
  EXPECT_TRUE(has(r, "PrologTimeout=300 s covers the prolog's 102 s; epilog without a limit (EpilogTimeout=0)")) << r.detail;
  f.conf.values.erase("epilogtimeout");  // back to PrologEpilogTimeout=60
  r = run_check("hook-timeouts", f);
  EXPECT_EQ(r.status, CheckStatus::kOk);
  EXPECT_TRUE(has(r, "; PrologEpilogTimeout=60 s covers the epilog's 22 s")) << r.detail;
  f.conf.values["prologtimeout"] = "5m";
  r = run_check("hook-timeouts", f);
  EXPECT_EQ(r.status, CheckStatus::kFail);
  EXPECT_EQ(r.detail, "PrologTimeout=5m is not a number of seconds (0 to 65534)");
}

TEST(SlurmSeriesChecksTest, CgroupJobIdPathsAndTheSluidNamedJobCgroup) {
  NodeFacts f = on_series("slurm 24.11.5");
  EXPECT_EQ(run_check("cgroup-job-dir", f).detail, "<no line>");  // v1, before 26.05
  f.cgroup_conf = SlurmConf{};
  f.cgroup_conf->values["cgroupjobidpaths"] = "yes";
  CheckResult r = run_check("cgroup-job-dir", f);
  EXPECT_EQ(r.status, CheckStatus::kFail);
  EXPECT_TRUE(has(r, "CgroupJobIdPaths=yes, which Slurm 24.11.5 does not know (26.05.2 added it)")) << r.detail;
  f.slurm_version = parse_slurm_version("slurm 26.05.1");
  EXPECT_EQ(run_check("cgroup-job-dir", f).status, CheckStatus::kFail);
  f.slurm_version = parse_slurm_version("slurm 26.05.2");
  EXPECT_EQ(run_check("cgroup-job-dir", f).detail, "<no line>");  // known, but a v1 host
  f.cgroup_v1_mounted = false;
  f.cgroup_v2_mounted = true;
  r = run_check("cgroup-job-dir", f);
  EXPECT_EQ(r.status, CheckStatus::kOk);
  EXPECT_EQ(r.detail, "CgroupJobIdPaths=yes: job cgroups are named job_<id>");
  f.cgroup_conf->values["cgroupjobidpaths"] = "1";  // a Slurm boolean: yes, up, true or 1
  EXPECT_EQ(run_check("cgroup-job-dir", f).detail, "CgroupJobIdPaths=1: job cgroups are named job_<id>");
  f.cgroup_conf->values.erase("cgroupjobidpaths");
  r = run_check("cgroup-job-dir", f);
  EXPECT_TRUE(has(r, "named after the job's SLUID")) << r.detail;
  f.slurm_version = parse_slurm_version("slurm 25.11.3");
  EXPECT_EQ(run_check("cgroup-job-dir", f).detail, "<no line>");
}

TEST(NodeChecksTest, NamespaceTypeLinuxWithPidOrUserNamespacesIsAFail) {
  NodeFacts f = ready_facts();
  f.conf.values["namespacetype"] = "namespace/linux";
  f.namespace_yaml_path = "/etc/slurm/namespace.yaml";
  f.namespace_yaml = "dirs: /tmp\nclone_ns_flags:\n  - CLONE_NEWPID  # own pid space\n  - CLONE_NEWNS\n";
  CheckResult r = run_check("dev-shm", f);
  EXPECT_EQ(r.status, CheckStatus::kFail);
  EXPECT_TRUE(has(r, "NamespaceType=namespace/linux with clone_ns_flags CLONE_NEWPID in /etc/slurm/namespace.yaml")) << r.detail;
  EXPECT_TRUE(has(r, "own PID namespace")) << r.detail;
  f.namespace_yaml = "dirs: /tmp\nclone_ns_flags: [CLONE_NEWUSER, CLONE_NEWPID]\n";
  EXPECT_TRUE(has(run_check("dev-shm", f), "PID and user namespace")) << run_check("dev-shm", f).detail;
  // A commented-out flag is no flag; dirs without /dev/shm: fine.
  f.namespace_yaml = "dirs: /tmp\n# clone_ns_flags: [CLONE_NEWPID]\n";
  r = run_check("dev-shm", f);
  EXPECT_EQ(r.status, CheckStatus::kOk) << r.detail;
  // dirs missing: Slurm's default /tmp,/dev/shm, a private /dev/shm.
  f.namespace_yaml = "clone_ns_flags: []\n";
  r = run_check("dev-shm", f);
  EXPECT_EQ(r.status, CheckStatus::kFail);
  EXPECT_TRUE(has(r, "dirs defaults to /tmp,/dev/shm")) << r.detail;
  // NamespaceType=namespace/tmpfs is job_container/tmpfs renamed.
  f.conf.values["namespacetype"] = "namespace/tmpfs";
  f.job_container_dirs = "/tmp";
  EXPECT_TRUE(has(run_check("dev-shm", f), "NamespaceType=namespace/tmpfs with Dirs=/tmp")) << run_check("dev-shm", f).detail;
}

TEST(SlurmSeriesChecksTest, ContainmentOnCgroupV2DependsOnTheSeries) {
  auto v2_node = [](const char* version) {
    NodeFacts f = on_series(version);
    f.cgroup_v1_mounted = false;
    f.cgroup_v2_mounted = true;
    f.conf.values["prologflags"] = "Contain";
    f.conf.values["proctracktype"] = "proctrack/cgroup";
    f.cgroup_conf = SlurmConf{};
    f.cgroup_conf->values["constraindevices"] = "yes";
    return f;
  };
  CheckResult old = run_check("containment", v2_node("slurm 22.05.8"));
  EXPECT_EQ(old.status, CheckStatus::kFail);
  EXPECT_TRUE(has(old, "cgroup v2 on Slurm 22.05.8")) << old.detail;
  EXPECT_TRUE(has(old, "boot the node with cgroup v1")) << old.detail;
  CheckResult now = run_check("containment", v2_node("slurm 24.11.5"));
  EXPECT_EQ(now.status, CheckStatus::kFail);
  EXPECT_TRUE(has(now, "RunInJob")) << now.detail;
  EXPECT_FALSE(has(now, "boot the node with cgroup v1")) << now.detail;
  NodeFacts ok = v2_node("slurm 24.11.5");
  ok.conf.values["prologflags"] = "RunInJob";
  EXPECT_EQ(run_check("containment", ok).status, CheckStatus::kOk) << run_check("containment", ok).detail;
  // cgroup v1 and Contain: fine on both series.
  NodeFacts v1 = v2_node("slurm 22.05.8");
  v1.cgroup_v1_mounted = true;
  EXPECT_EQ(run_check("containment", v1).status, CheckStatus::kOk) << run_check("containment", v1).detail;
}

}  // namespace
TEST(NodeChecksTest, ComputeModeRowJudgesTheGatheredGpus) {
  NodeFacts f = ready_facts();
  EXPECT_EQ(run_check("compute-mode", f).status, CheckStatus::kOk);
  (*f.gpus)[2].compute_mode = "Default";
  EXPECT_EQ(run_check("compute-mode", f).status, CheckStatus::kWarn);
  (*f.gpus)[1].compute_mode = "Prohibited";
  EXPECT_EQ(run_check("compute-mode", f).status, CheckStatus::kFail);
  EXPECT_TRUE(has(run_check("compute-mode", f), (*f.gpus)[1].uuid) || has(run_check("compute-mode", f), "GPU 1"));
}

}  // namespace unilab::mps
