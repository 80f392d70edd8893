// Standalone Prolog=/Epilog= programs for sites that run scripts instead of
// SPANK job_prolog/job_epilog: same environment, same arguments, same code.
#pragma once

#include <string>
#include <vector>

namespace unilab::mps::helper {

// Plugin arguments from `key=value` words and `--config FILE` (one key=value
// per line, # comments). Throws CudaMpsError.
std::vector<std::string> collect_arguments(const std::vector<std::string>& argv);

// Returns the process exit code (0 ok, 1 failure: Slurm then drains the node).
int run_prolog(const std::vector<std::string>& argv);
int run_epilog(const std::vector<std::string>& argv);

}  // namespace unilab::mps::helper
