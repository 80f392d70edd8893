// task_init in slurmstepd, as the job user, before exec: rewrite the task's
// CUDA_VISIBLE_DEVICES to UUIDs and point it at the job's daemon for its GPUs,
// from the records alone (no nvidia-smi on the task path).
#include <unistd.h>

#include <cstdint>
#include <exception>
#include <optional>
#include <string>

#include "common/slurm/containment.hpp"
#include "common/mps/errors.hpp"
#include "common/slurm/gres.hpp"
#include "common/slurm/job.hpp"
#include "common/slurm/job_failure.hpp"
#include "common/slurm/job_faults.hpp"
#include "common/mps/safefs.hpp"
extern "C" {
#include <slurm/slurm.h>
}
#include "spank/plugin.hpp"
#include "spank/state.hpp"

namespace unilab::mps::spank {
namespace {

std::optional<std::string> task_getenv(spank_t sp, const char* key) {
  char buf[8192];
  if (spank_getenv(sp, key, buf, sizeof buf) != ESPANK_SUCCESS) return std::nullopt;
  return std::string(buf);
}

}  // namespace

int remote_task_init_privileged(spank_t sp, int, char**) {
  if (!state().requested) return 0;  // jobs without the option: untouched
  uint32_t job_id = 0;
  if (spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS) return 0;  // task_init reports it
  try {
    // Root-only files: read here, before slurmstepd drops to the job user.
    // SLURMD_NODENAME is not in the task's environment yet: task_init picks
    // this node's reason.
    state().prolog_failures = read_job_prolog_failures(state().config.state_dir, 0, std::to_string(job_id));
  } catch (const std::exception& e) {
    slurm_verbose("unilab-mps: job %u: prolog failure reason not read: %s", job_id, e.what());
  }
  return 0;  // only ever a detail for task_init's message
}

int remote_task_init(spank_t sp, int, char**) {
  if (!state().requested) return 0;  // jobs without the option: untouched
  uint32_t job_id = 0, step_id = 0;
  uid_t uid = 0;
  if (spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS || spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS) {
    slurm_error("unilab-mps: cannot read the job id/uid from Slurm; the task cannot be bound to its MPS daemon");
    return -1;
  }
  spank_get_item(sp, S_JOB_STEPID, &step_id);
  // The batch script is one "task" holding every GPU of the job: it gets
  // UUID visibility, and a daemon only if one serves exactly its GPUs; the
  // job's sruns do the per-task binding.
  const bool batch_step = step_id == SLURM_BATCH_SCRIPT;
  bool has_gpus = false;
  try {
    TaskContext task;
    task.job_id = std::to_string(job_id);
    task.uid = uid;
    task.node = task_getenv(sp, "SLURMD_NODENAME").value_or("");
    task.cuda_visible_devices = task_getenv(sp, "CUDA_VISIBLE_DEVICES");
    task.step_gpus = task_getenv(sp, "SLURM_STEP_GPUS");
    task.job_gpus = task_getenv(sp, "SLURM_JOB_GPUS");
    uint32_t local_tasks = 1;
    if (spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &local_tasks) == ESPANK_SUCCESS) task.local_tasks = local_tasks;
    task.site_max_threads = state().config.max_threads;
    has_gpus = !parse_gpu_index_list(task.job_gpus.value_or("")).empty() ||
               !parse_gpu_index_list(task.step_gpus.value_or("")).empty();
    RecordStore store = slurm_record_store(state().config);
    SystemDeviceAccess devices;
    SystemProcReader proc;
    std::vector<DaemonRecord> records = job_records(store, task.job_id, task.node, uid, nullptr, state().config.run_dir);
    if (auto why = state().prolog_failures.find(task.node); records.empty() && has_gpus && why != state().prolog_failures.end()) {
      throw CudaMpsError(prolog_failure_message(task.job_id, task.node, why->second));
    }
    if (records.empty()) task.prolog_runs_in_job = site_runs_prolog_in_job();
    TaskEnvironment env = compute_task_environment(records, task, devices, proc, !batch_step);
    if (!env.daemon_name.empty() && env.containment) {
      // The prolog's mover puts the daemon into the job's cgroup once Slurm
      // creates it: no client (and so no MPS server) before that.
      SystemClock clock;
      wait_daemon_contained(*env.containment, env.daemon_pid, proc, clock, state().config.start_timeout, env.daemon_name);
    }
    for (const auto& [k, v] : env.set) {
      if (spank_setenv(sp, k.c_str(), v.c_str(), 1) != ESPANK_SUCCESS) {
        slurm_error("unilab-mps: cannot set %s for the task", k.c_str());
        return -1;
      }
    }
    if (env.daemon_name.empty()) {
      slurm_verbose("unilab-mps: job %u batch script: %s", job_id, env.note.c_str());
    } else {
      slurm_verbose("unilab-mps: job %u task bound to daemon %s", job_id, env.daemon_name.c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    // A batch script without GPUs on this node needs no daemon. One with
    // GPUs whose daemons are missing or dead (failed prolog, crashed
    // daemon) fails closed like any task: it would run on the GPUs without MPS.
    if (batch_step && !has_gpus) {
      slurm_verbose("unilab-mps: batch script of job %u left without an MPS daemon: %s", job_id, e.what());
      return 0;
    }
    slurm_error("unilab-mps: %s", e.what());
    // Slurm ignores a failing task_init of an `optional` plugin and would
    // exec the task unbound (fail open). We run in the task's own process
    // just before exec: end it the way slurmstepd ends a task whose
    // `required` plugin failed (exec_task: error, then _exit(1)).
    _exit(1);
  }
}

int remote_task_exit(spank_t sp, int, char**) {
  if (!state().requested) return 0;  // jobs without the option: untouched
  uint32_t job_id = 0;
  uid_t uid = 0;
  if (spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS || spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS) return 0;
  try {
    // slurmstepd's own environment holds neither the task's pipe directory
    // nor SLURMD_NODENAME (set in the task's process): every daemon of the
    // job in this node's store, trusted as the task path trusts them. A
    // fault is said once whichever task finds it.
    const std::string job = std::to_string(job_id);
    // A task killed with its job (cancel, time limit) must not report the
    // teardown's own kills of the daemon and its servers as faults.
    int status = 0;
    std::optional<int> exit_status;
    if (spank_get_item(sp, S_TASK_EXIT_STATUS, &status) == ESPANK_SUCCESS) exit_status = status;
    std::vector<std::string> problems;
    for (const auto& f : task_exit_faults(state().config, job, uid, exit_status, &problems)) {
      // slurmstepd's errors go to the slurmd log and to the step's stderr
      // (its log is set up on task 0's stderr), as its own OOM notice does.
      slurm_error("unilab-mps: %s", escape_control(fault_message(job, f.node, f)).c_str());
    }
    for (const auto& p : problems) slurm_verbose("unilab-mps: job %u: %s", job_id, escape_control(p).c_str());
  } catch (const std::exception& e) {
    slurm_verbose("unilab-mps: job %u: faults not checked at task exit: %s", job_id, e.what());
  }
  return 0;
}

}  // namespace unilab::mps::spank
