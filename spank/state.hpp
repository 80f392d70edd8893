// What the option callbacks learned in this process (srun or slurmstepd).
#pragma once

#include <string>

#include "common/mps/record.hpp"
#include "common/slurm/slurm_config.hpp"

namespace unilab::mps::spank {

struct PluginState {
  PluginConfig config;
  bool requested = false;
  std::string mode = "auto";
  MpsLimits limits;
};

PluginState& state();

}  // namespace unilab::mps::spank
