// The job epilog: every daemon the job left on the node stopped, its
// directories and records removed (also run by the prolog for a requeued job).
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
#include "common/slurm/history.hpp"
#include "common/slurm/job_faults.hpp"
#include "common/slurm/slurm_conf_path.hpp"

namespace unilab::mps {

namespace {

// What the prolog would have recorded for run-dir entry `entry` (its
// record-name suffix `suffix`), from the configuration and the job's own
// (Slurm-given) identity only (job_daemon_spec), as a "starting" record:
// stop_daemon then finds the daemon through its pid file, verified by /proc
// (uid and pipe directory), never through a stored pid.
DaemonRecord orphan_record(const PluginConfig& cfg, const JobContext& job, const std::string& suffix, const std::string& entry) {
  DaemonRecord r;
  static_cast<DaemonSpec&>(r) = job_daemon_spec(job, suffix);
  const DaemonDirectories dirs = daemon_directories(cfg.run_dir, entry);
  r.pipe_directory = dirs.pipe;
  r.log_directory = dirs.log;
  r.state = RecordState::kStarting;
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
    CleanTarget t{orphan_record(cfg, job, *suffix, entry), true, "no record", false};
    const std::string& name = t.record.name;
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
    out.errors.push_back(a.error);
    return;
  }
  const StopReport& rep = *a.report;
  if (rep.outcome == StopOutcome::kStale) {
    out.warnings.push_back(rep.detail);
    if (!t.orphan) out.stopped.push_back({t.record.name, t.record.pid, StopOutcome::kStale, rep.detail});
    return;
  }
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

// One history line per daemon the job had (a run-dir entry with no daemon
// in it is no daemon); never fails the hook.
void journal_stops(const PluginConfig& cfg, const JobContext& job, const std::vector<CleanTarget>& targets,
                   const std::vector<StopAttempt>& attempts, const std::map<std::string, long>& servers,
                   const std::vector<JobFault>& faults, const std::string& by, double now, EpilogOutcome& out) {
  if (!cfg.history) return;
  std::vector<nlohmann::json> lines;
  for (size_t i = 0; i < targets.size(); ++i) {
    const auto& report = attempts[i].report;
    if (report && report->outcome == StopOutcome::kNotStarted) continue;
    auto it = servers.find(targets[i].record.name);
    lines.push_back(history_entry(targets[i].record, report, attempts[i].error, job.user.empty() ? std::to_string(job.uid) : job.user,
                                  by, now, it == servers.end() ? -1 : it->second, faults)
                        .to_json());
  }
  if (std::string e = append_history(*cfg.history, cfg.history_max, lines); !e.empty()) {
    out.warnings.push_back(fmt::format("job {}: history not written ({} line(s) lost): {}", job.job_id, lines.size(), e));
  } else {
    out.history_lines += lines.size();
  }
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

}  // namespace

// Stops and removes everything job `job` left on this node (see
// run_job_epilog): every daemon at once, within one stop_timeout.
void clean_job_node(Services& s, const PluginConfig& cfg, const JobContext& job, EpilogOutcome& out, const std::string& by) {
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
  // Before the stops remove their logs: what the servers went through.
  std::vector<DaemonRecord> logged;
  std::vector<std::string> names;
  for (const auto& t : targets) {
    names.push_back(t.record.name);
    if (!t.orphan) logged.push_back(t.record);
  }
  std::map<std::string, long> servers;
  for (const auto& f : note_job_faults(cfg, logged, kEpilogFaultKinds, by, s.clock.wall_seconds(), &out.warnings, &servers)) {
    out.faults.push_back(fault_message(job.job_id, job.node, f));
  }
  const auto attempts = stop_daemons(s, cfg.tools, store, records, cfg.stop_timeout);
  for (size_t i = 0; i < targets.size(); ++i) report_stop(job, targets[i], attempts[i], out);
  journal_stops(cfg, job, targets, attempts, servers, recorded_job_faults(cfg, names), by, s.clock.wall_seconds(), out);
  remove_job_faults(cfg, names);
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

EpilogOutcome run_job_epilog(Services& s, const PluginConfig& cfg, const JobContext& job) {
  EpilogOutcome out;
  clean_job_node(s, cfg, job, out);
  return out;
}

}  // namespace unilab::mps
