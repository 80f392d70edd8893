// Shared between the per-context files of the SPANK plugin. Only this
// directory includes spank.h; all logic lives in common/.
#pragma once

extern "C" {
// spank.h's prototypes sit outside its own extern "C" block (Slurm 22.05).
#include <slurm/spank.h>
}

#include <string>
#include <vector>

namespace unilab::mps::spank {

std::vector<std::string> plugin_args(int argc, char** argv);

// local/allocator (srun, sbatch, salloc) and remote (slurmstepd): register
// --unilab-mps[=MODE], --unilab-mps-threads, --unilab-mps-mem, --unilab-mps-priority.
int register_options(spank_t sp, int argc, char** argv);

// remote, per task, still root: read the job prolog's failure reason, if any
// (root-only file), for task_init to name.
int remote_task_init_privileged(spank_t sp, int argc, char** argv);

// remote, per task, as the job user: rewrite the task's GPU environment.
int remote_task_init(spank_t sp, int argc, char** argv);

// remote, per task after it exited, root: the job's MPS server faults, said
// once (slurmstepd's errors reach the slurmd log and the job's stderr).
int remote_task_exit(spank_t sp, int argc, char** argv);

// job_script (prolog/epilog, root).
int job_script_prolog(int argc, char** argv);
int job_script_epilog(int argc, char** argv);

// slurmd start: validate plugin arguments once, loudly.
int slurmd_init(int argc, char** argv);

}  // namespace unilab::mps::spank
