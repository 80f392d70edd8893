// The job prolog: the node's GPUs mapped, one daemon per GPU (or one for
// all) started as the job's user, recorded, and placed in the job's cgroup.
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
#include "common/slurm/node_probe.hpp"
#include "common/slurm/slurm_conf_path.hpp"
#include "common/slurm/slurm_files.hpp"

namespace unilab::mps {

namespace {

std::string read_gres_conf(const std::string& path) {
  auto [dir, file] = split_parent(path);
  Fd d(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!d) throw CudaMpsError(fmt::format("cannot open {}: {}; set gres_conf= in plugstack.conf", dir, std::strerror(errno)));
  auto text = read_file_at(d.get(), file, 4 << 20);
  if (!text) throw CudaMpsError(fmt::format("{} does not exist; set gres_conf= in plugstack.conf", path));
  return *text;
}

// The node's GPUs in GRES order (the one nvidia-smi call of the job; two
// more where a GPU has MIG enabled), after checking that every GRES index
// of the job is one of them. `notes` gets where Slurm's own pairing of
// indices and UUIDs overrode gres.conf's order.
std::vector<NodeGpu> job_node_gpus(Services& s, const PluginConfig& cfg, const JobContext& job, const std::vector<int>& job_gpus,
                                   std::vector<std::string>& notes) {
  GresConf conf = parse_gres_conf(read_gres_conf(gres_conf_path(cfg, job.slurm_conf)), job.node);
  // GRES indices follow slurm.conf's Gres= types, not gres.conf's lines.
  try {
    SystemNodeProbe probe;
    const std::string slurm_conf = job.slurm_conf ? *job.slurm_conf : locate_slurm_conf().path;
    if (auto gres = node_gres(read_slurm_conf(probe, slurm_conf), job.node)) order_gres_as_slurm(conf, *gres);
  } catch (const CudaMpsError& e) {
    notes.push_back(fmt::format("GRES indices taken in gres.conf's order: {}", e.what()));
  }
  std::vector<GpuIdentity> gpus = discover_gpus(s.runner, cfg.tools);  // the one nvidia-smi call
  // The driver's MIG capability minors, read only where MIG is in play.
  MigCaps caps;
  if (std::any_of(gpus.begin(), gpus.end(), [](const auto& g) { return g.mig.has_value(); }) ||
      std::any_of(conf.gpus.begin(), conf.gpus.end(), [](const auto& e) { return e.files.size() > 1; })) {
    caps = read_mig_caps(cfg.tools.driver_proc + "/nvidia-caps/mig-minors");
  }
  std::vector<NodeGpu> node_gpus = map_node_gpus(conf, gpus, device_minor, caps);
  for (auto& n : apply_slurm_uuids(node_gpus, job_gpus, job.cuda_visible_devices, gpus, caps)) notes.push_back(std::move(n));
  for (int idx : job_gpus) {
    if (idx < 0 || static_cast<size_t>(idx) >= node_gpus.size()) {
      throw CudaMpsError(fmt::format("SLURM_JOB_GPUS names GRES index {} but gres.conf lists {} GPU(s) for node {}", idx,
                                     node_gpus.size(), job.node));
    }
  }
  std::vector<std::string> job_uuids;
  for (int idx : job_gpus) job_uuids.push_back(node_gpus[static_cast<size_t>(idx)].uuid);
  require_gpus_suit_mps(gpus, job_uuids);  // Prohibited or MIG: refused now, not CUDA error 805 in the job
  return node_gpus;
}

// One daemon per job GPU (auto) or one for all of them (multi).
std::vector<StartRequest> job_start_requests(const PluginConfig& cfg, const JobContext& job, const JobRequest& req,
                                             const std::vector<int>& job_gpus, const std::vector<NodeGpu>& node_gpus,
                                             const std::optional<ContainmentPlan>& plan) {
  std::vector<std::vector<int>> groups;
  if (req.mode == JobMode::kMulti) {
    groups.push_back(job_gpus);
  } else {
    for (int idx : job_gpus) groups.push_back({idx});
  }
  if (req.mode == JobMode::kMulti && job_gpus.size() > 1) {
    for (int idx : job_gpus) {
      const NodeGpu& g = node_gpus[static_cast<size_t>(idx)];
      if (!g.mig) continue;
      throw CudaMpsError(fmt::format("--unilab-mps=multi runs one daemon over all of job {}'s GPUs on node {}, but GRES index {} "
                                     "is MIG device {}, and NVIDIA runs MPS on MIG as one daemon per MIG device; use "
                                     "--unilab-mps (one daemon per GPU or MIG slice)",
                                     job.job_id, job.node, idx, g.uuid));
    }
  }
  std::vector<StartRequest> out;
  for (const auto& group : groups) {
    StartRequest sr;
    const std::string suffix = req.mode == JobMode::kMulti ? "multi" : fmt::format("gpu{}", group[0]);
    static_cast<DaemonSpec&>(sr) = job_daemon_spec(job, suffix);
    sr.directory_name = job_run_entry(job.job_id, job.node, suffix);
    sr.topology_mode = group.size() > 1     ? TopologyMode::kSingleTaskMulti
                       : groups.size() > 1 ? TopologyMode::kPerGpu
                                           : TopologyMode::kSingle;
    for (int idx : group) sr.gpu_uuids.push_back(node_gpus[static_cast<size_t>(idx)].uuid);
    sr.base_directory = cfg.run_dir;
    sr.slurm = SlurmBinding{job.job_id, job.node, req.mode, group, node_gpus};
    sr.limits = req.limits;
    sr.containment = plan;
    sr.private_fs = cfg.dir_size;
    sr.start_timeout = cfg.start_timeout;
    out.push_back(std::move(sr));
  }
  return out;
}

// Moves the started daemons into the job's cgroup (or arranges that they
// join it once Slurm creates it); the line to log, or CudaMpsError.
std::string contain_job_daemons(const PluginConfig& cfg, const JobContext& job, const ContainmentPlan& plan, bool holding,
                                const std::vector<DaemonRecord>& started) {
  std::vector<ProcessIdentity> ids;
  for (const auto& r : started) ids.push_back(r.identity());
  bool deferred = false;
  auto errors = contain_daemons(plan, job.node, job.job_id, holding, ids, cfg.start_timeout + kContainGrace, &deferred);
  if (!errors.empty()) {
    throw CudaMpsError(fmt::format("cannot move job {}'s MPS daemons into the job's cgroup: {}", job.job_id, join(errors, "; ")));
  }
  return deferred ? fmt::format("daemons of job {} join cgroup {} once Slurm creates it (tasks wait for that)", job.job_id,
                                plan.job_cgroup)
                  : fmt::format("daemons of job {} are in cgroup {}", job.job_id, plan.job_cgroup);
}

}  // namespace

std::optional<ContainmentPlan> job_containment_plan(const PluginConfig& cfg, const JobContext& job) {
  if (cfg.contain == "off") return std::nullopt;
  const std::string conf = job.slurm_conf ? *job.slurm_conf : locate_slurm_conf().path;
  CgroupSite site;
  try {
    site = read_cgroup_site(conf);
  } catch (const CudaMpsError& e) {
    throw CudaMpsError(fmt::format("cannot tell whether this node confines jobs with cgroups ({}); set SLURM_CONF for slurmd, "
                                   "or contain=off in plugstack.conf if the site uses no cgroup plugin",
                                   e.what()));
  }
  SystemCgroupFs fs;
  SystemProcReader proc;
  return plan_containment(site, cfg.contain, job.uid, job.job_id, proc.cgroup(getpid()).value_or(""), fs, job.sluid);
}

PrologOutcome run_job_prolog(Services& s, const PluginConfig& cfg, const JobContext& job, const JobRequest& req) {
  PrologOutcome out;
  std::vector<int> job_gpus = parse_gpu_index_list(job.job_gpus.value_or(""));
  if (job_gpus.empty()) {
    // Not a node failure: the task path tells the user what to request.
    out.note = fmt::format("job {} asked for MPS but has no GPU on node {}: nothing started", job.job_id, job.node);
    return out;
  }
  std::vector<std::string> pairing;
  std::vector<NodeGpu> node_gpus = job_node_gpus(s, cfg, job, job_gpus, pairing);
  RecordStore store = slurm_record_store(cfg);
  // A requeued job keeps its id: clear what an interrupted earlier run left.
  EpilogOutcome earlier;
  clean_job_node(s, cfg, job, earlier, "prolog (what an earlier run of the requeued job left)");
  if (!earlier.ok()) {
    throw CudaMpsError(fmt::format("cannot clear what an earlier run of job {} left: {}", job.job_id, join(earlier.errors, "; ")));
  }
  out.warnings = std::move(earlier.warnings);
  out.faults = std::move(earlier.faults);
  out.warnings.insert(out.warnings.end(), pairing.begin(), pairing.end());
  // Decided before anything starts: a node that constrains devices but
  // cannot put the daemon in the job refuses the job here.
  std::optional<ContainmentPlan> plan = job_containment_plan(cfg, job);
  auto requests = job_start_requests(cfg, job, req, job_gpus, node_gpus, plan);
  // Born contained: in the job's cgroups, or in holding ones until Slurm
  // makes the job's (containment.hpp, prepare_launch_cgroups).
  LaunchCgroups born;
  SystemCgroupFs fs;
  SystemProcReader proc;
  if (plan) born = prepare_launch_cgroups(*plan, job.node, job.job_id, proc.cgroup(getpid()).value_or(""), fs);
  for (auto& r : requests) r.launch_cgroups = born.procs_files;
  auto release = [&] {
    if (born.holding) release_holding_cgroups(*plan, job.job_id, proc, s.signaller, fs, cfg.stop_timeout);
  };
  try {
    out.started = start_daemons(s, cfg.tools, store, requests, cfg.stop_timeout);
  } catch (const CudaMpsError&) {
    release();
    throw;
  }
  if (plan) {
    try {
      out.warnings.push_back(contain_job_daemons(cfg, job, *plan, born.holding, out.started));
    } catch (const CudaMpsError&) {
      stop_daemons(s, cfg.tools, store, out.started, cfg.stop_timeout);
      release();
      throw;
    }
  }
  return out;
}

}  // namespace unilab::mps
