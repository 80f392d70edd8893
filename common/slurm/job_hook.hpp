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
// (SPANK: a negative value; helpers: exit code 1). Both first make sure the
// process is root's (take_root_identity), logging what they restored; when
// it is not, the prolog fails, and the epilog fails for a job that asked
// (naming how to finish it by hand) and logs and succeeds for one that did
// not. The prolog of a job that did not ask does none of this.
bool run_prolog_hook(const Getenv& env, const HookArguments& args, const HookLog& log);
bool run_epilog_hook(const Getenv& env, const HookArguments& args, const HookLog& log);

// The prolog and epilog act as root, the real uid 0 that started them,
// and nothing else. The extern step of Slurm 24.11.0 to 25.11.3 (RunInJob)
// can fork its Prolog=/Epilog= while another of its threads has set the
// effective gid, groups and uid of the whole process to the job user's: its
// x11 cleanup does that at step end even for jobs without --x11 (25.05
// keeps it from its own cgroup cleanup only; 25.11.4 skips it without x11).
// Slurm's run_command then copies the effective ids into the real ones
// before exec, so the program starts either as uid 0 with the user's gid
// and groups, or entirely as the user (docs/DESIGN.md, Slurm series).
//
// Real uid 0: sets every uid and gid to 0 and empties the supplementary
// groups when any id differs from 0, returning one line saying what it
// restored ("" when nothing differed; groups alone are left, as the extern
// step can keep the user's after its cleanup and root needs none). Any other
// real uid (the job's user, or a user running a helper by hand, even one
// made set-uid): throws CudaMpsError naming the uid and the Slurm race, and
// changes nothing.
std::string take_root_identity();

}  // namespace unilab::mps
