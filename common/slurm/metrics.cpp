#include "common/slurm/metrics.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "common/mps/daemon.hpp"
#include "common/mps/status.hpp"
#include "common/mps/units.hpp"
#include "common/slurm/job.hpp"
#include "common/slurm/job_faults.hpp"

namespace unilab::mps {
namespace {

struct Family {
  std::string name, help, unit;
  std::vector<std::string> samples;  // "{labels} value"
};

// Families in the order they are printed; each sample belongs to one.
class Exposition {
 public:
  Family& family(const std::string& name, const std::string& help, const std::string& unit = "") {
    for (auto& f : families_) {
      if (f.name == name) return f;
    }
    families_.push_back({name, help, unit, {}});
    return families_.back();
  }
  void add(const std::string& name, const std::string& help, const std::string& labels, double value, const std::string& unit = "") {
    family(name, help, unit).samples.push_back(fmt::format("{{{}}} {}", labels, value_text(value)));
  }
  std::string text() const {
    std::string out;
    for (const auto& f : families_) {
      out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n", f.name, f.help, f.name);
      if (!f.unit.empty()) out += fmt::format("# UNIT {} {}\n", f.name, f.unit);
      for (const auto& s : f.samples) out += f.name + s + "\n";
    }
    return out + "# EOF\n";
  }

 private:
  static std::string value_text(double v) {
    if (v == static_cast<double>(static_cast<long long>(v))) return std::to_string(static_cast<long long>(v));
    return fmt::format("{}", v);
  }
  std::vector<Family> families_;
};

// Processes of the daemon's user, not the daemon or its servers, whose
// environment names its pipe directory: the job's tasks bound to it and what
// they started. Which of them are connected is the daemon's to say
// (get_client_list), and root does not ask a user's daemon.
size_t bound_processes(ProcReader& proc, const DaemonRecord& r, const std::vector<pid_t>& servers) {
  size_t n = 0;
  for (pid_t pid : proc.pids()) {
    if (pid == r.pid || std::find(servers.begin(), servers.end(), pid) != servers.end()) continue;
    auto st = proc.stat(pid);
    if (!st || st->uid != r.uid || st->state == 'Z' || st->state == 'X') continue;
    if (proc.environ_value(pid, "CUDA_MPS_PIPE_DIRECTORY") == r.pipe_directory) ++n;
  }
  return n;
}

}  // namespace

std::string metric_label_value(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string node_metrics(ProcReader& proc, const PluginConfig& cfg, const std::string& node,
                         const std::function<std::string(uid_t)>& user_of) {
  Exposition x;
  RecordStore store = slurm_record_store(cfg);
  RecordListing listing = store.list(std::nullopt, node);
  const std::string node_label = fmt::format("node=\"{}\"", metric_label_value(node));
  x.add("unilab_mps_daemons", "MPS control daemons unilab-mps recorded for Slurm jobs on this node.", node_label,
        static_cast<double>(listing.records.size()));
  x.add("unilab_mps_records_unreadable", "Record files on this node unilab-mps could not use (corrupt, other schema).", node_label,
        static_cast<double>(listing.problems.size()));
  for (const auto& r : listing.records) {
    const bool up = r.state == RecordState::kRunning && daemon_process_is_live(r, proc);
    const auto servers = up ? mps_servers_of(r, proc) : std::vector<pid_t>{};
    const size_t bound = up ? bound_processes(proc, r, servers) : 0;
    const size_t faults = recorded_job_faults(cfg, {r.name}).size();
    for (const auto& gpu : r.gpu_uuids) {
      const std::string labels = fmt::format(
          "job=\"{}\",user=\"{}\",{},daemon=\"{}\",gpu_uuid=\"{}\"", metric_label_value(r.job_id.value_or("")),
          metric_label_value(user_of(r.uid)), node_label, metric_label_value(r.name), metric_label_value(gpu));
      x.add("unilab_mps_daemon_up", "1 while the job's MPS control daemon runs (pid, start time, uid and boot verified in /proc).",
            labels, up ? 1 : 0);
      x.add("unilab_mps_daemon_start_time_seconds", "When the job prolog started the daemon (seconds since the epoch).", labels,
            r.created_at, "seconds");
      x.add("unilab_mps_servers", "MPS server processes of the daemon (its children in /proc).", labels,
            static_cast<double>(servers.size()));
      x.add("unilab_mps_bound_processes",
            "Processes of the job's user whose environment names the daemon's pipe directory: the job's tasks and what they "
            "started, which may be its clients (which are connected, only the daemon can say).",
            labels, static_cast<double>(bound));
      if (r.limits.active_thread_percentage) {
        x.add("unilab_mps_active_thread_percentage", "The daemon's default active thread percentage (--unilab-mps-threads).",
              labels, *r.limits.active_thread_percentage);
      }
      if (r.limits.pinned_mem_limit) {
        x.add("unilab_mps_pinned_memory_limit_bytes", "The daemon's default pinned device memory limit per GPU (--unilab-mps-mem).",
              labels, static_cast<double>(parse_size_bytes(*r.limits.pinned_mem_limit)), "bytes");
      }
      if (r.limits.client_priority) {
        x.add("unilab_mps_client_priority", "CUDA_MPS_CLIENT_PRIORITY of the job's tasks (0 normal, 1 below normal).", labels,
              r.limits.client_priority == ClientPriority::kBelowNormal ? 1 : 0);
      }
      x.add("unilab_mps_faults", "MPS server faults recorded for the daemon during the job.", labels, static_cast<double>(faults));
    }
  }
  return x.text();
}

}  // namespace unilab::mps
