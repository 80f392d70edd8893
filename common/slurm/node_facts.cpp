// doctor --node, step one: every fact the checks need, read once through
// NodeProbe and CommandRunner into NodeFacts; nothing changed on the node.
#include "common/slurm/node_doctor.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <set>

#include <fmt/format.h>

#include "common/slurm/containment.hpp"
#include "common/mps/errors.hpp"
#include "common/mps/gpu.hpp"
#include "common/slurm/gres.hpp"
#include "common/mps/mps_control.hpp"
#include "common/mps/mps_pid_file.hpp"
#include "common/mps/proc.hpp"
#include "common/mps/safefs.hpp"
#include "common/slurm/config_text.hpp"
#include "common/slurm/slurm_config.hpp"

namespace unilab::mps {

namespace {

// Every component of `path` from / down, up to the first that does not exist.
std::vector<PathFacts> dir_chain(NodeProbe& probe, const std::string& path) {
  std::vector<std::string> components;
  for (std::string p = path; p != "/" && !p.empty() && p != "."; p = config_dir_of(p)) components.push_back(p);
  components.push_back("/");
  std::reverse(components.begin(), components.end());
  std::vector<PathFacts> out;
  for (const auto& c : components) {
    out.push_back({c, probe.stat(c)});
    if (!out.back().facts.exists) break;
  }
  return out;
}

// Why root may not run `path`: it, or a directory above it, is not root's
// alone (a user who can write any of them can swap the file). "" when sound.
std::string root_only_path_problem(NodeProbe& probe, const std::string& path) {
  for (const PathFacts& c : dir_chain(probe, path)) {
    if (!c.facts.exists) return fmt::format("{} does not exist", c.path);
    if (c.facts.is_symlink) return fmt::format("{} is a symlink", c.path);
    if (c.facts.uid != 0 || (c.facts.mode & (S_IWGRP | S_IWOTH))) {
      return fmt::format("{} is owned by uid {} with mode {:o}: not root's alone", c.path, c.facts.uid, c.facts.mode);
    }
  }
  return "";
}

// `slurmd -V` of the running slurmd's own executable: the release that
// actually runs, whatever else is installed. Never a binary a user could
// have put there (issue: a stale pid file, the pid reused by a user's
// ~/slurmd): the process is root in all its uids (gather_slurmd), the path
// /proc/PID/exe names is root's alone from / down and is the very file the
// process runs (device and inode), and the query runs as
// options.version_query_as (nobody, from the CLI as root).
void gather_slurm_version(NodeProbe& probe, CommandRunner& runner, NodeFacts& f) {
  if (f.slurmd_pid <= 0 || !f.slurmd_name || !f.slurmd_name->starts_with("slurmd")) return;
  f.slurmd_exe = probe.process_exe(f.slurmd_pid);
  if (!f.slurmd_exe || f.slurmd_exe->empty() || f.slurmd_exe->front() != '/') {
    f.slurmd_exe.reset();
    return;
  }
  if (std::string why = root_only_path_problem(probe, *f.slurmd_exe); !why.empty()) {
    f.slurmd_exe_problem = why;
  } else if (!probe.process_runs(f.slurmd_pid, *f.slurmd_exe)) {
    f.slurmd_exe_problem = fmt::format("{} is not the file pid {} runs (replaced since it started?)", *f.slurmd_exe, f.slurmd_pid);
  }
  if (!f.slurmd_exe_problem.empty()) return;
  Command c;
  c.argv = {*f.slurmd_exe, "-V"};
  c.timeout = std::chrono::milliseconds(5000);
  c.credentials = f.options.version_query_as;
  CommandResult r = runner.run(c);
  f.slurmd_version_output = r.ok() ? r.out : (r.exec_error.empty() ? r.err + r.out : r.exec_error);
  if (r.ok()) f.slurm_version = parse_slurm_version(r.out);
}

// The pid file is read only when root wrote it and only root can change it,
// and its pid taken only when that process is root's: slurmd 22.05 leaves
// the file behind when it dies, and its pid is then anyone's to reuse.
void gather_slurmd(NodeProbe& probe, CommandRunner& runner, NodeFacts& f) {
  f.slurmd_pid_file =
      expand_node_pattern(f.conf.get("slurmdpidfile").value_or(f.options.default_slurmd_pid_file), f.node, f.host);
  f.slurmd_pid_text = probe.read_root_file(f.slurmd_pid_file, f.slurmd_pid_problem);
  if (f.slurmd_pid_text) f.slurmd_pid = parse_pid_file_text(*f.slurmd_pid_text).value_or(0);
  if (f.slurmd_pid > 0) {
    f.slurmd_name = probe.process_name(f.slurmd_pid);
    f.slurmd_started = probe.process_start_time(f.slurmd_pid);
    std::optional<uid_t> uid = probe.process_uid(f.slurmd_pid);
    if (f.slurmd_name && uid && *uid != 0) {
      f.slurmd_pid_problem = fmt::format("pid {} ({}) runs as uid {}, not root: not slurmd (the pid file is stale)", f.slurmd_pid,
                                         *f.slurmd_name, *uid);
      f.slurmd_pid = 0;
      f.slurmd_name.reset();
      f.slurmd_started.reset();
    }
  }
  std::vector<std::string> watched = f.stack.files;
  if (!f.plugin_lines.empty() && !f.plugin_lines.front().resolved.empty()) watched.push_back(f.plugin_lines.front().resolved);
  for (const auto& path : watched) f.watched.push_back({path, probe.stat(path)});
  gather_slurm_version(probe, runner, f);
}

void gather_tools(NodeProbe& probe, CommandRunner& runner, NodeFacts& f) {
  f.nvidia = gather_nvidia_tool_facts(
      runner, f.config.tools, [&](const std::string& p) { return probe.executable(p); },
      [&](const std::string& p) { return probe.stat(p).is_dir; }, [&](const std::string& p) { return probe.read_file(p); });
  f.nvidia_smi_executable = f.nvidia.nvidia_smi_executable;
  if (f.nvidia.discovery) f.gpus = f.nvidia.discovery->gpus;
  if (f.nvidia.discovery_error) f.gpus_error = *f.nvidia.discovery_error;
  f.mps_control_executable = probe.executable(f.config.tools.mps_control);
}

void gather_gres(NodeProbe& probe, NodeFacts& f) {
  f.gres_path = gres_conf_path(f.config, f.options.slurm_conf);
  auto text = probe.read_file(f.gres_path);
  if (!text) {
    f.gres_error = fmt::format("cannot read {}; set gres_conf= in plugstack.conf", f.gres_path);
    return;
  }
  try {
    f.gres = parse_gres_conf(*text, f.node);
    if (!f.conf_error) {
      if (auto gres = node_gres(f.conf, f.node)) f.gres_discarded = order_gres_as_slurm(*f.gres, *gres);  // Slurm's GRES index order
    }
  } catch (const CudaMpsError& e) {
    f.gres_error = fmt::format("{}: {}", f.gres_path, e.what());
    return;
  }
  const std::vector<GpuIdentity> gpus = f.gpus.value_or(std::vector<GpuIdentity>{});
  MigCaps caps;
  if (std::any_of(gpus.begin(), gpus.end(), [](const auto& g) { return g.mig.has_value(); }) ||
      std::any_of(f.gres->gpus.begin(), f.gres->gpus.end(), [](const auto& e) { return e.files.size() > 1; })) {
    const std::string path = f.config.tools.driver_proc + "/nvidia-caps/mig-minors";
    try {
      auto minors = probe.read_file(path);
      if (!minors) throw CudaMpsError("cannot read it");
      caps.minors = MigMinors::parse(*minors);
    } catch (const CudaMpsError& e) {
      caps.error = fmt::format("{}: {} (the driver lists the capability minors of MIG instances there)", path, e.what());
    }
  }
  try {
    f.gpu_entries = map_node_gpu_entries(*f.gres, gpus, [&](const std::string& p) { return probe.device_minor(p); }, caps);
  } catch (const CudaMpsError& e) {
    f.gpu_map_error = e.what();
  }
}

// Dirs= of job_container.conf (Slurm >= 23.02; 22.05 always mounts a private /dev/shm).
void gather_job_container(NodeProbe& probe, NodeFacts& f) {
  f.namespace_yaml_path = config_dir_of(f.options.slurm_conf) + "/namespace.yaml";
  f.namespace_yaml = probe.read_file(f.namespace_yaml_path);
  f.job_container_conf_path = config_dir_of(f.options.slurm_conf) + "/job_container.conf";
  auto text = probe.read_file(f.job_container_conf_path);
  if (!text) return;
  for (const auto& line : tokenize_config(*text, f.job_container_conf_path, ConfigSyntax::kSlurm)) {
    for (const auto& tok : line.words) {
      if (lower(tok).starts_with("dirs=")) f.job_container_dirs = tok.substr(5);
    }
  }
}

void gather_cgroups(NodeProbe& probe, NodeFacts& f) {
  const std::string cgroup_path = config_dir_of(f.options.slurm_conf) + "/cgroup.conf";
  if (probe.stat(cgroup_path).exists) {
    try {
      f.cgroup_conf = read_slurm_conf(probe, cgroup_path);
    } catch (const CudaMpsError& e) {
      f.cgroup_conf_error = e.what();
    }
  }
  const std::string mount = cgroup_site_from(f.conf, f.cgroup_conf).mountpoint;
  f.cgroup_v1_mounted = probe.stat(mount + "/freezer").is_dir;
  f.cgroup_v2_mounted = probe.stat(mount + "/cgroup.controllers").exists;
}

// The script Prolog=/Epilog= names (one absolute path; no globs or lists).
std::optional<std::string> hook_script(NodeProbe& probe, const NodeFacts& f, const char* key) {
  const std::string value = f.conf.get(key).value_or("");
  if (value.empty() || value[0] != '/' || value.find_first_of(",*?[") != std::string::npos) return std::nullopt;
  if (!probe.stat(value).is_regular) return std::nullopt;
  return probe.read_file(value);
}

}  // namespace

NodeFacts gather_node_facts(NodeProbe& probe, CommandRunner& runner, const NodeDoctorOptions& options) {
  NodeFacts f;
  f.options = options;
  f.host = probe.hostname();
  read_node_slurm_conf(probe, f.options.slurm_conf, f.options.slurm_conf_location, f.options.node, f.host, f);
  read_node_plugstack(probe, f.options.slurm_conf, f.options.default_plugin_dir, f);
  gather_slurmd(probe, runner, f);
  f.state_dir_chain = dir_chain(probe, f.config.state_dir);
  f.run_dir_chain = dir_chain(probe, f.config.run_dir);
  if (f.config.history) {
    f.history_dir_chain = dir_chain(probe, config_dir_of(*f.config.history));
    f.history_file = probe.stat(*f.config.history);
    f.history_rotated = probe.stat(*f.config.history + ".1");
  }
  gather_tools(probe, runner, f);
  gather_gres(probe, f);
  f.default_pipe = probe.probe_socket(std::string(kDefaultPipeDirectory) + "/control");
  gather_job_container(probe, f);
  gather_cgroups(probe, f);
  f.prolog_script = hook_script(probe, f, "prolog");
  f.epilog_script = hook_script(probe, f, "epilog");
  return f;
}

}  // namespace unilab::mps
