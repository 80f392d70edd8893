// Where this node's slurm.conf is, and so the directory whose gres.conf,
// cgroup.conf, plugstack.conf and job_container.conf Slurm reads (it looks
// for them next to slurm.conf).
//
// Configless Slurm (SlurmctldParameters=enable_configless, slurmd
// --conf-server), verified on 22.05.8: slurmd fetches the files from
// slurmctld into <SlurmdSpoolDir>/conf-cache (0755 root, files 0644), links
// /run/slurm/conf to that directory, and sets SLURM_CONF=<conf-cache>/slurm.conf
// in its own environment, which slurmstepd (the SPANK plugin's remote context
// and job tasks) inherits; the job prolog/epilog (SPANK job_script context
// and Prolog=/Epilog= programs) get the same SLURM_CONF from slurmd. Only a
// process outside slurmd (the CLI) needs the /run/slurm/conf link.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace unilab::mps {

inline constexpr const char* kDefaultSlurmConf = "/etc/slurm/slurm.conf";
inline constexpr const char* kConfiglessLink = "/run/slurm/conf";
inline constexpr const char* kConfiglessSlurmConf = "/run/slurm/conf/slurm.conf";
inline constexpr const char* kConfiglessSource = "configless cache";

struct SlurmConfLocation {
  std::string path;    // slurm.conf
  std::string source;  // "SLURM_CONF" | "default" | kConfiglessSource
  // The configless cache: the directory /run/slurm/conf points at; or why
  // that link was not used (not trusted). Empty otherwise.
  std::string cache_target;
  std::string cache_problem;
  bool configless() const { return source == kConfiglessSource; }
  std::string dir() const;  // the directory of the other Slurm config files
  // One line for reports: the path, where it came from, and the cache.
  std::string describe() const;
};

// The configless link as this node has it: nullopt when there is none (no
// /run/slurm/conf/slurm.conf); else its target, or why it is not trusted.
struct ConfiglessCache {
  std::string target;
  std::string problem;
};
using ConfiglessCacheProbe = std::function<std::optional<ConfiglessCache>()>;

// Slurm's own order (read_config.c, _establish_config_source): SLURM_CONF
// when set; else the compiled-in default when it exists; else the configless
// cache when it exists (and, here, is trusted); else the default (whose
// absence the caller reports). `exists` and `cache` are the file-system seams.
SlurmConfLocation locate_slurm_conf(const std::optional<std::string>& slurm_conf_env,
                                    const std::function<bool(const std::string&)>& exists, const ConfiglessCacheProbe& cache,
                                    const std::string& default_path = kDefaultSlurmConf);

// The link /run/slurm/conf is followed only when /run and /run/slurm are
// root-owned and not writable by group or others, the link itself belongs to
// root, its target is absolute and every component of the target is a real
// directory (no symlink) that is root-owned and not group/other writable (a
// root-owned sticky one such as /tmp passes as an ancestor), and the cached
// slurm.conf is a root-owned regular file not writable by group or others.
std::optional<ConfiglessCache> probe_configless_cache();

// The same over this process's environment and file system.
SlurmConfLocation locate_slurm_conf();

}  // namespace unilab::mps
