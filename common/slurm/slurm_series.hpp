// The Slurm release a node runs, and the slurm.conf/cgroup.conf settings that
// differ between release series (verified in Slurm's NEWS and man pages; see
// docs/DESIGN.md "Slurm series").
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace unilab::mps {

struct SlurmVersion {
  int major = 0;  // 22 in 22.05.8
  int minor = 0;  // 5 in 22.05.8
  int micro = 0;  // 8 in 22.05.8
  // "22.05": the release series (settings change between series only).
  std::string series() const;
  std::string to_string() const;  // "22.05.8"
  bool at_least(int series_major, int series_minor) const {
    return major > series_major || (major == series_major && minor >= series_minor);
  }
};

// Parses what `slurmd -V` prints ("slurm 22.05.8", "slurm-wlm 24.11.5",
// possibly with a suffix such as "-1" or "rc1"); nullopt for anything else.
std::optional<SlurmVersion> parse_slurm_version(std::string_view output);

// PrologFlags=RunInJob: the prolog runs inside the job's extern step. Added
// in Slurm 24.05; earlier releases stop with "PrologFlags invalid".
constexpr int kRunInJobMajor = 24, kRunInJobMinor = 5;
bool has_run_in_job(const SlurmVersion& v);

// With RunInJob, slurmstepd gave the prolog/epilog on a job's second and
// later nodes the wrong node's GRES (wrong or no SLURM_JOB_GPUS, or a
// crash): Slurm's "Fix segfault with multi-node gres with
// PrologFlags=RunInJob", fixed in 25.11.0.
bool has_run_in_job_multinode_gres_fix(const SlurmVersion& v);

// With RunInJob, 24.11.0 to 25.11.3 can start the Epilog= (and the
// Prolog= of an x11 job) as the job's user: the extern step runs its x11
// cleanup, which drops privileges process-wide, for every job while it
// forks the epilog (read at the release tags; 24.05 runs it for x11 jobs
// only, 25.11.4 again). docs/DESIGN.md, "Slurm series".
bool has_run_in_job_user_epilog_race(const SlurmVersion& v);
// For x11 jobs (PrologFlags=X11) the race is older and lasts longer: 24.05
// runs the x11 cleanup for them, and 25.11.4 to 25.11.7 carry only half of
// the fix (the in-process privilege drop stays); 26.05.0 has all of it.
bool has_run_in_job_x11_epilog_race(const SlurmVersion& v);

// cgroup/v1 is deprecated from 25.05 on (slurmd warns at start).
bool has_cgroup_v1_deprecated(const SlurmVersion& v);

// slurm.conf PrologTimeout= and EpilogTimeout= (25.05; PrologEpilogTimeout
// is then only their default). Earlier releases stop at the unknown key
// ("Parsing error at unrecognized key", seen on 22.05.8 and 24.11.5).
bool has_prolog_and_epilog_timeouts(const SlurmVersion& v);

// 26.05.0 names a job's cgroup v2 directory after its SLUID; cgroup.conf
// CgroupJobIdPaths=yes (26.05.2) brings back job_<id>. Before 26.05.2 the
// key is unknown and slurmd stops at it (seen on 22.05.8 and 24.11.5).
bool has_sluid_job_cgroup(const SlurmVersion& v);
bool has_cgroup_job_id_paths(const SlurmVersion& v);

// CgroupPlugin=cgroup/v2: added in 22.05 (21.08 knew only cgroup/v1 and
// autodetect). CgroupPlugin=disabled: added in 24.05.
bool has_cgroup_v2_plugin(const SlurmVersion& v);
bool has_cgroup_plugin_disabled(const SlurmVersion& v);

}  // namespace unilab::mps
