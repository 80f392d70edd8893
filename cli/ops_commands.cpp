// `unilab-mps history` and `unilab-mps metrics`: what an admin reads of the
// node's job MPS daemons, found through the node's plugstack.conf as
// `status --job` finds them.
#include <ctime>
#include <iostream>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "common/mps/errors.hpp"
#include "common/mps/runner.hpp"
#include "common/mps/text.hpp"
#include "common/slurm/history.hpp"
#include "common/slurm/metrics.hpp"
#include "common/slurm/slurm_files.hpp"

namespace unilab::mps::cli {
namespace {

NodePluginConfig node_config(const ParsedArgs& a) {
  SystemNodeProbe probe;
  return node_plugin_config(probe, slurm_conf_of(a), slurm_node_of(a, "--node"), default_plugin_dir());
}

}  // namespace

int cmd_history(Context& c, const ParsedArgs& a) {
  std::string path;
  if (auto f = a.value("--file")) {
    path = *f;
  } else {
    NodePluginConfig node = node_config(a);
    if (!node.config) {
      throw CudaMpsError(fmt::format("cannot find the plugin's history= on this node: {}; run `unilab-mps doctor --node`, or "
                                     "pass --file (the journal)", node.problem));
    }
    if (!node.config->history) {
      throw CudaMpsError(fmt::format("the plugin keeps no history on this node (history=off in {}); set history=PATH "
                                     "there (docs/ADMIN.md, \"History\")", node.plugin_line));
    }
    path = *node.config->history;
  }
  HistoryRead read = read_history(path);
  if (!read.problem.empty()) throw CudaMpsError(fmt::format("cannot read the history: {}", read.problem));
  std::optional<double> since;
  if (auto s = a.value("--since")) since = std::stod(*s);
  const auto entries = select_history(read.entries, a.value("--job"), since);
  if (c.json) {
    nlohmann::json j = {{"files", read.files}, {"bad_lines", read.bad_lines}, {"entries", entries}};
    std::cout << j.dump(2) << "\n";
    return kExitOk;
  }
  if (read.files.empty()) {
    std::cout << fmt::format("no history yet at {} (the epilog writes it when a job's daemons stop)\n", path);
    return kExitOk;
  }
  std::cout << render_history(entries);
  if (read.bad_lines) {
    std::cerr << fmt::format("unilab-mps: {} line(s) of {} are no history entries and were skipped\n", read.bad_lines,
                             join(read.files, " and "));
  }
  return kExitOk;
}

int cmd_metrics(Context& c, const ParsedArgs& a) {
  NodePluginConfig node = node_config(a);
  if (!node.config) {
    throw CudaMpsError(fmt::format("cannot find the plugin's state_dir= on this node: {}; run `unilab-mps doctor --node`",
                                   node.problem));
  }
  if (node.node.empty()) {
    throw UsageError(fmt::format("this host is several Slurm nodes ({}); pass --node NAME", join(node.host_nodes, ",")));
  }
  std::cout << node_metrics(c.proc, *node.config, node.node, user_name_of);
  return kExitOk;
}

}  // namespace unilab::mps::cli
