// `unilab-mps doctor --node`: is this Slurm node ready for --unilab-mps jobs?
// The checks live in common/slurm/node_doctor.cpp; this file picks the inputs and prints.
#include <cstdlib>
#include <iostream>

#include "cli/commands.hpp"
#include "common/slurm/node_doctor.hpp"
#include "common/slurm/slurm_conf_path.hpp"

#ifndef UNILAB_MPS_SLURM_PLUGIN_DIR
#define UNILAB_MPS_SLURM_PLUGIN_DIR "/usr/lib/x86_64-linux-gnu/slurm-wlm"
#endif

namespace unilab::mps::cli {

int cmd_node_doctor(const ParsedArgs& a, bool json) {
  if (!a.has("--node")) throw UsageError("--node-name and --slurm-conf go with `doctor --node`");
  if (!a.positional.empty()) throw UsageError("`doctor --node` checks the whole node and takes no SELECTOR");
  NodeDoctorOptions opt;
  opt.slurm_conf = a.value("--slurm-conf").value_or(locate_slurm_conf().path);
  if (opt.slurm_conf.empty() || opt.slurm_conf[0] != '/') throw UsageError("--slurm-conf needs an absolute path");
  if (auto n = a.value("--node-name")) {
    opt.node = *n;
  } else if (const char* env_node = std::getenv("SLURMD_NODENAME"); env_node != nullptr && *env_node) {
    opt.node = env_node;
  }
  opt.default_plugin_dir = UNILAB_MPS_SLURM_PLUGIN_DIR;
  SystemNodeProbe probe;
  SystemRunner runner;
  NodeDoctorReport rep = node_doctor(probe, runner, opt);
  if (json) {
    std::cout << rep.to_json().dump(2) << "\n";
  } else {
    std::cout << rep.to_text();
  }
  return rep.ok() ? kExitOk : kExitNotReady;
}

}  // namespace unilab::mps::cli
