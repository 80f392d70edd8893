// job_prolog / job_epilog (root, in slurmd's spank prolog process). No
// PATH/HOME there and spank_getenv does not work: plain getenv(3).
#include <exception>
#include <string>

#include "common/errors.hpp"
#include "common/gpu.hpp"
#include "common/job.hpp"
#include "common/job_logs.hpp"
#include "spank/plugin.hpp"
#include "spank/state.hpp"

namespace unilab::mps::spank {

PluginState& state() {
  static PluginState s;
  return s;
}

std::vector<std::string> plugin_args(int argc, char** argv) {
  std::vector<std::string> out;
  for (int i = 0; i < argc; ++i) out.emplace_back(argv[i] ? argv[i] : "");
  return out;
}

int slurmd_init(int argc, char** argv) {
  try {
    parse_plugin_args(plugin_args(argc, argv));
    return 0;
  } catch (const std::exception& e) {
    slurm_error("unilab-mps: refusing to load: %s", e.what());
    return -1;
  }
}

int job_script_prolog(int argc, char** argv) {
  Getenv env = process_getenv();
  // Jobs that did not ask: no subprocess, no file, nothing parsed further.
  if (!env(spank_option_env_name("unilab-mps").c_str())) return 0;
  std::string job_id = env("SLURM_JOB_ID").value_or("?");
  try {
    PluginConfig cfg = parse_plugin_args(plugin_args(argc, argv));
    auto req = job_request_from_env(env, cfg);
    JobContext job = job_context_from_env(env);
    SystemServices sys;
    Services& s = sys.services;
    PrologOutcome out = run_job_prolog(s, cfg, job, *req);
    for (const auto& w : out.warnings) slurm_info("unilab-mps: job %s prolog: %s", job.job_id.c_str(), w.c_str());
    if (!out.note.empty()) slurm_info("unilab-mps: %s", out.note.c_str());
    for (const auto& r : out.started) {
      slurm_info("unilab-mps: job %s: started MPS daemon %s (pid %d, uid %u) on %s", job.job_id.c_str(), r.name.c_str(),
                 static_cast<int>(r.pid), static_cast<unsigned>(r.uid), join(r.gpu_uuids, ",").c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    slurm_error("unilab-mps: job %s prolog failed: %s", job_id.c_str(), e.what());
    return -1;
  }
}

int job_script_epilog(int argc, char** argv) {
  Getenv env = process_getenv();
  std::string job_id = env("SLURM_JOB_ID").value_or("?");
  try {
    PluginConfig cfg = parse_plugin_args(plugin_args(argc, argv));
    JobContext job = job_context_from_env(env);
    SystemServices sys;
    Services& s = sys.services;
    // Before the epilog removes the daemons' log dirs: a failed job's MPS
    // logs end up in the slurmd log.
    for (const auto& line : epilog_log_report(cfg, job, job_end_from_env(env))) slurm_info("unilab-mps: %s", line.c_str());
    EpilogOutcome out = run_job_epilog(s, cfg, job);
    for (const auto& r : out.stopped) {
      slurm_info("unilab-mps: job %s: daemon %s (pid %d): %s", job.job_id.c_str(), r.name.c_str(), static_cast<int>(r.pid),
                 std::string(to_string(r.outcome)).c_str());
    }
    for (const auto& w : out.warnings) slurm_info("unilab-mps: job %s epilog: %s", job.job_id.c_str(), w.c_str());
    for (const auto& e : out.errors) slurm_error("unilab-mps: job %s epilog failed: %s", job.job_id.c_str(), e.c_str());
    return out.ok() ? 0 : -1;
  } catch (const std::exception& e) {
    // A bad configuration cannot have started anything (the prolog fails the
    // same way), so it must not drain every node's epilog.
    slurm_error("unilab-mps: job %s epilog: %s", job_id.c_str(), e.what());
    return 0;
  }
}

}  // namespace unilab::mps::spank
