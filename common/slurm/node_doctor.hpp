// `unilab-mps doctor --node`: is this Slurm node ready for --unilab-mps jobs,
// and if not, why? One gather step reads slurm.conf, plugstack.conf (with its
// includes), the plugin's arguments, gres.conf, the slurmd process, its
// version and the NVIDIA tools into one NodeFacts, through NodeProbe and
// CommandRunner; changes nothing. Every check is then a small pure function
// of those facts, listed in one table (node_checks(), common/slurm/node_checks.cpp)
// with the checks it needs; the report loops over the table.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/mps/check_status.hpp"
#include "common/slurm/gres.hpp"
#include "common/mps/runner.hpp"
#include "common/slurm/node_probe.hpp"
#include "common/slurm/slurm_conf_path.hpp"
#include "common/slurm/slurm_config.hpp"
#include "common/slurm/slurm_files.hpp"
#include "common/slurm/slurm_series.hpp"
#include "common/mps/nvidia_checks.hpp"
#include "common/mps/status.hpp"

namespace unilab::mps {

struct NodeDoctorOptions {
  std::string slurm_conf = "/etc/slurm/slurm.conf";
  // How slurm_conf was found (locate_slurm_conf, SLURM_CONF, --slurm-conf):
  // the report names it, and says so when it is the configless cache.
  std::optional<SlurmConfLocation> slurm_conf_location;
  std::optional<std::string> node;                    // Slurm node name; default: from slurm.conf and the host name
  std::string default_plugin_dir;                     // Slurm's PluginDir when slurm.conf sets none
  std::string default_slurmd_pid_file = "/var/run/slurmd.pid";
  double mtime_slack_s = 0.1;                         // /proc start times have clock-tick resolution
  // Who `slurmd -V` runs as (the CLI: nobody when it runs as root). The
  // binary is the running slurmd's own, proved so (docs/DESIGN.md, trust
  // rules), but a version query needs no privilege.
  std::optional<Credentials> version_query_as;
};

// One row of the node's GPU table: GRES index -> device -> minor -> nvidia-smi index -> UUID.
struct NodeGpuRow {
  int gres_index = -1;
  std::string device;
  int minor = -1;
  std::optional<int> nvidia_smi_index;
  std::string uuid;
  std::string problem;  // empty when the GPU maps
  std::optional<MigSlice> mig;  // a MIG slice: its parent and instances (SMI is the parent's index)
  nlohmann::json to_json() const;
};

// A path and what stat said about it.
struct PathFacts {
  std::string path;
  FileFacts facts;
};

// Everything the node checks look at, read once by gather_node_facts.
// (slurm.conf, the node, plugstack.conf and the plugin's line: the
// NodeSlurmFiles part, read as every other part of unilab-mps reads them)
struct NodeFacts : NodeSlurmFiles {
  NodeDoctorOptions options;
  std::string host;
  // slurmd
  std::string slurmd_pid_file;
  std::optional<std::string> slurmd_pid_text;
  std::string slurmd_pid_problem;  // the pid file or its process is not root's: why (the pid is then 0)
  pid_t slurmd_pid = 0;
  std::optional<std::string> slurmd_name;
  std::optional<double> slurmd_started;
  std::vector<PathFacts> watched;  // plugstack files and the plugin: slurmd reads them at start
  std::optional<std::string> slurmd_exe;
  std::optional<std::string> slurmd_version_output;  // `slurmd -V`, or why it did not run
  std::string slurmd_exe_problem;  // why slurmd_exe was not run (not root's, not the running binary)
  std::optional<SlurmVersion> slurm_version;
  // the plugin's directories, each component from / down to the leaf
  std::vector<PathFacts> state_dir_chain, run_dir_chain;
  // history=: its directory's chain, the journal and its rotation (.1)
  std::vector<PathFacts> history_dir_chain;
  FileFacts history_file, history_rotated;
  // NVIDIA tools, as the plugin runs them (driver_dir=, the one query)
  NvidiaToolFacts nvidia;
  bool nvidia_smi_executable = false;
  std::optional<std::vector<GpuIdentity>> gpus;
  std::string gpus_error;
  bool mps_control_executable = false;
  // gres.conf and the GPU table
  std::string gres_path;
  std::optional<GresConf> gres;
  std::string gres_error;  // unreadable or unparsable
  std::vector<GresGpuEntry> gres_discarded;  // GPU lines beyond slurm.conf's Gres=: Slurm gives them no index
  std::vector<GresGpuMapping> gpu_entries;
  std::string gpu_map_error;
  // the rest
  SocketState default_pipe = SocketState::kMissing;
  std::string job_container_conf_path;
  std::optional<std::string> job_container_dirs;  // Dirs= of job_container.conf
  // namespace.yaml of namespace/linux (Slurm 25.11+), as text
  std::string namespace_yaml_path;
  std::optional<std::string> namespace_yaml;
  std::optional<SlurmConf> cgroup_conf;
  std::string cgroup_conf_error;
  bool cgroup_v1_mounted = false;  // <mount>/freezer is a directory
  bool cgroup_v2_mounted = false;  // <mount>/cgroup.controllers exists
  // The files Prolog=/Epilog= name, when each is one absolute path to a
  // regular file (a wrapper that may exec the helpers)
  std::optional<std::string> prolog_script, epilog_script;
};

// Reads the machine. The only step of the doctor that does I/O.
NodeFacts gather_node_facts(NodeProbe& probe, CommandRunner& runner, const NodeDoctorOptions& options);

// What a check says; nullopt from a check: it does not apply here (no line).
struct CheckResult {
  CheckStatus status = CheckStatus::kOk;
  std::string detail;
};
using NodeCheckFn = std::optional<CheckResult> (*)(const NodeFacts&);

// One row of the doctor's table. A check whose `depends_on` check failed or
// was skipped is not run: it is reported as skipped, naming that check, so a
// root cause fails once. A dependency without a line (it did not apply)
// does not stop it.
struct NodeCheck {
  const char* id;
  const char* depends_on[3];  // ids of earlier rows; nullptr: none
  NodeCheckFn run;
};

// The table, in report order.
const std::vector<NodeCheck>& node_checks();

// Runs `table` over `facts` in order.
std::vector<DoctorCheck> run_node_checks(const NodeFacts& facts, const std::vector<NodeCheck>& table);

// The GPU table of the report (gres.conf entries mapped to nvidia-smi GPUs).
std::vector<NodeGpuRow> node_gpu_rows(const NodeFacts& facts);

struct NodeDoctorReport {
  std::string node;
  std::string slurm_conf;
  std::optional<SlurmConfLocation> slurm_conf_location;
  std::vector<DoctorCheck> checks;
  std::vector<NodeGpuRow> gpus;
  bool ok() const;
  nlohmann::json to_json() const;
  // The human table: one line per check, then the GPU table, then ready / not ready.
  std::string to_text() const;
};

NodeDoctorReport node_doctor(NodeProbe& probe, CommandRunner& runner, const NodeDoctorOptions& options);

}  // namespace unilab::mps
