// Slurm's configuration files as unilab-mps reads them, one module for
// every part that needs them (the node doctor, `status --job`, the plugin's
// containment plan): slurm.conf with its includes, cgroup.conf in slurm.conf's
// syntax, plugstack.conf with its includes and the plugin's line, and which
// node of slurm.conf this host is. Reads through NodeProbe only.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/slurm/gres.hpp"  // NodeGres
#include "common/slurm/node_probe.hpp"
#include "common/slurm/slurm_conf_path.hpp"
#include "common/slurm/slurm_config.hpp"

namespace unilab::mps {

// slurm.conf (and the files it includes), as far as unilab-mps needs it.
struct SlurmConf {
  std::string path;
  std::vector<std::string> files;                          // every file read
  std::map<std::string, std::string> values;               // lowercase key -> value (last one wins)
  std::vector<std::map<std::string, std::string>> nodes;   // NodeName= lines, lowercase keys
  std::vector<std::string> problems;                       // unreadable includes
  std::optional<std::string> get(const std::string& lowercase_key) const;
};
// Throws CudaMpsError when `path` cannot be read.
SlurmConf read_slurm_conf(NodeProbe& probe, const std::string& path);

// The `name` GRES (gpu) of `node`: its NodeName line's Gres=, else the
// last NodeName=DEFAULT before it. Throws CudaMpsError naming a malformed
// entry; nullopt when slurm.conf names no such node.
std::optional<std::vector<NodeGres>> node_gres(const SlurmConf& conf, const std::string& node, const std::string& name = "gpu");

// One `required`/`optional` line of plugstack.conf.
struct PlugstackEntry {
  std::string file;
  int line = 0;
  std::string kind;      // required | optional
  std::string path;      // as written
  std::string resolved;  // absolute path; a relative one looked up in PluginDir; empty: not found
  std::vector<std::string> args;
};

struct Plugstack {
  std::string path;
  std::vector<std::string> files;      // every file read, in Slurm's order
  std::vector<PlugstackEntry> entries;
  std::vector<std::string> includes;   // "FILE:LINE: include PATTERN (N files)"
  std::vector<std::string> problems;   // lines Slurm ignores, unreadable files
};
// Reads plugstack.conf the way Slurm 22.05 does (src/common/plugstack.c):
// `#` comments, `required|optional PATH ARGS...`, `include GLOB` relative to
// the including file's directory; a missing top file is an empty stack.
Plugstack read_plugstack(NodeProbe& probe, const std::string& path, const std::vector<std::string>& plugin_dirs);

// Expands %n (node name) and %h (host name) as slurmd does in SlurmdPidFile.
std::string expand_node_pattern(const std::string& pattern, const std::string& node, const std::string& host);


// The unilab_mps.so file name, as plugstack.conf lines name it.
inline constexpr const char* kPluginFile = "unilab_mps.so";

// The directory a Slurm config file's neighbours are looked up in ("." for
// a bare name).
std::string config_dir_of(const std::string& path);

// What a node's Slurm files say about unilab-mps: slurm.conf, which node
// of it this host is, plugstack.conf with its includes, and the plugin's
// line and arguments there.
struct NodeSlurmFiles {
  // slurm.conf
  SlurmConf conf;
  std::optional<std::string> conf_error;     // slurm.conf unreadable
  std::vector<std::string> node_candidates;  // NodeNames of this host
  std::string node;                          // the node: as given, else this host's first NodeName, else the host
  // plugstack.conf and our line in it
  std::string plugstack_path;
  std::vector<std::string> plugin_dirs;
  Plugstack stack;
  std::vector<PlugstackEntry> plugin_lines;  // lines naming unilab_mps.so
  std::optional<FileFacts> plugin_file;      // the first line's resolved file
  std::optional<PluginConfig> plugin_config; // its arguments, parsed
  std::string plugin_args_error;
  PluginConfig config;                       // plugin_config, else the defaults
};
// slurm.conf at `path` (found as `location` says, when known) and the node:
// `node` when given, else the NodeName this `host` is.
void read_node_slurm_conf(NodeProbe& probe, const std::string& path, const std::optional<SlurmConfLocation>& location,
                          const std::optional<std::string>& node, const std::string& host, NodeSlurmFiles& f);
// plugstack.conf (slurm.conf's PlugStackConfig, else next to `slurm_conf`),
// the unilab_mps.so lines in it and the first one's arguments.
void read_node_plugstack(NodeProbe& probe, const std::string& slurm_conf, const std::string& default_plugin_dir,
                         NodeSlurmFiles& f);

// The plugin's configuration on this node, found the way node_doctor finds
// it: slurm.conf (PlugStackConfig, PluginDir) -> plugstack.conf and its
// includes -> the unilab_mps.so line (the first, as Slurm loads it) -> its
// arguments through parse_plugin_args. Reads only; never throws.
struct NodePluginConfig {
  std::optional<PluginConfig> config;   // nullopt: `problem` says why
  std::string problem;
  std::string plugin_line;              // FILE:LINE of the line used
  std::string node;                     // as node_doctor decides it; empty: the host is several nodes
  std::vector<std::string> host_nodes;  // NodeName of this host in slurm.conf (several: pick one)
};
NodePluginConfig node_plugin_config(NodeProbe& probe, const std::string& slurm_conf, const std::optional<std::string>& node,
                                    const std::string& default_plugin_dir);
// The same from a located slurm.conf: a configless cache that was not
// trusted is named in `problem` when slurm.conf cannot be read.
NodePluginConfig node_plugin_config(NodeProbe& probe, const SlurmConfLocation& slurm_conf, const std::optional<std::string>& node,
                                    const std::string& default_plugin_dir);

}  // namespace unilab::mps
