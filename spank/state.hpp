// What the option callbacks learned in this process (srun or slurmstepd).
#pragma once

#include <map>
#include <string>

#include "common/mps/record.hpp"
#include "common/slurm/slurm_config.hpp"

namespace unilab::mps::spank {

struct PluginState {
  PluginConfig config;
  bool requested = false;
  // The job prolog's failure reasons by node, read while still root
  // (task_init_privileged); empty when none was kept.
  std::map<std::string, std::string> prolog_failures;
};

PluginState& state();

}  // namespace unilab::mps::spank
