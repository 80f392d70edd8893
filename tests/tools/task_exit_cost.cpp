// Times what the SPANK task_exit hook does for each ended task of an MPS job
// (task_exit_faults, the very function the hook calls: the job's records in
// the node's store, both logs of each daemon read and scanned, each daemon's
// identity in /proc) on a job whose daemons a real prolog started. Used by
// bench/direct.sh; a measurement, not a test.
//
// usage: task_exit_cost REPS JOB UID PLUGIN_ARG...
// Prints one line per call: its wall time in microseconds and the number of
// faults it noted (0 on logs without fault lines).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "common/slurm/job_faults.hpp"
#include "common/slurm/slurm_config.hpp"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fputs("usage: task_exit_cost REPS JOB UID PLUGIN_ARG...\n", stderr);
    return 2;
  }
  const int reps = std::atoi(argv[1]);
  const std::string job = argv[2];
  const auto uid = static_cast<uid_t>(std::strtoul(argv[3], nullptr, 10));
  try {
    const unilab::mps::PluginConfig cfg =
        unilab::mps::parse_plugin_args(std::vector<std::string>(argv + 4, argv + argc));
    for (int i = 0; i < reps; ++i) {
      std::vector<std::string> problems;
      const auto t0 = std::chrono::steady_clock::now();
      const auto faults = unilab::mps::task_exit_faults(cfg, job, uid, 0, &problems);
      const auto us =
          std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
      std::printf("%lld %zu\n", static_cast<long long>(us), faults.size());
      for (const auto& p : problems) std::fprintf(stderr, "task_exit_cost: %s\n", p.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "task_exit_cost: %s\n", e.what());
    return 1;
  }
  return 0;
}
