#include "cli/commands.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include <fmt/format.h>

#include "common/daemon.hpp"
#include "common/errors.hpp"
#include "common/gpu.hpp"
#include "common/safefs.hpp"
#include "common/status.hpp"
#include "common/topology.hpp"

namespace unilab::mps::cli {
namespace {

std::optional<std::string> getenv_opt(const char* key) {
  const char* v = std::getenv(key);
  return v == nullptr ? std::nullopt : std::optional<std::string>(v);
}

// Everything a command needs, from flags, then environment, then defaults.
struct Context {
  SystemServices sys;
  SystemRunner& runner{sys.runner};
  SystemProcReader& proc{sys.proc};
  Services& services{sys.services};
  Tools tools;
  std::string state_dir;
  std::string run_dir;
  uid_t uid = getuid();
  gid_t gid = getgid();
  std::string host = current_host();
  bool json = false;

  explicit Context(const ParsedArgs& a) {
    json = a.has("--json");
    tools.nvidia_smi = a.value("--nvidia-smi").value_or(getenv_opt("UNILAB_MPS_NVIDIA_SMI").value_or(tools.nvidia_smi));
    tools.mps_control = a.value("--mps-control").value_or(getenv_opt("UNILAB_MPS_CONTROL").value_or(tools.mps_control));
    auto sd = a.value("--state-dir");
    if (!sd) sd = getenv_opt("UNILAB_MPS_STATE_DIR");
    state_dir = sd ? *sd : RecordStore::default_user_root();
    auto rd = a.value("--run-dir");
    if (!rd) rd = getenv_opt("UNILAB_MPS_RUN_DIR");
    if (rd) {
      run_dir = *rd;
    } else if (auto xdg = getenv_opt("XDG_RUNTIME_DIR"); xdg && !xdg->empty() && (*xdg)[0] == '/') {
      run_dir = *xdg + "/unilab-mps";
    } else {
      run_dir = fmt::format("/tmp/unilab-mps-{}", uid);
    }
    for (const auto* p : {&tools.nvidia_smi, &tools.mps_control, &state_dir, &run_dir}) {
      if (p->empty() || (*p)[0] != '/') throw UsageError(fmt::format("'{}' must be an absolute path", *p));
    }
  }
  RecordStore store() const { return RecordStore(state_dir, uid, gid, 0700, 0600); }
};

std::chrono::milliseconds seconds_option(const ParsedArgs& a, const std::string& key, double def) {
  double v = def;
  if (auto s = a.value(key)) {
    char* end = nullptr;
    v = std::strtod(s->c_str(), &end);
    if (end == s->c_str() || *end != '\0' || !(v > 0) || v > 3600) throw UsageError(key + " needs seconds in (0, 3600]");
  }
  return std::chrono::milliseconds(static_cast<long>(v * 1000));
}

void print_json(const nlohmann::json& j) { std::cout << j.dump(2) << "\n"; }

std::string shell_quote(const std::string& v) {
  std::string out = "'";
  for (char c : v) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// A daemon name given on the command line: the record store's rule, spelled out.
void check_daemon_name(const std::string& name) {
  if (!is_safe_name(name)) {
    throw UsageError(fmt::format("'{}' is not a valid daemon name: letters, digits, '.', '_' and '-', not starting with '.', "
                                 "at most 128 characters", name));
  }
}

// `start --foreground`: the daemon runs as a child until it ends (Ctrl-C or a
// signal to this process is passed on); then the directories this call
// created are removed, as `stop` would. Exit: the daemon's own status.
int run_foreground(const Tools& tools, const StartRequest& req) {
  std::vector<std::string> paths;  // what may be created, outermost first
  if (!req.pipe_directory || !req.log_directory) paths.push_back(req.base_directory + "/" + req.name);
  if (req.pipe_directory) paths.push_back(*req.pipe_directory);
  if (req.log_directory) paths.push_back(*req.log_directory);
  std::vector<bool> existed;
  for (const auto& p : paths) existed.push_back(access(p.c_str(), F_OK) == 0);
  std::fflush(stdout);
  pid_t child = fork();
  if (child < 0) throw CudaMpsError(fmt::format("cannot fork for the foreground daemon: {}", std::strerror(errno)));
  if (child == 0) {
    try {
      exec_foreground_daemon(tools, req);
    } catch (const CudaMpsError& e) {
      std::fprintf(stderr, "unilab-mps: %s\n", e.what());
    }
    _exit(kExitError);
  }
  // Signals for the daemon reach it through the terminal's process group;
  // a signal sent to this process alone is forwarded.
  static pid_t forward_to = 0;
  forward_to = child;
  struct sigaction sa {};
  sa.sa_handler = [](int sig) { if (forward_to > 0) kill(forward_to, sig); };
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaction(sig, &sa, nullptr);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  std::vector<std::string> errors;
  for (size_t i = paths.size(); i-- > 0;) {
    if (existed[i] || access(paths[i].c_str(), F_OK) != 0) continue;
    try {
      auto [parent, leaf] = split_parent(paths[i]);
      Fd dir = open_trusted_dir(parent, geteuid());
      if (std::string e = remove_tree_at(dir.get(), leaf); !e.empty()) errors.push_back(paths[i] + ": " + e);
    } catch (const CudaMpsError& e) {
      errors.push_back(paths[i] + ": " + e.what());
    }
  }
  for (const auto& e : errors) std::cerr << "unilab-mps: could not remove " << e << "\n";
  if (WIFEXITED(status)) return WEXITSTATUS(status) == 0 && !errors.empty() ? kExitError : WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}

std::string short_list(const std::vector<std::string>& v) { return v.empty() ? "-" : join(v, ","); }

// The caller's view: its mask, its pipe directory, its own records on this host.
StatusQuery caller_query(const Context& c) {
  StatusQuery q;
  q.cuda_visible_devices = getenv_opt("CUDA_VISIBLE_DEVICES");
  q.pipe_directory_env = getenv_opt("CUDA_MPS_PIPE_DIRECTORY");
  q.uid = c.uid;
  q.host = c.host;
  return q;
}

int cmd_status(Context& c, const ParsedArgs& a) {
  StatusQuery q = caller_query(c);
  RecordStore store = c.store();
  if (auto job = a.value("--job")) {
    // A Slurm job's records live in the root-owned state dir, scoped by node.
    q.job_id = *job;
    q.host = a.value("--node").value_or(getenv_opt("SLURMD_NODENAME").value_or(c.host));
    if (c.uid == 0) q.uid.reset();
    store = RecordStore(a.value("--state-dir").value_or("/run/unilab-mps"), 0, 0, 0755, 0644);
  }
  HostStatus h = host_status(c.services, c.tools, store, q);
  if (c.json) {
    print_json(h.to_json());
    return kExitOk;
  }
  fmt::print("host {} ({}), CUDA_VISIBLE_DEVICES={}\n", c.host, h.platform, h.cuda_visible_devices.value_or("(unset)"));
  if (h.diagnostic) fmt::print("nvidia-smi: {}\n", *h.diagnostic);
  if (!h.gpus.empty()) {
    fmt::print("{:<5} {:<41} {:<6} {}\n", "GPU", "UUID", "MINOR", "NAME");
    for (const auto& g : h.gpus) fmt::print("{:<5} {:<41} {:<6} {}\n", g.index, g.uuid, g.minor_number, g.name);
  }
  fmt::print("daemons ({}) in {}\n", h.managed_daemons.size(), store.root());
  for (size_t i = 0; i < h.managed_daemons.size(); ++i) {
    const auto& r = h.managed_daemons[i];
    fmt::print("  {:<24} pid {:<8} {:<10} {:<22} {}{}\n", r.name, r.pid, h.daemon_states[i]["liveness"].get<std::string>(),
               to_string(r.topology_mode), short_list(r.gpu_uuids), r.job_id ? " job " + *r.job_id : "");
    fmt::print("  {:<24} pipe {}\n", "", r.pipe_directory);
    if (r.limits.active_thread_percentage || r.limits.pinned_mem_limit) {
      std::vector<std::string> l;
      if (r.limits.active_thread_percentage) l.push_back(fmt::format("active threads {}%", *r.limits.active_thread_percentage));
      if (r.limits.pinned_mem_limit) l.push_back(fmt::format("pinned memory {} per GPU", *r.limits.pinned_mem_limit));
      fmt::print("  {:<24} limits {}\n", "", join(l, ", "));
    }
  }
  for (const auto& p : h.record_problems) fmt::print("  ignored record {}: {}\n", p.file, p.reason);
  fmt::print("control pipes:\n");
  for (const auto& p : h.control_pipes) {
    fmt::print("  {:<60} {}{}\n", p.path, p.kind, p.managed_names.empty() ? "" : " (managed: " + join(p.managed_names, ",") + ")");
  }
  return kExitOk;
}

int cmd_doctor(Context& c, const ParsedArgs& a) {
  StatusQuery q = caller_query(c);
  RecordStore store = c.store();
  std::optional<std::string> selector;
  if (!a.positional.empty()) selector = a.positional[0];
  DoctorReport rep = doctor(c.services, c.tools, store, selector, q);
  if (c.json) {
    print_json(rep.to_json());
  } else {
    for (const auto& ch : rep.checks) fmt::print("[{:<4}] {:<20} {}\n", ch.status, ch.name, ch.detail);
    fmt::print("{}\n", rep.ok() ? "ready" : "not ready");
  }
  return rep.ok() ? kExitOk : kExitNotReady;
}

MpsLimits limits_from(const ParsedArgs& a) {
  MpsLimits l;
  if (auto t = a.value("--threads")) {
    char* end = nullptr;
    double v = std::strtod(t->c_str(), &end);
    if (end == t->c_str() || *end != '\0' || !(v > 0) || v > 100) throw UsageError("--threads needs a percentage in (0, 100]");
    l.active_thread_percentage = v;
  }
  if (auto m = a.value("--mem")) l.pinned_mem_limit = *m;
  return l;
}

int cmd_start(Context& c, const ParsedArgs& a) {
  std::optional<std::string> selector;
  if (!a.positional.empty()) selector = a.positional[0];
  auto gpus = discover_gpus(c.runner, c.tools.nvidia_smi);
  TopologyPlan plan = resolve_topology(selector, getenv_opt("CUDA_VISIBLE_DEVICES"), gpus);
  std::vector<std::vector<GpuIdentity>> groups;
  if (plan.topology_mode == kTaskPerGpu) {
    for (const auto& g : plan.gpus) groups.push_back({g});
  } else {
    groups.push_back(plan.gpus);
  }
  auto name = a.value("--name");
  if (name) check_daemon_name(*name);
  if (groups.size() > 1 && (a.value("--pipe-dir") || a.value("--log-dir"))) {
    throw UsageError("--pipe-dir/--log-dir name one daemon; per-gpu starts several");
  }
  StartRequest base;
  base.uid = c.uid;
  base.gid = c.gid;
  base.host = c.host;
  base.topology_mode = *kTopologyModeNames.lookup(plan.topology_mode);
  base.base_directory = c.run_dir;
  base.pipe_directory = a.value("--pipe-dir");
  base.log_directory = a.value("--log-dir");
  base.start_timeout = seconds_option(a, "--timeout", 10);
  base.limits = limits_from(a);
  if (a.has("--foreground")) {
    if (groups.size() != 1) throw UsageError("--foreground runs one daemon; per-gpu starts several");
    base.name = name.value_or(default_daemon_name(groups[0]));
    for (const auto& g : groups[0]) base.gpu_uuids.push_back(g.uuid);
    return run_foreground(c.tools, base);
  }
  RecordStore store = c.store();
  std::vector<StartRequest> requests;
  for (const auto& group : groups) {
    StartRequest req = base;
    req.name = name ? (groups.size() > 1 ? *name + "-" + canonicalize_gpu_uuid(group[0].uuid).substr(0, 8) : *name)
                    : default_daemon_name(group);
    for (const auto& g : group) req.gpu_uuids.push_back(g.uuid);
    requests.push_back(std::move(req));
  }
  // Fail closed: a partial per-gpu start leaves nothing behind.
  std::vector<DaemonRecord> started = start_daemons(c.services, c.tools, store, requests, std::chrono::seconds(5));
  if (c.json) {
    nlohmann::json j = {{"plan", plan.to_json()}, {"daemons", nlohmann::json::array()}};
    for (const auto& r : started) j["daemons"].push_back(r.to_json());
    print_json(j);
  } else {
    for (const auto& r : started) {
      fmt::print("started {} (pid {}) on {}\n  pipe {}\n  log  {}\n", r.name, r.pid, join(r.gpu_uuids, ","), r.pipe_directory,
                 r.log_directory);
    }
    fmt::print("next: eval \"$(unilab-mps env{})\" in the shell that launches your program\n",
               started.size() == 1 ? "" : " " + started[0].name);
  }
  return kExitOk;
}

int cmd_stop(Context& c, const ParsedArgs& a) {
  RecordStore store = c.store();
  auto timeout = seconds_option(a, "--timeout", 10);
  if (a.has("--all")) {
    if (!a.positional.empty()) throw UsageError("stop takes a NAME or --all, not both");
    StopAllResult res = stop_all_daemons(c.services, c.tools, store, c.uid, c.host, timeout);
    if (c.json) {
      nlohmann::json j = {{"stopped", nlohmann::json::array()}, {"errors", res.errors}};
      for (const auto& s : res.stopped) j["stopped"].push_back(s.to_json());
      print_json(j);
    } else {
      for (const auto& s : res.stopped) fmt::print("{}: {}{}\n", s.name, to_string(s.outcome), s.detail.empty() ? "" : " (" + s.detail + ")");
      if (res.stopped.empty() && res.errors.empty()) fmt::print("no daemon recorded for uid {} on {}\n", c.uid, c.host);
    }
    for (const auto& e : res.errors) std::cerr << "unilab-mps: " << e << "\n";
    if (!res.ok()) return kExitError;
    // As `stop NAME`: a stale record that was cleaned (nothing signalled) is exit 3.
    bool stale = std::any_of(res.stopped.begin(), res.stopped.end(), [](const StopReport& r) { return r.outcome == StopOutcome::kStale; });
    return stale ? kExitStale : kExitOk;
  }
  std::optional<std::string> name;
  if (!a.positional.empty()) name = a.positional[0];
  if (name) check_daemon_name(*name);
  DaemonRecord rec = read_daemon_record(store, name, c.uid, c.host, c.proc);
  StopReport rep = stop_daemon(c.services, c.tools, store, rec, timeout);
  if (c.json) {
    print_json(rep.to_json());
  } else {
    fmt::print("{}: {}{}\n", rep.name, to_string(rep.outcome), rep.detail.empty() ? "" : " (" + rep.detail + ")");
  }
  return kExitOk;
}

int cmd_env(Context& c, const ParsedArgs& a) {
  RecordStore store = c.store();
  std::vector<std::pair<std::string, std::string>> env;
  if (auto gpu = a.value("--gpu")) {
    if (!a.positional.empty()) throw UsageError("env takes a NAME or --gpu, not both");
    env = select_environment_for_gpu(*gpu, store.list(c.uid, c.host).records, c.proc);
  } else {
    std::optional<std::string> name;
    if (!a.positional.empty()) name = a.positional[0];
    if (name) check_daemon_name(*name);
    DaemonRecord rec = read_daemon_record(store, name, c.uid, c.host, c.proc);
    if (!daemon_process_is_live(rec, c.proc)) {
      if (rec.state == RecordState::kStarting) {
        throw CudaMpsError(fmt::format("daemon '{}' is still starting (or its start was interrupted); `unilab-mps status` "
                                       "shows it, `unilab-mps stop {}` ends it", rec.name, rec.name));
      }
      // Exit 3 means the stale record was cleaned: clean it (nothing is signalled).
      auto errors = remove_owned_directories(rec);
      store.remove(rec.name);
      throw StaleCudaMpsDaemonError(fmt::format("daemon '{}' (pid {}) is not running; its record{} removed and nothing was "
                                                "signalled; `unilab-mps start` starts a new one",
                                                rec.name, rec.pid, errors.empty() ? " and directories were" : " was"));
    }
    env = environment_for_daemon(rec);
  }
  if (c.json) {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [k, v] : env) j[k] = v;
    print_json(j);
  } else {
    for (const auto& [k, v] : env) fmt::print("export {}={}\n", k, shell_quote(v));
  }
  return kExitOk;
}

int cmd_visible_devices(Context& c, const ParsedArgs& a) {
  std::optional<std::string> mask = a.positional.empty() ? getenv_opt("CUDA_VISIBLE_DEVICES") : a.positional[0];
  if (!mask) throw CudaMpsError("CUDA_VISIBLE_DEVICES is unset and no MASK was given; pass the mask to normalize");
  auto out = resolve_mps_visibility_entries(split_mask(*mask), c.runner, c.tools.nvidia_smi);
  if (c.json) {
    print_json({{"input", *mask}, {"entries", out}, {"value", join(out, ",")}});
  } else {
    fmt::print("{}\n", join(out, ","));
  }
  return kExitOk;
}

}  // namespace

int run_command(const ParsedArgs& a) {
  Context c(a);
  if (a.command == "status") return cmd_status(c, a);
  if (a.command == "doctor" && (a.has("--node") || a.value("--node-name") || a.value("--slurm-conf"))) {
    return cmd_node_doctor(a, c.json);
  }
  if (a.command == "doctor") return cmd_doctor(c, a);
  if (a.command == "start") return cmd_start(c, a);
  if (a.command == "stop") return cmd_stop(c, a);
  if (a.command == "env") return cmd_env(c, a);
  if (a.command == "visible-devices") return cmd_visible_devices(c, a);
  if (a.command == "probe") return cmd_probe(a, c.json, c.tools.nvidia_smi, c.tools.mps_control);
  throw UsageError("unknown command '" + a.command + "'");
}

}  // namespace unilab::mps::cli
