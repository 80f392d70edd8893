// Standalone Prolog=/Epilog= programs for sites that run scripts instead of
// SPANK job_prolog/job_epilog: same environment, same arguments, same flow
// (common/slurm/job_hook.hpp); here only the arguments and stderr logging.
#pragma once

#include <string>
#include <vector>

namespace unilab::mps::helper {

// Plugin arguments from `key=value` words and `--config FILE`: FILE is an
// absolute path in a root-trusted directory, read with Slurm's config syntax
// (comments, `\` continuations, quoted values; one or more key=value per
// line; Include is refused). Throws CudaMpsError naming FILE:LINE.
std::vector<std::string> collect_arguments(const std::vector<std::string>& argv);

// Returns the process exit code (0 ok, 1 failure: Slurm then drains the node).
int run_prolog(const std::vector<std::string>& argv);
int run_epilog(const std::vector<std::string>& argv);

}  // namespace unilab::mps::helper
