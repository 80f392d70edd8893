#include "common/slurm/job_hook.hpp"

#include <unistd.h>

#include <exception>
#include <optional>

#include <fmt/format.h>

#include "common/mps/errors.hpp"
#include "common/mps/gpu.hpp"
#include "common/slurm/job_failure.hpp"
#include "common/slurm/job_logs.hpp"

namespace unilab::mps {
namespace {

bool asked_for_mps(const Getenv& env) { return env(spank_option_env_name("unilab-mps").c_str()).has_value(); }

void report_started(const PrologOutcome& out, const JobContext& job, const HookLog& log) {
  for (const auto& w : out.warnings) log.info(fmt::format("job {} prolog: {}", job.job_id, w));
  if (!out.note.empty()) log.info(out.note);
  for (const auto& r : out.started) {
    log.info(fmt::format("job {}: started MPS daemon {} (pid {}, uid {}) on {}", job.job_id, r.name, r.pid, r.uid,
                         join(r.gpu_uuids, ",")));
  }
}

void report_stopped(const EpilogOutcome& out, const JobContext& job, const HookLog& log) {
  for (const auto& r : out.stopped) log.info(fmt::format("job {}: daemon {} (pid {}): {}", job.job_id, r.name, r.pid, to_string(r.outcome)));
  for (const auto& w : out.warnings) log.info(fmt::format("job {} epilog: {}", job.job_id, w));
  for (const auto& e : out.errors) log.error(fmt::format("job {} epilog failed: {}", job.job_id, e));
}

// The reason goes where the job's tasks can show it to the user. It is a
// convenience: the front end's log line already says why the prolog failed,
// and a task without it points at that log. So neither keeping nor clearing
// it may change the prolog's result or add a line to its one-line failure
// (when the state dir itself is the problem, the prolog's error names it).
void keep_reason(const PluginConfig& cfg, const JobContext& job, const std::string& reason) {
  try {
    keep_prolog_failure(cfg.state_dir, geteuid(), job.job_id, job.node, reason);
  } catch (const std::exception&) {
  }
}

void forget_reason(const PluginConfig& cfg, const JobContext& job, const HookLog* log) {
  try {
    clear_prolog_failure(cfg.state_dir, geteuid(), job.job_id, job.node);
  } catch (const std::exception& e) {
    if (log != nullptr) log->info(fmt::format("job {}: {}", job.job_id, e.what()));
  }
}

bool prolog_for(const PluginConfig& cfg, const JobContext& job, const JobRequest& req, const HookLog& log) {
  forget_reason(cfg, job, nullptr);  // a requeued job's earlier run
  try {
    SystemServices sys;
    report_started(run_job_prolog(sys.services, cfg, job, req), job, log);
    return true;
  } catch (const std::exception& e) {
    log.error(fmt::format("job {} prolog failed: {}", job.job_id, e.what()));
    keep_reason(cfg, job, e.what());
    return false;
  }
}

bool epilog_for(const PluginConfig& cfg, const JobContext& job, const Getenv& env, const HookLog& log) {
  SystemServices sys;
  // Before the epilog removes the daemons' log dirs: a failed job's MPS
  // logs end up in the front end's log.
  for (const auto& line : epilog_log_report(cfg, job, job_end_from_env(env))) log.info(line);
  EpilogOutcome out = run_job_epilog(sys.services, cfg, job);
  report_stopped(out, job, log);
  forget_reason(cfg, job, &log);
  return out.ok();
}

}  // namespace

bool run_prolog_hook(const Getenv& env, const HookArguments& args, const HookLog& log) {
  // Jobs that did not ask: no subprocess, no file, nothing parsed further.
  if (!asked_for_mps(env)) return true;
  const std::string job_id = env("SLURM_JOB_ID").value_or("?");
  PluginConfig cfg;
  JobContext job;
  std::optional<JobRequest> req;
  try {
    cfg = parse_plugin_args(args());
    req = job_request_from_env(env, cfg);
    job = job_context_from_env(env);
  } catch (const std::exception& e) {
    log.error(fmt::format("job {} prolog failed: {}", job_id, e.what()));
    return false;
  }
  return prolog_for(cfg, job, *req, log);
}

bool run_epilog_hook(const Getenv& env, const HookArguments& args, const HookLog& log) {
  const bool asked = asked_for_mps(env);
  const std::string job_id = env("SLURM_JOB_ID").value_or("?");
  try {
    PluginConfig cfg = parse_plugin_args(args());
    JobContext job = job_context_from_env(env);
    return epilog_for(cfg, job, env, log);
  } catch (const std::exception& e) {
    if (!asked) {
      log.error(fmt::format("job {} epilog: {} (the job did not ask for MPS: not failing it)", job_id, e.what()));
      return true;
    }
    log.error(fmt::format("job {} epilog failed: {}; a daemon of this job may be left running unaccounted for", job_id,
                          e.what()));
    return false;
  }
}

}  // namespace unilab::mps
