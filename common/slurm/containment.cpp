#include "common/slurm/containment.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/mps/errors.hpp"
#include "common/mps/runner.hpp"
#include "common/mps/safefs.hpp"
#include "common/slurm/slurm_conf_path.hpp"

namespace unilab::mps {
namespace {

using std::chrono::milliseconds;

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Slurm's booleans (s_p_handle_boolean): yes, up or 1, in any case.
bool yes(const std::optional<std::string>& v) {
  if (!v) return false;
  const std::string l = lower(*v);
  return l == "yes" || l == "up" || l == "1" || l == "true";
}

// Whether the comma-separated `list` holds `item` exactly.
bool list_has(const std::string& list, const std::string& item) {
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t end = list.find(',', pos);
    if (end == std::string::npos) end = list.size();
    if (list.compare(pos, end - pos, item) == 0) return true;
    pos = end + 1;
  }
  return false;
}

// Slurm's flag lists are comma separated and case-insensitive.
bool has_flag(const std::optional<std::string>& list, const std::string& flag) {
  return list && list_has(lower(*list), flag);
}

// The cgroup path of one /proc/PID/cgroup line ("ID:CONTROLLERS:PATH") whose
// controller list holds `controller` (v2: the "0::" line, controller "").
std::optional<std::string> cgroup_path_of(const std::string& text, const std::string& controller) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
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

std::vector<pid_t> tree_of(pid_t root, ProcReader& proc) {
  std::vector<pid_t> out{root};
  std::set<pid_t> seen{root};
  for (size_t i = 0; i < out.size() && out.size() < 4096; ++i) {
    for (pid_t c : proc.children(out[i])) {
      if (seen.insert(c).second) out.push_back(c);
    }
  }
  return out;
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
    s.constrain_devices = yes(cgroup->get("constraindevices"));
    s.constrain_ram = yes(cgroup->get("constrainramspace")) || yes(cgroup->get("constrainswapspace"));
    s.constrain_cores = yes(cgroup->get("constraincores"));
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

std::optional<ContainmentPlan> plan_containment(const CgroupSite& site, const std::string& mode, uid_t uid,
                                                const std::string& job_id, const std::string& own_cgroup, CgroupFs& fs) {
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
  if (!site.prolog_run_in_job || !own || !path_in(*own, plan.job_cgroup, true)) {
    throw CudaMpsError(fmt::format(
        "on cgroup v2 the MPS daemon can only start inside job {}'s cgroup when the prolog runs there, but it runs in '{}'; "
        "set PrologFlags=RunInJob in slurm.conf (Slurm 24.05+) and restart slurmctld and slurmd",
        job_id, own.value_or("?")));
  }
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

std::string move_daemon_tree(const ProcessIdentity& daemon, const std::vector<std::string>& procs_files, ProcReader& proc,
                             CgroupFs& fs) {
  Liveness l = check_identity(daemon, proc);
  if (l != Liveness::kLive) return fmt::format("daemon pid {} is {}", daemon.pid, to_string(l));
  for (pid_t pid : tree_of(daemon.pid, proc)) {
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

std::vector<std::string> contain_daemons(const ContainmentPlan& plan, const std::string& node,
                                         const std::vector<ProcessIdentity>& daemons, milliseconds deadline_after,
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
  if (auto files = extern_step_procs_files(plan, node, fs)) {
    for (const auto& d : daemons) {
      std::string e = move_daemon_tree(d, *files, proc, fs);
      if (!e.empty()) errors.push_back(e);
    }
    return errors;
  }
  // The extern step's cgroups appear after the prolog exits: a detached
  // process (own session, no fds: slurmd waits for none of it) polls for them.
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
    for (int fd = 0; fd < 1024; ++fd) close(fd);
    int null_fd = open("/dev/null", O_RDWR);
    if (null_fd == 0) {
      dup2(0, 1);
      dup2(0, 2);
    }
    auto deadline = std::chrono::steady_clock::now() + deadline_after;
    std::vector<ProcessIdentity> left = daemons;
    while (!left.empty() && std::chrono::steady_clock::now() < deadline) {
      if (auto files = extern_step_procs_files(plan, node, fs)) {
        for (const auto& d : left) move_daemon_tree(d, *files, proc, fs);
        _exit(0);
      }
      // Give up early on daemons that are gone (job cancelled meanwhile).
      std::erase_if(left, [&](const ProcessIdentity& d) { return check_identity(d, proc) != Liveness::kLive; });
      std::this_thread::sleep_for(milliseconds(10));
    }
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

}  // namespace unilab::mps
