#include "common/mps/env.hpp"
#include "common/slurm/slurm_conf_path.hpp"

#include <sys/stat.h>

#include <cstdlib>

namespace unilab::mps {

std::string SlurmConfLocation::dir() const {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

SlurmConfLocation locate_slurm_conf(const std::optional<std::string>& slurm_conf_env,
                                    const std::function<bool(const std::string&)>& exists, const std::string& default_path) {
  if (slurm_conf_env && !slurm_conf_env->empty()) return {*slurm_conf_env, "SLURM_CONF"};
  if (exists(default_path)) return {default_path, "default"};
  if (exists(kConfiglessSlurmConf)) return {kConfiglessSlurmConf, "configless cache"};
  return {default_path, "default"};
}

SlurmConfLocation locate_slurm_conf() {
  return locate_slurm_conf(process_env("SLURM_CONF"), [](const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0;
  });
}

}  // namespace unilab::mps
