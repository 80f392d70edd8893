// Containment: a job's MPS daemon lives in the job's cgroup on its node, so
// it reaches only the job's GPU device files, is accounted to the job, and
// dies with it. The daemon is started by the root prolog, which (Slurm 22.05,
// PrologFlags=Contain) runs before the job's extern step cgroup exists; the
// daemon is then moved into `step_extern` once Slurm creates it, before any
// task can reach it (the task path waits for the move and fails closed).
//
// Slurm facts this relies on (verified on local clusters, see docs/DESIGN.md):
//  - cgroup v1, PrologFlags=Contain (22.05+): `<mnt>/<ctrl>/slurm[_<node>]/
//    uid_U/job_J/step_extern` appears ~40 ms after the prolog exits; a
//    process written into its freezer and devices cgroup.procs is
//    device-constrained and SIGKILLed at job end. A process in `job_J` itself
//    is constrained but never killed: only step cgroups are.
//  - cgroup v1, PrologFlags=RunInJob (24.05+): the prolog runs inside the
//    extern step (freezer at job level, devices in step_extern): step_extern
//    exists already and the daemon must still be moved into freezer
//    step_extern to die with the job.
//  - cgroup v2, PrologFlags=RunInJob: the prolog runs in
//    `.../<job>/step_extern/slurm` (<job>: `job_J`, or on 26.05 the job's
//    SLUID); the daemon is born in `step_extern/user/unilab_mps`, where
//    Slurm's own teardown kills (prepare_launch_cgroups), nothing to move.
//    Without RunInJob the prolog runs in slurmd's cgroup: refused.
// cgroup.procs moves one process, not what it forked earlier: the daemon's
// whole tree (MPS servers, if a client somehow came first) is moved.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/slurm/slurm_files.hpp"
#include "common/mps/proc.hpp"
#include "common/mps/record.hpp"

namespace unilab::mps {

// What the site's slurm.conf and cgroup.conf say about cgroups.
// A Slurm boolean (s_p_handle_boolean): yes, up, true or 1, in any case;
// unset is false.
bool slurm_boolean(const std::optional<std::string>& v);

struct CgroupSite {
  bool prolog_contain = false;     // PrologFlags contains Contain
  bool prolog_run_in_job = false;  // PrologFlags contains RunInJob (24.05+)
  bool proctrack_cgroup = false;   // ProctrackType=proctrack/cgroup (freezer kills steps)
  std::string cgroup_plugin = "autodetect";  // cgroup/v1 | cgroup/v2 | autodetect
  std::string mountpoint = "/sys/fs/cgroup";
  bool constrain_devices = false;
  bool constrain_ram = false;
  bool constrain_cores = false;
};

// From the two parsed files; a missing cgroup.conf means Slurm's defaults.
CgroupSite cgroup_site_from(const SlurmConf& slurm_conf, const std::optional<SlurmConf>& cgroup_conf);

// Reads slurm.conf at `slurm_conf` (and cgroup.conf beside it). Throws
// CudaMpsError when slurm.conf cannot be read.
CgroupSite read_cgroup_site(const std::string& slurm_conf);

// Whether the slurm.conf this node reads (locate_slurm_conf) has
// PrologFlags=RunInJob; false when it cannot be read. For messages only.
bool site_runs_prolog_in_job();

// The cgroup file system, abstract so it can be mocked out for tests.
class CgroupFs {
 public:
  virtual ~CgroupFs() = default;
  virtual bool is_dir(const std::string& path) = 0;
  // Writes `text` to an existing file; returns 0 or the errno.
  virtual int write(const std::string& path, const std::string& text) = 0;
  // An existing file's text (cgroup.procs, cpuset.cpus); nullopt when unreadable.
  virtual std::optional<std::string> read(const std::string&) { return std::nullopt; }
  // mkdir 0755 (an existing directory is success); returns 0 or the errno.
  virtual int make_dir(const std::string&) { return ENOTSUP; }
  // rmdir; returns 0 or the errno (ENOENT counts as success).
  virtual int remove_dir(const std::string&) { return ENOTSUP; }
};
class SystemCgroupFs final : public CgroupFs {
 public:
  bool is_dir(const std::string& path) override;
  int write(const std::string& path, const std::string& text) override;
  std::optional<std::string> read(const std::string& path) override;
  int make_dir(const std::string& path) override;
  int remove_dir(const std::string& path) override;
};

// Where a job's daemons are born (StartRequest::launch_cgroups), so that
// neither they nor anything they fork is ever outside the job's control:
//  - v1 where the job's step_extern exists already (RunInJob): its
//    cgroup.procs files;
//  - v1 before Slurm made it (Contain: it appears after the prolog): a
//    root-owned holding cgroup per controller, `<mnt>/<ctrl>/unilab_mps/
//    job_<J>` (cpuset: the parent's cpus and mems), that the mover later
//    empties into step_extern (adopt_holding_cgroups);
//  - v2: `<job>/step_extern/user/unilab_mps` (made by root), beside the
//    tasks of the extern step: Slurm 25.05+ ends a job by writing
//    step_extern/user's cgroup.kill and waits for the step's processes, so
//    a daemon left where the prolog runs (step_extern/slurm) is never killed
//    and the job hangs in COMPLETING (seen on 26.05.5). Where Slurm made no
//    step_extern/user, the daemon inherits the prolog's cgroup as before.
// A user can write none of these (cgroup.procs of root-owned cgroups), so
// a process born there stays there until root moves it. Throws CudaMpsError
// when the holding cgroup cannot be made.
struct LaunchCgroups {
  std::vector<std::string> procs_files;
  bool holding = false;  // procs_files are holding cgroups, not the job's own
};
// `own_cgroup`: /proc/self/cgroup of the prolog (v2 finds the step there).
LaunchCgroups prepare_launch_cgroups(const ContainmentPlan& plan, const std::string& node, const std::string& job_id,
                                     const std::string& own_cgroup, CgroupFs& fs);

// The v2 cgroup directory a job's daemons are born in (see above), from
// the /proc/self/cgroup text of a prolog or epilog running in that job's
// extern step; nullopt when that text names no such step.
std::optional<std::string> v2_daemon_cgroup_dir(const ContainmentPlan& plan, const std::string& own_cgroup);

// The epilog's part: removes the v2 daemon cgroup (empty by then: Slurm
// killed what was in it). An error line, or empty.
std::string remove_v2_daemon_cgroup(const ContainmentPlan& plan, const std::string& own_cgroup, CgroupFs& fs);

// The holding cgroup directory of job `job_id` in v1 controller `ctrl`.
std::string holding_cgroup_dir(const ContainmentPlan& plan, const std::string& ctrl, const std::string& job_id);

// Moves every process in job `job_id`'s holding cgroups into `step_files`
// (one per controller, extern_step_procs_files' order), freezing the
// holding freezer cgroup first where there is one (nothing in it can fork
// or exit meanwhile), then removes the holding cgroups. Each pid is checked
// to be in the holding cgroup just before it is written. An error line, or
// empty.
std::string adopt_holding_cgroups(const ContainmentPlan& plan, const std::string& job_id,
                                  const std::vector<std::string>& step_files, ProcReader& proc, CgroupFs& fs);

// Kills every process in job `job_id`'s holding cgroups and removes them
// (the job ended, or its step never appeared). An error line, or empty.
std::string release_holding_cgroups(const ContainmentPlan& plan, const std::string& job_id, ProcReader& proc,
                                    Signaller& signaller, CgroupFs& fs, std::chrono::milliseconds timeout);

// Decides where job `job_id`'s daemon for `uid` must live. `mode` is the
// plugin argument contain=: "auto" contains whenever the site constrains
// devices or tracks processes with cgroups; "off" never. nullopt: nothing to
// contain. Throws CudaMpsError, naming the slurm.conf setting to add, when the
// site constrains devices but its PrologFlags cannot put the daemon in the job.
// `own_cgroup` is /proc/self/cgroup of the prolog: on v2 the job's cgroup is
// found there, whatever Slurm named it: the directory holding the
// prolog's `step_extern`, when it is `job_<id>` (up to 25.11, and 26.05
// with CgroupJobIdPaths=yes) or the job's SLUID `sluid` (26.05).
std::optional<ContainmentPlan> plan_containment(const CgroupSite& site, const std::string& mode, uid_t uid,
                                                const std::string& job_id, const std::string& own_cgroup, CgroupFs& fs,
                                                const std::optional<std::string>& sluid = std::nullopt);

// What `doctor --node` says about containment on a node: status ok | warn |
// fail and one line naming what is missing. `v1_mounted`: the freezer
// hierarchy exists under the cgroup mount point (autodetect picks v1).
struct ContainmentAdvice {
  std::string status;
  std::string detail;
};
ContainmentAdvice containment_advice(const CgroupSite& site, const std::string& mode, bool v1_mounted);

// The v1 cgroup.procs files of the job's extern step for `node`, when every
// controller's step_extern exists (Slurm's root is `slurm_<node>` on builds
// with multiple-slurmd support, else `slurm`); nullopt while one is missing.
std::optional<std::vector<std::string>> extern_step_procs_files(const ContainmentPlan& plan, const std::string& node,
                                                                CgroupFs& fs);

// Writes the daemon and its descendants into `procs_files`, after verifying
// the daemon's identity. Returns an error line, empty on success.
std::string move_daemon_tree(const ProcessIdentity& daemon, const std::vector<std::string>& procs_files, ProcReader& proc,
                             CgroupFs& fs);

// Whether /proc/PID/cgroup text puts the process where `plan` wants it.
bool cgroup_matches(const ContainmentPlan& plan, const std::string& proc_cgroup_text);

// Moves every daemon now when its extern step exists (RunInJob), else
// leaves a detached root process that waits (until `deadline_after`) for
// the step to appear and then moves them (Contain: the step appears after
// the prolog exits). Returns error lines for daemons that could not be
// moved now; the detached mover logs nothing (the task path checks).
// With `holding`, the daemons were born in job `job_id`'s holding cgroups:
// those are emptied into the step (or, when it never appears, killed).
std::vector<std::string> contain_daemons(const ContainmentPlan& plan, const std::string& node, const std::string& job_id,
                                         bool holding, const std::vector<ProcessIdentity>& daemons,
                                         std::chrono::milliseconds deadline_after, bool* deferred = nullptr);

// For the task path: waits (bounded) until the daemon `pid` sits in the
// cgroup `plan` names; throws CudaMpsError when it never gets there.
void wait_daemon_contained(const ContainmentPlan& plan, pid_t pid, ProcReader& proc, class Clock& clock,
                           std::chrono::milliseconds timeout, const std::string& daemon_name);

}  // namespace unilab::mps
