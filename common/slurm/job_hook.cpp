#include "common/slurm/job_hook.hpp"

#include <grp.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <chrono>
#include <exception>
#include <optional>

#include <fmt/format.h>

#include "common/mps/errors.hpp"
#include "common/mps/gpu.hpp"
#include "common/mps/safefs.hpp"
#include "common/slurm/job_failure.hpp"
#include "common/slurm/job_logs.hpp"

namespace unilab::mps {
namespace {

// Every message reaches the slurmd log as one line of printable ASCII:
// tool output, log lines and names a user influences can neither forge a
// line of their own nor garble the log (escape_control: \xNN).
HookLog escaped(const HookLog& log) {
  return {[log](const std::string& m) { log.info(escape_control(m)); },
          [log](const std::string& m) { log.error(escape_control(m)); }};
}

bool asked_for_mps(const Getenv& env) { return env(spank_option_env_name("unilab-mps").c_str()).has_value(); }

void report_started(const PrologOutcome& out, const JobContext& job, const HookLog& log) {
  for (const auto& w : out.warnings) log.info(fmt::format("job {} prolog: {}", job.job_id, w));
  for (const auto& f : out.faults) log.error(f);
  if (!out.note.empty()) log.info(out.note);
  for (const auto& r : out.started) {
    log.info(fmt::format("job {}: started MPS daemon {} (pid {}, uid {}) on {}", job.job_id, r.name, r.pid, r.uid,
                         join(r.gpu_uuids, ",")));
  }
}

void report_stopped(const EpilogOutcome& out, const JobContext& job, const HookLog& log) {
  for (const auto& f : out.faults) log.error(f);  // the first sighting of each: once (job_faults.hpp)
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
  const auto t0 = std::chrono::steady_clock::now();
  EpilogOutcome out = run_job_epilog(sys.services, cfg, job);
  report_stopped(out, job, log);
  // How long the node's epilog took for MPS: what an admin compares with
  // EpilogTimeout and UnkillableStepTimeout when a node drains.
  if (!out.stopped.empty()) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
    log.info(fmt::format("job {} epilog: {} daemon(s) stopped in {} ms{}", job.job_id, out.stopped.size(), ms,
                         cfg.history ? fmt::format(", {} history line(s) in {}", out.history_lines, *cfg.history) : ""));
  }
  forget_reason(cfg, job, &log);
  return out.ok();
}

// Takes root's ids back (take_root_identity) and logs what it restored;
// false, with the error logged, when the process is not root's.
bool as_root(const std::string& job_id, const char* hook, bool fails, const HookLog& log, const char* on_error) {
  try {
    if (std::string note = take_root_identity(); !note.empty()) log.info(fmt::format("job {} {}: {}", job_id, hook, note));
    return true;
  } catch (const std::exception& e) {
    log.error(fmt::format("job {} {}{}: {}{}", job_id, hook, fails ? " failed" : "", e.what(), on_error));
    return false;
  }
}

}  // namespace

std::string take_root_identity() {
  uid_t ruid = 0, euid = 0, suid = 0;
  gid_t rgid = 0, egid = 0, sgid = 0;
  if (getresuid(&ruid, &euid, &suid) != 0 || getresgid(&rgid, &egid, &sgid) != 0) {
    throw CudaMpsError(fmt::format("cannot read this process's ids: {}", std::strerror(errno)));
  }
  if (ruid != 0) {
    throw CudaMpsError(fmt::format(
        "runs as uid {} (gid {}), not root, so it cannot act on what root wrote. With PrologFlags=RunInJob, Slurm "
        "24.11.0 to 25.11.3 can start the Prolog=/Epilog= as the job's user: the extern step forks it while its x11 "
        "cleanup has dropped privileges (fixed in 25.11.4)",
        ruid, rgid));
  }
  if (euid == 0 && suid == 0 && rgid == 0 && egid == 0 && sgid == 0) return "";
  // Effective root first: only it may set the groups and the gids.
  if (setresuid(-1, 0, -1) != 0 || setgroups(0, nullptr) != 0 || setresgid(0, 0, 0) != 0 || setresuid(0, 0, 0) != 0) {
    throw CudaMpsError(fmt::format("started with uid {}/{} and gid {}/{} (real/effective) and cannot take root's ids "
                                   "back: {}",
                                   ruid, euid, rgid, egid, std::strerror(errno)));
  }
  return fmt::format(
      "started with uid {}/{} and gid {}/{} (real/effective), as Slurm's extern step starts it when its x11 cleanup "
      "races the fork (fixed in 25.11.4); took root's ids back before acting",
      ruid, euid, rgid, egid);
}

bool run_prolog_hook(const Getenv& env, const HookArguments& args, const HookLog& raw_log) {
  // Jobs that did not ask: no subprocess, no file, nothing parsed further.
  if (!asked_for_mps(env)) return true;
  const HookLog log = escaped(raw_log);
  const std::string job_id = env("SLURM_JOB_ID").value_or("?");
  if (!as_root(job_id, "prolog", true, log, "")) return false;
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

bool run_epilog_hook(const Getenv& env, const HookArguments& args, const HookLog& raw_log) {
  const HookLog log = escaped(raw_log);
  const bool asked = asked_for_mps(env);
  const std::string job_id = env("SLURM_JOB_ID").value_or("?");
  // As a configuration error (header): a job that did not ask is not failed.
  if (!as_root(job_id, "epilog", asked, log,
               asked ? "; the job's daemons were not stopped: as root, run unilab-mps-epilog again with the job's "
                       "SLURM_JOB_ID, SLURM_JOB_UID, SLURM_JOB_GID and SLURMD_NODENAME (docs/ADMIN.md, section 6), then "
                       "resume the node"
                     : " (the job did not ask for MPS: not failing it)")) {
    return !asked;
  }
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
