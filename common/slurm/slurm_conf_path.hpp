// Where this node's slurm.conf is, and so the directory whose gres.conf,
// cgroup.conf, plugstack.conf and job_container.conf Slurm reads (it looks
// for them next to slurm.conf).
//
// Configless Slurm (SlurmctldParameters=enable_configless, slurmd
// --conf-server): slurmd fetches the files from slurmctld into
// <SlurmdSpoolDir>/conf-cache, links /run/slurm/conf to that directory, and
// sets SLURM_CONF=<conf-cache>/slurm.conf in its own environment, which the
// SPANK plugin in slurmd and slurmstepd inherits; Prolog=/Epilog= scripts get
// SLURM_CONF from slurmd as well (Slurm 22.05 and 24.11 alike).
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace unilab::mps {

inline constexpr const char* kDefaultSlurmConf = "/etc/slurm/slurm.conf";
inline constexpr const char* kConfiglessSlurmConf = "/run/slurm/conf/slurm.conf";

struct SlurmConfLocation {
  std::string path;    // slurm.conf
  std::string source;  // "SLURM_CONF" | "default" | "configless cache"
  std::string dir() const;  // the directory of the other Slurm config files
};

// Slurm's own order (read_config.c, _establish_config_source): SLURM_CONF
// when set; else the compiled-in default when it exists; else the configless
// cache when it exists; else the default (whose absence the caller reports).
// `exists` is the file-system seam.
SlurmConfLocation locate_slurm_conf(const std::optional<std::string>& slurm_conf_env,
                                    const std::function<bool(const std::string&)>& exists,
                                    const std::string& default_path = kDefaultSlurmConf);

// The same over this process's environment and file system.
SlurmConfLocation locate_slurm_conf();

}  // namespace unilab::mps
