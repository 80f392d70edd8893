// Option registration and submit-time validation (srun/sbatch/salloc), also
// run in slurmstepd (remote) where the callbacks record what the job asked.
#include <exception>
#include <string>

#include "common/mps/errors.hpp"
#include "common/slurm/slurm_config.hpp"
#include "spank/plugin.hpp"
#include "spank/state.hpp"

namespace unilab::mps::spank {
namespace {

// Slurm keeps pointers to these for the life of the process.
char kOptMps[] = "unilab-mps";
char kOptMpsArg[] = "MODE";
char kOptMpsUsage[] =
    "Run each task against a private, user-owned CUDA MPS daemon of this job. MODE: auto (default, one daemon per GPU) "
    "or multi (one daemon for all of the job's GPUs on a node).";
char kOptThreads[] = "unilab-mps-threads";
char kOptThreadsArg[] = "PCT";
char kOptThreadsUsage[] = "With --unilab-mps: MPS default active thread percentage (0-100] for the job's daemons, per daemon: "
    "MPS enforces it on every client, a client can only lower its own share (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE) and the job's "
    "owner can change the daemon's default (not a limit between users); or auto: each task's clients get 100 over the tasks "
    "sharing its GPU on the node (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, per client, at most the site's max_threads).";
char kOptMem[] = "unilab-mps-mem";
char kOptMemArg[] = "SIZE";
char kOptMemUsage[] = "With --unilab-mps: MPS default pinned device memory limit per GPU (e.g. 8G), per daemon: MPS enforces it "
    "on every client, a client can only lower its own (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT) and the job's owner can change the "
    "daemon's default (not a limit between users).";

char kOptPriority[] = "unilab-mps-priority";
char kOptPriorityArg[] = "LEVEL";
char kOptPriorityUsage[] = "With --unilab-mps: CUDA_MPS_CLIENT_PRIORITY of the job's tasks, 0 (normal, the default) or 1 "
    "(below-normal), per client: a hint to the driver for their work against other clients of the same daemon, not a "
    "guarantee (NVIDIA); a task can set its own, and it orders only the job's own clients.";

// The option callbacks validate the values at submit (a bad one fails
// srun/sbatch there); the job's prolog and tasks read them again from the
// job's SPANK option variables, so nothing is kept here.
int on_mode(int, const char* optarg, int) {
  try {
    state().requested = true;
    static_cast<void>(parse_mode(optarg));
    return 0;
  } catch (const std::exception& e) {
    slurm_error("unilab-mps: %s", e.what());
    return -1;
  }
}

int on_threads(int, const char* optarg, int) {
  try {
    if (auto v = spank_option_value(optarg); v && !is_auto_threads(*v)) {
      static_cast<void>(parse_thread_percentage(*v, state().config.max_threads));
    }
    return 0;
  } catch (const std::exception& e) {
    slurm_error("unilab-mps: --unilab-mps-threads: %s", e.what());
    return -1;
  }
}

int on_mem(int, const char* optarg, int) {
  try {
    if (auto v = spank_option_value(optarg)) {
      static_cast<void>(parse_mem_limit(*v, state().config.max_mem_bytes));
    }
    return 0;
  } catch (const std::exception& e) {
    slurm_error("unilab-mps: --unilab-mps-mem: %s", e.what());
    return -1;
  }
}

int on_priority(int, const char* optarg, int) {
  try {
    if (auto v = spank_option_value(optarg)) static_cast<void>(parse_client_priority(*v));
    return 0;
  } catch (const std::exception& e) {
    slurm_error("unilab-mps: --unilab-mps-priority: %s", e.what());
    return -1;
  }
}

}  // namespace

int register_options(spank_t sp, int argc, char** argv) {
  try {
    state().config = parse_plugin_args(plugin_args(argc, argv));
  } catch (const std::exception& e) {
    slurm_error("unilab-mps: refusing to load: %s", e.what());
    return -1;
  }
  struct spank_option opts[] = {
      {kOptMps, kOptMpsArg, kOptMpsUsage, 2, 0, on_mode},
      {kOptThreads, kOptThreadsArg, kOptThreadsUsage, 1, 0, on_threads},
      {kOptMem, kOptMemArg, kOptMemUsage, 1, 0, on_mem},
      {kOptPriority, kOptPriorityArg, kOptPriorityUsage, 1, 0, on_priority},
  };
  for (auto& o : opts) {
    if (spank_option_register(sp, &o) != ESPANK_SUCCESS) {
      slurm_error("unilab-mps: cannot register option --%s", o.name);
      return -1;
    }
  }
  return 0;
}

}  // namespace unilab::mps::spank
