// The Slurm job logic of unilab-mps, free of Slurm headers so the SPANK
// plugin, the standalone prolog/epilog helpers and the tests share it:
// job prolog (start the job's daemons), task environment (from the records
// alone), job epilog (stop exactly the job's daemons).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/mps/env.hpp"
#include "common/mps/daemon.hpp"
#include "common/mps/record.hpp"
#include "common/slurm/slurm_config.hpp"

namespace unilab::mps {


// What Slurm gives a prolog/epilog (no PATH, no HOME there).
struct JobContext {
  std::string job_id;
  uid_t uid = 0;
  gid_t gid = 0;
  std::string user;                       // SLURM_JOB_USER (the history journal); empty when not given
  std::optional<std::string> job_gpus;    // SLURM_JOB_GPUS (GRES indices)
  // The prolog's CUDA_VISIBLE_DEVICES: Slurm's gpu/nvml puts a MIG slice's
  // UUID there (26.05 also a GPU's), in SLURM_JOB_GPUS's order.
  std::optional<std::string> cuda_visible_devices;
  std::string node;                       // SLURMD_NODENAME, else the host name
  std::optional<std::string> slurm_conf;  // SLURM_CONF
  // SLURM_JOB_SLUID (Slurm 25.11+ in the prolog): 26.05 names the job's
  // cgroup v2 directory after it unless CgroupJobIdPaths=yes.
  std::optional<std::string> sluid;
};
// Throws CudaMpsError naming a missing or malformed variable.
JobContext job_context_from_env(const Getenv& env);

// The job's request as the option(s) carried it.
struct JobRequest {
  JobMode mode = JobMode::kAuto;
  MpsLimits limits;
};

// Reads the option from the env-var fallback Slurm sets for prolog/epilog
// (`SPANK__SLURM_SPANK_OPTION_unilab_mps_unilab_mps`; a flag without value
// arrives as "(null)"). nullopt when the job did not ask for MPS.
std::optional<JobRequest> job_request_from_env(const Getenv& env, const PluginConfig& cfg);
std::string spank_option_env_name(const std::string& option);

// The records store of the Slurm side: root-owned, world-readable records
// (the task path reads them as the job user).
RecordStore slurm_record_store(const PluginConfig& cfg);

// Record names: job<ID>.<node>.gpu<GRES index> (auto) or job<ID>.<node>.multi.
std::string job_daemon_name(const std::string& job_id, const std::string& node, const std::string& suffix);
// The spec every daemon of the job on this node starts from: that name,
// the job's user, node and id (the rest is the prolog's to fill in).
DaemonSpec job_daemon_spec(const JobContext& job, const std::string& suffix);
// Whether `name` is one of those names for job `job_id` on `node` (exactly:
// node "n1" never matches a daemon of node "n1.x").
bool is_job_daemon_name(const std::string& name, const std::string& job_id, const std::string& node);

// A daemon's entry in run_dir (the directory holding its pipe and log
// directories), kept short because the daemon's socket
// <run_dir>/<entry>/pipe/control_privileged must fit a UNIX socket address
// (107 bytes): <job id>.<GRES index>.<node tag>, or <job id>.m.<node tag>
// for multi. The node tag is three characters of a hash of the node name:
// run_dir is node-local, the tag only keeps apart the nodes of a host that
// runs several slurmd. `suffix` is the record name's (gpuN or multi). Code
// before this layout named the entry like the record; job_run_entry_suffix
// still accepts those entries.
std::string job_run_entry(const std::string& job_id, const std::string& node, const std::string& suffix);
// The record-name suffix (gpuN or multi) of `entry` when it is one of job
// `job_id`'s entries on `node`, in either layout; nullopt otherwise.
std::optional<std::string> job_run_entry_suffix(const std::string& entry, const std::string& job_id, const std::string& node);
// The longest run_dir whose daemons' sockets fit for every job id (32 bits),
// node name and GRES index below 1000.
size_t max_run_dir_length();

// Where this job's daemons must live on this node (slurm.conf and
// cgroup.conf beside SLURM_CONF); nullopt when the node does not confine
// jobs with cgroups or contain=off. Throws CudaMpsError when the node
// constrains devices but cannot put the daemon in the job.
std::optional<ContainmentPlan> job_containment_plan(const PluginConfig& cfg, const JobContext& job);

// How long after the daemons' start the prolog waits for Slurm to create
// the job's cgroup they must join (on top of start_timeout).
inline constexpr std::chrono::seconds kContainGrace{30};

// The longest run_job_prolog and run_job_epilog can take with `cfg`, summed
// from the bounds of their steps, and those parts in words (doctor --node
// holds slurm.conf's PrologTimeout and EpilogTimeout against them).
struct HookBound {
  std::chrono::milliseconds total{0};
  std::string parts;
};
HookBound prolog_bound(const PluginConfig& cfg);
HookBound epilog_bound(const PluginConfig& cfg);

struct PrologOutcome {
  std::vector<DaemonRecord> started;
  std::string note;                   // e.g. "job has no GPU on this node: nothing started"
  std::vector<std::string> warnings;  // what an earlier run of a requeued job left, cleaned first
  std::vector<std::string> faults;    // faults that earlier run's daemons had (logged as errors)
};
// Starts the job's daemons on this node as the job user: one nvidia-smi call,
// one daemon per job GPU (auto) or one for all (multi). What an earlier run
// of the same (requeued) job left is cleaned first, as the epilog would. Any
// failure stops what was started, removes dirs/records, and throws CudaMpsError.
PrologOutcome run_job_prolog(Services& s, const PluginConfig& cfg, const JobContext& job, const JobRequest& req);

struct EpilogOutcome {
  std::vector<StopReport> stopped;
  std::vector<std::string> warnings;  // stale or untrusted records, orphans, leftover dirs: logged, not fatal
  std::vector<std::string> errors;    // a daemon that survived SIGKILL: the node should drain
  std::vector<std::string> faults;    // MPS server faults this run saw first (job_faults.hpp): logged as errors, once
  size_t history_lines = 0;           // lines appended to the history journal
  bool ok() const { return errors.empty(); }
};
// Stops every daemon of this job on this node, whether or not the option is
// visible; idempotent; nothing to do where no prolog ran. Two sources, one
// proof each:
//  - trusted records (name, job id, node and the job's uid all agree):
//    stop_daemon, identity-checked;
//  - run-dir entries named for the job that no trusted record covers (the
//    record is corrupt, of another schema, names another uid or host, or was
//    never written): the daemon is found from the pid file in the entry's
//    pipe directory and accepted only when /proc shows it runs as the job's
//    uid with exactly that CUDA_MPS_PIPE_DIRECTORY (the proof a "starting"
//    record uses); then it is stopped the same way.
// A record is untrusted also when it is not the store owner's file, or
// names directories other than run_dir/<name> (see job_records). An
// untrusted record file is never used to signal anything and nothing it
// names is removed; it is reported (reason in the warning) and removed with
// the job's run-dir entry, since nothing else would ever clean it.
EpilogOutcome run_job_epilog(Services& s, const PluginConfig& cfg, const JobContext& job);

// Whether the task may open a device file (cgroup device constraint denies
// with EPERM). Abstract so it can be mocked out for tests.
class DeviceAccess {
 public:
  virtual ~DeviceAccess() = default;
  virtual bool denied(const std::string& device) = 0;
};
class SystemDeviceAccess final : public DeviceAccess {
 public:
  bool denied(const std::string& device) override;
};

struct TaskContext {
  std::string job_id;
  uid_t uid = 0;
  std::string node;
  std::optional<std::string> cuda_visible_devices;  // as Slurm set it for the task
  std::optional<std::string> step_gpus;             // SLURM_STEP_GPUS
  std::optional<std::string> job_gpus;              // SLURM_JOB_GPUS
  // slurm.conf has PrologFlags=RunInJob: only the Prolog= helper can have
  // started daemons (read by the caller when no record was found)
  bool prolog_runs_in_job = false;
  unsigned local_tasks = 1;                 // the step's tasks on this node (--unilab-mps-threads=auto)
  std::optional<double> site_max_threads{};  // max_threads=, the cap of an auto share
};

// --unilab-mps-threads=auto: the active thread percentage of a task using
// `task_gpus` of the `node_gpus` GPUs the job has on the node, when the
// step runs `local_tasks` tasks there: 100 over the tasks that share its
// GPU (local_tasks * task_gpus / node_gpus, rounded up, at least 1), rounded
// down, at least 1, at most the site's maximum.
int auto_thread_share(unsigned local_tasks, size_t task_gpus, size_t node_gpus, const std::optional<double>& site_max);

struct TaskEnvironment {
  std::vector<std::pair<std::string, std::string>> set;  // CUDA_VISIBLE_DEVICES, CUDA_MPS_*
  std::string daemon_name;                               // empty when no daemon was required and none fits
  std::vector<int> gres_indices;
  std::string note;                                      // why no daemon, when daemon_name is empty
  pid_t daemon_pid = 0;
  std::optional<ContainmentPlan> containment;            // where the daemon must be before the task may use it
};

// Chooses the task's GPUs and the one daemon that serves exactly them, from
// the job's records alone (no nvidia-smi here). Without device constraint
// the task's CUDA_VISIBLE_DEVICES holds GRES indices; with ConstrainDevices
// it holds local positions among the device files the task may open (in GRES
// order), and SLURM_STEP_GPUS can be wrong per task (seen live), so the
// device files decide. Throws CudaMpsError with the option or binding that
// would fit. With `require_daemon` false (the batch script, which holds every
// GPU of the job and launches the real tasks with srun), a task that no
// daemon serves exactly still gets UUID visibility and no pipe directory.
TaskEnvironment compute_task_environment(const std::vector<DaemonRecord>& job_records, const TaskContext& task,
                                         DeviceAccess& devices, ProcReader& proc, bool require_daemon = true);

// The job's trusted records on this node: named for the job and node, and
// job id, node (host) and - when given - uid all agree; with `run_dir`, its
// owned_directories are also exactly run_dir/<name> and its pipe/log
// directories run_dir/<name>/{pipe,log} (the epilog always checks this).
// Records named for the job that are corrupt or disagree are never returned;
// `problems` gets one line for each.
std::vector<DaemonRecord> job_records(RecordStore& store, const std::string& job_id, const std::string& node,
                                      std::optional<uid_t> uid, std::vector<std::string>* problems = nullptr,
                                      const std::optional<std::string>& run_dir = std::nullopt);
// The Slurm nodes that records of job `job_id` (of `uid`) in `store` name,
// for a caller that does not know its node (slurmstepd's task-exit hook);
// each is then read through job_records, which checks them.
std::vector<std::string> job_nodes_in_store(RecordStore& store, const std::string& job_id, uid_t uid);

// Records named for a job on a node, split into the ones every field of
// which agrees (trusted) and the rest (corrupt, other schema, or naming
// another job, host or uid): those are never acted on.
struct JobRecordScan {
  std::vector<DaemonRecord> trusted;
  std::vector<RecordProblem> untrusted;
};
// The scan behind job_records, with the untrusted ones and why.
JobRecordScan scan_job_records(RecordStore& store, const std::string& job_id, const std::string& node, std::optional<uid_t> uid,
                               const std::optional<std::string>& run_dir);

// What run_job_epilog does (the prolog runs it too, for what an earlier run
// of a requeued job left): every daemon the job left on this node stopped
// within one stop_timeout, its directories and records removed.
// `by` names the caller in the history journal ("epilog", "prolog").
void clean_job_node(Services& s, const PluginConfig& cfg, const JobContext& job, EpilogOutcome& out,
                    const std::string& by = "epilog");

// GRES indices for a message: "0,2".
std::string describe_indices(const std::vector<int>& v);

}  // namespace unilab::mps
