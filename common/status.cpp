#include "common/status.hpp"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

#include "common/errors.hpp"
#include "common/mps_control.hpp"

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

HostStatus host_status(Services& s, const Tools& tools, RecordStore& store, const StatusQuery& q) {
  HostStatus h;
  struct utsname u {};
  h.platform = uname(&u) == 0 ? fmt::format("{}-{}", u.sysname, u.machine) : "unknown";
  h.cuda_visible_devices = q.cuda_visible_devices;
  if (q.discover) {
    try {
      auto all = discover_gpus(s.runner, tools.nvidia_smi);
      h.nvidia_smi_available = true;
      h.gpus = visible_gpus(q.cuda_visible_devices, all);
    } catch (const CudaMpsError& e) {
      h.diagnostic = e.what();
    }
  }
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
  for (const auto& r : h.managed_daemons) h.daemon_states.push_back(daemon_status(r, s.proc));

  std::vector<std::string> dirs = {kDefaultPipeDirectory};
  if (q.pipe_directory_env && !q.pipe_directory_env->empty()) dirs.push_back(*q.pipe_directory_env);
  for (const auto& r : h.managed_daemons) dirs.push_back(r.pipe_directory);
  for (const auto& d : dirs) {
    std::string path = d + "/control";
    if (std::any_of(h.control_pipes.begin(), h.control_pipes.end(), [&](const auto& p) { return p.path == path; })) continue;
    ControlPipeStatus p{path, control_pipe_kind(path), {}};
    for (const auto& r : h.managed_daemons) if (r.pipe_directory == d) p.managed_names.push_back(r.name);
    h.control_pipes.push_back(std::move(p));
  }
  return h;
}

bool DoctorReport::ok() const {
  return std::none_of(checks.begin(), checks.end(), [](const auto& c) { return c.status == "fail"; });
}

nlohmann::json DoctorReport::to_json() const {
  nlohmann::json c = nlohmann::json::array();
  for (const auto& check : checks) c.push_back(check.to_json());
  return {{"ok", ok()}, {"checks", c}, {"plan", plan ? plan->to_json() : nlohmann::json(nullptr)}};
}

DoctorReport doctor(Services& s, const Tools& tools, RecordStore& store, const std::optional<std::string>& selector,
                    const StatusQuery& q) {
  DoctorReport rep;
  auto add = [&](std::string name, std::string status, std::string detail) {
    rep.checks.push_back({std::move(name), std::move(status), std::move(detail)});
  };
  std::vector<GpuIdentity> gpus;
  try {
    gpus = discover_gpus(s.runner, tools.nvidia_smi);
    add("nvidia-smi", "ok", fmt::format("{} reports {} GPU{}", tools.nvidia_smi, gpus.size(), gpus.size() == 1 ? "" : "s"));
  } catch (const CudaMpsError& e) {
    add("nvidia-smi", "fail", e.what());
  }
  if (!gpus.empty()) {
    try {
      rep.plan = resolve_topology(selector, q.cuda_visible_devices, gpus);
      std::vector<std::string> u;
      for (const auto& g : rep.plan->gpus) u.push_back(g.uuid);
      add("topology", "ok", fmt::format("{} on {}", rep.plan->topology_mode, join(u, ",")));
    } catch (const CudaMpsError& e) {
      add("topology", "fail", e.what());
    }
  }
  if (access(tools.mps_control.c_str(), X_OK) == 0) {
    add("mps-control", "ok", tools.mps_control + " is executable");
  } else {
    add("mps-control", "fail", fmt::format("{} is missing or not executable; install the NVIDIA MPS tools or set --mps-control",
                                           tools.mps_control));
  }
  RecordListing listing;
  try {
    listing = store.list(q.uid, q.host);
    add("records", listing.problems.empty() ? "ok" : "warn",
        fmt::format("{} record{} in {}{}", listing.records.size(), listing.records.size() == 1 ? "" : "s", store.root(),
                    listing.problems.empty() ? "" : fmt::format("; {} unreadable (ignored): {}", listing.problems.size(),
                                                                listing.problems.front().file + ": " + listing.problems.front().reason)));
  } catch (const CudaMpsError& e) {
    add("records", "fail", e.what());
  }
  for (const auto& r : listing.records) {
    bool live = daemon_process_is_live(r, s.proc);
    if (r.state == RecordState::kStarting) {
      // Its starter stopped between launch and the final record: the daemon
      // it may have launched is found the way stop_daemon finds it.
      if (auto orphan = recover_starting_identity(r, s.proc)) {
        add("daemon " + r.name, "warn",
            fmt::format("orphan: pid {} runs (found through {}/{}, verified uid {} and pipe directory) but its start was "
                        "never completed; `unilab-mps stop {}` stops it",
                        orphan->pid, r.pipe_directory, kPidFileName, r.uid, r.name));
        continue;
      }
    }
    if (!live) {
      add("daemon " + r.name, "warn",
          fmt::format("recorded pid {} is not running (stale{}); `unilab-mps stop {}` cleans it", r.pid,
                      r.state == RecordState::kStarting ? ", crashed while starting" : "", r.name));
    } else if (rep.plan) {
      for (const auto& g : rep.plan->gpus) {
        if (std::find(r.gpu_uuids.begin(), r.gpu_uuids.end(), g.uuid) != r.gpu_uuids.end()) {
          add("daemon " + r.name, "ok", fmt::format("already serves {} (pid {})", g.uuid, r.pid));
        }
      }
    }
  }
  std::string def = std::string(kDefaultPipeDirectory) + "/control";
  std::string kind = control_pipe_kind(def);
  if (kind == "socket") {
    add("default-pipe", "warn",
        fmt::format("{} exists: a system-wide MPS daemon may be running there, and every CUDA program without "
                    "CUDA_MPS_PIPE_DIRECTORY would join it", def));
  } else {
    add("default-pipe", "ok", fmt::format("no daemon socket at {}", def));
  }
  if (q.pipe_directory_env) {
    add("pipe-env", "ok", fmt::format("CUDA_MPS_PIPE_DIRECTORY={} (control: {})", *q.pipe_directory_env,
                                      control_pipe_kind(*q.pipe_directory_env + "/control")));
  }
  return rep;
}

}  // namespace unilab::mps
