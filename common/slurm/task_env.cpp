// Each task's environment: its GPUs (as UUIDs) and the pipe and log
// directories of the daemon that serves exactly them, from the records alone.
#include "common/slurm/job.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <set>
#include <string_view>

#include <fmt/format.h>

#include "common/mps/errors.hpp"
#include "common/mps/gpu.hpp"
#include "common/mps/mps_control.hpp"
#include "common/mps/nvidia_checks.hpp"
#include "common/mps/safefs.hpp"
#include "common/mps/topology.hpp"
#include "common/slurm/containment.hpp"
#include "common/slurm/gres.hpp"
#include "common/slurm/slurm_conf_path.hpp"

namespace unilab::mps {

namespace {

// The task path found no record of the job on this node: why, for the user.
[[noreturn]] void refuse_no_records(const TaskContext& task) {
  // Tasks of an srun-created allocation have SLURM_STEP_GPUS but no
  // SLURM_JOB_GPUS; CUDA_VISIBLE_DEVICES proves nothing (the user's
  // environment can carry one).
  if (parse_gpu_index_list(task.job_gpus.value_or("")).empty() && parse_gpu_index_list(task.step_gpus.value_or("")).empty()) {
    throw CudaMpsError(fmt::format("--unilab-mps needs GPUs, but job {} has none on node {}; request them with --gres=gpu:N or --gpus=N",
                                   task.job_id, task.node));
  }
  if (task.prolog_runs_in_job) {
    throw CudaMpsError(fmt::format("no MPS daemon was started for job {} on node {}: the node has PrologFlags=RunInJob, where Slurm "
                                   "calls no SPANK job prolog, so only a Prolog= running unilab-mps-prolog starts daemons; either "
                                   "it is not configured (ask the admin: 'unilab-mps doctor --node' names the fix) or it failed "
                                   "(the slurmd log says why)",
                                   task.job_id, task.node));
  }
  throw CudaMpsError(fmt::format("no MPS daemon was started for job {} on node {}: the job prolog failed there (the slurmd log "
                                 "says why after 'unilab-mps: job {} prolog failed'), or --unilab-mps was given only to srun; "
                                 "give it to sbatch/salloc (the allocation)",
                                 task.job_id, task.node, task.job_id));
}

// The node's GPU device files this task may open; device constraint is
// active when some of them is denied.
struct VisibleDevices {
  std::vector<const NodeGpu*> allowed;
  bool constrained = false;
};

VisibleDevices visible_devices(const std::vector<NodeGpu>& node_gpus, DeviceAccess& devices) {
  VisibleDevices v;
  for (const auto& g : node_gpus) {
    if (devices.denied(g.device)) {
      v.constrained = true;
    } else {
      v.allowed.push_back(&g);
    }
  }
  return v;
}

// The GRES index one CUDA_VISIBLE_DEVICES entry set by Slurm names.
int gres_index_of_entry(const std::string& e, const TaskContext& task, const std::vector<NodeGpu>& node_gpus,
                        const VisibleDevices& vis) {
  if (looks_like_gpu_uuid(e)) {  // already rewritten (nested step): map back by UUID
    auto it = std::find_if(node_gpus.begin(), node_gpus.end(),
                           [&](const auto& g) { return canonicalize_gpu_uuid(g.uuid) == canonicalize_gpu_uuid(e); });
    if (it == node_gpus.end()) throw CudaMpsError(fmt::format("CUDA_VISIBLE_DEVICES entry {} is not a GPU of node {}", e, task.node));
    return it->gres_index;
  }
  int n = -1;
  auto [p, ec] = std::from_chars(e.data(), e.data() + e.size(), n);
  if (ec != std::errc() || p != e.data() + e.size() || n < 0) {
    throw CudaMpsError(fmt::format("cannot interpret CUDA_VISIBLE_DEVICES entry '{}' set by Slurm", e));
  }
  if (!vis.constrained) return n;
  if (static_cast<size_t>(n) >= vis.allowed.size()) {
    throw CudaMpsError(fmt::format("CUDA_VISIBLE_DEVICES entry {} exceeds the {} GPU device(s) this task may open", n,
                                   vis.allowed.size()));
  }
  return vis.allowed[static_cast<size_t>(n)]->gres_index;
}

// The task's GPUs as GRES indices, each once, in the order Slurm gave them.
std::vector<int> task_gpu_indices(const TaskContext& task, const std::vector<NodeGpu>& node_gpus, const VisibleDevices& vis) {
  std::vector<int> out;
  auto add = [&](int idx) {
    if (std::find(out.begin(), out.end(), idx) == out.end()) out.push_back(idx);
  };
  const std::optional<std::string>& cvd = task.cuda_visible_devices;
  if (cvd && !cvd->empty()) {
    for (const auto& e : split_mask(*cvd)) add(gres_index_of_entry(e, task, node_gpus, vis));
    // Under device constraint a GPU the task may not open is not its own.
    // Slurm before 23.11.4 gave every task of a per-task binding the same
    // (first) MIG UUID while each task's cgroup allowed its own slice: the
    // device files decide then, as they do for local indices.
    auto allowed = [&](int idx) {
      return std::any_of(vis.allowed.begin(), vis.allowed.end(), [&](const NodeGpu* g) { return g->gres_index == idx; });
    };
    if (vis.constrained && !vis.allowed.empty() && !std::all_of(out.begin(), out.end(), allowed)) {
      out.clear();
      for (const auto* g : vis.allowed) add(g->gres_index);
    }
  } else if (vis.constrained) {
    for (const auto* g : vis.allowed) add(g->gres_index);
  } else {
    for (int n : parse_gpu_index_list(task.step_gpus && !task.step_gpus->empty() ? *task.step_gpus : task.job_gpus.value_or(""))) {
      add(n);
    }
  }
  if (out.empty()) {
    throw CudaMpsError(fmt::format("this task of job {} has no GPU on node {}; request GPUs for the step (e.g. --gres=gpu:1)",
                                   task.job_id, task.node));
  }
  return out;
}

// The UUIDs of the task's GPUs, each of which must be one of the job's.
std::vector<std::string> task_gpu_uuids(const std::vector<DaemonRecord>& records, const TaskContext& task,
                                        const std::vector<int>& task_gpus) {
  std::set<int> job_set;
  for (const auto& r : records) job_set.insert(r.slurm->gres_indices.begin(), r.slurm->gres_indices.end());
  const std::vector<NodeGpu>& node_gpus = records.front().slurm->node_gpus;
  std::vector<std::string> uuids;
  for (int idx : task_gpus) {
    if (!job_set.count(idx)) {
      throw CudaMpsError(fmt::format("the task's GPU (GRES index {}) is not one of job {}'s GPUs on node {}", idx, task.job_id,
                                     task.node));
    }
  }
  for (int idx : task_gpus) {
    auto it = std::find_if(node_gpus.begin(), node_gpus.end(), [&](const auto& g) { return g.gres_index == idx; });
    if (it == node_gpus.end()) throw CudaMpsError(fmt::format("GRES index {} is missing from job {}'s GPU table", idx, task.job_id));
    uuids.push_back(it->uuid);
  }
  return uuids;
}

// The record whose GPUs are exactly the task's (the last such), or null.
const DaemonRecord* daemon_serving(const std::vector<DaemonRecord>& records, const std::vector<int>& task_gpus) {
  std::set<int> want(task_gpus.begin(), task_gpus.end());
  const DaemonRecord* hit = nullptr;
  for (const auto& r : records) {
    if (std::set<int>(r.slurm->gres_indices.begin(), r.slurm->gres_indices.end()) == want) hit = &r;
  }
  return hit;
}

// No daemon serves exactly the task's GPUs: the option or binding that would.
[[noreturn]] void refuse_no_daemon(const std::vector<DaemonRecord>& records, const std::vector<int>& task_gpus) {
  if (records.front().slurm->mode == JobMode::kMulti) {
    std::set<int> job_set;
    for (const auto& r : records) job_set.insert(r.slurm->gres_indices.begin(), r.slurm->gres_indices.end());
    throw CudaMpsError(fmt::format("this task uses GPU(s) {} but --unilab-mps=multi runs one daemon for all of the job's GPUs "
                                   "on the node ({}); use --unilab-mps (one daemon per GPU) with --gpus-per-task=1, or give "
                                   "every task all the GPUs",
                                   describe_indices(task_gpus), describe_indices(std::vector<int>(job_set.begin(), job_set.end()))));
  }
  throw CudaMpsError(fmt::format("this task uses {} GPUs ({}) but --unilab-mps runs one daemon per GPU; use --unilab-mps=multi "
                                 "for multi-GPU tasks, or --gpus-per-task=1",
                                 task_gpus.size(), describe_indices(task_gpus)));
}

}  // namespace

bool SystemDeviceAccess::denied(const std::string& device) {
  int fd = open(device.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd >= 0) {
    close(fd);
    return false;
  }
  // ENXIO/ENODEV: allowed, but no driver behind the node (e.g. test devices).
  return errno == EPERM || errno == EACCES;
}

int auto_thread_share(unsigned local_tasks, size_t task_gpus, size_t node_gpus, const std::optional<double>& site_max) {
  const size_t tasks = std::max<size_t>(local_tasks, 1), mine = std::max<size_t>(task_gpus, 1), all = std::max(node_gpus, mine);
  const size_t sharers = std::max<size_t>(1, (tasks * mine + all - 1) / all);
  int share = std::max(1, static_cast<int>(100 / sharers));
  if (site_max) share = std::max(1, std::min(share, static_cast<int>(*site_max)));
  return share;
}

TaskEnvironment compute_task_environment(const std::vector<DaemonRecord>& records, const TaskContext& task,
                                         DeviceAccess& devices, ProcReader& proc, bool require_daemon) {
  if (records.empty()) refuse_no_records(task);
  for (const auto& r : records) {
    if (!r.slurm) throw CudaMpsError(fmt::format("record {} of job {} has no Slurm binding; it is not the plugin's", r.name, task.job_id));
  }
  const std::vector<NodeGpu>& node_gpus = records.front().slurm->node_gpus;
  const std::vector<int> task_gpus = task_gpu_indices(task, node_gpus, visible_devices(node_gpus, devices));
  const std::vector<std::string> uuids = task_gpu_uuids(records, task, task_gpus);
  TaskEnvironment env;
  env.gres_indices = task_gpus;
  const DaemonRecord* hit = daemon_serving(records, task_gpus);
  if (hit == nullptr && !require_daemon) {
    env.set = {{"CUDA_VISIBLE_DEVICES", join(uuids, ",")}};
    env.note = fmt::format("no single daemon serves GPU(s) {}; the job's sruns bind each task to its daemon",
                           describe_indices(task_gpus));
    return env;
  }
  if (hit == nullptr) refuse_no_daemon(records, task_gpus);
  if (!daemon_process_is_live(*hit, proc)) {
    throw CudaMpsError(fmt::format("the MPS daemon of job {} for GPU(s) {} (pid {}) is no longer running; see {}/control.log",
                                   task.job_id, describe_indices(task_gpus), hit->pid, hit->log_directory));
  }
  env.set = {{"CUDA_VISIBLE_DEVICES", join(uuids, ",")},
             {"CUDA_MPS_PIPE_DIRECTORY", hit->pipe_directory},
             {"CUDA_MPS_LOG_DIRECTORY", hit->log_directory}};
  if (hit->limits.active_thread_share_auto) {
    size_t job_gpus = 0;
    for (const auto& r : records) job_gpus += r.slurm->gres_indices.size();
    env.set.emplace_back("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
                         std::to_string(auto_thread_share(task.local_tasks, task_gpus.size(), job_gpus, task.site_max_threads)));
  }
  if (hit->limits.client_priority) env.set.emplace_back("CUDA_MPS_CLIENT_PRIORITY", client_priority_value(*hit->limits.client_priority));
  env.daemon_name = hit->name;
  env.daemon_pid = hit->pid;
  env.containment = hit->containment;
  return env;
}

}  // namespace unilab::mps
