#include "common/slurm/job_faults.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "common/mps/daemon.hpp"
#include "common/mps/errors.hpp"
#include "common/mps/mps_control.hpp"
#include "common/mps/safefs.hpp"
#include "common/mps/text.hpp"
#include "common/slurm/job.hpp"

namespace unilab::mps {
namespace {

constexpr const char* kFaultSuffix = ".fault.json";

std::string faults_dir(const PluginConfig& cfg) { return cfg.state_dir + "/" + kFaultsSubdir; }

std::string fault_file(const std::string& daemon, const MpsFault& f) { return daemon + "." + f.key() + kFaultSuffix; }

// The daemon a fault file belongs to: its name minus ".<16 hex>.fault.json".
std::optional<std::string> daemon_of_file(const std::string& file) {
  if (!file.ends_with(kFaultSuffix)) return std::nullopt;
  const std::string stem = file.substr(0, file.size() - std::string(kFaultSuffix).size());
  const size_t dot = stem.rfind('.');
  if (dot == std::string::npos || stem.size() - dot - 1 != 16) return std::nullopt;
  return stem.substr(0, dot);
}

// Creates `name` with `content` in `dir` only if it does not exist: a temp
// file written in full, then link(2), which fails on an existing name.
bool create_once(int dir, const std::string& name, const std::string& content) {
  const std::string tmp = "." + name + ".tmp" + std::to_string(getpid());
  write_file_atomic(dir, tmp, content, 0644);
  const bool created = linkat(dir, tmp.c_str(), dir, name.c_str(), 0) == 0;
  const int err = errno;
  unlinkat(dir, tmp.c_str(), 0);
  if (!created && err != EEXIST) throw CudaMpsError(fmt::format("cannot record fault {}: {}", name, std::strerror(err)));
  return created;
}

}  // namespace

nlohmann::json JobFault::to_json() const {
  return {{"daemon", daemon},          {"node", node}, {"gpu_uuids", gpu_uuids}, {"log_directory", log_directory},
          {"fault", fault.to_json()},  {"noted_at", noted_at},   {"noted_by", noted_by}};
}

JobFault JobFault::from_json(const nlohmann::json& j) {
  try {
    JobFault f;
    f.daemon = j.at("daemon").get<std::string>();
    f.node = j.value("node", "");
    f.gpu_uuids = j.at("gpu_uuids").get<std::vector<std::string>>();
    f.log_directory = j.value("log_directory", "");
    f.fault = MpsFault::from_json(j.at("fault"));
    f.noted_at = j.value("noted_at", 0.0);
    f.noted_by = j.value("noted_by", "");
    return f;
  } catch (const nlohmann::json::exception& e) {
    throw CudaMpsError(fmt::format("bad fault file: {}", e.what()));
  }
}

std::vector<JobFault> note_job_faults(const PluginConfig& cfg, const std::vector<DaemonRecord>& records,
                                      const std::set<MpsFaultKind>& kinds, const std::string& noted_by, double now,
                                      std::vector<std::string>* problems, std::map<std::string, long>* servers_started,
                                      ProcReader* proc) {
  std::vector<JobFault> noted;
  Fd dir;
  for (const auto& r : records) {
    try {
      DaemonLogScan scan = scan_daemon_logs(r.log_directory, r.uid);
      if (proc && kinds.count(MpsFaultKind::kDaemonGone) && r.state == RecordState::kRunning && !daemon_process_is_live(r, *proc)) {
        MpsFault gone;
        gone.kind = MpsFaultKind::kDaemonGone;
        gone.line = fmt::format("daemon pid {} (start tick {}) no longer runs", r.pid, r.process_start_ticks);
        scan.faults.insert(scan.faults.begin(), std::move(gone));
      }
      if (servers_started) (*servers_started)[r.name] = scan.servers_started;
      size_t kept = 0;  // this daemon's fault files
      bool counted = false;
      for (auto& f : scan.faults) {
        if (!kinds.count(f.kind)) continue;
        if (!dir) dir = ensure_trusted_dir(faults_dir(cfg), 0, 0, 0, 0755);
        if (!counted) {
          for (const auto& file : list_dir(dir.get())) kept += daemon_of_file(file) == r.name ? 1 : 0;
          counted = true;
        }
        // The logs are the user's: a daemon whose log fills with fault
        // lines gets kMaxFaultsPerDaemon said, not one file per line.
        if (kept >= kMaxFaultsPerDaemon) break;
        JobFault jf{r.name, r.slurm ? r.slurm->node : r.host, r.gpu_uuids, r.log_directory, std::move(f), now, noted_by};
        if (create_once(dir.get(), fault_file(r.name, jf.fault), jf.to_json().dump() + "\n")) {
          noted.push_back(std::move(jf));
          ++kept;
        }
      }
    } catch (const CudaMpsError& e) {
      if (problems) problems->push_back(fmt::format("daemon {}: faults not checked: {}", r.name, e.what()));
    }
  }
  return noted;
}

std::vector<JobFault> recorded_job_faults(const PluginConfig& cfg, const std::vector<std::string>& daemons) {
  std::vector<JobFault> out;
  try {
    Fd dir = open_trusted_dir_if_exists(faults_dir(cfg), 0, Leaf::kPrivate);
    if (!dir) return out;
    for (const auto& file : list_dir(dir.get())) {
      auto daemon = daemon_of_file(file);
      if (!daemon || std::find(daemons.begin(), daemons.end(), *daemon) == daemons.end()) continue;
      try {
        if (auto text = read_owned_file_at(dir.get(), file, 0, 64 << 10)) out.push_back(JobFault::from_json(nlohmann::json::parse(*text)));
      } catch (const std::exception&) {
        // A fault file root did not write whole is no fault to report.
      }
    }
  } catch (const CudaMpsError&) {
    return out;
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.noted_at < b.noted_at; });
  return out;
}

void remove_job_faults(const PluginConfig& cfg, const std::vector<std::string>& daemons) {
  try {
    Fd dir = open_trusted_dir_if_exists(faults_dir(cfg), 0, Leaf::kPrivate);
    if (!dir) return;
    for (const auto& file : list_dir(dir.get())) {
      auto daemon = daemon_of_file(file);
      if (daemon && std::find(daemons.begin(), daemons.end(), *daemon) != daemons.end()) unlinkat(dir.get(), file.c_str(), 0);
    }
  } catch (const CudaMpsError&) {
  }
}

std::map<pid_t, std::string> server_states(CommandRunner& runner, const Tools& tools, const DaemonRecord& daemon,
                                           const std::vector<pid_t>& servers) {
  std::map<pid_t, std::string> out;
  if (geteuid() != daemon.uid) return out;
  MpsControl mps(runner, tools.mps_control, tools.driver_dir);
  const MpsEndpoint ep{daemon.pipe_directory, daemon.log_directory, daemon.uid, daemon.gid};
  for (pid_t pid : servers) {
    CommandResult r = mps.send(ep, fmt::format("get_server_status {}", pid), std::chrono::seconds(5));
    std::string line = escape_control(r.first_output_line());
    out[pid] = r.ok() && !line.empty() ? line : fmt::format("unknown ({})", line.empty() ? r.describe() : line);
  }
  return out;
}

const std::set<MpsFaultKind>& task_exit_fault_kinds(std::optional<int> wait_status) {
  if (wait_status && WIFSIGNALED(*wait_status)) {
    const int sig = WTERMSIG(*wait_status);
    if (sig == SIGTERM || sig == SIGKILL || sig == SIGINT || sig == SIGHUP) return kEpilogFaultKinds;
  }
  return kTaskExitFaultKinds;
}

std::vector<JobFault> task_exit_faults(const PluginConfig& cfg, const std::string& job_id, uid_t uid,
                                       std::optional<int> wait_status, std::vector<std::string>* problems) {
  RecordStore store = slurm_record_store(cfg);
  std::vector<DaemonRecord> daemons;
  for (const auto& node : job_nodes_in_store(store, job_id, uid)) {
    for (auto& r : job_records(store, job_id, node, uid, nullptr, cfg.run_dir)) daemons.push_back(std::move(r));
  }
  SystemClock clock;
  SystemProcReader proc;
  return note_job_faults(cfg, daemons, task_exit_fault_kinds(wait_status), "task-exit", clock.wall_seconds(), problems,
                         nullptr, &proc);
}

std::string fault_message(const std::string& job_id, const std::string& node, const JobFault& f) {
  const std::string what = fmt::format("job {} node {}: MPS daemon {} (GPU {}): {}", job_id, node, f.daemon,
                                       join(f.gpu_uuids, ","), describe(f.fault.kind));
  if (f.fault.log.empty()) {  // not a log line (daemon-gone): what was seen, and the log to read
    return fmt::format("{}: {}; see {}/{}", what, f.fault.line, f.log_directory, kControlLog);
  }
  const std::string culprit =
      f.fault.client ? fmt::format("; the client process that hit it: {}", *f.fault.client) : std::string();
  return fmt::format("{}{}; {}: '{}'; see {}/{}", what, culprit, f.fault.log, f.fault.line, f.log_directory, f.fault.log);
}

}  // namespace unilab::mps
