// Plugin arguments (plugstack.conf `key=value`) and the --unilab-mps option
// value, parsed by pure functions into one config struct whose defaults live
// here. An unknown key or a bad value is an error, never a warning.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/mps/modes.hpp"       // JobMode
#include "common/mps/private_fs.hpp"  // PrivateFsLimits
#include "common/mps/tools.hpp"
#include "common/mps/units.hpp"  // parse_size_bytes, parse_seconds

namespace unilab::mps {

struct PluginConfig {
  std::string state_dir = "/run/unilab-mps";      // root-owned records
  std::string run_dir = "/run/unilab-mps/run";    // parent of per-daemon pipe/log dirs
  Tools tools;                                    // nvidia_smi=, mps_control=
  std::optional<std::string> gres_conf;           // default: next to SLURM_CONF
  std::chrono::milliseconds start_timeout{15000};
  std::chrono::milliseconds stop_timeout{10000};
  std::optional<double> max_threads;              // site maximum for --unilab-mps-threads
  std::optional<unsigned long long> max_mem_bytes;  // site maximum for --unilab-mps-mem
  std::optional<double> default_threads;          // applied when the user gives none
  std::string contain = "auto";                   // auto | off: daemon in the job's cgroup (containment.hpp)
  std::optional<PrivateFsLimits> dir_size = PrivateFsLimits{};  // dir_size=: each daemon dir's own tmpfs; off: none
  std::optional<std::string> history = "/var/log/unilab-mps/history.jsonl";  // history=: the epilog's journal; off: none
  unsigned long long history_max = 4ULL << 20;    // history_max=: rotate at this size (the journal: at most twice it)
};

// Parses plugin arguments; throws CudaMpsError naming the bad argument.
// The keys are one table (slurm_config.cpp), which also writes the docs'.
PluginConfig parse_plugin_args(const std::vector<std::string>& args);

// That table as Markdown (key, default, meaning), in README.md's brief words
// or docs/ADMIN.md's full ones; tests/lint/plugin_args_docs.sh holds both
// documents to it.
enum class PluginArgWords { kBrief, kFull };
std::string plugin_args_table(PluginArgWords words);

// The plugin arguments a config file holds (the prolog/epilog helpers'
// --config): Slurm's config syntax (config_text.hpp), any number of
// key=value words per line. Include lines and bare words are refused.
// Throws CudaMpsError naming `file`:line.
std::vector<std::string> plugin_args_from_config(std::string_view text, const std::string& file);

// A SPANK option's value as Slurm hands it over: a flag given without a
// value arrives as nullptr or, re-imported in a batch step's srun (and in the
// prolog/epilog environment), as the string "(null)". Both are "no value":
// nullopt. The one place that knows this quirk.
std::optional<std::string> spank_option_value(const char* value);

// The --unilab-mps value: auto (default, also for no value) or multi.
JobMode parse_mode(const char* value);

// --unilab-mps-threads: a percentage in (0, 100], within the site maximum,
// or `auto` (is_auto_threads): each task's share, at task start.
bool is_auto_threads(const std::string& value);
double parse_thread_percentage(const std::string& value, const std::optional<double>& site_max);

// --unilab-mps-priority: NVIDIA's client priority levels, 0 or normal, 1 or
// below-normal (case-insensitive).
ClientPriority parse_client_priority(const std::string& value);

// --unilab-mps-mem: a size like 4096M, 8G (MPS syntax: integer + K/M/G, or
// bytes), within the site maximum. Returns the normalized MPS spelling.
std::string parse_mem_limit(const std::string& value, const std::optional<unsigned long long>& site_max);

// The gres.conf path: the configured one, else next to SLURM_CONF, else next
// to the slurm.conf locate_slurm_conf finds (the configless cache included).
std::string gres_conf_path(const PluginConfig& cfg, const std::optional<std::string>& slurm_conf);

}  // namespace unilab::mps
