// `unilab-mps status`: the caller's GPUs, daemons and pipes; with --job, one
// Slurm job's daemons on this node, found through the node's plugstack.conf
// exactly as `doctor --node` finds the plugin's arguments.
#include <iostream>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "common/mps/errors.hpp"
#include "common/slurm/job.hpp"
#include "common/slurm/job_faults.hpp"
#include "common/slurm/slurm_files.hpp"
#include "common/slurm/slurm_config.hpp"
#include "common/mps/status.hpp"

namespace unilab::mps::cli {
namespace {

// The plugin's state_dir= and tools on this node; --state-dir,
// --nvidia-smi and --mps-control given on the command line win. Without a
// usable plugin line, --state-dir is required (the default would look in
// the wrong place, as a plugin with another state_dir= shows).
PluginConfig job_plugin_config(const ParsedArgs& a, const NodePluginConfig& node) {
  if (!node.config && !a.value("--state-dir")) {
    throw CudaMpsError(fmt::format("cannot find the plugin's state_dir= on this node: {}; run `unilab-mps doctor --node`, or "
                                   "pass --state-dir (the plugin's state_dir=)", node.problem));
  }
  PluginConfig cfg = node.config.value_or(PluginConfig{});
  if (auto v = a.value("--state-dir")) cfg.state_dir = *v;
  if (auto v = a.value("--nvidia-smi")) cfg.tools.nvidia_smi = *v;
  if (auto v = a.value("--mps-control")) cfg.tools.mps_control = *v;
  return cfg;
}

std::string job_node(const NodePluginConfig& node) {
  if (node.node.empty()) {
    throw UsageError(fmt::format("this host is several Slurm nodes ({}); pass --node NAME", join(node.host_nodes, ",")));
  }
  return node.node;
}

std::string no_daemon_message(const Context& c, const StatusQuery& q, const RecordStore& store, const HostStatus& h) {
  std::string whose = q.uid ? fmt::format(" of uid {}", c.uid) : "";
  std::string problems;
  if (!h.record_problems.empty()) {
    problems = fmt::format(" ({} record{} unreadable, first: {}: {})", h.record_problems.size(),
                           h.record_problems.size() == 1 ? "" : "s", h.record_problems[0].file, h.record_problems[0].reason);
  }
  return fmt::format("job {} has no unilab-mps daemon{} on node {} in {}{}; run this on a node of the job, as root or the "
                     "job's user (`unilab-mps doctor --node` checks the node)",
                     *q.job_id, whose, *q.host, store.root(), problems);
}

int print_status(const Context& c, const HostStatus& h, const std::string& heading, const std::string& records_dir) {
  if (c.json) {
    std::cout << h.to_json().dump(2) << "\n";
  } else {
    std::cout << render_host_status(h, heading, records_dir);
  }
  return kExitOk;
}

int job_status(Context& c, const ParsedArgs& a) {
  SystemNodeProbe probe;
  NodePluginConfig node = node_plugin_config(probe, slurm_conf_of(a), slurm_node_of(a, "--node"), default_plugin_dir());
  PluginConfig cfg = job_plugin_config(a, node);
  StatusQuery q;
  q.job_id = a.value("--job");
  q.host = job_node(node);
  if (c.uid != 0) q.uid = c.uid;  // root sees every user's daemons of the job
  RecordStore store = slurm_record_store(cfg);
  HostStatus h = host_status(c.services, cfg.tools, store, q);
  if (h.managed_daemons.empty()) throw CudaMpsError(no_daemon_message(c, q, store, h));
  std::string from = a.value("--state-dir") ? "--state-dir" : node.plugin_line;
  // The job's MPS server faults (said once by the plugin, kept until the
  // epilog) and, asked as the job's user, what its servers are now.
  std::vector<std::string> names;
  for (const auto& r : h.managed_daemons) names.push_back(r.name);
  const auto faults = recorded_job_faults(cfg, names);
  nlohmann::json states = nlohmann::json::object();
  for (size_t i = 0; i < h.managed_daemons.size(); ++i) {
    const auto servers = h.daemon_states[i].value("mps_servers", std::vector<pid_t>{});
    for (const auto& [pid, state] : server_states(c.runner, cfg.tools, h.managed_daemons[i], servers)) {
      states[std::to_string(pid)] = state;
    }
  }
  const std::string heading = fmt::format("job {} on node {} (records from {}; nvidia-smi {})", *q.job_id, *q.host, from,
                                          cfg.tools.nvidia_smi);
  if (c.json) {
    nlohmann::json j = h.to_json();
    j["faults"] = nlohmann::json::array();
    for (const auto& f : faults) j["faults"].push_back(f.to_json());
    j["server_status"] = states;
    std::cout << j.dump(2) << "\n";
    return kExitOk;
  }
  std::cout << render_host_status(h, heading, store.root());
  for (const auto& [pid, state] : states.items()) std::cout << fmt::format("mps server {}: {}\n", pid, state.get<std::string>());
  std::cout << fmt::format("faults ({}):\n", faults.size());
  for (const auto& f : faults) std::cout << "  " << fault_message(*q.job_id, *q.host, f) << "\n";
  return kExitOk;
}

}  // namespace

int cmd_status(Context& c, const ParsedArgs& a) {
  if (a.value("--job")) return job_status(c, a);
  if (a.value("--node") || a.value("--slurm-conf")) throw UsageError("--node and --slurm-conf go with `status --job`");
  StatusQuery q = caller_query(c);
  RecordStore store = c.store();
  HostStatus h = host_status(c.services, c.tools, store, q);
  return print_status(c, h, fmt::format("host {} ({}), CUDA_VISIBLE_DEVICES={}", c.host, h.platform,
                                        h.cuda_visible_devices.value_or("(unset)")), store.root());
}

}  // namespace unilab::mps::cli
