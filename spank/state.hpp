// What the option callbacks learned in this process (srun or slurmstepd).
#pragma once

#include <string>

#include "common/record.hpp"
#include "common/slurm_config.hpp"

namespace unilab::mps::spank {

struct PluginState {
  PluginConfig config;
  bool requested = false;
  std::string mode = "auto";
  MpsLimits limits;
  // The job prolog's failure reason on this node, read while still root
  // (task_init_privileged); empty when none was kept.
  std::string prolog_failure;
};

PluginState& state();

}  // namespace unilab::mps::spank
