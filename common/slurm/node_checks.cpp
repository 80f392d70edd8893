// The checks of `unilab-mps doctor --node`: each a pure function of the
// gathered NodeFacts, listed in one table at the end of this file.
//
// Adding a check: write `std::optional<CheckResult> check_x(const NodeFacts&)`
// (a new fact goes into NodeFacts and is read in gather_node_facts), then add
// one row {"x", {"id it needs", ...}, check_x} to kChecks where it belongs in
// the report. Return nullopt when the check does not apply on this node.
#include <sys/stat.h>
#include <time.h>

#include <algorithm>
#include <cctype>
#include <map>

#include <fmt/format.h>

#include "common/slurm/containment.hpp"
#include "common/mps/errors.hpp"
#include "common/mps/gpu.hpp"
#include "common/mps/mps_control.hpp"
#include "common/slurm/node_doctor.hpp"
#include "common/mps/safefs.hpp"
#include "common/mps/text.hpp"

namespace unilab::mps {
namespace {


using Result = std::optional<CheckResult>;

CheckResult ok(std::string detail) { return {CheckStatus::kOk, std::move(detail)}; }
CheckResult warn(std::string detail) { return {CheckStatus::kWarn, std::move(detail)}; }
CheckResult fail(std::string detail) { return {CheckStatus::kFail, std::move(detail)}; }

std::string plural(size_t n) { return n == 1 ? "" : "s"; }

std::string format_time(double t) {
  time_t secs = static_cast<time_t>(t);
  struct tm tm {};
  localtime_r(&secs, &tm);
  char buf[32];
  strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string octal_mode(mode_t m) { return fmt::format("{:04o}", static_cast<unsigned>(m & 07777)); }

const PlugstackEntry* plugin_line(const NodeFacts& f) { return f.plugin_lines.empty() ? nullptr : &f.plugin_lines.front(); }

// ------------------------------------------------------------ slurm.conf, node

bool configless(const NodeFacts& f) { return f.options.slurm_conf_location && f.options.slurm_conf_location->configless(); }

Result check_slurm_conf(const NodeFacts& f) {
  if (f.conf_error) return fail(*f.conf_error);
  std::string files = join(f.conf.files, ", ");
  if (configless(f)) {
    files += fmt::format(" (configless cache: {} -> {}, written by slurmd from slurmctld's files)", kConfiglessLink,
                         f.options.slurm_conf_location->cache_target);
  }
  if (f.conf.problems.empty()) return ok(files);
  return warn(files + "; " + join(f.conf.problems, "; "));
}

Result check_node(const NodeFacts& f) {
  if (f.options.node) return ok(fmt::format("{} (given)", f.node));
  const auto& names = f.node_candidates;
  if (names.size() == 1) return ok(fmt::format("{} (NodeName of host {} in slurm.conf)", f.node, f.host));
  if (names.empty()) {
    return warn(fmt::format("no NodeName/NodeHostname in slurm.conf matches host {}; assuming node {} (pass --node-name)", f.host,
                            f.host));
  }
  return fail(fmt::format("host {} is several Slurm nodes ({}); pass --node-name", f.host, join(names, ",")));
}

// ------------------------------------------------------------ plugstack and the plugin

// Configless: slurmctld ships only a file named plugstack.conf next to its
// slurm.conf (proc_req.c slurmd_config_files); slurmd reads it from its
// cache only while PlugStackConfig is unset (plugstack.c spank_stack_init).
std::string configless_plugstack_note(const NodeFacts& f) {
  if (!configless(f) || !f.conf.get("plugstackconfig")) return "";
  return fmt::format("; configless node: PlugStackConfig={} is read on this node as it is, not from the files slurmctld "
                     "ships (it ships plugstack.conf next to its slurm.conf, read from the cache only without "
                     "PlugStackConfig)",
                     f.plugstack_path);
}

Result check_plugstack(const NodeFacts& f) {
  const Plugstack& s = f.stack;
  const std::string note = configless_plugstack_note(f);
  if (s.files.empty()) {
    return fail(fmt::format("{} does not exist (PlugStackConfig{}): Slurm loads no SPANK plugin{}", f.plugstack_path,
                            f.conf.get("plugstackconfig") ? "" : " unset: next to slurm.conf", note));
  }
  CheckResult r = ok(fmt::format("read {}{}{}{}", join(s.files, ", "), s.includes.empty() ? "" : "; " + join(s.includes, "; "),
                                 s.problems.empty() ? "" : "; " + join(s.problems, "; "), note));
  if (!s.problems.empty() || !note.empty()) r.status = CheckStatus::kWarn;
  return r;
}

Result check_plugin_listed(const NodeFacts& f) {
  const auto& lines = f.plugin_lines;
  if (lines.empty()) {
    return fail(fmt::format("no `optional .../{}` line in {}: add one (example: /usr/share/doc/unilab-mps/examples/"
                            "plugstack.conf.d/unilab-mps.conf), then restart slurmd",
                            kPluginFile, f.stack.files.empty() ? f.plugstack_path : join(f.stack.files, ", ")));
  }
  if (lines.size() > 1) {
    std::vector<std::string> where;
    for (const auto& e : lines) where.push_back(fmt::format("{}:{}", e.file, e.line));
    return fail(fmt::format("{} is listed {} times ({}): Slurm refuses to load it a second time; keep one line", kPluginFile,
                            lines.size(), join(where, ", ")));
  }
  const PlugstackEntry& e = lines.front();
  return ok(fmt::format("{}:{}: {} {} ({} argument{})", e.file, e.line, e.kind, e.path, e.args.size(), plural(e.args.size())));
}

Result check_plugin_file(const NodeFacts& f) {
  const PlugstackEntry* e = plugin_line(f);
  if (!e) return std::nullopt;
  if (e->resolved.empty()) {
    return fail(fmt::format("{} is not in PluginDir ({}): give the absolute path", e->path, join(f.plugin_dirs, ":")));
  }
  const FileFacts so = f.plugin_file.value_or(FileFacts{});
  if (!so.exists) return fail(fmt::format("{} does not exist: install unilab-mps (cmake --install or the .deb)", e->resolved));
  if (!so.is_regular) return fail(fmt::format("{} is not a regular file", e->resolved));
  if (so.uid != 0 || (so.mode & (S_IWGRP | S_IWOTH))) {
    return fail(fmt::format("{} is owned by uid {} with mode {}: slurmd loads it as root, so it must be root-owned and writable "
                            "by root only",
                            e->resolved, so.uid, octal_mode(so.mode)));
  }
  return ok(fmt::format("{} (root, {})", e->resolved, octal_mode(so.mode)));
}

Result check_plugin_args(const NodeFacts& f) {
  const PlugstackEntry* e = plugin_line(f);
  if (!e) return std::nullopt;
  if (!f.plugin_config) return fail(fmt::format("{}: the plugin refuses to load with these arguments", f.plugin_args_error));
  return ok(e->args.empty() ? "defaults" : join(e->args, " "));
}

// ------------------------------------------------------------ slurmd

// A file of the configless cache, which slurmd itself rewrites at every
// reconfigure whether or not its content changed.
bool in_configless_cache(const NodeFacts& f, const std::string& path) {
  if (!configless(f)) return false;
  const SlurmConfLocation& loc = *f.options.slurm_conf_location;
  return path.starts_with(loc.dir() + "/") || (!loc.cache_target.empty() && path.starts_with(loc.cache_target + "/"));
}

// Running, and started after the plugin and plugstack.conf last changed.
Result check_slurmd(const NodeFacts& f) {
  const bool running = f.slurmd_pid > 0 && f.slurmd_name && f.slurmd_name->starts_with("slurmd") && f.slurmd_started;
  if (!running) {
    if (!f.slurmd_pid_problem.empty()) {
      return fail(fmt::format("cannot tell whether slurmd runs: {}; root writes slurmd's pid file (SlurmdPidFile), so "
                              "restart slurmd to rewrite it",
                              f.slurmd_pid_problem));
    }
    std::string why = !f.slurmd_pid_text ? "no pid file " + f.slurmd_pid_file
                                         : fmt::format("pid file {} names {}", f.slurmd_pid_file,
                                                       f.slurmd_pid > 0 ? fmt::format("pid {} ({})", f.slurmd_pid,
                                                                                      f.slurmd_name.value_or("gone"))
                                                                        : std::string("no pid"));
    return fail(fmt::format("slurmd is not running ({}): start it", why));
  }
  std::vector<std::string> changed, recached;
  for (const auto& w : f.watched) {
    if (w.facts.exists && w.facts.mtime > *f.slurmd_started + f.options.mtime_slack_s) {
      (in_configless_cache(f, w.path) ? recached : changed).push_back(fmt::format("{} ({})", w.path, format_time(w.facts.mtime)));
    }
  }
  if (changed.empty() && !recached.empty()) {
    return warn(fmt::format("pid {} started {}; slurmd rewrote its configless cache since ({}), as it does at every scontrol "
                            "reconfigure: if plugstack.conf changed on the controller, restart slurmd (it decides at start "
                            "whether to run the SPANK prolog/epilog)",
                            f.slurmd_pid, format_time(*f.slurmd_started), join(recached, ", ")));
  }
  if (changed.empty()) {
    return ok(fmt::format("pid {} started {}, after the plugin and plugstack.conf last changed", f.slurmd_pid,
                          format_time(*f.slurmd_started)));
  }
  return fail(fmt::format("pid {} started {}, before {} changed: restart slurmd (it decides at start whether to run the SPANK "
                          "prolog/epilog; scontrol reconfigure is not enough)",
                          f.slurmd_pid, format_time(*f.slurmd_started), join(changed, ", ")));
}

Result check_slurm_version(const NodeFacts& f) {
  if (f.slurm_version) {
    return ok(fmt::format("Slurm {} (series {}) from {} -V", f.slurm_version->to_string(), f.slurm_version->series(),
                          f.slurmd_exe.value_or("slurmd")));
  }
  if (!f.slurmd_exe) return warn("cannot tell which Slurm runs (no running slurmd to ask): release-specific advice is generic");
  if (!f.slurmd_exe_problem.empty()) {
    return warn(fmt::format("cannot tell which Slurm runs: {} -V was not run ({}); release-specific advice is generic",
                            *f.slurmd_exe, f.slurmd_exe_problem));
  }
  std::string said = f.slurmd_version_output.value_or("");
  said = said.substr(0, said.find('\n'));
  return warn(fmt::format("cannot tell which Slurm runs: {} -V said '{}'; release-specific advice is generic", *f.slurmd_exe,
                          said));
}

// ------------------------------------------------------------ the plugin's directories

// A directory the plugin creates or trusts: every existing component passes
// the plugin's own trust rule (safefs; a root-owned sticky ancestor such as
// /tmp is fine), is no symlink, and the leaf is traversable by every user
// (tasks read records and reach their pipe directory as the job user).
CheckResult judge_root_dir(const std::vector<PathFacts>& chain, const std::string& path, const std::string& role) {
  for (const auto& [c, facts] : chain) {
    if (!facts.exists) return ok(fmt::format("{} does not exist yet; the first MPS job's prolog creates it (root, 0755)", path));
    const bool leaf = c == path;
    if (facts.is_symlink) return fail(fmt::format("{} ({}) is a symlink: the plugin refuses symlinks in its {}", c, path, role));
    if (!facts.is_dir) return fail(fmt::format("{} is not a directory", c));
    if (auto problem = dir_trust_problem(c, facts.uid, facts.mode, 0, !leaf); !problem.empty()) {
      return fail(fmt::format("{} (the plugin will not trust it as its {})", problem, role));
    }
    if (leaf && (facts.mode & S_IXOTH) == 0) {
      return fail(fmt::format("{} has mode {}: job users must traverse it; chmod 0755 {}", c, octal_mode(facts.mode), c));
    }
  }
  return ok(fmt::format("{} (root, {})", path, octal_mode(chain.empty() ? 0 : chain.back().facts.mode)));
}

Result check_state_dir(const NodeFacts& f) {
  if (!plugin_line(f)) return std::nullopt;
  return judge_root_dir(f.state_dir_chain, f.config.state_dir, "state_dir");
}

Result check_run_dir(const NodeFacts& f) {
  if (!plugin_line(f)) return std::nullopt;
  return judge_root_dir(f.run_dir_chain, f.config.run_dir, "run_dir");
}

std::string kib(unsigned long long bytes) { return fmt::format("{} KiB", (bytes + 1023) / 1024); }

// One file of the journal: root's own regular, singly linked file, as the
// epilog requires before it appends (history.cpp); else why not.
std::string journal_file_problem(const std::string& path, const FileFacts& f) {
  if (!f.exists) return "";
  if (f.is_symlink) return fmt::format("{} is a symlink: the epilog will not write through it; remove it", path);
  if (!f.is_regular) return fmt::format("{} is not a regular file; move it away", path);
  if (f.uid != 0 || (f.mode & (S_IWGRP | S_IWOTH)) || f.nlink > 1) {
    return fmt::format("{} is not root's own file (uid {}, mode {}, {} links): the epilog refuses to append to it; move it away",
                       path, f.uid, octal_mode(f.mode), f.nlink);
  }
  return "";
}

// history=: a directory root alone controls, a journal root owns, bounded by
// history_max= (the current file and its .1), room to write.
Result check_history(const NodeFacts& f) {
  if (!plugin_line(f)) return std::nullopt;
  if (!f.config.history) return ok("history=off: the epilog keeps no journal");
  const std::string& path = *f.config.history;
  const std::string dir = config_dir_of(path);
  CheckResult d = judge_root_dir(f.history_dir_chain, dir, "history directory");
  if (d.status != CheckStatus::kOk) return d;
  if (f.history_dir_chain.empty() || !f.history_dir_chain.back().facts.exists) {
    return ok(fmt::format("{} does not exist yet; the first MPS job's epilog creates it (root, 0755)", dir));
  }
  for (const auto& [p, facts] : {std::pair{path, f.history_file}, std::pair{path + ".1", f.history_rotated}}) {
    if (auto problem = journal_file_problem(p, facts); !problem.empty()) return fail(problem);
  }
  const FileFacts& where = f.history_dir_chain.back().facts;
  if (where.read_only_fs) return fail(fmt::format("{} is on a read-only file system: every journal line would be lost", dir));
  // A line is about 1 KiB: twice history_max= is what the journal may need.
  const unsigned long long max = f.config.history_max;
  const std::string size = fmt::format("{}: {} of history_max={} (rotated: {}); at most {} on disk", path,
                                       kib(f.history_file.size), kib(max), kib(f.history_rotated.size), kib(2 * max));
  if (f.history_file.size > max + (64ULL << 10) || f.history_rotated.size > max + (64ULL << 10)) {
    return warn(size + "; larger than history_max=: written by something other than the epilog, or history_max= was lowered "
                       "(the next append rotates it)");
  }
  if (where.free_bytes < 2 * max) {
    return warn(fmt::format("{}; only {} free on its file system: lines will be lost when it fills (one warning each in "
                            "the slurmd log)", size, kib(where.free_bytes)));
  }
  return ok(size);
}

// ------------------------------------------------------------ NVIDIA tools, as the plugin will run them

std::string defaults_note(const NodeFacts& f) {
  return f.plugin_config ? "" : " (plugin default: no usable plugstack line to take it from)";
}

// The tools run as the plugin runs them (nvidia_checks.hpp: driver_dir=, exit 14).
Result check_nvidia_smi(const NodeFacts& f) {
  NvidiaCheckResult r = check_nvidia_tools_run(f.nvidia);
  return CheckResult{r.status, r.detail + (f.nvidia.discovery_error ? "" : defaults_note(f))};
}

// Compute and MIG modes of the node's GPUs (Exclusive_Process recommended).
Result check_compute_mode(const NodeFacts& f) {
  if (!f.gpus) return std::nullopt;
  NvidiaCheckResult r = check_compute_modes(*f.gpus);
  return CheckResult{r.status, r.detail};
}

Result check_mps_control(const NodeFacts& f) {
  if (f.mps_control_executable) return ok(f.config.tools.mps_control + " is executable" + defaults_note(f));
  return fail(fmt::format("{} is missing or not executable; install the NVIDIA MPS tools or set mps_control={}",
                          f.config.tools.mps_control, defaults_note(f)));
}

// ------------------------------------------------------------ gres.conf and the GPU table

Result check_gres_conf(const NodeFacts& f) {
  if (!f.gres) return fail(f.gres_error);
  const GresConf& g = *f.gres;
  const auto migs = static_cast<size_t>(std::count_if(g.gpus.begin(), g.gpus.end(), [](const auto& e) { return e.files.size() > 1; }));
  std::string what = g.gpus.empty() ? (g.autodetect ? std::string("AutoDetect") : std::string("no GPU"))
                                    : fmt::format("{} GPU GRES{}", g.gpus.size(),
                                                  migs ? fmt::format(" ({} of them MIG slices, MultipleFiles=)", migs) : "");
  if (!f.gres_discarded.empty()) {
    std::vector<std::string> lines;
    for (const auto& e : f.gres_discarded) lines.push_back(join(e.files, ",") + (e.type.empty() ? "" : " (Type=" + e.type + ")"));
    return warn(fmt::format("{}: {} for node {}; {} GPU line(s) beyond slurm.conf's Gres= for the node, which Slurm discards: {}",
                            f.gres_path, what, f.node, lines.size(), join(lines, "; ")));
  }
  return ok(fmt::format("{}: {} for node {}, in slurm.conf's Gres= order", f.gres_path, what, f.node));
}

Result check_gpu_map(const NodeFacts& f) {
  if (!f.gres) return std::nullopt;
  if (!f.gpu_map_error.empty()) return fail(f.gpu_map_error);
  std::vector<std::string> problems;
  std::map<std::string, std::vector<std::string>> by_uuid;
  for (const auto& row : node_gpu_rows(f)) {
    if (!row.problem.empty()) problems.push_back(fmt::format("GRES {}", row.gres_index));
    if (!row.uuid.empty()) by_uuid[row.uuid].push_back(std::to_string(row.gres_index));
  }
  for (const auto& [uuid, idx] : by_uuid) {
    if (idx.size() > 1) problems.push_back(fmt::format("GRES {} are the same GPU {}", join(idx, ","), uuid));
  }
  const size_t n = f.gpu_entries.size();
  if (n == 0) return fail(fmt::format("no GPU for node {} (gres.conf AutoDetect and nvidia-smi found none)", f.node));
  if (!problems.empty()) {
    return fail(fmt::format("{} of {} GPU(s) cannot be mapped to a UUID ({}): MPS jobs on them fail in the prolog",
                            problems.size(), n, join(problems, "; ")));
  }
  return ok(fmt::format("{} GPU{} mapped GRES index -> device -> minor -> UUID", n, plural(n)));
}

// nvidia-smi GPUs that no gres.conf entry names: Slurm never schedules them.
Result check_gpu_unlisted(const NodeFacts& f) {
  if (!f.gres || !f.gpus || !f.gpu_map_error.empty()) return std::nullopt;
  std::vector<std::string> unlisted;
  for (const auto& g : *f.gpus) {
    if (mig_enabled(g)) continue;  // its MIG devices are the GRES, never the GPU itself
    bool listed = std::any_of(f.gpu_entries.begin(), f.gpu_entries.end(),
                              [&](const GresGpuMapping& m) { return m.gpu && m.gpu->uuid == g.uuid; });
    if (!listed && g.mig) unlisted.push_back(fmt::format("MIG device {} ({} on nvidia-smi {})", g.uuid, g.mig->profile, g.mig->parent_index));
    if (!listed && !g.mig) unlisted.push_back(fmt::format("nvidia-smi {} (minor {}, {})", g.index, g.minor_number, g.uuid));
  }
  if (unlisted.empty()) return std::nullopt;
  return warn(fmt::format("{}: in no gres.conf File= entry, so Slurm never gives it to a job", join(unlisted, "; ")));
}

// ------------------------------------------------------------ the host around the jobs

// A daemon on the default pipe directory captures every CUDA program without CUDA_MPS_PIPE_DIRECTORY.
Result check_default_pipe(const NodeFacts& f) {
  const std::string def = std::string(kDefaultPipeDirectory) + "/control";
  switch (f.default_pipe) {
    case SocketState::kListening:
      return fail(fmt::format("an MPS daemon listens on {}: every CUDA program without CUDA_MPS_PIPE_DIRECTORY joins it (jobs "
                              "without --unilab-mps included); stop it (echo quit | nvidia-cuda-mps-control)",
                              def));
    case SocketState::kDenied:
      return warn(fmt::format("{} is a socket this user may not connect to: a daemon may listen there; run as root", def));
    case SocketState::kRefused:
      return warn(fmt::format("{} is a stale socket (no daemon answers); remove {} when no daemon runs", def,
                              kDefaultPipeDirectory));
    case SocketState::kNotSocket:
      return ok(fmt::format("{} is not a socket: no daemon there", def));
    case SocketState::kMissing:
      break;
  }
  return ok(fmt::format("no daemon on {}", def));
}

// The values of a namespace.yaml key (namespace/linux, Slurm 25.11+): what
// follows "KEY:" on its line and the "- item" lines under it, comments cut.
std::string yaml_values(const std::string& text, const std::string& key) {
  std::string out;
  bool in_list = false;
  for (std::string_view line : split_lines(text)) {
    if (auto hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    const std::string t(trim(line));
    if (t.empty()) continue;
    if (in_list && t.starts_with("-")) {
      out += " " + t.substr(1);
      continue;
    }
    in_list = false;
    if (t.starts_with(key + ":")) {
      out += " " + t.substr(key.size() + 1);
      in_list = true;
    }
  }
  return out;
}

// A job-private /dev/shm separates clients from the MPS server's mps.shm.* segments.
// Slurm 22.05's job_container/tmpfs always mounts a private /dev/shm;
// later versions take Dirs= in job_container.conf (default /tmp,/dev/shm).
// 25.11 renames the setting NamespaceType (namespace/tmpfs reads
// job_container.conf) and adds namespace/linux (namespace.yaml: dirs, the
// same default, and clone_ns_flags, whose PID and user namespaces put the
// job's tasks where the plugin's task check cannot see the daemon's
// process and MPS clients do not share the daemon's PID namespace).
Result check_dev_shm(const NodeFacts& f) {
  const std::string key = f.conf.get("namespacetype") ? "NamespaceType" : "JobContainerType";
  const std::string jc = f.conf.get("namespacetype").value_or(f.conf.get("jobcontainertype").value_or("job_container/none"));
  if (lower(jc) == "namespace/linux") {
    const std::string text = f.namespace_yaml.value_or("");
    const std::string flags = yaml_values(text, "clone_ns_flags");
    std::vector<std::string> bad;
    for (const char* flag : {"CLONE_NEWPID", "CLONE_NEWUSER"}) {
      if (flags.find(flag) != std::string::npos) bad.push_back(flag);
    }
    if (!bad.empty()) {
      return fail(fmt::format("{}={} with clone_ns_flags {} in {}: the job's tasks run in their own {} namespace with a private "
                              "/proc, where unilab-mps cannot see the job's MPS daemon (the task is refused) and MPS clients "
                              "would not share the daemon's; remove {} from clone_ns_flags",
                              key, jc, join(bad, ","), f.namespace_yaml_path, bad.size() > 1 ? "PID and user" :
                              (bad[0] == "CLONE_NEWPID" ? "PID" : "user"), join(bad, " and ")));
    }
    const std::string dirs = yaml_values(text, "dirs");
    if (!f.namespace_yaml || (dirs.find("/dev/shm") != std::string::npos) || trim(dirs).empty()) {
      return fail(fmt::format("{}={} gives every job a private /dev/shm ({}): MPS clients then cannot reach the server the "
                              "prolog started (its mps.shm.* segments live in the host's /dev/shm); set dirs: /tmp in {}",
                              key, jc, trim(dirs).empty() ? "dirs defaults to /tmp,/dev/shm" : "dirs:" + dirs,
                              f.namespace_yaml_path));
    }
    return ok(fmt::format("{}={} with dirs:{} in {}: /dev/shm stays shared, no PID or user namespace", key, jc, dirs,
                          f.namespace_yaml_path));
  }
  if (lower(jc).find("tmpfs") == std::string::npos) {
    return ok(fmt::format("{}={}: jobs share the host's /dev/shm with the MPS server", key, jc));
  }
  const auto& dirs = f.job_container_dirs;
  if (dirs && dirs->find("/dev/shm") == std::string::npos) {
    return ok(fmt::format("{}={} with Dirs={} in {}: /dev/shm stays shared (Slurm >= 23.02)", key, jc, *dirs,
                          f.job_container_conf_path));
  }
  return fail(fmt::format("{}={} gives every job a private /dev/shm{}: MPS clients then cannot reach the server "
                          "the prolog started (its mps.shm.* segments live in the host's /dev/shm); use {}, or "
                          "on Slurm >= 23.02 Dirs=/tmp in job_container.conf",
                          key, jc, dirs ? fmt::format(" (Dirs={} in {})", *dirs, f.job_container_conf_path)
                                        : std::string(" (Slurm 22.05 always does)"),
                          key == "NamespaceType" ? "no NamespaceType" : "job_container/none"));
}

}  // namespace

// The series-specific checks (PrologFlags, CgroupPlugin, containment) live in
// node_checks_slurm.cpp.
Result check_prolog_flags(const NodeFacts& f);
Result check_cgroup_plugin(const NodeFacts& f);
Result check_containment(const NodeFacts& f);
Result check_hook_timeouts(const NodeFacts& f);
Result check_cgroup_job_dir(const NodeFacts& f);
Result check_prolog_helper(const NodeFacts& f);

namespace {

// The doctor's table, in report order. A row runs only when the rows it
// depends on passed (or did not apply); otherwise it is reported skipped.
const std::vector<NodeCheck> kChecks = {
    {"slurm.conf", {}, check_slurm_conf},
    {"node", {}, check_node},
    {"plugstack", {}, check_plugstack},
    {"plugin-listed", {"plugstack"}, check_plugin_listed},
    {"plugin-file", {"plugin-listed"}, check_plugin_file},
    {"plugin-args", {"plugin-listed"}, check_plugin_args},
    {"slurmd", {}, check_slurmd},
    {"slurm-version", {}, check_slurm_version},
    {"state-dir", {"plugin-args"}, check_state_dir},
    {"run-dir", {"plugin-args"}, check_run_dir},
    {"history", {"plugin-args"}, check_history},
    {"nvidia-smi", {"plugin-args"}, check_nvidia_smi},
    {"compute-mode", {"nvidia-smi"}, check_compute_mode},
    {"mps-control", {"plugin-args"}, check_mps_control},
    {"gres.conf", {"plugin-args"}, check_gres_conf},
    {"gpu-map", {"gres.conf", "nvidia-smi"}, check_gpu_map},
    {"gpu-unlisted", {"gres.conf", "nvidia-smi"}, check_gpu_unlisted},
    {"default-pipe", {}, check_default_pipe},
    {"dev-shm", {}, check_dev_shm},
    {"prolog-helper", {"plugin-listed"}, check_prolog_helper},
    {"prolog-flags", {}, check_prolog_flags},
    {"hook-timeouts", {"plugin-args"}, check_hook_timeouts},
    {"cgroup-plugin", {}, check_cgroup_plugin},
    {"cgroup-job-dir", {"cgroup-plugin"}, check_cgroup_job_dir},
    {"containment", {"plugin-args", "prolog-flags", "cgroup-plugin"}, check_containment},
};

}  // namespace

const std::vector<NodeCheck>& node_checks() { return kChecks; }

std::vector<DoctorCheck> run_node_checks(const NodeFacts& facts, const std::vector<NodeCheck>& table) {
  std::vector<DoctorCheck> out;
  std::map<std::string, CheckStatus> seen;  // id -> status, for rows that wrote a line
  for (const NodeCheck& row : table) {
    const char* blocked_by = nullptr;
    for (const char* dep : row.depends_on) {
      if (dep == nullptr) break;
      auto it = seen.find(dep);
      if (it != seen.end() && (it->second == CheckStatus::kFail || it->second == CheckStatus::kSkip)) {
        blocked_by = dep;
        break;
      }
    }
    std::optional<CheckResult> r =
        blocked_by ? CheckResult{CheckStatus::kSkip, fmt::format("skipped: needs {}", blocked_by)} : row.run(facts);
    if (!r) continue;
    seen[row.id] = r->status;
    out.push_back({row.id, r->status, std::move(r->detail)});
  }
  return out;
}

std::vector<NodeGpuRow> node_gpu_rows(const NodeFacts& f) {
  std::vector<NodeGpuRow> rows;
  for (const auto& m : f.gpu_entries) {
    NodeGpuRow row{m.gres_index, m.device, m.minor, std::nullopt, "", m.problem, std::nullopt};
    if (m.gpu) {
      row.nvidia_smi_index = m.gpu->mig ? m.gpu->mig->parent_index : m.gpu->index;
      row.uuid = m.gpu->uuid;
      row.mig = m.gpu->mig;
    } else if (!f.gpus && m.minor >= 0) {
      row.problem = fmt::format("minor {}: no nvidia-smi GPU table to map it with", m.minor);
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace unilab::mps
