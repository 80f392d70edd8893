// Read-only host status and the `doctor` checks: nothing here creates or
// changes anything.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/mps/check_status.hpp"
#include "common/mps/daemon.hpp"
#include "common/mps/gpu.hpp"
#include "common/mps/record.hpp"
#include "common/mps/topology.hpp"

namespace unilab::mps {

struct ControlPipeStatus {
  std::string path;   // <pipe dir>/control
  std::string kind;   // socket | fifo | missing | other
  std::vector<std::string> managed_names;  // records whose pipe dir this is
  nlohmann::json to_json() const;
};

struct HostStatus {
  std::string platform;
  bool nvidia_smi_available = false;
  std::optional<std::string> cuda_visible_devices;
  std::vector<GpuIdentity> gpus;  // visible under the mask
  std::vector<ControlPipeStatus> control_pipes;
  std::vector<DaemonRecord> managed_daemons;
  std::optional<std::string> diagnostic;
  std::vector<std::string> compatible_topology_modes = topology_mode_words();
  std::vector<RecordProblem> record_problems;
  // Liveness per managed daemon, same order; filled by host_status.
  std::vector<nlohmann::json> daemon_states;
  nlohmann::json to_json() const;
};

struct StatusQuery {
  std::optional<std::string> cuda_visible_devices;
  std::optional<std::string> pipe_directory_env;  // CUDA_MPS_PIPE_DIRECTORY of the caller
  std::optional<uid_t> uid;          // nullopt: every user's records (root, Slurm view)
  std::optional<std::string> host;
  std::optional<std::string> job_id;  // only records of this Slurm job
  bool discover = true;               // false: records only, no nvidia-smi call
};

// With q.job_id (a Slurm job's view) only that job's daemons are listed, and
// only their GPUs and control pipes; nvidia-smi is not run when it has none.
// Fills HostStatus; each live daemon's entry in daemon_states also lists
// its MPS servers under "mps_servers" (mps_servers_of).
HostStatus host_status(Services& s, const Tools& tools, RecordStore& store, const StatusQuery& q);

// The MPS servers a live daemon runs: its children whose comm is the MPS
// binaries' (nvidia-cuda-mps-server shows as "nvidia-cuda-mps", 15
// characters), running as the daemon's user. The control daemon forks one
// per client uid, at the first client. Empty for a daemon that is not live.
std::vector<pid_t> mps_servers_of(const DaemonRecord& record, ProcReader& proc);

struct DoctorCheck {
  std::string name;
  CheckStatus status = CheckStatus::kOk;
  std::string detail;
  nlohmann::json to_json() const { return {{"name", name}, {"status", std::string(to_string(status))}, {"detail", detail}}; }
};

// The text renderers, one for every front end: a status below `heading`
// with its records directory, and one `[status] name detail` line per check.
std::string render_host_status(const HostStatus& h, const std::string& heading, const std::string& records_dir);
std::string render_checks(const std::vector<DoctorCheck>& checks);

struct DoctorReport {
  std::vector<DoctorCheck> checks;
  std::optional<TopologyPlan> plan;
  bool ok() const;
  nlohmann::json to_json() const;
  std::string to_text() const;  // the checks, then ready / not ready
};

// Validates topology and daemon state for `selector` without creating or
// changing anything.
DoctorReport doctor(Services& s, const Tools& tools, RecordStore& store, const std::optional<std::string>& selector,
                    const StatusQuery& q);

}  // namespace unilab::mps
