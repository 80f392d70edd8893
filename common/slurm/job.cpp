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

// "job<ID>.<node>.": what every record name of the job on the node starts with.
std::string record_name_prefix(const std::string& job_id, const std::string& node) { return fmt::format("job{}.{}.", job_id, node); }

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

// Records named for a job on a node, split into the ones every field of
// which agrees (trusted) and the rest (corrupt, other schema, or naming
// another job, host or uid): those are never acted on.
struct JobRecordScan {
  std::vector<DaemonRecord> trusted;
  std::vector<RecordProblem> untrusted;
};

std::string disagreement(const DaemonRecord& r, const std::string& job_id, const std::string& node, std::optional<uid_t> uid,
                         const std::optional<std::string>& run_dir) {
  if (r.job_id != job_id || !r.slurm || r.slurm->job_id != job_id) return fmt::format("it does not name job {}", job_id);
  if (r.host != node || r.slurm->node != node) return fmt::format("it names host '{}', not node {}", r.host, node);
  if (uid && r.uid != *uid) return fmt::format("it names uid {}, not the job's uid {}", r.uid, *uid);
  if (run_dir) {
    // The prolog lays every daemon out as run_dir/<entry>/{pipe,log} and owns
    // exactly run_dir/<entry> (job_run_entry, or the record's own name where
    // earlier code wrote it). Anything else did not come from it, and root
    // must never remove, or send a daemon's commands to, what it names.
    const std::string suffix = r.name.substr(record_name_prefix(job_id, node).size());
    const DaemonDirectories mine = daemon_directories(*run_dir, job_run_entry(job_id, node, suffix));
    const DaemonDirectories legacy = daemon_directories(*run_dir, r.name);
    const DaemonDirectories& want = r.owned_directories == std::vector<std::string>{legacy.root} ? legacy : mine;
    if (r.owned_directories != std::vector<std::string>{want.root}) {
      return fmt::format("its owned_directories [{}] are not exactly {}", join(r.owned_directories, ", "), mine.root);
    }
    if (r.pipe_directory != want.pipe || r.log_directory != want.log) {
      return fmt::format("its pipe/log directories {} and {} are not {} and {}", r.pipe_directory, r.log_directory, want.pipe,
                         want.log);
    }
  }
  return {};
}

JobRecordScan scan_job_records(RecordStore& store, const std::string& job_id, const std::string& node, std::optional<uid_t> uid,
                               const std::optional<std::string>& run_dir) {
  JobRecordScan out;
  RecordListing listing = store.list(std::nullopt, std::nullopt);
  for (auto& r : listing.records) {
    if (!is_job_daemon_name(r.name, job_id, node)) continue;
    std::string why = disagreement(r, job_id, node, uid, run_dir);
    if (why.empty()) {
      out.trusted.push_back(std::move(r));
    } else {
      out.untrusted.push_back({record_file_name(r.name), why});
    }
  }
  for (auto& p : listing.problems) {
    const std::string ext = record_file_name("");
    if (p.file.ends_with(ext) && is_job_daemon_name(p.file.substr(0, p.file.size() - ext.size()), job_id, node)) {
      out.untrusted.push_back(std::move(p));
    }
  }
  return out;
}

// What the prolog would have recorded for run-dir entry `entry` (record
// name `name`), from the configuration and the job's own (Slurm-given)
// identity only, as a "starting" record: stop_daemon then finds the daemon
// through its pid file, verified by /proc (uid and pipe directory), never
// through a stored pid.
DaemonRecord orphan_record(const PluginConfig& cfg, const JobContext& job, const std::string& name, const std::string& entry) {
  DaemonRecord r;
  r.name = name;
  r.uid = job.uid;
  r.gid = job.gid;
  r.host = job.node;
  r.topology_mode = TopologyMode::kSingle;
  const DaemonDirectories dirs = daemon_directories(cfg.run_dir, entry);
  r.pipe_directory = dirs.pipe;
  r.log_directory = dirs.log;
  r.state = RecordState::kStarting;
  r.job_id = job.job_id;
  r.owned_directories = {dirs.root};
  return r;
}

// A daemon the epilog stops: a trusted record, or a run-dir entry named for
// the job that no trusted record covers (an orphan, with why it has no
// usable record).
struct CleanTarget {
  DaemonRecord record;
  bool orphan = false;
  std::string record_note;      // orphans: "no record" or why the record is not trusted
  bool had_record = false;      // orphans: an untrusted record file goes with the entry
};

// What a trusted record stops: the recorded daemon, or - when that process
// is gone but a daemon of the job still serves its pipe directory under
// another pid (the /proc proof of a "starting" record) - that one, since
// the directories are about to be removed.
CleanTarget trusted_target(Services& s, const DaemonRecord& r, EpilogOutcome& out) {
  CleanTarget t{r, false, "", false};
  if (r.state != RecordState::kStarting && check_identity(r.identity(), s.proc) != Liveness::kLive) {
    if (auto found = recover_starting_identity(r, s.proc)) {
      out.warnings.push_back(fmt::format("daemon {}: recorded pid {} is not it, but pid {} serves its pipe directory as uid {} "
                                         "(pid file + /proc): stopping that one",
                                         r.name, r.pid, found->pid, r.uid));
      t.record.state = RecordState::kStarting;
    }
  }
  return t;
}

// Entries of the run dir; a run dir others may write to (even sticky) could
// hold entries named for this job that are not the prolog's: refused.
std::vector<std::string> run_dir_entries(const PluginConfig& cfg, const JobContext& job, EpilogOutcome& out) {
  try {
    if (Fd dir = open_trusted_dir_if_exists(cfg.run_dir, geteuid(), Leaf::kPrivate)) return list_dir(dir.get());
  } catch (const CudaMpsError& e) {
    out.errors.push_back(fmt::format("cannot look for leftovers of job {} in {}: {}", job.job_id, cfg.run_dir, e.what()));
  }
  return {};
}

// Run-dir entries of the job without a trusted record; their untrusted
// records are taken out of `untrusted` (they go with the entry).
void add_orphan_targets(const PluginConfig& cfg, const JobContext& job, const std::string& store_root,
                        std::map<std::string, std::string>& untrusted, std::vector<CleanTarget>& targets, EpilogOutcome& out) {
  std::set<std::string> covered;  // entries a trusted record owns
  for (const auto& t : targets) {
    for (const auto& d : t.record.owned_directories) covered.insert(split_parent(d).second);
  }
  const std::string ext = record_file_name("");
  for (const auto& entry : run_dir_entries(cfg, job, out)) {
    auto suffix = job_run_entry_suffix(entry, job.job_id, job.node);
    if (covered.count(entry) || !suffix) continue;
    const std::string name = job_daemon_name(job.job_id, job.node, *suffix);
    CleanTarget t{orphan_record(cfg, job, name, entry), true, "no record", false};
    if (auto why = untrusted.find(name); why != untrusted.end()) {
      t.record_note = fmt::format("record {}/{}{} not trusted: {}", store_root, name, ext, why->second);
      t.had_record = true;
      untrusted.erase(why);
    }
    targets.push_back(std::move(t));
  }
}

void report_stop(const JobContext& job, const CleanTarget& t, const StopAttempt& a, EpilogOutcome& out) {
  if (!a.report) {
    if (!a.stale) {
      out.errors.push_back(a.error);
      return;
    }
    out.warnings.push_back(a.error);
    if (!t.orphan) out.stopped.push_back({t.record.name, t.record.pid, StopOutcome::kStale, a.error});
    return;
  }
  const StopReport& rep = *a.report;
  const std::string removed = t.had_record ? " and record" : "";
  if (t.orphan && rep.outcome == StopOutcome::kNotStarted) {
    out.warnings.push_back(fmt::format("{} of job {} ({}): no daemon runs there; directory{} removed", t.record.owned_directories[0],
                                       job.job_id, t.record_note, removed));
  } else if (t.orphan) {
    out.warnings.push_back(fmt::format("{} of job {} ({}): its daemon pid {} (found through its pid file, verified "
                                       "uid {} and pipe directory in /proc) stopped: {}; directory{} removed",
                                       t.record.owned_directories[0], job.job_id, t.record_note, rep.pid, job.uid, to_string(rep.outcome),
                                       removed));
  }
  if (!rep.detail.empty()) {
    out.warnings.push_back(t.orphan ? fmt::format("{}: {}", t.record.name, rep.detail)
                                    : fmt::format("daemon {}: {}", t.record.name, rep.detail));
  }
  out.stopped.push_back(rep);
}

// Untrusted records without a run-dir entry: nothing of theirs can run.
void remove_untrusted_records(RecordStore& store, const std::map<std::string, std::string>& untrusted, EpilogOutcome& out) {
  const std::string ext = record_file_name("");
  for (const auto& [name, reason] : untrusted) {
    try {
      store.remove_file(record_file_name(name));
      out.warnings.push_back(fmt::format("record {}/{}{} not trusted ({}): never used to signal anything; removed", store.root(),
                                         name, ext, reason));
    } catch (const CudaMpsError& e) {
      out.warnings.push_back(fmt::format("record {}/{}{} not trusted ({}): {}", store.root(), name, ext, reason, e.what()));
    }
  }
}

// Stops and removes everything job `job` left on this node (see
// run_job_epilog): every daemon at once, within one stop_timeout.
void clean_job_node(Services& s, const PluginConfig& cfg, const JobContext& job, EpilogOutcome& out) {
  RecordStore store = slurm_record_store(cfg);
  JobRecordScan scan;
  try {
    scan = scan_job_records(store, job.job_id, job.node, job.uid, cfg.run_dir);
  } catch (const CudaMpsError& e) {
    // An untrustworthy state dir must not be acted on, and is the admin's to fix.
    out.errors.push_back(e.what());
    return;
  }
  std::vector<CleanTarget> targets;
  for (const auto& r : scan.trusted) targets.push_back(trusted_target(s, r, out));
  std::map<std::string, std::string> untrusted;  // daemon name -> reason
  const std::string ext = record_file_name("");
  for (const auto& p : scan.untrusted) untrusted[p.file.substr(0, p.file.size() - ext.size())] = p.reason;
  add_orphan_targets(cfg, job, store.root(), untrusted, targets, out);

  std::vector<DaemonRecord> records;
  for (const auto& t : targets) records.push_back(t.record);
  const auto attempts = stop_daemons(s, cfg.tools, store, records, cfg.stop_timeout);
  for (size_t i = 0; i < targets.size(); ++i) report_stop(job, targets[i], attempts[i], out);
  remove_untrusted_records(store, untrusted, out);
  // The mover empties and removes a job's holding cgroups; when it could
  // not (it died, the step never came), nothing held there outlives the job.
  // On v2 the daemons' own cgroup in the extern step goes (Slurm killed
  // what was in it before this epilog ran).
  for (const auto& r : records) {
    if (r.containment && r.containment->cgroup_version == 2) {
      SystemCgroupFs fs;
      SystemProcReader proc;
      if (std::string e = remove_v2_daemon_cgroup(*r.containment, proc.cgroup(getpid()).value_or(""), fs); !e.empty()) {
        out.warnings.push_back(fmt::format("job {}: {}", job.job_id, e));
      }
      break;
    }
    if (!r.containment || r.containment->cgroup_version != 1) continue;
    SystemCgroupFs fs;
    if (!fs.is_dir(holding_cgroup_dir(*r.containment, r.containment->controllers.front(), job.job_id))) break;
    SystemProcReader proc;
    if (std::string e = release_holding_cgroups(*r.containment, job.job_id, proc, s.signaller, fs, cfg.stop_timeout); !e.empty()) {
      out.errors.push_back(fmt::format("job {}: {}", job.job_id, e));
    }
    break;
  }
}

// The node's GPUs in GRES order (the one nvidia-smi call of the job),
// after checking that every GRES index of the job is one of them.
std::vector<NodeGpu> job_node_gpus(Services& s, const PluginConfig& cfg, const JobContext& job, const std::vector<int>& job_gpus) {
  GresConf conf = parse_gres_conf(read_gres_conf(gres_conf_path(cfg, job.slurm_conf)), job.node);
  std::vector<GpuIdentity> gpus = discover_gpus(s.runner, cfg.tools.nvidia_smi, cfg.tools.driver_dir);  // the one nvidia-smi call
  std::vector<NodeGpu> node_gpus = map_node_gpus(conf, gpus);
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
  std::vector<StartRequest> out;
  for (const auto& group : groups) {
    StartRequest sr;
    const std::string suffix = req.mode == JobMode::kMulti ? "multi" : fmt::format("gpu{}", group[0]);
    sr.name = job_daemon_name(job.job_id, job.node, suffix);
    sr.directory_name = job_run_entry(job.job_id, job.node, suffix);
    sr.uid = job.uid;
    sr.gid = job.gid;
    sr.host = job.node;
    sr.topology_mode = group.size() > 1     ? TopologyMode::kSingleTaskMulti
                       : groups.size() > 1 ? TopologyMode::kPerGpu
                                           : TopologyMode::kSingle;
    for (int idx : group) sr.gpu_uuids.push_back(node_gpus[static_cast<size_t>(idx)].uuid);
    sr.base_directory = cfg.run_dir;
    sr.job_id = job.job_id;
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

// The prolog: one nvidia-smi call, every daemon's start within one
// start_timeout, after a failed start the stop of what did start, and the
// wait for the job's cgroup. The epilog: every stop within one
// stop_timeout, then (cgroup v1 holding cgroups) the kill of what is held.
HookBound prolog_bound(const PluginConfig& cfg) {
  using std::chrono::milliseconds;
  const milliseconds smi = kNvidiaSmiTimeout, stop = cfg.stop_timeout + kStopOverrun, contain = cfg.start_timeout + kContainGrace;
  return {smi + cfg.start_timeout + stop + contain,
          fmt::format("nvidia-smi {} + start_timeout {} + a failed start's stop {} + the wait for the job's cgroup {}",
                      seconds_text(smi), seconds_text(cfg.start_timeout), seconds_text(stop), seconds_text(contain))};
}

HookBound epilog_bound(const PluginConfig& cfg) {
  const std::chrono::milliseconds stop = cfg.stop_timeout + kStopOverrun;
  return {stop + cfg.stop_timeout, fmt::format("the stops {} + the kill of held processes {}", seconds_text(stop),
                                               seconds_text(cfg.stop_timeout))};
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
  if (auto sluid = env("SLURM_JOB_SLUID"); sluid && !sluid->empty()) {
    if (!std::all_of(sluid->begin(), sluid->end(), [](unsigned char c) { return std::isalnum(c); })) {
      throw CudaMpsError(fmt::format("SLURM_JOB_SLUID '{}' is not a Slurm SLUID (letters and digits)", escape_control(*sluid)));
    }
    j.sluid = sluid;
  }
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
  req.mode = *kJobModeNames.lookup(parse_mode(mode->c_str()));
  auto raw_threads = env(spank_option_env_name("unilab-mps-threads").c_str());
  if (auto t = spank_option_value(raw_threads ? raw_threads->c_str() : nullptr)) {
    req.limits.active_thread_percentage = parse_thread_percentage(*t, cfg.max_threads);
  } else if (cfg.default_threads) {
    req.limits.active_thread_percentage = cfg.default_threads;
  }
  auto raw_mem = env(spank_option_env_name("unilab-mps-mem").c_str());
  if (auto m = spank_option_value(raw_mem ? raw_mem->c_str() : nullptr)) {
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

namespace {

// "gpuN" (N decimal digits) or "multi": the suffixes a record name may end in.
bool is_daemon_suffix(std::string_view suffix) {
  if (suffix == "multi") return true;
  if (!suffix.starts_with("gpu") || suffix.size() == 3) return false;
  return std::all_of(suffix.begin() + 3, suffix.end(), [](unsigned char c) { return std::isdigit(c); });
}

// Three base-62 characters of the node name's FNV-1a hash (about 238,000
// values): apart only the nodes of one host, which are few.
std::string node_tag(const std::string& node) {
  static constexpr std::string_view kDigits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  uint32_t h = 2166136261u;
  for (unsigned char c : node) h = (h ^ c) * 16777619u;
  std::string tag(3, '0');
  for (auto& c : tag) {
    c = kDigits[h % kDigits.size()];
    h /= static_cast<uint32_t>(kDigits.size());
  }
  return tag;
}

}  // namespace

bool is_job_daemon_name(const std::string& name, const std::string& job_id, const std::string& node) {
  const std::string prefix = record_name_prefix(job_id, node);
  return name.starts_with(prefix) && is_daemon_suffix(std::string_view(name).substr(prefix.size()));
}

std::string job_run_entry(const std::string& job_id, const std::string& node, const std::string& suffix) {
  if (!is_daemon_suffix(suffix)) throw CudaMpsError(fmt::format("'{}' is not a daemon suffix (gpuN or multi)", suffix));
  const std::string_view shown = suffix == "multi" ? std::string_view("m") : std::string_view(suffix).substr(3);
  std::string entry = fmt::format("{}.{}.{}", job_id, shown, node_tag(node));
  if (!is_safe_name(entry)) throw CudaMpsError(fmt::format("cannot name a run-dir entry for job '{}'", job_id));
  return entry;
}

std::optional<std::string> job_run_entry_suffix(const std::string& entry, const std::string& job_id, const std::string& node) {
  if (is_job_daemon_name(entry, job_id, node)) return entry.substr(record_name_prefix(job_id, node).size());
  const std::string prefix = job_id + ".";
  const std::string tail = "." + node_tag(node);
  if (!entry.starts_with(prefix) || !entry.ends_with(tail) || entry.size() <= prefix.size() + tail.size()) return std::nullopt;
  const std::string shown = entry.substr(prefix.size(), entry.size() - prefix.size() - tail.size());
  std::string suffix = shown == "m" ? "multi" : "gpu" + shown;
  if (!is_daemon_suffix(suffix) || job_run_entry(job_id, node, suffix) != entry) return std::nullopt;
  return suffix;
}

size_t max_run_dir_length() {
  const std::string worst = "/" + job_run_entry("4294967295", "n", "gpu999") + "/" + kPipeLeaf;
  return max_pipe_directory_length() - worst.size();
}

std::vector<DaemonRecord> job_records(RecordStore& store, const std::string& job_id, const std::string& node,
                                      std::optional<uid_t> uid, std::vector<std::string>* problems,
                                      const std::optional<std::string>& run_dir) {
  JobRecordScan scan = scan_job_records(store, job_id, node, uid, run_dir);
  if (problems != nullptr) {
    for (const auto& p : scan.untrusted) problems->push_back(fmt::format("record {}/{} ignored: {}", store.root(), p.file, p.reason));
  }
  return std::move(scan.trusted);
}

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
  std::vector<NodeGpu> node_gpus = job_node_gpus(s, cfg, job, job_gpus);
  RecordStore store = slurm_record_store(cfg);
  // A requeued job keeps its id: clear what an interrupted earlier run left.
  EpilogOutcome earlier;
  clean_job_node(s, cfg, job, earlier);
  if (!earlier.ok()) {
    throw CudaMpsError(fmt::format("cannot clear what an earlier run of job {} left: {}", job.job_id, join(earlier.errors, "; ")));
  }
  out.warnings = std::move(earlier.warnings);
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

EpilogOutcome run_job_epilog(Services& s, const PluginConfig& cfg, const JobContext& job) {
  EpilogOutcome out;
  clean_job_node(s, cfg, job, out);
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
  env.daemon_name = hit->name;
  env.daemon_pid = hit->pid;
  env.containment = hit->containment;
  return env;
}

}  // namespace unilab::mps
