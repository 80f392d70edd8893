#include "common/slurm/slurm_files.hpp"

#include <algorithm>
#include <cctype>
#include <set>

#include <fmt/format.h>

#include "common/mps/errors.hpp"
#include "common/mps/text.hpp"
#include "common/mps/units.hpp"
#include "common/slurm/config_text.hpp"
#include "common/slurm/gres.hpp"  // expand_hostlist

namespace unilab::mps {
namespace {

constexpr int kMaxIncludeDepth = 8;

std::string base_of(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

ConfigSource probe_source(NodeProbe& probe, ConfigSyntax syntax) {
  ConfigSource src;
  src.read = [&probe](const std::string& path) { return probe.read_file(path); };
  if (syntax == ConfigSyntax::kPlugstack) src.expand = [&probe](const std::string& pattern) { return probe.glob(pattern); };
  src.syntax = syntax;
  src.max_depth = kMaxIncludeDepth;
  return src;
}

void add_slurm_conf_line(const ConfigLine& line, SlurmConf& conf) {
  std::map<std::string, std::string> kv;
  for (const auto& w : line.words) {
    if (auto pair = split_key_value(w)) kv[lower(pair->first)] = pair->second;
  }
  if (kv.empty()) return;
  const std::string first = lower(line.words[0].substr(0, line.words[0].find('=')));
  if (first == "nodename") {
    conf.nodes.push_back(std::move(kv));
  } else if (first != "partitionname" && first != "nodeset" && first != "downnodes" && first != "frontendname" &&
             first != "switchname") {
    for (auto& [k, v] : kv) conf.values[k] = v;
  }
}

std::optional<PlugstackEntry> plugstack_entry(NodeProbe& probe, const ConfigLine& line, const std::vector<std::string>& plugin_dirs,
                                              std::vector<std::string>& problems) {
  const std::string& kind = line.words[0];
  if (kind == "include") {
    problems.push_back(fmt::format("{}: include without a pattern", line.where()));
    return std::nullopt;
  }
  if (kind != "required" && kind != "optional") {
    problems.push_back(fmt::format("{}: '{}' is not required, optional or include: Slurm ignores this line", line.where(), kind));
    return std::nullopt;
  }
  if (line.words.size() < 2) {
    problems.push_back(fmt::format("{}: no plugin path: Slurm ignores this line", line.where()));
    return std::nullopt;
  }
  PlugstackEntry e;
  e.file = line.file;
  e.line = line.line;
  e.kind = kind;
  e.path = line.words[1];
  e.args.assign(line.words.begin() + 2, line.words.end());
  if (e.path[0] == '/') {
    e.resolved = e.path;
  } else {
    for (const auto& d : plugin_dirs) {
      std::string candidate = (d.ends_with("/") ? d : d + "/") + e.path;
      if (probe.stat(candidate).is_regular) {
        e.resolved = candidate;
        break;
      }
    }
  }
  return e;
}

// Which node of slurm.conf this machine is: NodeName or NodeHostname equal to
// the host name (ranges expanded, NodeHostname paired by position).
std::vector<std::string> nodes_for_host(const SlurmConf& conf, const std::string& host) {
  std::set<std::string> out;
  for (const auto& n : conf.nodes) {
    auto it = n.find("nodename");
    if (it == n.end()) continue;
    std::vector<std::string> names, hosts;
    try {
      names = expand_hostlist(it->second);
      if (auto h = n.find("nodehostname"); h != n.end()) hosts = expand_hostlist(h->second);
    } catch (const CudaMpsError&) {
      continue;
    }
    for (size_t i = 0; i < names.size(); ++i) {
      const std::string& hn = hosts.empty() ? names[i] : hosts[std::min(i, hosts.size() - 1)];
      if (hn == host || names[i] == host) out.insert(names[i]);
    }
  }
  return {out.begin(), out.end()};
}

}  // namespace

std::optional<std::vector<NodeGres>> node_gres(const SlurmConf& conf, const std::string& node, const std::string& name) {
  std::optional<std::string> defaults, gres;
  bool found = false;
  for (const auto& n : conf.nodes) {
    auto it = n.find("nodename");
    if (it == n.end()) continue;
    auto g = n.find("gres");
    if (lower(it->second) == "default") {
      if (g != n.end()) defaults = g->second;
      continue;
    }
    std::vector<std::string> names;
    try {
      names = expand_hostlist(it->second);
    } catch (const CudaMpsError&) {
      continue;
    }
    if (std::find(names.begin(), names.end(), node) == names.end()) continue;
    found = true;
    gres = g != n.end() ? std::optional<std::string>(g->second) : defaults;
    break;
  }
  if (!found) return std::nullopt;
  std::vector<NodeGres> out;
  // name[:type]:count[suffix][(S:...)], comma-separated ("gpu:h200:2(S:0-1),mps:100").
  const std::string text = gres.value_or("");  // the views below point into it
  for (std::string_view item : split_nonempty(text, ',')) {
    if (const size_t paren = item.find('('); paren != std::string_view::npos) item = item.substr(0, paren);
    const auto parts = split_nonempty(item, ':');
    if (parts.empty() || lower(parts[0]) != name) continue;
    NodeGres g;
    std::string_view count = parts.size() >= 2 ? parts.back() : "1";
    if (parts.size() == 3) g.type = std::string(parts[1]);
    if (parts.size() == 2 && !count.empty() && !std::isdigit(static_cast<unsigned char>(count[0]))) {
      g.type = std::string(count);  // gpu:h200 (count 1)
      count = "1";
    }
    if (parts.size() > 3) throw CudaMpsError(fmt::format("slurm.conf NodeName={} Gres= entry '{}' is not name[:type]:count", node, item));
    try {
      g.count = static_cast<unsigned long>(parse_size_bytes(std::string(count)));
    } catch (const CudaMpsError&) {
      throw CudaMpsError(fmt::format("slurm.conf NodeName={} Gres= entry '{}': '{}' is not a count", node, item, count));
    }
    out.push_back(std::move(g));
  }
  return out;
}

std::optional<std::string> SlurmConf::get(const std::string& lowercase_key) const {
  auto it = values.find(lowercase_key);
  return it == values.end() ? std::nullopt : std::optional<std::string>(it->second);
}

SlurmConf read_slurm_conf(NodeProbe& probe, const std::string& path) {
  SlurmConf conf;
  conf.path = path;
  ConfigTree tree;
  try {
    tree = read_config_tree(path, probe_source(probe, ConfigSyntax::kSlurm));
  } catch (const CudaMpsError& e) {
    if (!probe.read_file(path)) throw CudaMpsError(fmt::format("cannot read {}; set SLURM_CONF or --slurm-conf", path));
    throw;
  }
  conf.files = std::move(tree.files);
  conf.problems = std::move(tree.problems);
  for (const auto& line : tree.lines) add_slurm_conf_line(line, conf);
  return conf;
}

Plugstack read_plugstack(NodeProbe& probe, const std::string& path, const std::vector<std::string>& plugin_dirs) {
  Plugstack out;
  out.path = path;
  if (!probe.read_file(path)) {
    if (probe.stat(path).exists) out.problems.push_back(fmt::format("{}: exists but cannot be read", path));
    return out;  // Slurm: a missing plugstack.conf is an empty one
  }
  ConfigSource src = probe_source(probe, ConfigSyntax::kPlugstack);
  src.on_line = [&](const ConfigLine& line, std::vector<std::string>& problems) {
    if (auto e = plugstack_entry(probe, line, plugin_dirs, problems)) out.entries.push_back(std::move(*e));
  };
  ConfigTree tree = read_config_tree(path, src);
  out.files = std::move(tree.files);
  out.includes = std::move(tree.includes);
  out.problems = std::move(tree.problems);
  return out;
}

std::string expand_node_pattern(const std::string& pattern, const std::string& node, const std::string& host) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size() && (pattern[i + 1] == 'n' || pattern[i + 1] == 'h')) {
      out += pattern[i + 1] == 'n' ? node : host;
      ++i;
    } else {
      out += pattern[i];
    }
  }
  return out;
}

std::string config_dir_of(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

void read_node_slurm_conf(NodeProbe& probe, const std::string& path, const std::optional<SlurmConfLocation>& location,
                          const std::optional<std::string>& node, const std::string& host, NodeSlurmFiles& f) {
  f.conf.path = path;
  try {
    f.conf = read_slurm_conf(probe, path);
  } catch (const CudaMpsError& e) {
    f.conf_error = e.what();
    if (location && !location->cache_problem.empty()) {
      *f.conf_error += fmt::format("; the configless cache {} is not used: {}", kConfiglessLink, location->cache_problem);
    }
  }
  if (node) {
    f.node = *node;
    return;
  }
  f.node_candidates = nodes_for_host(f.conf, host);
  f.node = f.node_candidates.empty() ? host : f.node_candidates.front();
}

void read_node_plugstack(NodeProbe& probe, const std::string& slurm_conf, const std::string& default_plugin_dir,
                         NodeSlurmFiles& f) {
  f.plugstack_path = f.conf.get("plugstackconfig").value_or(config_dir_of(slurm_conf) + "/plugstack.conf");
  const std::string dirs = f.conf.get("plugindir").value_or(default_plugin_dir);
  for (std::string_view d : split_nonempty(dirs, ':')) f.plugin_dirs.emplace_back(d);
  f.stack = read_plugstack(probe, f.plugstack_path, f.plugin_dirs);
  for (const auto& e : f.stack.entries) {
    if (base_of(e.path) == kPluginFile) f.plugin_lines.push_back(e);
  }
  if (f.plugin_lines.empty()) return;
  const PlugstackEntry& entry = f.plugin_lines.front();
  if (!entry.resolved.empty()) f.plugin_file = probe.stat(entry.resolved);
  try {
    f.plugin_config = parse_plugin_args(entry.args);
    f.config = *f.plugin_config;
  } catch (const CudaMpsError& e) {
    f.plugin_args_error = e.what();
  }
}

NodePluginConfig node_plugin_config(NodeProbe& probe, const std::string& slurm_conf, const std::optional<std::string>& node,
                                    const std::string& default_plugin_dir) {
  return node_plugin_config(probe, SlurmConfLocation{slurm_conf, "given", "", ""}, node, default_plugin_dir);
}

// What the doctor reads first, stopped at the plugin's arguments.
NodePluginConfig node_plugin_config(NodeProbe& probe, const SlurmConfLocation& slurm_conf, const std::optional<std::string>& node,
                                    const std::string& default_plugin_dir) {
  NodeSlurmFiles f;
  read_node_slurm_conf(probe, slurm_conf.path, slurm_conf, node, probe.hostname(), f);
  NodePluginConfig out;
  out.host_nodes = f.node_candidates;
  if (node || f.node_candidates.size() <= 1) out.node = f.node;
  if (f.conf_error) {
    out.problem = *f.conf_error;
    return out;
  }
  read_node_plugstack(probe, slurm_conf.path, default_plugin_dir, f);
  if (f.plugin_lines.empty()) {
    out.problem = fmt::format("no `optional .../{}` line in {}", kPluginFile,
                              f.stack.files.empty() ? f.plugstack_path : join(f.stack.files, ", "));
    return out;
  }
  out.plugin_line = fmt::format("{}:{}", f.plugin_lines.front().file, f.plugin_lines.front().line);
  if (f.plugin_config) {
    out.config = f.plugin_config;
  } else {
    out.problem = fmt::format("{}: {}", out.plugin_line, f.plugin_args_error);
  }
  return out;
}

}  // namespace unilab::mps
