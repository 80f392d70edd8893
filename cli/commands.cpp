#include "cli/commands.hpp"
#include "cli/option_values.hpp"

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

#include "common/mps/daemon.hpp"
#include "common/mps/errors.hpp"
#include "common/mps/gpu.hpp"
#include "common/mps/nvidia_checks.hpp"
#include "common/mps/safefs.hpp"
#include "common/mps/status.hpp"
#include "common/slurm/slurm_config.hpp"
#include "common/mps/topology.hpp"
#include "common/mps/units.hpp"

namespace unilab::mps::cli {
namespace {

// --timeout: checked by the table (seconds_value); absent: the default.
std::chrono::milliseconds seconds_option(const ParsedArgs& a, const std::string& key, double def) {
  auto s = a.value(key);
  if (!s) return std::chrono::milliseconds(static_cast<long>(def * 1000));
  try {
    return parse_seconds(*s);
  } catch (const CudaMpsError&) {
    throw UsageError(key + " needs seconds in (0, 3600]");
  }
}

void print_json(const nlohmann::json& j) { std::cout << j.dump(2) << "\n"; }

std::string shell_quote(const std::string& v) {
  std::string out = "'";
  for (char c : v) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// A daemon NAME operand: the record store's rule, as for --name.
void check_daemon_name(const std::string& name) { daemon_name_value("NAME", name); }

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

// --threads and --mem were checked (and --mem normalized) by the plugin's
// own parsers in the table; --threads is read back through the same parser.
MpsLimits limits_from(const ParsedArgs& a) {
  MpsLimits l;
  if (auto t = a.value("--threads")) l.active_thread_percentage = parse_thread_percentage(*t, std::nullopt);
  if (auto m = a.value("--mem")) l.pinned_mem_limit = *m;
  return l;
}

// A stale record was found and cleaned, nothing signalled: said on stderr
// as any error is, with its own exit code.
int report_stale(const std::string& message) {
  std::cerr << "unilab-mps: " << message << "\n";
  return kExitStale;
}

}  // namespace

// The handlers of the command table (cli/command_table.cpp).

int cmd_doctor(Context& c, const ParsedArgs& a) {
  if (a.has("--node") || a.value("--node-name") || a.value("--slurm-conf")) return cmd_node_doctor(c, a);
  StatusQuery q = caller_query(c);
  RecordStore store = c.store();
  std::optional<std::string> selector;
  if (!a.positional.empty()) selector = a.positional[0];
  DoctorReport rep = doctor(c.services, c.tools, store, selector, q);
  if (c.json) {
    print_json(rep.to_json());
  } else {
    fmt::print("{}", rep.to_text());
  }
  return rep.ok() ? kExitOk : kExitNotReady;
}

int cmd_start(Context& c, const ParsedArgs& a) {
  std::optional<std::string> selector;
  if (!a.positional.empty()) selector = a.positional[0];
  auto gpus = discover_gpus(c.runner, c.tools);
  TopologyPlan plan = resolve_topology(selector, getenv_opt("CUDA_VISIBLE_DEVICES"), gpus);
  {
    std::vector<std::string> uuids;
    for (const auto& g : plan.gpus) uuids.push_back(g.uuid);
    require_gpus_suit_mps(gpus, uuids);  // Prohibited, or a whole GPU with MIG on: refused before anything starts
  }
  std::vector<std::vector<GpuIdentity>> groups;
  if (plan.topology_mode == TopologyMode::kPerGpu) {
    for (const auto& g : plan.gpus) groups.push_back({g});
  } else {
    groups.push_back(plan.gpus);
  }
  auto name = a.value("--name");
  if (groups.size() > 1 && (a.value("--pipe-dir") || a.value("--log-dir"))) {
    throw UsageError("--pipe-dir/--log-dir name one daemon; per-gpu starts several");
  }
  StartRequest base;
  base.uid = c.uid;
  base.gid = c.gid;
  base.host = c.host;
  base.topology_mode = plan.topology_mode;
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
    req.name = name ? (groups.size() > 1 ? *name + "-" + uuid_tag(group[0].uuid) : *name)
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
  if (rep.outcome == StopOutcome::kStale) return report_stale(rep.detail);
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
      return report_stale(fmt::format("daemon '{}' (pid {}) is not running; its record{} removed and nothing was "
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

}  // namespace unilab::mps::cli
