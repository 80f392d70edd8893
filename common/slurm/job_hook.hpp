// The job prolog/epilog flow, once, for both front ends: the SPANK plugin's
// job_prolog/job_epilog (spank/job_script.cpp, logging through slurm_info/
// slurm_error) and the Prolog=/Epilog= helpers (prolog/, logging to stderr,
// which slurmd keeps). Each front end passes its own sink and its own source
// of plugin arguments, and maps the result to its own return convention.
//
// Configuration errors (bad plugin arguments, a bad --config file):
//  - a job that did not ask for MPS is never affected. Its prolog returns at
//    once without reading the configuration at all; its epilog (which must
//    still clean up daemons an srun-only request may have started) logs the
//    error and succeeds;
//  - a job that asked for MPS fails closed, in the prolog and in the epilog:
//    with the configuration unreadable the epilog cannot know the state and
//    run directories, so a daemon of the job may be left running and
//    unaccounted for. Draining the node makes an admin look.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/slurm/job.hpp"

namespace unilab::mps {

// Where a front end's messages go. Lines come without a program prefix.
struct HookLog {
  std::function<void(const std::string&)> info;
  std::function<void(const std::string&)> error;
};

// The plugin arguments, produced only when needed (a job that did not ask
// never has them read). May throw CudaMpsError.
using HookArguments = std::function<std::vector<std::string>()>;

// Both return true on success; false means the front end reports failure
// (SPANK: a negative value; helpers: exit code 1).
bool run_prolog_hook(const Getenv& env, const HookArguments& args, const HookLog& log);
bool run_epilog_hook(const Getenv& env, const HookArguments& args, const HookLog& log);

}  // namespace unilab::mps
