// What the epilog keeps of a job's MPS daemon logs: the daemons' log
// directories live until the job epilog removes them, so the epilog copies
// the last lines of control.log into the slurmd log first, when the job
// failed or the log itself shows an error. An admin then diagnoses a failed
// MPS job from the slurmd log alone.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/slurm/job.hpp"
#include "common/mps/record.hpp"

namespace unilab::mps {

// How the job ended, as Slurm 22.05 tells the epilog (src/plugins/prep/script/
// prep_script_slurmd.c _build_env, epilog only, when slurmctld knows it):
// SLURM_JOB_EXIT_CODE (the raw wait status: 768 = exit 3, 9 = killed by
// SIGKILL), SLURM_JOB_EXIT_CODE2 ("3:0", exit:signal) and
// SLURM_JOB_DERIVED_EC (the highest exit status of the job's steps).
struct JobEnd {
  bool known = false;   // false: no SLURM_JOB_EXIT_CODE (the prolog, or Slurm did not say)
  bool failed = false;
  std::string description;  // "exit code 3", "signal 9", "a step exited with 2", "success"
};
JobEnd job_end_from_env(const Getenv& env);

struct DaemonLogTail {
  std::string daemon;               // record name
  std::string log_file;             // <log dir>/control.log
  std::string reason;               // why it is copied
  std::vector<std::string> lines;   // printable, each at most 400 bytes
};

// The last `lines` lines of control.log of a daemon whose log dir belongs to
// `uid`: read without following symlinks, only a regular, singly linked file
// owned by `uid` (a job user must not make root copy another file into the
// slurmd log). Control characters become '?'. Empty when unreadable.
std::vector<std::string> read_daemon_log_tail(const std::string& log_directory, uid_t uid, size_t lines);

// True when a control.log line reports a problem (error, failure, a server
// that exited with a non-zero status).
bool log_line_shows_error(const std::string& line);

// The tails to copy for the job's daemons on this node (its trusted records):
// every daemon's when the job failed, otherwise only those whose tail shows an
// error (also when Slurm did not say how the job ended).
std::vector<DaemonLogTail> job_log_tails_to_keep(const std::vector<DaemonRecord>& records, const JobEnd& end, size_t lines);

// The lines an epilog writes (slurmd log, helper stderr) for the job's
// daemons on this node, before run_job_epilog removes their log directories:
// a header per daemon, then its lines prefixed with the daemon name. Never throws.
std::vector<std::string> epilog_log_report(const PluginConfig& cfg, const JobContext& job, const JobEnd& end,
                                           size_t lines = 20);

}  // namespace unilab::mps
