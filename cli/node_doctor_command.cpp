// `unilab-mps doctor --node`: is this Slurm node ready for --unilab-mps jobs?
// The checks live in common/slurm (node_facts.cpp gathers, node_checks*.cpp check, node_doctor.cpp reports); this file picks the inputs and prints.
#include <pwd.h>
#include <unistd.h>

#include <iostream>

#include "cli/commands.hpp"
#include "common/slurm/node_doctor.hpp"
#include "common/slurm/slurm_conf_path.hpp"

#ifndef UNILAB_MPS_SLURM_PLUGIN_DIR
#define UNILAB_MPS_SLURM_PLUGIN_DIR "/usr/lib/x86_64-linux-gnu/slurm-wlm"
#endif

namespace unilab::mps::cli {

SlurmConfLocation slurm_conf_of(const ParsedArgs& a) {
  if (auto f = a.value("--slurm-conf")) return {*f, "--slurm-conf", "", ""};
  auto env = getenv_opt("SLURM_CONF");
  if (env && !env->empty() && (*env)[0] != '/') {
    throw UsageError("SLURM_CONF='" + *env + "' must be an absolute path; fix it or pass --slurm-conf");
  }
  return locate_slurm_conf();  // SLURM_CONF, the default file, else slurmd's configless cache
}

std::optional<std::string> slurm_node_of(const ParsedArgs& a, const std::string& option) {
  if (auto n = a.value(option)) return n;
  auto env = getenv_opt("SLURMD_NODENAME");
  return env && !env->empty() ? env : std::nullopt;
}

std::string default_plugin_dir() { return UNILAB_MPS_SLURM_PLUGIN_DIR; }

int cmd_node_doctor(Context& c, const ParsedArgs& a) {
  if (!a.has("--node")) throw UsageError("--node-name and --slurm-conf go with `doctor --node`");
  if (!a.positional.empty()) throw UsageError("`doctor --node` checks the whole node and takes no SELECTOR");
  NodeDoctorOptions opt;
  opt.slurm_conf_location = slurm_conf_of(a);
  opt.slurm_conf = opt.slurm_conf_location->path;
  opt.node = slurm_node_of(a, "--node-name");
  opt.default_plugin_dir = default_plugin_dir();
  // As root, `slurmd -V` runs as nobody (65534 where NSS does not know it):
  // a version query needs no privilege.
  if (geteuid() == 0) {
    const struct passwd* nobody = getpwnam("nobody");
    opt.version_query_as = Credentials{nobody ? nobody->pw_uid : 65534, nobody ? nobody->pw_gid : 65534};
  }
  SystemNodeProbe probe;
  NodeDoctorReport rep = node_doctor(probe, c.runner, opt);
  if (c.json) {
    std::cout << rep.to_json().dump(2) << "\n";
  } else {
    std::cout << rep.to_text();
  }
  return rep.ok() ? kExitOk : kExitNotReady;
}

}  // namespace unilab::mps::cli
