// The node checks whose advice depends on the Slurm release series (see
// common/slurm/slurm_series.hpp and docs/DESIGN.md "Slurm series"); rows of the
// table in node_checks.cpp.
#include <algorithm>
#include <cctype>
#include <charconv>

#include <fmt/format.h>

#include "common/mps/text.hpp"
#include "common/slurm/containment.hpp"
#include "common/slurm/job.hpp"
#include "common/slurm/node_doctor.hpp"

namespace unilab::mps {
namespace {

using Result = std::optional<CheckResult>;

// The cgroup version this host mounts: 1 when the v1 freezer hierarchy is
// there, 2 when only the unified one is, 0 when neither is seen.
int host_cgroup_version(const NodeFacts& f) { return f.cgroup_v1_mounted ? 1 : (f.cgroup_v2_mounted ? 2 : 0); }

Result cgroup_plugin_mismatch(const NodeFacts& f, const std::string& plugin, const std::string& mount) {
  const int host = host_cgroup_version(f);
  if (plugin == "cgroup/v1" && host == 2) {
    return CheckResult{CheckStatus::kFail,
                       fmt::format("CgroupPlugin=cgroup/v1 but {} is cgroup v2 only: slurmd cannot start its cgroup plugin; set "
                                   "CgroupPlugin=autodetect (or cgroup/v2) in cgroup.conf",
                                   mount)};
  }
  if (plugin == "cgroup/v2" && host == 1) {
    return CheckResult{CheckStatus::kFail,
                       fmt::format("CgroupPlugin=cgroup/v2 but {} holds the cgroup v1 hierarchies: slurmd cannot start its "
                                   "cgroup plugin; set CgroupPlugin=autodetect (or cgroup/v1) in cgroup.conf",
                                   mount)};
  }
  return std::nullopt;
}

// Whether a Prolog=/Epilog= value runs HELPER: it names it, or names a
// wrapper script (read by the gather step) that does.
bool runs_helper(const NodeFacts& f, const std::string& key, const std::optional<std::string>& script, const char* helper) {
  const std::string value = f.conf.get(key).value_or("");
  return value.find(helper) != std::string::npos || (script && script->find(helper) != std::string::npos);
}

// Which cgroup.conf the row judged (the configless cache's, on such a node).
std::string cgroup_conf_origin(const NodeFacts& f) {
  if (f.cgroup_conf) return "from " + f.cgroup_conf->path;
  return "no cgroup.conf next to " + f.options.slurm_conf + ": Slurm's defaults";
}

// One of slurm.conf's hook timeouts as slurmd applies it (prep/script's
// slurmd side: seconds, and 0 or NO_VAL16 = 65534 wait without a limit).
struct HookTimeout {
  std::string key;              // the key that set it, as slurm.conf spells it
  std::optional<long> seconds;  // nullopt: no limit
  std::string error;            // not a number
};

HookTimeout hook_timeout(const NodeFacts& f, const char* key, bool split_keys) {
  HookTimeout t;
  std::optional<std::string> value = split_keys ? f.conf.get(lower(key)) : std::nullopt;
  t.key = value ? key : "PrologEpilogTimeout";
  if (!value) value = f.conf.get("prologepilogtimeout");
  if (!value) return t;
  long n = -1;
  const std::string v = std::string(trim(*value));
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size() || n < 0 || n > 65534) {
    t.error = fmt::format("{}={} is not a number of seconds (0 to 65534)", t.key, *value);
  } else if (n != 0 && n != 65534) {
    t.seconds = n;
  }
  return t;
}

}  // namespace

// slurm.conf's PrologTimeout/EpilogTimeout (25.05+; PrologEpilogTimeout
// before, and their default after) against the longest the plugin's prolog
// and epilog can take with its arguments: slurmd kills a hook that runs
// longer and drains the node.
Result check_hook_timeouts(const NodeFacts& f) {
  const auto& v = f.slurm_version;
  std::vector<std::string> unknown;
  for (const char* key : {"PrologTimeout", "EpilogTimeout"}) {
    if (f.conf.get(lower(key)) && v && !has_prolog_and_epilog_timeouts(*v)) unknown.push_back(key);
  }
  if (!unknown.empty()) {
    return CheckResult{CheckStatus::kFail,
                       fmt::format("slurm.conf sets {}, which Slurm {} does not know (25.05 added it): slurmctld and slurmd "
                                   "stop at 'Parsing error at unrecognized key'; use PrologEpilogTimeout= there",
                                   join(unknown, " and "), v->to_string())};
  }
  const bool split = !v || has_prolog_and_epilog_timeouts(*v);
  const HookBound bounds[] = {prolog_bound(f.config), epilog_bound(f.config)};
  const HookTimeout limits[] = {hook_timeout(f, "PrologTimeout", split), hook_timeout(f, "EpilogTimeout", split)};
  const char* hooks[] = {"prolog", "epilog"};
  std::vector<std::string> errors, short_ones, seen;
  for (int i = 0; i < 2; ++i) {
    const HookTimeout& t = limits[i];
    if (!t.error.empty()) {
      errors.push_back(t.error);
    } else if (!t.seconds) {
      seen.push_back(fmt::format("{} without a limit ({}), the plugin's own bound {}", hooks[i],
                                 t.key == "PrologEpilogTimeout" ? "no timeout set" : t.key + "=0", seconds_text(bounds[i].total)));
    } else if (std::chrono::seconds(*t.seconds) < bounds[i].total) {
      short_ones.push_back(fmt::format("{}={} s is shorter than the longest the plugin's {} can take, {} ({})", t.key,
                                       *t.seconds, hooks[i], seconds_text(bounds[i].total), bounds[i].parts));
    } else {
      seen.push_back(fmt::format("{}={} s covers the {}'s {}", t.key, *t.seconds, hooks[i], seconds_text(bounds[i].total)));
    }
  }
  if (!errors.empty()) return CheckResult{CheckStatus::kFail, join(errors, "; ")};
  if (!short_ones.empty()) {
    return CheckResult{CheckStatus::kWarn,
                       fmt::format("{}: slurmd kills a hook that runs longer and drains the node; raise it, or lower the "
                                   "plugin's start_timeout=/stop_timeout=",
                                   join(short_ones, "; "))};
  }
  return CheckResult{CheckStatus::kOk, join(seen, "; ")};
}

// cgroup.conf CgroupJobIdPaths= (26.05.2+) and how Slurm names a job's
// cgroup v2 directory: the plugin finds it either way (the prolog's own
// /proc/self/cgroup), but an unknown key stops slurmd.
Result check_cgroup_job_dir(const NodeFacts& f) {
  const auto& v = f.slurm_version;
  const std::optional<std::string> paths = f.cgroup_conf ? f.cgroup_conf->get("cgroupjobidpaths") : std::nullopt;
  if (paths && v && !has_cgroup_job_id_paths(*v)) {
    return CheckResult{CheckStatus::kFail,
                       fmt::format("cgroup.conf sets CgroupJobIdPaths={}, which Slurm {} does not know (26.05.2 added it): "
                                   "slurmd stops at 'Parsing error at unrecognized key'; remove it",
                                   *paths, v->to_string())};
  }
  const CgroupSite site = cgroup_site_from(f.conf, f.cgroup_conf);
  const bool v2 = site.cgroup_plugin == "cgroup/v2" || (site.cgroup_plugin == "autodetect" && host_cgroup_version(f) == 2);
  if (!v2 || !v || !has_sluid_job_cgroup(*v)) return std::nullopt;
  const bool job_ids = slurm_boolean(paths);
  return CheckResult{CheckStatus::kOk,
                     job_ids ? fmt::format("CgroupJobIdPaths={}: job cgroups are named job_<id>", *paths)
                             : std::string("job cgroups are named after the job's SLUID (26.05; CgroupJobIdPaths=yes names them "
                                           "job_<id>): the prolog finds either from its own cgroup")};
}

// The Prolog=/Epilog= helpers against PrologFlags (docs/DESIGN.md "Slurm
// series"). With RunInJob (24.05+) slurmstepd runs the prolog and epilog
// itself and never calls a SPANK job_prolog/job_epilog (spank_has_prolog()
// is only set in slurmd), so the helpers are the only way daemons start and
// stop. Without it slurmd runs the plugin's job_prolog and then Prolog= with
// the same SPANK option variables: the helper would clear what the plugin
// just started and start the daemons a second time.
Result check_prolog_helper(const NodeFacts& f) {
  if (f.plugin_lines.empty()) return std::nullopt;
  const bool prolog = runs_helper(f, "prolog", f.prolog_script, "unilab-mps-prolog");
  const bool epilog = runs_helper(f, "epilog", f.epilog_script, "unilab-mps-epilog");
  const std::string flags = f.conf.get("prologflags").value_or("");
  if (!list_has(lower(flags), "runinjob")) {
    if (!prolog) return std::nullopt;
    return CheckResult{CheckStatus::kWarn,
                       fmt::format("Prolog={} runs unilab-mps-prolog after the plugin's own job_prolog, which already starts "
                                   "the daemons; remove it (the helper is for nodes with PrologFlags=RunInJob or whose slurmd "
                                   "does not load the plugin)",
                                   f.conf.get("prolog").value_or(""))};
  }
  std::vector<std::string> missing;
  if (!prolog) missing.push_back("Prolog= (unilab-mps-prolog)");
  if (!epilog) missing.push_back("Epilog= (unilab-mps-epilog)");
  if (!missing.empty()) {
    return CheckResult{CheckStatus::kFail,
                       fmt::format("PrologFlags={}: Slurm then runs no SPANK job_prolog/job_epilog, only the Prolog=/Epilog= "
                                   "programs inside the job's extern step, so the plugin alone starts no daemon; set {} to a "
                                   "root-owned wrapper that execs the helper with the plugin's arguments (docs/ADMIN.md, "
                                   "section 6)",
                                   flags, join(missing, " and "))};
  }
  return CheckResult{CheckStatus::kOk, fmt::format("PrologFlags={}: Prolog={} and Epilog={} run the helpers in the job's extern step",
                                                   flags, f.conf.get("prolog").value_or(""), f.conf.get("epilog").value_or(""))};
}

// When the daemons start. Contain, RunInJob and X11 imply Alloc (Slurm's
// prolog_str2flags); RunInJob exists from Slurm 24.05 on.
Result check_prolog_flags(const NodeFacts& f) {
  const std::string flags = f.conf.get("prologflags").value_or("");
  const std::string items = lower(flags);  // Slurm's flags are case-insensitive
  if (list_has(items, "runinjob") && f.slurm_version && !has_run_in_job(*f.slurm_version)) {
    return CheckResult{CheckStatus::kFail,
                       fmt::format("PrologFlags={}: RunInJob exists from Slurm 24.05 on, and Slurm {} stops with 'PrologFlags "
                                   "invalid'; use PrologFlags=Contain there",
                                   flags, f.slurm_version->to_string())};
  }
  if (list_has(items, "runinjob") && f.slurm_version) {
    std::vector<std::string> bugs;
    if (!has_run_in_job_multinode_gres_fix(*f.slurm_version)) {
      bugs.push_back(
          "the prolog on a job's second and later nodes gets another node's GPUs, or none (a Slurm bug fixed in 25.11.0: "
          "'Fix segfault with multi-node gres with PrologFlags=RunInJob'), so multi-node --unilab-mps jobs fail there");
    }
    const bool x11 = list_has(items, "x11");
    if (has_run_in_job_user_epilog_race(*f.slurm_version)) {
      bugs.push_back(
          "the extern step can start the Epilog as the job's user (its x11 cleanup races the fork; fixed in 25.11.4), and "
          "unilab-mps-epilog then fails closed and the node drains until it is rerun as root (docs/ADMIN.md, section 6)");
    } else if (x11 && has_run_in_job_x11_epilog_race(*f.slurm_version)) {
      bugs.push_back(
          "the extern step of an x11 job can still start the Epilog as the job's user (25.11.4 to 25.11.7 carry half of "
          "the fix; 26.05.0 all of it), and unilab-mps-epilog then fails closed and the node drains until it is rerun as "
          "root (docs/ADMIN.md, section 6)");
    }
    if (!bugs.empty()) {
      return CheckResult{CheckStatus::kWarn,
                         fmt::format("PrologFlags={} on Slurm {}: {}; upgrade to {}, or on cgroup v1 use "
                                     "PrologFlags=Contain",
                                     flags, f.slurm_version->to_string(), join(bugs, "; and "), x11 ? "26.05.0" : "25.11.4")};
    }
  }
  const bool alloc = list_has(items, "alloc") || list_has(items, "contain") || list_has(items, "runinjob") || list_has(items, "x11");
  if (alloc) return CheckResult{CheckStatus::kOk, fmt::format("PrologFlags={}: daemons start on every node at allocation", flags)};
  return CheckResult{CheckStatus::kOk,
                     "no PrologFlags=Alloc: daemons start when the job's first step reaches the node (the batch script, or the "
                     "first srun of an salloc); set it to fail a broken node before user code runs"};
}

// CgroupPlugin of cgroup.conf against the release (cgroup/v2 from 22.05,
// disabled from 24.05) and against the cgroup file system this host mounts.
Result check_cgroup_plugin(const NodeFacts& f) {
  if (!f.cgroup_conf_error.empty()) return CheckResult{CheckStatus::kFail, f.cgroup_conf_error};
  const CgroupSite site = cgroup_site_from(f.conf, f.cgroup_conf);
  const std::string& plugin = site.cgroup_plugin;
  const auto& v = f.slurm_version;
  if (plugin != "autodetect" && plugin != "cgroup/v1" && plugin != "cgroup/v2" && plugin != "disabled") {
    return CheckResult{CheckStatus::kFail, fmt::format("CgroupPlugin={} is none of autodetect, cgroup/v1, cgroup/v2", plugin)};
  }
  if (v && ((plugin == "cgroup/v2" && !has_cgroup_v2_plugin(*v)) || (plugin == "disabled" && !has_cgroup_plugin_disabled(*v)))) {
    return CheckResult{CheckStatus::kFail,
                       fmt::format("CgroupPlugin={} exists from Slurm {} on, not in Slurm {}: set CgroupPlugin=autodetect",
                                   plugin, plugin == "disabled" ? "24.05" : "22.05", v->to_string())};
  }
  if (plugin == "disabled") {
    return CheckResult{CheckStatus::kWarn,
                       "CgroupPlugin=disabled: Slurm confines no job in a cgroup, so daemons are not contained (the epilog "
                       "stops them)"};
  }
  if (auto mismatch = cgroup_plugin_mismatch(f, plugin, site.mountpoint)) return mismatch;
  const int host = host_cgroup_version(f);
  if (v && has_cgroup_v1_deprecated(*v) && (plugin == "cgroup/v1" || (plugin == "autodetect" && host == 1))) {
    return CheckResult{CheckStatus::kWarn,
                       fmt::format("CgroupPlugin={} runs cgroup v1, which Slurm {} deprecates (since 25.05; slurmd warns at "
                                   "start): plan the move to cgroup v2 with PrologFlags=RunInJob and the Prolog=/Epilog= "
                                   "helpers (docs/ADMIN.md, section 6) ({})",
                                   plugin, v->to_string(), cgroup_conf_origin(f))};
  }
  return CheckResult{CheckStatus::kOk, fmt::format("CgroupPlugin={}{} ({})", plugin,
                                                   host == 0 ? std::string(": no cgroup hierarchy seen at " + site.mountpoint)
                                                             : fmt::format(": cgroup v{} at {}", host, site.mountpoint),
                                                   cgroup_conf_origin(f))};
}

// Whether the daemons can live in their job's cgroup. On cgroup v2 that
// needs PrologFlags=RunInJob, which releases before 24.05 do not have.
Result check_containment(const NodeFacts& f) {
  const CgroupSite site = cgroup_site_from(f.conf, f.cgroup_conf);
  const auto& v = f.slurm_version;
  const bool confined = site.constrain_devices || site.proctrack_cgroup;
  const bool v2 = site.cgroup_plugin == "cgroup/v2" || (site.cgroup_plugin == "autodetect" && !f.cgroup_v1_mounted);
  if (confined && v2 && f.config.contain != "off" && v && !has_run_in_job(*v)) {
    return CheckResult{CheckStatus::kFail,
                       fmt::format("cgroup v2 on Slurm {}: the prolog runs in slurmd's cgroup and PrologFlags=RunInJob (which "
                                   "runs it in the job's) exists from Slurm 24.05 on, so every --unilab-mps job is refused here; "
                                   "boot the node with cgroup v1 (CgroupPlugin=cgroup/v1, PrologFlags=Contain) or upgrade Slurm",
                                   v->to_string())};
  }
  ContainmentAdvice advice = containment_advice(site, f.config.contain, f.cgroup_v1_mounted);
  return CheckResult{check_status_from_string(advice.status).value_or(CheckStatus::kFail), advice.detail};
}

}  // namespace unilab::mps
