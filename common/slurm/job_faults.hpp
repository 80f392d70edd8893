// A job's MPS server faults, noticed and said once.
//
// Where: the task-exit hook in slurmstepd (after each task, while the job
// still runs: no thread, no polling; what it says goes to the slurmd log and,
// as slurmstepd's own errors do, to the job's stderr, like Slurm's OOM
// notice), the epilog (before it stops the daemons) and `status --job`.
// Each fault is kept as one root-owned file, <state_dir>/faults/<daemon>.<key>.json,
// created only if it does not exist yet (link(2) of a finished temp file):
// whoever creates it is the one that reports it, so a fault is said once
// however many tasks, steps and hooks see it. The epilog removes them with
// the job's records, after the history journal took them.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/mps/mps_faults.hpp"
#include "common/mps/proc.hpp"
#include "common/mps/runner.hpp"
#include "common/mps/tools.hpp"
#include "common/mps/record.hpp"
#include "common/slurm/slurm_config.hpp"

namespace unilab::mps {

inline constexpr const char* kFaultsSubdir = "faults";
// The most faults kept (and said) per daemon: its logs are its user's to
// write, so what root records of them is bounded.
inline constexpr size_t kMaxFaultsPerDaemon = 16;

struct JobFault {
  std::string daemon;                  // record name
  std::string node;                    // the Slurm node it ran on
  std::vector<std::string> gpu_uuids;  // the daemon's GPUs
  std::string log_directory;           // where the line is
  MpsFault fault;
  double noted_at = 0;                 // wall clock seconds
  std::string noted_by;                // "task-exit", "epilog", ...
  nlohmann::json to_json() const;
  static JobFault from_json(const nlohmann::json& j);  // throws CudaMpsError
};

// Scans the logs of `records` (the job's trusted records on this node) for
// faults of `kinds` and records every one not recorded yet; returns those
// this call recorded first (the ones to report). Never throws: a log or
// directory that cannot be read is skipped, and `problems` (optional) says
// why.
// `servers_started` (optional) gets each daemon's count of MPS servers
// started in the window read (DaemonLogScan).
// With `proc` and kDaemonGone among `kinds`, a running record whose daemon
// no longer runs (pid, start time, uid, boot in /proc) is a fault too.
std::vector<JobFault> note_job_faults(const PluginConfig& cfg, const std::vector<DaemonRecord>& records,
                                      const std::set<MpsFaultKind>& kinds, const std::string& noted_by, double now,
                                      std::vector<std::string>* problems = nullptr,
                                      std::map<std::string, long>* servers_started = nullptr, ProcReader* proc = nullptr);

// The faults recorded for these daemons (by name), oldest first.
std::vector<JobFault> recorded_job_faults(const PluginConfig& cfg, const std::vector<std::string>& daemons);

// Removes the fault files of these daemons.
void remove_job_faults(const PluginConfig& cfg, const std::vector<std::string>& daemons);

// What the daemon says of its servers now (`get_server_status <pid>`:
// ACTIVE, FAULT, ...), asked through its pipe. Only the daemon's own user
// asks (status --job as the job's user); root never asks a user's daemon.
std::map<pid_t, std::string> server_states(CommandRunner& runner, const Tools& tools, const DaemonRecord& daemon,
                                           const std::vector<pid_t>& servers);

// One line for the slurmd log and the job's stderr: job, node, daemon, GPU,
// what happened, the log line and where the log is.
std::string fault_message(const std::string& job_id, const std::string& node, const JobFault& f);

// The kinds the task-exit hook reports (the job is still running: a server
// that exited did so during the job) and the ones the epilog adds (a server
// exit seen only then could be the teardown's own).
inline const std::set<MpsFaultKind> kTaskExitFaultKinds{MpsFaultKind::kServerExited, MpsFaultKind::kFatalException,
                                                        MpsFaultKind::kFatalGpuError, MpsFaultKind::kDaemonGone};
inline const std::set<MpsFaultKind> kEpilogFaultKinds{MpsFaultKind::kFatalException, MpsFaultKind::kFatalGpuError};

// The kinds the task-exit hook reports for a task that ended with this
// wait(2) status. A task killed by SIGTERM, SIGKILL, SIGINT or SIGHUP may be
// ending with its job (a cancel, a time limit, srun interrupted): the same
// teardown kills the daemon and its servers where they run in the job's
// cgroup, so only the faults no teardown causes (kEpilogFaultKinds). Any
// other end (an exit code, a crash signal), or no status: kTaskExitFaultKinds.
const std::set<MpsFaultKind>& task_exit_fault_kinds(std::optional<int> wait_status);

// What the task-exit hook does for a task of `job_id` (run by `uid`) that
// ended with `wait_status` on this node: every daemon of the job in the
// node's store (slurmstepd's environment names neither the task's daemon
// nor the node), trusted as the task path trusts them, checked for faults
// (task_exit_fault_kinds, the daemons' identity in /proc). Returns the faults
// this call noted first, for the caller to say; `problems` gets what could
// not be read. The SPANK task_exit hook and bench/direct.sh's measurement of
// it call this.
std::vector<JobFault> task_exit_faults(const PluginConfig& cfg, const std::string& job_id, uid_t uid,
                                       std::optional<int> wait_status, std::vector<std::string>* problems);

}  // namespace unilab::mps
