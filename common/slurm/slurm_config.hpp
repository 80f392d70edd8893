// Plugin arguments (plugstack.conf `key=value`) and the --unilab-mps option
// value, parsed by pure functions into one config struct whose defaults live
// here. An unknown key or a bad value is an error, never a warning.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "common/mps/daemon.hpp"

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
};

// Parses plugin arguments; throws CudaMpsError naming the bad argument.
PluginConfig parse_plugin_args(const std::vector<std::string>& args);

// The --unilab-mps value: "auto" (default) or "multi". Slurm hands a flag
// without a value to the plugin as nullptr or, re-imported in a batch step's
// srun, as the string "(null)": both mean "auto".
std::string parse_mode(const char* value);

// --unilab-mps-threads: a percentage in (0, 100], within the site maximum.
double parse_thread_percentage(const std::string& value, const std::optional<double>& site_max);

// --unilab-mps-mem: a size like 4096M, 8G (MPS syntax: integer + K/M/G, or
// bytes), within the site maximum. Returns the normalized MPS spelling.
std::string parse_mem_limit(const std::string& value, const std::optional<unsigned long long>& site_max);
unsigned long long parse_size_bytes(const std::string& value);

// The gres.conf path: the configured one, else next to SLURM_CONF, else next
// to the slurm.conf locate_slurm_conf finds (the configless cache included).
std::string gres_conf_path(const PluginConfig& cfg, const std::optional<std::string>& slurm_conf);

}  // namespace unilab::mps
