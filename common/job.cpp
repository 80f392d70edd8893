#include "common/job.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <set>

#include <fmt/format.h>

#include "common/errors.hpp"
#include "common/gpu.hpp"
#include "common/gres.hpp"
#include "common/safefs.hpp"
#include "common/topology.hpp"

namespace unilab::mps {
namespace {

template <typename T>
T parse_id(const std::optional<std::string>& v, const char* name) {
  T out{};
  if (!v || v->empty()) throw CudaMpsError(fmt::format("{} is not set; is this running as a Slurm prolog/epilog?", name));
  auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
  if (ec != std::errc() || p != v->data() + v->size()) throw CudaMpsError(fmt::format("{}='{}' is not a number", name, *v));
  return out;
}

std::string read_gres_conf(const std::string& path) {
  auto [dir, file] = split_parent(path);
  Fd d(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!d) throw CudaMpsError(fmt::format("cannot open {}: {}; set gres_conf= in plugstack.conf", dir, std::strerror(errno)));
  auto text = read_file_at(d.get(), file, 4 << 20);
  if (!text) throw CudaMpsError(fmt::format("{} does not exist; set gres_conf= in plugstack.conf", path));
  return *text;
}

std::string describe_indices(const std::vector<int>& v) {
  std::vector<std::string> s;
  for (int i : v) s.push_back(std::to_string(i));
  return join(s, ",");
}

}  // namespace

Getenv process_getenv() {
  return [](const char* key) -> std::optional<std::string> {
    const char* v = std::getenv(key);
    return v == nullptr ? std::nullopt : std::optional<std::string>(v);
  };
}

JobContext job_context_from_env(const Getenv& env) {
  JobContext j;
  j.job_id = std::to_string(parse_id<unsigned long>(env("SLURM_JOB_ID"), "SLURM_JOB_ID"));
  j.uid = parse_id<uid_t>(env("SLURM_JOB_UID"), "SLURM_JOB_UID");
  j.gid = parse_id<gid_t>(env("SLURM_JOB_GID"), "SLURM_JOB_GID");
  j.job_gpus = env("SLURM_JOB_GPUS");
  auto node = env("SLURMD_NODENAME");
  j.node = node && !node->empty() ? *node : current_host();
  j.slurm_conf = env("SLURM_CONF");
  return j;
}

std::string spank_option_env_name(const std::string& option) {
  // Slurm: SPANK__SLURM_SPANK_OPTION_<plugin>_<option>, non-alphanumerics -> '_'.
  std::string name = "SPANK__SLURM_SPANK_OPTION_unilab_mps_" + option;
  for (size_t i = sizeof("SPANK__SLURM_SPANK_OPTION_") - 1; i < name.size(); ++i) {
    if (!std::isalnum(static_cast<unsigned char>(name[i]))) name[i] = '_';
  }
  return name;
}

std::optional<JobRequest> job_request_from_env(const Getenv& env, const PluginConfig& cfg) {
  auto mode = env(spank_option_env_name("unilab-mps").c_str());
  if (!mode) return std::nullopt;
  JobRequest req;
  req.mode = parse_mode(mode->c_str());
  if (auto t = env(spank_option_env_name("unilab-mps-threads").c_str()); t && *t != "(null)") {
    req.limits.active_thread_percentage = parse_thread_percentage(*t, cfg.max_threads);
  } else if (cfg.default_threads) {
    req.limits.active_thread_percentage = cfg.default_threads;
  }
  if (auto m = env(spank_option_env_name("unilab-mps-mem").c_str()); m && *m != "(null)") {
    req.limits.pinned_mem_limit = parse_mem_limit(*m, cfg.max_mem_bytes);
  }
  return req;
}

RecordStore slurm_record_store(const PluginConfig& cfg) { return RecordStore(cfg.state_dir, 0, 0, 0755, 0644); }

std::string job_daemon_name(const std::string& job_id, const std::string& node, const std::string& suffix) {
  std::string name = fmt::format("job{}.{}.{}", job_id, node, suffix);
  if (!is_safe_name(name)) {
    throw CudaMpsError(fmt::format("cannot name a daemon for job {} on node '{}': the node name has unsupported characters",
                                   job_id, node));
  }
  return name;
}

std::vector<DaemonRecord> job_records(RecordStore& store, const std::string& job_id, const std::string& node,
                                      std::optional<uid_t> uid, std::vector<std::string>* problems) {
  auto listing = store.list(uid, node);
  std::vector<DaemonRecord> out;
  for (auto& r : listing.records) {
    if (r.job_id == job_id && r.slurm) out.push_back(std::move(r));
  }
  if (problems != nullptr) {
    const std::string prefix = fmt::format("job{}.{}.", job_id, node);
    for (const auto& p : listing.problems) {
      if (p.file.starts_with(prefix)) problems->push_back(fmt::format("record {}/{} ignored: {}", store.root(), p.file, p.reason));
    }
  }
  return out;
}

PrologOutcome run_job_prolog(Services& s, const PluginConfig& cfg, const JobContext& job, const JobRequest& req) {
  PrologOutcome out;
  std::vector<int> job_gpus = parse_gpu_index_list(job.job_gpus.value_or(""));
  if (job_gpus.empty()) {
    // Not a node failure: the task path tells the user what to request.
    out.note = fmt::format("job {} asked for MPS but has no GPU on node {}: nothing started", job.job_id, job.node);
    return out;
  }
  GresConf conf = parse_gres_conf(read_gres_conf(gres_conf_path(cfg, job.slurm_conf)), job.node);
  std::vector<GpuIdentity> gpus = discover_gpus(s.runner, cfg.tools.nvidia_smi);  // the one nvidia-smi call
  std::vector<NodeGpu> node_gpus = map_node_gpus(conf, gpus);
  for (int idx : job_gpus) {
    if (idx < 0 || static_cast<size_t>(idx) >= node_gpus.size()) {
      throw CudaMpsError(fmt::format("SLURM_JOB_GPUS names GRES index {} but gres.conf lists {} GPU(s) for node {}", idx,
                                     node_gpus.size(), job.node));
    }
  }
  RecordStore store = slurm_record_store(cfg);
  // A requeued job keeps its id: clear what an interrupted earlier run left.
  for (const auto& old : job_records(store, job.job_id, job.node, std::nullopt)) {
    try {
      stop_daemon(s, cfg.tools, store, old, cfg.stop_timeout);
    } catch (const StaleCudaMpsDaemonError&) {
    }
  }
  std::vector<std::vector<int>> groups;
  if (req.mode == "multi") {
    groups.push_back(job_gpus);
  } else {
    for (int idx : job_gpus) groups.push_back({idx});
  }
  try {
    for (const auto& group : groups) {
      StartRequest sr;
      sr.name = job_daemon_name(job.job_id, job.node, req.mode == "multi" ? "multi" : fmt::format("gpu{}", group[0]));
      sr.uid = job.uid;
      sr.gid = job.gid;
      sr.host = job.node;
      sr.topology_mode = group.size() > 1 ? kSingleTaskMultiGpu : (groups.size() > 1 ? kTaskPerGpu : kSingleGpu);
      for (int idx : group) sr.gpu_uuids.push_back(node_gpus[static_cast<size_t>(idx)].uuid);
      sr.base_directory = cfg.run_dir;
      sr.job_id = job.job_id;
      sr.slurm = SlurmBinding{job.job_id, job.node, req.mode, group, node_gpus};
      sr.limits = req.limits;
      sr.start_timeout = cfg.start_timeout;
      out.started.push_back(start_daemon(s, cfg.tools, store, sr));
    }
  } catch (const CudaMpsError&) {
    for (const auto& r : out.started) {
      try {
        stop_daemon(s, cfg.tools, store, r, cfg.stop_timeout);
      } catch (const CudaMpsError&) {
      }
    }
    throw;
  }
  return out;
}

EpilogOutcome run_job_epilog(Services& s, const PluginConfig& cfg, const JobContext& job) {
  EpilogOutcome out;
  RecordStore store = slurm_record_store(cfg);
  std::vector<DaemonRecord> records;
  try {
    records = job_records(store, job.job_id, job.node, std::nullopt, &out.warnings);
  } catch (const CudaMpsError& e) {
    // An untrustworthy state dir must not be acted on, and is the admin's to fix.
    out.errors.push_back(e.what());
    return out;
  }
  for (const auto& r : records) {
    try {
      StopReport rep = stop_daemon(s, cfg.tools, store, r, cfg.stop_timeout);
      if (!rep.detail.empty()) out.warnings.push_back(fmt::format("daemon {}: {}", r.name, rep.detail));
      out.stopped.push_back(std::move(rep));
    } catch (const StaleCudaMpsDaemonError& e) {
      out.warnings.push_back(e.what());
      out.stopped.push_back({r.name, r.pid, "stale", e.what()});
    } catch (const CudaMpsError& e) {
      out.errors.push_back(e.what());
    }
  }
  return out;
}

bool SystemDeviceAccess::denied(const std::string& device) {
  int fd = open(device.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd >= 0) {
    close(fd);
    return false;
  }
  // ENXIO/ENODEV: allowed, but no driver behind the node (e.g. test devices).
  return errno == EPERM || errno == EACCES;
}

TaskEnvironment compute_task_environment(const std::vector<DaemonRecord>& records, const TaskContext& task,
                                         DeviceAccess& devices, ProcReader& proc, bool require_daemon) {
  if (records.empty()) {
    if (parse_gpu_index_list(task.job_gpus.value_or("")).empty()) {
      throw CudaMpsError(fmt::format("--unilab-mps needs GPUs, but job {} has none on node {}; request them with --gres=gpu:N or --gpus=N",
                                     task.job_id, task.node));
    }
    throw CudaMpsError(fmt::format("no MPS daemon was started for job {} on node {}; give --unilab-mps to sbatch/salloc (the "
                                   "allocation), not only to srun, and check the slurmd log",
                                   task.job_id, task.node));
  }
  const std::vector<NodeGpu>& node_gpus = records.front().slurm->node_gpus;
  std::set<int> job_set;
  for (const auto& r : records) job_set.insert(r.slurm->gres_indices.begin(), r.slurm->gres_indices.end());

  // Device constraint is active when some GPU device file of the node is denied.
  std::vector<const NodeGpu*> allowed;
  bool constrained = false;
  for (const auto& g : node_gpus) {
    if (devices.denied(g.device)) {
      constrained = true;
    } else {
      allowed.push_back(&g);
    }
  }
  std::vector<int> task_gpus;
  auto add = [&](int idx) {
    if (std::find(task_gpus.begin(), task_gpus.end(), idx) == task_gpus.end()) task_gpus.push_back(idx);
  };
  std::optional<std::string> cvd = task.cuda_visible_devices;
  if (cvd && !cvd->empty()) {
    for (const auto& e : split_mask(*cvd)) {
      if (looks_like_gpu_uuid(e)) {  // already rewritten (nested step): map back by UUID
        auto it = std::find_if(node_gpus.begin(), node_gpus.end(),
                               [&](const auto& g) { return canonicalize_gpu_uuid(g.uuid) == canonicalize_gpu_uuid(e); });
        if (it == node_gpus.end()) throw CudaMpsError(fmt::format("CUDA_VISIBLE_DEVICES entry {} is not a GPU of node {}", e, task.node));
        add(it->gres_index);
        continue;
      }
      int n = -1;
      auto [p, ec] = std::from_chars(e.data(), e.data() + e.size(), n);
      if (ec != std::errc() || p != e.data() + e.size() || n < 0) {
        throw CudaMpsError(fmt::format("cannot interpret CUDA_VISIBLE_DEVICES entry '{}' set by Slurm", e));
      }
      if (constrained) {
        if (static_cast<size_t>(n) >= allowed.size()) {
          throw CudaMpsError(fmt::format("CUDA_VISIBLE_DEVICES entry {} exceeds the {} GPU device(s) this task may open", n,
                                         allowed.size()));
        }
        add(allowed[static_cast<size_t>(n)]->gres_index);
      } else {
        add(n);
      }
    }
  } else if (constrained) {
    for (const auto* g : allowed) add(g->gres_index);
  } else {
    auto list = parse_gpu_index_list(task.step_gpus && !task.step_gpus->empty() ? *task.step_gpus : task.job_gpus.value_or(""));
    for (int n : list) add(n);
  }
  if (task_gpus.empty()) {
    throw CudaMpsError(fmt::format("this task of job {} has no GPU on node {}; request GPUs for the step (e.g. --gres=gpu:1)",
                                   task.job_id, task.node));
  }
  for (int idx : task_gpus) {
    if (!job_set.count(idx)) {
      throw CudaMpsError(fmt::format("the task's GPU (GRES index {}) is not one of job {}'s GPUs on node {}", idx, task.job_id,
                                     task.node));
    }
  }
  std::vector<std::string> uuids;
  for (int idx : task_gpus) {
    auto it = std::find_if(node_gpus.begin(), node_gpus.end(), [&](const auto& g) { return g.gres_index == idx; });
    if (it == node_gpus.end()) throw CudaMpsError(fmt::format("GRES index {} is missing from job {}'s GPU table", idx, task.job_id));
    uuids.push_back(it->uuid);
  }
  TaskEnvironment env;
  env.gres_indices = task_gpus;
  std::set<int> want(task_gpus.begin(), task_gpus.end());
  const DaemonRecord* hit = nullptr;
  for (const auto& r : records) {
    if (std::set<int>(r.slurm->gres_indices.begin(), r.slurm->gres_indices.end()) == want) hit = &r;
  }
  if (hit == nullptr && !require_daemon) {
    env.set = {{"CUDA_VISIBLE_DEVICES", join(uuids, ",")}};
    env.note = fmt::format("no single daemon serves GPU(s) {}; the job's sruns bind each task to its daemon",
                           describe_indices(task_gpus));
    return env;
  }
  if (hit == nullptr) {
    const std::string& mode = records.front().slurm->mode;
    if (mode == "multi") {
      throw CudaMpsError(fmt::format("this task uses GPU(s) {} but --unilab-mps=multi runs one daemon for all of the job's GPUs "
                                     "on the node ({}); use --unilab-mps (one daemon per GPU) with --gpus-per-task=1, or give "
                                     "every task all the GPUs",
                                     describe_indices(task_gpus), describe_indices(std::vector<int>(job_set.begin(), job_set.end()))));
    }
    throw CudaMpsError(fmt::format("this task uses {} GPUs ({}) but --unilab-mps runs one daemon per GPU; use --unilab-mps=multi "
                                   "for multi-GPU tasks, or --gpus-per-task=1",
                                   task_gpus.size(), describe_indices(task_gpus)));
  }
  if (!daemon_process_is_live(*hit, proc)) {
    throw CudaMpsError(fmt::format("the MPS daemon of job {} for GPU(s) {} (pid {}) is no longer running; see {}/control.log",
                                   task.job_id, describe_indices(task_gpus), hit->pid, hit->log_directory));
  }
  env.set = {{"CUDA_VISIBLE_DEVICES", join(uuids, ",")},
             {"CUDA_MPS_PIPE_DIRECTORY", hit->pipe_directory},
             {"CUDA_MPS_LOG_DIRECTORY", hit->log_directory}};
  env.daemon_name = hit->name;
  return env;
}

}  // namespace unilab::mps
