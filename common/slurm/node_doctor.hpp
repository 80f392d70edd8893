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
#include "common/slurm/slurm_conf_path.hpp"
#include "common/slurm/slurm_config.hpp"
#include "common/slurm/slurm_series.hpp"
#include "common/mps/nvidia_checks.hpp"
#include "common/mps/status.hpp"

namespace unilab::mps {

struct FileFacts {
  bool exists = false;
  bool is_symlink = false;  // the path itself (lstat)
  bool is_dir = false;      // the rest follows a symlink
  bool is_regular = false;
  uid_t uid = 0;
  mode_t mode = 0;          // permission bits (incl. sticky)
  double mtime = 0;         // seconds since the epoch
};

// What connect(2) on a UNIX socket path says.
enum class SocketState { kMissing, kNotSocket, kListening, kRefused, kDenied };

// The machine as the node doctor sees it. Abstract so it can be mocked out for tests.
class NodeProbe {
 public:
  virtual ~NodeProbe() = default;
  // Whole file (bounded); nullopt when missing or unreadable.
  virtual std::optional<std::string> read_file(const std::string& path) = 0;
  virtual FileFacts stat(const std::string& path) = 0;
  // glob(3) matches, sorted; none is an empty list.
  virtual std::vector<std::string> glob(const std::string& pattern) = 0;
  virtual bool executable(const std::string& path) = 0;
  // Minor number of a character device; -1 otherwise.
  virtual int device_minor(const std::string& path) = 0;
  // /proc/PID/comm and the start time (wall clock, seconds); nullopt when gone.
  virtual std::optional<std::string> process_name(pid_t pid) = 0;
  virtual std::optional<double> process_start_time(pid_t pid) = 0;
  // The executable of a process (readlink /proc/PID/exe); nullopt when unknown.
  virtual std::optional<std::string> process_exe(pid_t pid) = 0;
  // The process's uid when its real, effective, saved and filesystem uids
  // are one; else the first of them that is not 0 (so "0" means root in all
  // four). nullopt when gone or unreadable.
  virtual std::optional<uid_t> process_uid(pid_t pid) = 0;
  // Whether `path` (followed) is the very file the process executes: the
  // same device and inode as /proc/PID/exe.
  virtual bool process_runs(pid_t pid, const std::string& path) = 0;
  // A file root wrote and only root can change: read only when it is a
  // regular file (never through a symlink, never a FIFO or device, opened
  // without blocking) owned by uid 0 and not writable by group or others.
  // Otherwise nullopt, and `problem` says why ("" when it does not exist).
  virtual std::optional<std::string> read_root_file(const std::string& path, std::string& problem) = 0;
  virtual SocketState probe_socket(const std::string& path) = 0;
  virtual std::string hostname() = 0;  // short host name
};

class SystemNodeProbe final : public NodeProbe {
 public:
  std::optional<std::string> read_file(const std::string& path) override;
  FileFacts stat(const std::string& path) override;
  std::vector<std::string> glob(const std::string& pattern) override;
  bool executable(const std::string& path) override;
  int device_minor(const std::string& path) override;
  std::optional<std::string> process_name(pid_t pid) override;
  std::optional<double> process_start_time(pid_t pid) override;
  std::optional<std::string> process_exe(pid_t pid) override;
  std::optional<uid_t> process_uid(pid_t pid) override;
  bool process_runs(pid_t pid, const std::string& path) override;
  std::optional<std::string> read_root_file(const std::string& path, std::string& problem) override;
  SocketState probe_socket(const std::string& path) override;
  std::string hostname() override;
};

// slurm.conf (and the files it includes), as far as the doctor needs it.
struct SlurmConf {
  std::string path;
  std::vector<std::string> files;                          // every file read
  std::map<std::string, std::string> values;               // lowercase key -> value (last one wins)
  std::vector<std::map<std::string, std::string>> nodes;   // NodeName= lines, lowercase keys
  std::vector<std::string> problems;                       // unreadable includes
  std::optional<std::string> get(const std::string& lowercase_key) const;
};
// Throws CudaMpsError when `path` cannot be read.
SlurmConf read_slurm_conf(NodeProbe& probe, const std::string& path);

// One `required`/`optional` line of plugstack.conf.
struct PlugstackEntry {
  std::string file;
  int line = 0;
  std::string kind;      // required | optional
  std::string path;      // as written
  std::string resolved;  // absolute path; a relative one looked up in PluginDir; empty: not found
  std::vector<std::string> args;
};

struct Plugstack {
  std::string path;
  std::vector<std::string> files;      // every file read, in Slurm's order
  std::vector<PlugstackEntry> entries;
  std::vector<std::string> includes;   // "FILE:LINE: include PATTERN (N files)"
  std::vector<std::string> problems;   // lines Slurm ignores, unreadable files
};
// Reads plugstack.conf the way Slurm 22.05 does (src/common/plugstack.c):
// `#` comments, `required|optional PATH ARGS...`, `include GLOB` relative to
// the including file's directory; a missing top file is an empty stack.
Plugstack read_plugstack(NodeProbe& probe, const std::string& path, const std::vector<std::string>& plugin_dirs);

// Expands %n (node name) and %h (host name) as slurmd does in SlurmdPidFile.
std::string expand_node_pattern(const std::string& pattern, const std::string& node, const std::string& host);

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
  nlohmann::json to_json() const;
};

// A path and what stat said about it.
struct PathFacts {
  std::string path;
  FileFacts facts;
};

// Everything the node checks look at, read once by gather_node_facts.
struct NodeFacts {
  NodeDoctorOptions options;
  std::string host;
  // slurm.conf
  SlurmConf conf;
  std::optional<std::string> conf_error;     // slurm.conf unreadable
  std::vector<std::string> node_candidates;  // NodeNames of this host
  std::string node;                          // the node the checks are about
  // plugstack.conf and our line in it
  std::string plugstack_path;
  std::vector<std::string> plugin_dirs;
  Plugstack stack;
  std::vector<PlugstackEntry> plugin_lines;  // lines naming unilab_mps.so
  std::optional<FileFacts> plugin_file;      // the first line's resolved file
  std::optional<PluginConfig> plugin_config; // its arguments, parsed
  std::string plugin_args_error;
  PluginConfig config;                       // plugin_config, else the defaults
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

// The plugin's configuration on this node, found the way node_doctor finds
// it: slurm.conf (PlugStackConfig, PluginDir) -> plugstack.conf and its
// includes -> the unilab_mps.so line (the first, as Slurm loads it) -> its
// arguments through parse_plugin_args. Reads only; never throws.
struct NodePluginConfig {
  std::optional<PluginConfig> config;   // nullopt: `problem` says why
  std::string problem;
  std::string plugin_line;              // FILE:LINE of the line used
  std::string node;                     // as node_doctor decides it; empty: the host is several nodes
  std::vector<std::string> host_nodes;  // NodeName of this host in slurm.conf (several: pick one)
};
NodePluginConfig node_plugin_config(NodeProbe& probe, const std::string& slurm_conf, const std::optional<std::string>& node,
                                    const std::string& default_plugin_dir);
// The same from a located slurm.conf: a configless cache that was not
// trusted is named in `problem` when slurm.conf cannot be read.
NodePluginConfig node_plugin_config(NodeProbe& probe, const SlurmConfLocation& slurm_conf, const std::optional<std::string>& node,
                                    const std::string& default_plugin_dir);

}  // namespace unilab::mps
