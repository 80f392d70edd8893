#include "common/slurm/containment.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/mps/errors.hpp"
#include "common/mps/runner.hpp"
#include "common/mps/safefs.hpp"
#include "common/mps/text.hpp"
#include "common/slurm/slurm_conf_path.hpp"

namespace unilab::mps {
namespace {

using std::chrono::milliseconds;

// Slurm's flag lists are comma separated and case-insensitive.
bool has_flag(const std::optional<std::string>& list, const std::string& flag) {
  return list && list_has(lower(*list), flag);
}

// The cgroup path of one /proc/PID/cgroup line ("ID:CONTROLLERS:PATH") whose
// controller list holds `controller` (v2: the "0::" line, controller "").
std::optional<std::string> cgroup_path_of(const std::string& text, const std::string& controller) {
  for (std::string_view l : split_lines(text)) {
    const std::string line(l);
    size_t c1 = line.find(':');
    size_t c2 = c1 == std::string::npos ? std::string::npos : line.find(':', c1 + 1);
    if (c2 == std::string::npos) continue;
    std::string ctrls = line.substr(c1 + 1, c2 - c1 - 1);
    std::string path = line.substr(c2 + 1);
    if (controller.empty()) {
      if (line.substr(0, c1) == "0" && ctrls.empty()) return path;
      continue;
    }
    if (list_has(ctrls, controller)) return path;
  }
  return std::nullopt;
}

// `path` is `leaf` itself below some root (v1: ".../uid_U/job_J/step_extern"),
// or with `allow_below` also a descendant of it (v2).
bool path_in(const std::string& path, const std::string& leaf, bool allow_below) {
  const std::string needle = "/" + leaf;
  for (size_t at = path.find(needle); at != std::string::npos; at = path.find(needle, at + 1)) {
    size_t after = at + needle.size();
    if (after == path.size()) return true;
    if (allow_below && path[after] == '/') return true;
  }
  return false;
}

// The job's extern step as it appears in a v2 cgroup path: "<job>/step_extern"
// where <job> is `job_<id>` or the job's SLUID, the first such pair in
// `path` (the prolog runs in step_extern or below it).
std::optional<std::string> v2_job_step(const std::string& path, const std::string& job_id,
                                       const std::optional<std::string>& sluid) {
  std::vector<std::string> parts;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t end = path.find('/', pos);
    if (end == std::string::npos) end = path.size();
    parts.push_back(path.substr(pos, end - pos));
    pos = end + 1;
  }
  for (size_t i = 1; i < parts.size(); ++i) {
    if (parts[i] != "step_extern") continue;
    const std::string& job = parts[i - 1];
    if (job == "job_" + job_id || (sluid && !sluid->empty() && job == *sluid)) return job + "/step_extern";
  }
  return std::nullopt;
}

// The cgroup version Slurm uses: its CgroupPlugin, or with autodetect v1
// where the v1 hierarchies are mounted.
int cgroup_version_of(const CgroupSite& site, bool v1_mounted) {
  if (site.cgroup_plugin == "cgroup/v2") return 2;
  if (site.cgroup_plugin == "cgroup/v1") return 1;
  return v1_mounted ? 1 : 2;
}

// The v1 hierarchies a job's processes live in: freezer when Slurm tracks
// processes with it, and each one the site constrains.
std::vector<std::string> v1_controllers(const CgroupSite& site) {
  std::vector<std::string> out;
  if (site.proctrack_cgroup) out.push_back("freezer");
  if (site.constrain_devices) out.push_back("devices");
  if (site.constrain_ram) out.push_back("memory");
  if (site.constrain_cores) out.push_back("cpuset");
  return out;
}

}  // namespace

CgroupSite cgroup_site_from(const SlurmConf& slurm, const std::optional<SlurmConf>& cgroup) {
  CgroupSite s;
  auto flags = slurm.get("prologflags");
  s.prolog_contain = has_flag(flags, "contain");
  s.prolog_run_in_job = has_flag(flags, "runinjob");
  s.proctrack_cgroup = lower(slurm.get("proctracktype").value_or("")) == "proctrack/cgroup";
  if (cgroup) {
    if (auto p = cgroup->get("cgroupplugin")) s.cgroup_plugin = lower(*p);
    if (auto m = cgroup->get("cgroupmountpoint"); m && !m->empty()) s.mountpoint = *m;
    s.constrain_devices = slurm_boolean(cgroup->get("constraindevices"));
    s.constrain_ram = slurm_boolean(cgroup->get("constrainramspace")) || slurm_boolean(cgroup->get("constrainswapspace"));
    s.constrain_cores = slurm_boolean(cgroup->get("constraincores"));
  }
  return s;
}

CgroupSite read_cgroup_site(const std::string& slurm_conf) {
  SystemNodeProbe probe;
  SlurmConf slurm = read_slurm_conf(probe, slurm_conf);
  std::optional<SlurmConf> cgroup;
  const std::string cgroup_conf = split_parent(slurm_conf).first + "/cgroup.conf";
  if (probe.stat(cgroup_conf).exists) cgroup = read_slurm_conf(probe, cgroup_conf);
  return cgroup_site_from(slurm, cgroup);
}

bool site_runs_prolog_in_job() {
  try {
    return read_cgroup_site(locate_slurm_conf().path).prolog_run_in_job;
  } catch (const std::exception&) {
    return false;
  }
}

bool SystemCgroupFs::is_dir(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

int SystemCgroupFs::write(const std::string& path, const std::string& text) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return errno;
  ssize_t n = ::write(fd, text.data(), text.size());
  int err = n == static_cast<ssize_t>(text.size()) ? 0 : (n < 0 ? errno : EIO);
  close(fd);
  return err;
}

std::optional<std::string> SystemCgroupFs::read(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return std::nullopt;
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      close(fd);
      return std::nullopt;
    }
    if (n == 0 || out.size() > (1u << 20)) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

int SystemCgroupFs::make_dir(const std::string& path) {
  if (mkdir(path.c_str(), 0755) == 0) return 0;
  return errno == EEXIST && is_dir(path) ? 0 : errno;
}

int SystemCgroupFs::remove_dir(const std::string& path) {
  if (rmdir(path.c_str()) == 0 || errno == ENOENT) return 0;
  return errno;
}

std::optional<ContainmentPlan> plan_containment(const CgroupSite& site, const std::string& mode, uid_t uid,
                                                const std::string& job_id, const std::string& own_cgroup, CgroupFs& fs,
                                                const std::optional<std::string>& sluid) {
  if (mode == "off") return std::nullopt;
  if (!site.constrain_devices && !site.proctrack_cgroup) return std::nullopt;
  const bool in_job_flags = site.prolog_contain || site.prolog_run_in_job;
  if (!in_job_flags) {
    if (!site.constrain_devices) return std::nullopt;  // nothing the daemon could reach beyond the job
    throw CudaMpsError(
        "this node constrains GPU devices (ConstrainDevices=yes) but slurm.conf's PrologFlags has neither Contain nor RunInJob, "
        "so the job's MPS daemon would run outside the job's cgroup with every GPU of the node; add PrologFlags=Contain "
        "(RunInJob on Slurm 24.05+) and restart slurmctld and slurmd");
  }
  ContainmentPlan plan;
  plan.mountpoint = site.mountpoint;
  const int version = cgroup_version_of(site, fs.is_dir(site.mountpoint + "/freezer"));
  plan.cgroup_version = version;
  if (version == 1) {
    plan.controllers = v1_controllers(site);
    plan.job_cgroup = fmt::format("uid_{}/job_{}/step_extern", uid, job_id);
    return plan;
  }
  plan.job_cgroup = fmt::format("job_{}/step_extern", job_id);
  // Only RunInJob puts the prolog (and so the daemon) in the job; without it,
  // as on v1 without the flags, refuse only where devices are constrained.
  if (!site.prolog_run_in_job && !site.constrain_devices) return std::nullopt;
  auto own = cgroup_path_of(own_cgroup, "");
  if (!site.prolog_run_in_job) {
    throw CudaMpsError(fmt::format(
        "on cgroup v2 the MPS daemon can only start inside job {}'s cgroup when the prolog runs there, but it runs in '{}'; "
        "set PrologFlags=RunInJob in slurm.conf (Slurm 24.05+) and restart slurmctld and slurmd",
        job_id, own.value_or("?")));
  }
  auto dir = own ? v2_job_step(*own, job_id, sluid) : std::nullopt;
  if (!dir) {
    throw CudaMpsError(fmt::format(
        "PrologFlags=RunInJob is set, but this prolog runs in '{}', not in job {}'s extern step (a 'step_extern' below "
        "'job_{}'{}); refusing to start a daemon outside the job's cgroup (is the prolog run by something other than slurmstepd?)",
        own.value_or("?"), job_id, job_id, sluid ? fmt::format(" or '{}', its SLUID", *sluid) : std::string()));
  }
  plan.job_cgroup = *dir;
  return plan;
}

ContainmentAdvice containment_advice(const CgroupSite& site, const std::string& mode, bool v1_mounted) {
  const int version = cgroup_version_of(site, v1_mounted);
  if (!site.constrain_devices && !site.proctrack_cgroup) {
    return {"ok", "no cgroup confinement on this node (no ConstrainDevices, no proctrack/cgroup): a job's daemon reaches what "
                  "any process of the job's user can; the epilog stops it"};
  }
  if (mode == "off") {
    return {"warn", "contain=off: daemons stay in slurmd's cgroup, outside the job's device constraint and not killed with the "
                    "job (the epilog stops them); remove contain=off"};
  }
  if (!site.prolog_contain && !site.prolog_run_in_job) {
    if (site.constrain_devices) {
      return {"fail", "ConstrainDevices=yes but PrologFlags has neither Contain nor RunInJob: every --unilab-mps job is "
                      "refused here; add PrologFlags=Contain (RunInJob on Slurm 24.05+) and restart slurmctld and slurmd"};
    }
    return {"warn", "proctrack/cgroup without PrologFlags=Contain: daemons cannot join their job's cgroup and are stopped by "
                    "the epilog only; add PrologFlags=Contain"};
  }
  if (version == 2 && !site.prolog_run_in_job) {
    return {"fail", "cgroup v2 needs PrologFlags=RunInJob (Slurm 24.05+) for the daemon to start inside its job's cgroup: "
                    "every --unilab-mps job is refused here; add RunInJob"};
  }
  std::string where = version == 1 ? fmt::format("cgroup v1 ({})", fmt::join(v1_controllers(site), ",")) : std::string("cgroup v2");
  if (version == 1 && !site.proctrack_cgroup) {
    return {"warn", fmt::format("daemons join their job's step_extern in {}, but without ProctrackType=proctrack/cgroup Slurm "
                                "does not kill them with the job (the epilog stops them)",
                                where)};
  }
  return {"ok", fmt::format("daemons join their job's step_extern in {} (PrologFlags {}): device-constrained and killed with "
                            "the job",
                            where, site.prolog_run_in_job ? "RunInJob" : "Contain")};
}

std::optional<std::vector<std::string>> extern_step_procs_files(const ContainmentPlan& plan, const std::string& node,
                                                                CgroupFs& fs) {
  if (plan.cgroup_version != 1) return std::vector<std::string>{};
  for (const std::string& root : {"slurm_" + node, std::string("slurm")}) {
    std::vector<std::string> files;
    for (const auto& ctrl : plan.controllers) {
      std::string dir = fmt::format("{}/{}/{}/{}", plan.mountpoint, ctrl, root, plan.job_cgroup);
      if (!fs.is_dir(dir)) break;
      files.push_back(dir + "/cgroup.procs");
    }
    if (files.size() == plan.controllers.size()) return files;
  }
  return std::nullopt;
}

namespace {

constexpr const char* kHoldingRoot = "unilab_mps";

std::vector<pid_t> procs_in(const std::string& procs_file, CgroupFs& fs) {
  std::vector<pid_t> out;
  auto text = fs.read(procs_file);
  if (!text) return out;
  for (std::string_view line : split_lines(*text)) {
    pid_t pid = 0;
    auto [ptr, ec] = std::from_chars(line.data(), line.data() + line.size(), pid);
    if (ec == std::errc() && ptr == line.data() + line.size() && pid > 0) out.push_back(pid);
  }
  return out;
}

// Whether /proc says `pid` is in `dir` (a holding cgroup) for controller `ctrl`.
bool in_cgroup_dir(const ContainmentPlan& plan, pid_t pid, const std::string& ctrl, const std::string& dir, ProcReader& proc) {
  auto text = proc.cgroup(pid);
  if (!text) return false;
  auto path = cgroup_path_of(*text, ctrl);
  const std::string prefix = plan.mountpoint + "/" + ctrl;
  return path && dir.size() > prefix.size() && dir.compare(0, prefix.size(), prefix) == 0 && *path == dir.substr(prefix.size());
}

// Sets the holding freezer cgroup to `state` and waits (1 s at most) until
// it reads back so; false when it does not.
bool set_freezer(const std::string& dir, const std::string& state, CgroupFs& fs) {
  if (fs.write(dir + "/freezer.state", state) != 0) return false;
  for (int i = 0; i < 200; ++i) {
    auto now = fs.read(dir + "/freezer.state");
    if (now && now->starts_with(state)) return true;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return false;
}

bool has_freezer(const ContainmentPlan& plan) {
  return std::find(plan.controllers.begin(), plan.controllers.end(), "freezer") != plan.controllers.end();
}

}  // namespace

std::string holding_cgroup_dir(const ContainmentPlan& plan, const std::string& ctrl, const std::string& job_id) {
  return fmt::format("{}/{}/{}/job_{}", plan.mountpoint, ctrl, kHoldingRoot, job_id);
}

std::optional<std::string> v2_daemon_cgroup_dir(const ContainmentPlan& plan, const std::string& own_cgroup) {
  if (plan.cgroup_version != 2) return std::nullopt;
  auto own = cgroup_path_of(own_cgroup, "");
  if (!own) return std::nullopt;
  const std::string needle = "/" + plan.job_cgroup;
  for (size_t at = own->find(needle); at != std::string::npos; at = own->find(needle, at + 1)) {
    size_t end = at + needle.size();
    if (end == own->size() || (*own)[end] == '/') return plan.mountpoint + own->substr(0, end) + "/user/" + kHoldingRoot;
  }
  return std::nullopt;
}

std::string remove_v2_daemon_cgroup(const ContainmentPlan& plan, const std::string& own_cgroup, CgroupFs& fs) {
  auto dir = v2_daemon_cgroup_dir(plan, own_cgroup);
  if (!dir || !fs.is_dir(*dir)) return {};
  if (int e = fs.remove_dir(*dir); e != 0) return fmt::format("cannot remove {}: {}", *dir, std::strerror(e));
  return {};
}

LaunchCgroups prepare_launch_cgroups(const ContainmentPlan& plan, const std::string& node, const std::string& job_id,
                                     const std::string& own_cgroup, CgroupFs& fs) {
  LaunchCgroups out;
  if (plan.cgroup_version == 2) {
    auto dir = v2_daemon_cgroup_dir(plan, own_cgroup);
    if (!dir || !fs.is_dir(split_parent(*dir).first)) return out;  // no step_extern/user: the prolog's own cgroup
    if (int e = fs.make_dir(*dir); e != 0) {
      throw CudaMpsError(fmt::format("cannot make the cgroup {} for job {}'s MPS daemons: {}", *dir, job_id, std::strerror(e)));
    }
    out.procs_files.push_back(*dir + "/cgroup.procs");
    return out;
  }
  if (plan.controllers.empty()) return out;
  if (auto files = extern_step_procs_files(plan, node, fs)) {
    out.procs_files = *files;
    return out;
  }
  out.holding = true;
  for (const auto& ctrl : plan.controllers) {
    const std::string parent = fmt::format("{}/{}/{}", plan.mountpoint, ctrl, kHoldingRoot);
    const std::string dir = holding_cgroup_dir(plan, ctrl, job_id);
    for (const auto& d : {parent, dir}) {
      if (int e = fs.make_dir(d); e != 0) {
        throw CudaMpsError(fmt::format("cannot make the holding cgroup {} for job {}'s MPS daemons: {}", d, job_id, std::strerror(e)));
      }
      // A new cpuset cgroup has no cpus or mems (nothing can join it):
      // those of its parent.
      if (ctrl == "cpuset") {
        const std::string up = split_parent(d).first;
        for (const char* f : {"cpuset.cpus", "cpuset.mems"}) {
          auto v = fs.read(up + "/" + f);
          if (!v || fs.write(d + "/" + f, *v) != 0) {
            throw CudaMpsError(fmt::format("cannot give the holding cgroup {} the {} of its parent", d, f));
          }
        }
      }
    }
    out.procs_files.push_back(dir + "/cgroup.procs");
  }
  return out;
}

namespace {

// Removes job `job_id`'s holding cgroup in every controller; the errors
// joined, or empty.
std::string remove_holding_dirs(const ContainmentPlan& plan, const std::string& job_id, CgroupFs& fs) {
  std::vector<std::string> errors;
  for (const auto& ctrl : plan.controllers) {
    const std::string dir = holding_cgroup_dir(plan, ctrl, job_id);
    if (int e = fs.remove_dir(dir); e != 0) errors.push_back(fmt::format("cannot remove {}: {}", dir, std::strerror(e)));
  }
  return join(errors, "; ");
}

}  // namespace

std::string adopt_holding_cgroups(const ContainmentPlan& plan, const std::string& job_id,
                                  const std::vector<std::string>& step_files, ProcReader& proc, CgroupFs& fs) {
  if (step_files.size() != plan.controllers.size()) return "the job's step_extern cgroups are incomplete";
  const bool freeze = has_freezer(plan);
  if (freeze && !set_freezer(holding_cgroup_dir(plan, "freezer", job_id), "FROZEN", fs)) {
    return fmt::format("cannot freeze the holding cgroup {}", holding_cgroup_dir(plan, "freezer", job_id));
  }
  // Frozen, nothing forks or exits; without a freezer a process may fork
  // while its siblings move: a few rounds take the late ones too.
  for (int round = 0; round < 16; ++round) {
    bool moved = false;
    for (size_t i = 0; i < plan.controllers.size(); ++i) {
      const std::string dir = holding_cgroup_dir(plan, plan.controllers[i], job_id);
      for (pid_t pid : procs_in(dir + "/cgroup.procs", fs)) {
        if (!in_cgroup_dir(plan, pid, plan.controllers[i], dir, proc)) continue;
        int err = fs.write(step_files[i], std::to_string(pid));
        if (err != 0 && err != ESRCH) return fmt::format("cannot move pid {} into {}: {}", pid, step_files[i], std::strerror(err));
        moved = true;
      }
    }
    if (!moved) break;
  }
  return remove_holding_dirs(plan, job_id, fs);
}

std::string release_holding_cgroups(const ContainmentPlan& plan, const std::string& job_id, ProcReader& proc,
                                    Signaller& signaller, CgroupFs& fs, milliseconds timeout) {
  if (plan.cgroup_version != 1) return {};
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    bool any = false;
    for (const auto& ctrl : plan.controllers) {
      const std::string dir = holding_cgroup_dir(plan, ctrl, job_id);
      if (!fs.is_dir(dir)) continue;
      for (pid_t pid : procs_in(dir + "/cgroup.procs", fs)) {
        any = true;
        auto st = running_stat(proc, pid);
        // pidfd first, then the cgroup re-checked: a pid that left and was
        // reused since the read is not signalled.
        if (st && in_cgroup_dir(plan, pid, ctrl, dir, proc)) {
          signaller.send_verified({pid, st->start_ticks, proc.boot_id(), st->uid}, SIGKILL, proc);
        }
      }
    }
    if (has_freezer(plan) && fs.is_dir(holding_cgroup_dir(plan, "freezer", job_id))) {
      fs.write(holding_cgroup_dir(plan, "freezer", job_id) + "/freezer.state", "THAWED");  // a frozen process dies once thawed
    }
    if (!any || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return remove_holding_dirs(plan, job_id, fs);
}

std::string move_daemon_tree(const ProcessIdentity& daemon, const std::vector<std::string>& procs_files, ProcReader& proc,
                             CgroupFs& fs) {
  Liveness l = check_identity(daemon, proc);
  if (l != Liveness::kLive) return fmt::format("daemon pid {} is {}", daemon.pid, to_string(l));
  std::vector<pid_t> tree{daemon.pid};
  for (const auto& d : descendants_of(daemon, proc)) tree.push_back(d.pid);
  for (pid_t pid : tree) {
    for (const auto& file : procs_files) {
      int err = fs.write(file, std::to_string(pid));
      // A descendant may exit meanwhile (ESRCH); the daemon itself must move.
      if (err != 0 && !(err == ESRCH && pid != daemon.pid)) {
        return fmt::format("cannot move pid {} into {}: {}", pid, file, std::strerror(err));
      }
    }
  }
  // Verify after the move: the pid still names the daemon we started.
  l = check_identity(daemon, proc);
  if (l != Liveness::kLive) return fmt::format("daemon pid {} is {} after the move", daemon.pid, to_string(l));
  return {};
}

bool cgroup_matches(const ContainmentPlan& plan, const std::string& text) {
  if (plan.cgroup_version == 2) {
    auto p = cgroup_path_of(text, "");
    return p && path_in(*p, plan.job_cgroup, true);
  }
  if (plan.controllers.empty()) return false;
  for (const auto& ctrl : plan.controllers) {
    auto p = cgroup_path_of(text, ctrl);
    if (!p || !path_in(*p, plan.job_cgroup, false)) return false;
  }
  return true;
}

namespace {

// The mover's work once the step exists: a holding cgroup emptied into it,
// then each daemon's tree moved (and its identity checked) as well.
std::vector<std::string> move_into_step(const ContainmentPlan& plan, const std::string& job_id, bool holding,
                                        const std::vector<std::string>& files, const std::vector<ProcessIdentity>& daemons,
                                        ProcReader& proc, CgroupFs& fs) {
  std::vector<std::string> errors;
  if (holding) {
    if (std::string e = adopt_holding_cgroups(plan, job_id, files, proc, fs); !e.empty()) errors.push_back(e);
  }
  for (const auto& d : daemons) {
    std::string e = move_daemon_tree(d, files, proc, fs);
    if (!e.empty()) errors.push_back(e);
  }
  return errors;
}

}  // namespace

std::vector<std::string> contain_daemons(const ContainmentPlan& plan, const std::string& node, const std::string& job_id,
                                         bool holding, const std::vector<ProcessIdentity>& daemons, milliseconds deadline_after,
                                         bool* deferred) {
  std::vector<std::string> errors;
  SystemCgroupFs fs;
  SystemProcReader proc;
  if (deferred) *deferred = false;
  if (plan.cgroup_version == 2) {
    for (const auto& d : daemons) {
      auto text = proc.cgroup(d.pid);
      if (!text || !cgroup_matches(plan, *text)) {
        errors.push_back(fmt::format("daemon pid {} is not in job cgroup {} ({})", d.pid, plan.job_cgroup,
                                     text ? *text : "no /proc entry"));
      }
    }
    return errors;
  }
  if (auto files = extern_step_procs_files(plan, node, fs)) return move_into_step(plan, job_id, holding, *files, daemons, proc, fs);
  // The extern step's cgroups appear after the prolog exits: a detached
  // process (own session, no fds: slurmd waits for none of it) polls for
  // them. Until then the daemons sit in the holding cgroups; a move that
  // fails, or a step that never comes, ends everything held there.
  if (deferred) *deferred = true;
  std::fflush(nullptr);
  pid_t child = fork();
  if (child < 0) {
    errors.push_back(fmt::format("cannot fork the cgroup mover: {}", std::strerror(errno)));
    return errors;
  }
  if (child == 0) {
    setsid();
    pid_t grandchild = fork();
    if (grandchild != 0) _exit(grandchild < 0 ? 1 : 0);
    if (syscall(SYS_close_range, 0U, ~0U, 0U) != 0) {
      for (int fd = 0; fd < 65536; ++fd) close(fd);
    }
    int null_fd = open("/dev/null", O_RDWR);
    if (null_fd == 0) {
      dup2(0, 1);
      dup2(0, 2);
    }
    auto deadline = std::chrono::steady_clock::now() + deadline_after;
    std::vector<ProcessIdentity> left = daemons;
    while (!left.empty() && std::chrono::steady_clock::now() < deadline) {
      if (auto files = extern_step_procs_files(plan, node, fs)) {
        auto failed = move_into_step(plan, job_id, holding, *files, left, proc, fs);
        if (failed.empty()) _exit(0);
        break;
      }
      // Give up early on daemons that are gone (job cancelled meanwhile).
      std::erase_if(left, [&](const ProcessIdentity& d) { return check_identity(d, proc) != Liveness::kLive; });
      std::this_thread::sleep_for(milliseconds(10));
    }
    // Not moved: nothing born in the holding cgroups may outlive this.
    SystemSignaller signaller;
    if (holding) release_holding_cgroups(plan, job_id, proc, signaller, fs, milliseconds(2000));
    _exit(left.empty() ? 0 : 1);
  }
  int status = 0;
  waitpid(child, &status, 0);
  return errors;
}

void wait_daemon_contained(const ContainmentPlan& plan, pid_t pid, ProcReader& proc, Clock& clock, milliseconds timeout,
                           const std::string& daemon_name) {
  const auto deadline = clock.now() + timeout;
  milliseconds step(5);
  std::optional<std::string> text;
  for (;;) {
    text = proc.cgroup(pid);
    if (text && cgroup_matches(plan, *text)) return;
    if (clock.now() >= deadline) break;
    clock.sleep_for(step);
    step = std::min(step * 2, milliseconds(50));
  }
  std::string where = "gone";
  if (text) {
    auto p = cgroup_path_of(*text, plan.cgroup_version == 2 ? "" : (plan.controllers.empty() ? "" : plan.controllers.back()));
    where = p.value_or("?");
  }
  throw CudaMpsError(fmt::format(
      "MPS daemon {} (pid {}) is not inside the job's cgroup ({}) after {} ms but in '{}'; refusing to bind the task to a "
      "daemon that can reach GPUs outside the job (the node's prolog could not move it: its slurmd log says why)",
      daemon_name, pid, plan.job_cgroup, timeout.count(), where));
}

bool slurm_boolean(const std::optional<std::string>& v) {
  if (!v) return false;
  const std::string l = lower(*v);
  return l == "yes" || l == "up" || l == "1" || l == "true";
}

}  // namespace unilab::mps
