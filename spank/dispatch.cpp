// The SPANK entry points: thin, one switch per callback, no exception crosses
// extern "C" (every context function catches and returns a negative value).
#include "spank/plugin.hpp"

extern "C" {
// SPANK_PLUGIN() in C++ gives these internal linkage: define them ourselves.
__attribute__((visibility("default"))) extern const char plugin_name[] = "unilab-mps";
__attribute__((visibility("default"))) extern const char plugin_type[] = "spank";
__attribute__((visibility("default"))) extern const unsigned int plugin_version = SLURM_VERSION_NUMBER;
__attribute__((visibility("default"))) extern const unsigned int spank_plugin_version = 1;

__attribute__((visibility("default"))) int slurm_spank_init(spank_t sp, int argc, char** argv) {
  // Not called in the job_script context; there plugin args still arrive.
  switch (spank_context()) {
    case S_CTX_LOCAL:
    case S_CTX_ALLOCATOR:
    case S_CTX_REMOTE:
      return unilab::mps::spank::register_options(sp, argc, argv);
    case S_CTX_SLURMD:
      // slurmd loads the stack at its start (and reconfigure): bad plugin
      // arguments are refused there, once, not at the first job.
      return unilab::mps::spank::slurmd_init(argc, argv);
    default:
      return 0;
  }
}

__attribute__((visibility("default"))) int slurm_spank_task_init_privileged(spank_t sp, int argc, char** argv) {
  if (spank_context() != S_CTX_REMOTE) return 0;
  return unilab::mps::spank::remote_task_init_privileged(sp, argc, argv);
}

__attribute__((visibility("default"))) int slurm_spank_task_init(spank_t sp, int argc, char** argv) {
  if (spank_context() != S_CTX_REMOTE) return 0;
  return unilab::mps::spank::remote_task_init(sp, argc, argv);
}

// After each task, in slurmstepd (root): an MPS server fault of the job is
// said once, to the slurmd log and the job's stderr. Never fails the task.
__attribute__((visibility("default"))) int slurm_spank_task_exit(spank_t sp, int argc, char** argv) {
  if (spank_context() != S_CTX_REMOTE) return 0;
  return unilab::mps::spank::remote_task_exit(sp, argc, argv);
}

__attribute__((visibility("default"))) int slurm_spank_job_prolog(spank_t, int argc, char** argv) {
  return unilab::mps::spank::job_script_prolog(argc, argv);
}

__attribute__((visibility("default"))) int slurm_spank_job_epilog(spank_t, int argc, char** argv) {
  return unilab::mps::spank::job_script_epilog(argc, argv);
}
}
