#include "common/mps/status.hpp"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

#include "common/mps/errors.hpp"
#include "common/mps/mps_control.hpp"
#include "common/mps/nvidia_checks.hpp"

namespace unilab::mps {

nlohmann::json ControlPipeStatus::to_json() const {
  return {{"path", path}, {"kind", kind}, {"managed_names", managed_names}};
}

nlohmann::json HostStatus::to_json() const {
  nlohmann::json g = nlohmann::json::array();
  for (const auto& gpu : gpus) g.push_back(gpu.to_json());
  nlohmann::json pipes = nlohmann::json::array();
  for (const auto& p : control_pipes) pipes.push_back(p.to_json());
  nlohmann::json problems = nlohmann::json::array();
  for (const auto& p : record_problems) problems.push_back(p.to_json());
  return {{"platform", platform},
          {"nvidia_smi_available", nvidia_smi_available},
          {"cuda_visible_devices", cuda_visible_devices ? nlohmann::json(*cuda_visible_devices) : nlohmann::json(nullptr)},
          {"gpus", g},
          {"control_pipes", pipes},
          {"managed_daemons", daemon_states},
          {"diagnostic", diagnostic ? nlohmann::json(*diagnostic) : nlohmann::json(nullptr)},
          {"compatible_topology_modes", compatible_topology_modes},
          {"record_problems", problems}};
}

namespace {

// A job's view shows the GPUs of its daemons, not the host's.
std::vector<GpuIdentity> gpus_of_daemons(const std::vector<GpuIdentity>& all, const std::vector<DaemonRecord>& daemons) {
  std::vector<GpuIdentity> out;
  for (const auto& g : all) {
    bool served = std::any_of(daemons.begin(), daemons.end(), [&](const DaemonRecord& r) {
      return std::any_of(r.gpu_uuids.begin(), r.gpu_uuids.end(),
                         [&](const std::string& u) { return canonicalize_gpu_uuid(u) == canonicalize_gpu_uuid(g.uuid); });
    });
    if (served) out.push_back(g);
  }
  return out;
}

void discover_into(HostStatus& h, Services& s, const Tools& tools, const StatusQuery& q) {
  try {
    auto all = discover_gpus(s.runner, tools);
    h.nvidia_smi_available = true;
    h.gpus = q.job_id ? gpus_of_daemons(all, h.managed_daemons) : visible_gpus(q.cuda_visible_devices, all);
  } catch (const CudaMpsError& e) {
    h.diagnostic = e.what();
  }
}

void list_into(HostStatus& h, RecordStore& store, const StatusQuery& q) {
  try {
    auto listing = store.list(q.uid, q.host);
    h.record_problems = listing.problems;
    for (auto& r : listing.records) {
      if (q.job_id && r.job_id != q.job_id) continue;
      h.managed_daemons.push_back(r);
    }
  } catch (const CudaMpsError& e) {
    h.record_problems.push_back({store.root(), e.what()});
  }
}

// The default pipe and the caller's (host view only), then every daemon's.
void pipes_into(HostStatus& h, const StatusQuery& q) {
  std::vector<std::string> dirs;
  if (!q.job_id) dirs.push_back(kDefaultPipeDirectory);
  if (!q.job_id && q.pipe_directory_env && !q.pipe_directory_env->empty()) dirs.push_back(*q.pipe_directory_env);
  for (const auto& r : h.managed_daemons) dirs.push_back(r.pipe_directory);
  for (const auto& d : dirs) {
    std::string path = d + "/control";
    if (std::any_of(h.control_pipes.begin(), h.control_pipes.end(), [&](const auto& p) { return p.path == path; })) continue;
    ControlPipeStatus p{path, control_pipe_kind(path), {}};
    for (const auto& r : h.managed_daemons) if (r.pipe_directory == d) p.managed_names.push_back(r.name);
    h.control_pipes.push_back(std::move(p));
  }
}

std::string short_list(const std::vector<std::string>& v) { return v.empty() ? "-" : join(v, ","); }

std::string render_daemon(const DaemonRecord& r, const nlohmann::json& state) {
  std::string out = fmt::format("  {:<24} pid {:<8} {:<10} {:<22} {}{}\n", r.name, r.pid, state["liveness"].get<std::string>(),
                                to_string(r.topology_mode), short_list(r.gpu_uuids), r.job_id ? " job " + *r.job_id : "");
  out += fmt::format("  {:<24} pipe {}\n", "", r.pipe_directory);
  std::vector<std::string> l;
  if (r.limits.active_thread_percentage) l.push_back(fmt::format("active threads {}%", *r.limits.active_thread_percentage));
  if (r.limits.active_thread_share_auto) l.push_back("active threads auto (100% over the tasks sharing a GPU, per task)");
  if (r.limits.pinned_mem_limit) l.push_back(fmt::format("pinned memory {} per GPU", *r.limits.pinned_mem_limit));
  if (r.limits.client_priority) {
    l.push_back(fmt::format("client priority {} (CUDA_MPS_CLIENT_PRIORITY={})", to_string(*r.limits.client_priority),
                            client_priority_value(*r.limits.client_priority)));
  }
  if (!l.empty()) out += fmt::format("  {:<24} limits {}\n", "", join(l, ", "));
  if (auto servers = state.find("mps_servers"); servers != state.end() && !servers->empty()) {
    std::vector<std::string> pids;
    for (const auto& p : *servers) pids.push_back(std::to_string(p.get<pid_t>()));
    out += fmt::format("  {:<24} mps servers {} (children of daemon pid {})\n", "", join(pids, ","), r.pid);
  }
  return out;
}

}  // namespace

HostStatus host_status(Services& s, const Tools& tools, RecordStore& store, const StatusQuery& q) {
  HostStatus h;
  struct utsname u {};
  h.platform = uname(&u) == 0 ? fmt::format("{}-{}", u.sysname, u.machine) : "unknown";
  h.cuda_visible_devices = q.cuda_visible_devices;
  list_into(h, store, q);
  // A job without daemons here has no GPUs to show: nvidia-smi is not run.
  if (q.discover && (!q.job_id || !h.managed_daemons.empty())) discover_into(h, s, tools, q);
  for (const auto& r : h.managed_daemons) {
    nlohmann::json state = daemon_status(r, s.proc);
    if (state.value("live", false)) state["mps_servers"] = mps_servers_of(r, s.proc);
    h.daemon_states.push_back(std::move(state));
  }
  pipes_into(h, q);
  return h;
}

std::string render_host_status(const HostStatus& h, const std::string& heading, const std::string& records_dir) {
  std::string out = heading + "\n";
  if (h.diagnostic) out += fmt::format("nvidia-smi: {}\n", *h.diagnostic);
  if (!h.gpus.empty()) {
    out += fmt::format("{:<5} {:<41} {:<6} {}\n", "GPU", "UUID", "MINOR", "NAME");
    for (const auto& g : h.gpus) {
      if (g.mig) {  // a MIG slice: what it is a part of
        out += fmt::format("{:<5} {:<41} {:<6} MIG {} of {} (GPU {}, GPU instance {}, compute instance {})\n", "MIG", g.uuid,
                           g.minor_number, g.mig->profile, g.mig->parent_uuid, g.mig->parent_index, g.mig->gpu_instance,
                           g.mig->compute_instance);
      } else {
        out += fmt::format("{:<5} {:<41} {:<6} {}\n", g.index, g.uuid, g.minor_number, g.name);
      }
    }
  }
  out += fmt::format("daemons ({}) in {}\n", h.managed_daemons.size(), records_dir);
  for (size_t i = 0; i < h.managed_daemons.size(); ++i) out += render_daemon(h.managed_daemons[i], h.daemon_states[i]);
  for (const auto& p : h.record_problems) out += fmt::format("  ignored record {}: {}\n", p.file, p.reason);
  out += "control pipes:\n";
  for (const auto& p : h.control_pipes) {
    out += fmt::format("  {:<60} {}{}\n", p.path, p.kind, p.managed_names.empty() ? "" : " (managed: " + join(p.managed_names, ",") + ")");
  }
  return out;
}

std::string render_checks(const std::vector<DoctorCheck>& checks) {
  std::string out;
  for (const auto& c : checks) out += fmt::format("[{:<4}] {:<14} {}\n", to_string(c.status), c.name, c.detail);
  return out;
}

std::vector<pid_t> mps_servers_of(const DaemonRecord& record, ProcReader& proc) {
  std::vector<pid_t> out;
  if (record.pid <= 0 || !daemon_process_is_live(record, proc)) return out;
  for (pid_t c : proc.children(record.pid)) {
    auto st = proc.stat(c);
    auto comm = proc.comm(c);
    if (!st || st->uid != record.uid || st->state == 'Z' || st->state == 'X') continue;
    if (comm && comm->starts_with("nvidia-cuda-mps")) out.push_back(c);
  }
  return out;
}

bool DoctorReport::ok() const {
  return std::none_of(checks.begin(), checks.end(), [](const auto& c) { return c.status == CheckStatus::kFail; });
}

std::string DoctorReport::to_text() const { return render_checks(checks) + (ok() ? "ready\n" : "not ready\n"); }

nlohmann::json DoctorReport::to_json() const {
  nlohmann::json c = nlohmann::json::array();
  for (const auto& check : checks) c.push_back(check.to_json());
  return {{"ok", ok()}, {"checks", c}, {"plan", plan ? plan->to_json() : nlohmann::json(nullptr)}};
}

namespace {

// nvidia-smi (one query), the selector's topology, and the compute/MIG
// modes of the selected GPUs (every GPU when the selector did not resolve).
void add_gpu_checks(Services& s, const Tools& tools, const std::optional<std::string>& selector, const StatusQuery& q,
                    DoctorReport& rep) {
  auto add = [&](std::string name, CheckStatus status, std::string detail) {
    rep.checks.push_back({std::move(name), status, std::move(detail)});
  };
  std::vector<GpuIdentity> gpus;
  try {
    GpuDiscovery found = query_gpus(s.runner, tools);
    gpus = found.gpus;
    add("nvidia-smi", found.warning ? CheckStatus::kWarn : CheckStatus::kOk,
        fmt::format("{} reports {} GPU{}{}", tools.nvidia_smi, gpus.size(), gpus.size() == 1 ? "" : "s",
                    found.warning ? "; " + *found.warning : ""));
  } catch (const CudaMpsError& e) {
    add("nvidia-smi", CheckStatus::kFail, e.what());
  }
  if (gpus.empty()) return;
  try {
    rep.plan = resolve_topology(selector, q.cuda_visible_devices, gpus);
    std::vector<std::string> u;
    for (const auto& g : rep.plan->gpus) u.push_back(g.uuid);
    add("topology", CheckStatus::kOk, fmt::format("{} on {}", to_string(rep.plan->topology_mode), join(u, ",")));
  } catch (const CudaMpsError& e) {
    add("topology", CheckStatus::kFail, e.what());
  }
  NvidiaCheckResult modes = check_compute_modes(rep.plan ? rep.plan->gpus : gpus);
  add(modes.id, modes.status, modes.detail);
}

}  // namespace

DoctorReport doctor(Services& s, const Tools& tools, RecordStore& store, const std::optional<std::string>& selector,
                    const StatusQuery& q) {
  DoctorReport rep;
  auto add = [&](std::string name, CheckStatus status, std::string detail) {
    rep.checks.push_back({std::move(name), std::move(status), std::move(detail)});
  };
  add_gpu_checks(s, tools, selector, q, rep);
  if (access(tools.mps_control.c_str(), X_OK) == 0) {
    add("mps-control", CheckStatus::kOk, tools.mps_control + " is executable");
  } else {
    add("mps-control", CheckStatus::kFail, fmt::format("{} is missing or not executable; install the NVIDIA MPS tools or set --mps-control",
                                           tools.mps_control));
  }
  RecordListing listing;
  try {
    listing = store.list(q.uid, q.host);
    add("records", listing.problems.empty() ? CheckStatus::kOk : CheckStatus::kWarn,
        fmt::format("{} record{} in {}{}", listing.records.size(), listing.records.size() == 1 ? "" : "s", store.root(),
                    listing.problems.empty() ? "" : fmt::format("; {} unreadable (ignored): {}", listing.problems.size(),
                                                                listing.problems.front().file + ": " + listing.problems.front().reason)));
  } catch (const CudaMpsError& e) {
    add("records", CheckStatus::kFail, e.what());
  }
  for (const auto& r : listing.records) {
    bool live = daemon_process_is_live(r, s.proc);
    if (r.state == RecordState::kStarting) {
      // Its starter stopped between launch and the final record: the daemon
      // it may have launched is found the way stop_daemon finds it.
      if (auto orphan = recover_starting_identity(r, s.proc)) {
        add("daemon " + r.name, CheckStatus::kWarn,
            fmt::format("orphan: pid {} runs (found through {}/{}, verified uid {} and pipe directory) but its start was "
                        "never completed; `unilab-mps stop {}` stops it",
                        orphan->pid, r.pipe_directory, kPidFileName, r.uid, r.name));
        continue;
      }
    }
    if (!live) {
      add("daemon " + r.name, CheckStatus::kWarn,
          fmt::format("recorded pid {} is not running (stale{}); `unilab-mps stop {}` cleans it", r.pid,
                      r.state == RecordState::kStarting ? ", crashed while starting" : "", r.name));
    } else if (rep.plan) {
      for (const auto& g : rep.plan->gpus) {
        if (std::find(r.gpu_uuids.begin(), r.gpu_uuids.end(), g.uuid) != r.gpu_uuids.end()) {
          add("daemon " + r.name, CheckStatus::kOk, fmt::format("already serves {} (pid {})", g.uuid, r.pid));
        }
      }
    }
  }
  std::string def = std::string(kDefaultPipeDirectory) + "/control";
  std::string kind = control_pipe_kind(def);
  if (kind == "socket") {
    add("default-pipe", CheckStatus::kWarn,
        fmt::format("{} exists: a system-wide MPS daemon may be running there, and every CUDA program without "
                    "CUDA_MPS_PIPE_DIRECTORY would join it", def));
  } else {
    add("default-pipe", CheckStatus::kOk, fmt::format("no daemon socket at {}", def));
  }
  if (q.pipe_directory_env) {
    add("pipe-env", CheckStatus::kOk, fmt::format("CUDA_MPS_PIPE_DIRECTORY={} (control: {})", *q.pipe_directory_env,
                                      control_pipe_kind(*q.pipe_directory_env + "/control")));
  }
  return rep;
}

}  // namespace unilab::mps
