#include "common/slurm/node_doctor.hpp"

#include <fcntl.h>
#include <glob.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

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

constexpr const char* kPluginFile = "unilab_mps.so";
constexpr int kMaxIncludeDepth = 8;

std::string dir_of(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string base_of(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

ConfigSource probe_source(NodeProbe& probe, ConfigSyntax syntax) {
  ConfigSource src;
  src.read = [&probe](const std::string& path) { return probe.read_file(path); };
  if (syntax == ConfigSyntax::kPlugstack) src.expand = [&probe](const std::string& pattern) { return probe.glob(pattern); };
  src.syntax = syntax;
  src.max_depth = kMaxIncludeDepth;
  return src;
}

void add_slurm_conf_line(const ConfigLine& line, SlurmConf& conf) {
  std::map<std::string, std::string> kv;
  for (const auto& w : line.words) {
    if (auto pair = split_key_value(w)) kv[lower(pair->first)] = pair->second;
  }
  if (kv.empty()) return;
  const std::string first = lower(line.words[0].substr(0, line.words[0].find('=')));
  if (first == "nodename") {
    conf.nodes.push_back(std::move(kv));
  } else if (first != "partitionname" && first != "nodeset" && first != "downnodes" && first != "frontendname" &&
             first != "switchname") {
    for (auto& [k, v] : kv) conf.values[k] = v;
  }
}

std::optional<PlugstackEntry> plugstack_entry(NodeProbe& probe, const ConfigLine& line, const std::vector<std::string>& plugin_dirs,
                                              std::vector<std::string>& problems) {
  const std::string& kind = line.words[0];
  if (kind == "include") {
    problems.push_back(fmt::format("{}: include without a pattern", line.where()));
    return std::nullopt;
  }
  if (kind != "required" && kind != "optional") {
    problems.push_back(fmt::format("{}: '{}' is not required, optional or include: Slurm ignores this line", line.where(), kind));
    return std::nullopt;
  }
  if (line.words.size() < 2) {
    problems.push_back(fmt::format("{}: no plugin path: Slurm ignores this line", line.where()));
    return std::nullopt;
  }
  PlugstackEntry e;
  e.file = line.file;
  e.line = line.line;
  e.kind = kind;
  e.path = line.words[1];
  e.args.assign(line.words.begin() + 2, line.words.end());
  if (e.path[0] == '/') {
    e.resolved = e.path;
  } else {
    for (const auto& d : plugin_dirs) {
      std::string candidate = (d.ends_with("/") ? d : d + "/") + e.path;
      if (probe.stat(candidate).is_regular) {
        e.resolved = candidate;
        break;
      }
    }
  }
  return e;
}

std::vector<std::string> split_colon(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(':', start);
    if (end == std::string::npos) end = s.size();
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// Which node of slurm.conf this machine is: NodeName or NodeHostname equal to
// the host name (ranges expanded, NodeHostname paired by position).
std::vector<std::string> nodes_for_host(const SlurmConf& conf, const std::string& host) {
  std::set<std::string> out;
  for (const auto& n : conf.nodes) {
    auto it = n.find("nodename");
    if (it == n.end()) continue;
    std::vector<std::string> names, hosts;
    try {
      names = expand_hostlist(it->second);
      if (auto h = n.find("nodehostname"); h != n.end()) hosts = expand_hostlist(h->second);
    } catch (const CudaMpsError&) {
      continue;
    }
    for (size_t i = 0; i < names.size(); ++i) {
      const std::string& hn = hosts.empty() ? names[i] : hosts[std::min(i, hosts.size() - 1)];
      if (hn == host || names[i] == host) out.insert(names[i]);
    }
  }
  return {out.begin(), out.end()};
}

}  // namespace

// ------------------------------------------------------------------ probe

std::optional<std::string> SystemNodeProbe::read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::nullopt;
  std::string out;
  char buf[8192];
  while (f.read(buf, sizeof buf) || f.gcount() > 0) {
    out.append(buf, static_cast<size_t>(f.gcount()));
    if (out.size() > (4u << 20)) return std::nullopt;
  }
  return out;
}

FileFacts SystemNodeProbe::stat(const std::string& path) {
  FileFacts f;
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return f;
  f.exists = true;
  f.is_symlink = S_ISLNK(st.st_mode);
  if (f.is_symlink && ::stat(path.c_str(), &st) != 0) return f;
  f.is_dir = S_ISDIR(st.st_mode);
  f.is_regular = S_ISREG(st.st_mode);
  f.uid = st.st_uid;
  f.mode = st.st_mode & 07777;
  f.mtime = static_cast<double>(st.st_mtim.tv_sec) + static_cast<double>(st.st_mtim.tv_nsec) / 1e9;
  return f;
}

std::vector<std::string> SystemNodeProbe::glob(const std::string& pattern) {
  glob_t g {};
  std::vector<std::string> out;
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  }
  globfree(&g);
  return out;
}

bool SystemNodeProbe::executable(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

int SystemNodeProbe::device_minor(const std::string& path) { return unilab::mps::device_minor(path); }

std::optional<std::string> SystemNodeProbe::process_name(pid_t pid) {
  auto comm = read_file(fmt::format("/proc/{}/comm", pid));
  if (!comm) return std::nullopt;
  while (!comm->empty() && comm->back() == '\n') comm->pop_back();
  return comm;
}

std::optional<double> SystemNodeProbe::process_start_time(pid_t pid) {
  // now - uptime + start ticks: /proc/stat's btime is whole seconds, uptime
  // has centisecond resolution.
  auto stat_text = read_file(fmt::format("/proc/{}/stat", pid));
  auto uptime_text = read_file("/proc/uptime");
  if (!stat_text || !uptime_text) return std::nullopt;
  auto st = parse_proc_stat(*stat_text);
  if (!st) return std::nullopt;
  double uptime = std::strtod(uptime_text->c_str(), nullptr);
  struct timespec now {};
  clock_gettime(CLOCK_REALTIME, &now);
  double wall = static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) / 1e9;
  long hz = sysconf(_SC_CLK_TCK);
  return wall - uptime + static_cast<double>(st->start_ticks) / static_cast<double>(hz > 0 ? hz : 100);
}

std::optional<std::string> SystemNodeProbe::process_exe(pid_t pid) {
  char buf[4096];
  ssize_t n = ::readlink(fmt::format("/proc/{}/exe", pid).c_str(), buf, sizeof buf - 1);
  if (n <= 0) return std::nullopt;
  return std::string(buf, static_cast<size_t>(n));
}

std::optional<uid_t> SystemNodeProbe::process_uid(pid_t pid) {
  auto status = read_file(fmt::format("/proc/{}/status", pid));
  if (!status) return std::nullopt;
  auto uids = parse_proc_status_uids(*status);
  if (!uids) return std::nullopt;
  for (uid_t u : *uids) {
    if (u != 0) return u;
  }
  return 0;
}

bool SystemNodeProbe::process_runs(pid_t pid, const std::string& path) {
  struct stat running {};
  struct stat file {};
  return ::stat(fmt::format("/proc/{}/exe", pid).c_str(), &running) == 0 && ::stat(path.c_str(), &file) == 0 &&
         running.st_dev == file.st_dev && running.st_ino == file.st_ino;
}

std::optional<std::string> SystemNodeProbe::read_root_file(const std::string& path, std::string& problem) {
  problem.clear();
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    if (errno != ENOENT) {
      problem = errno == ELOOP ? fmt::format("{} is a symlink", path) : fmt::format("cannot open {}: {}", path, std::strerror(errno));
    }
    return std::nullopt;
  }
  struct stat st {};
  std::optional<std::string> out;
  if (::fstat(fd, &st) != 0) {
    problem = fmt::format("cannot stat {}: {}", path, std::strerror(errno));
  } else if (!S_ISREG(st.st_mode)) {
    problem = fmt::format("{} is not a regular file", path);
  } else if (st.st_uid != 0 || (st.st_mode & (S_IWGRP | S_IWOTH))) {
    problem = fmt::format("{} is owned by uid {} with mode {:o}: not a file only root can write", path, st.st_uid,
                          st.st_mode & 07777);
  } else {
    out.emplace();
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0 && out->size() < (1u << 16)) out->append(buf, static_cast<size_t>(n));
    if (n < 0) {
      problem = fmt::format("cannot read {}: {}", path, std::strerror(errno));
      out.reset();
    }
  }
  ::close(fd);
  return out;
}

SocketState SystemNodeProbe::probe_socket(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return SocketState::kMissing;
  if (!S_ISSOCK(st.st_mode)) return SocketState::kNotSocket;
  sockaddr_un addr {};
  if (path.size() >= sizeof addr.sun_path) return SocketState::kRefused;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return SocketState::kRefused;
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  int err = errno;
  close(fd);
  if (rc == 0 || err == EAGAIN || err == EINPROGRESS) return SocketState::kListening;  // EAGAIN: backlog full
  if (err == EACCES || err == EPERM) return SocketState::kDenied;
  return SocketState::kRefused;
}

std::string SystemNodeProbe::hostname() {
  std::string h = current_host();
  if (auto dot = h.find('.'); dot != std::string::npos) h.resize(dot);
  return h;
}

// ------------------------------------------------------------------ parsing

std::optional<std::string> SlurmConf::get(const std::string& lowercase_key) const {
  auto it = values.find(lowercase_key);
  return it == values.end() ? std::nullopt : std::optional<std::string>(it->second);
}

SlurmConf read_slurm_conf(NodeProbe& probe, const std::string& path) {
  SlurmConf conf;
  conf.path = path;
  ConfigTree tree;
  try {
    tree = read_config_tree(path, probe_source(probe, ConfigSyntax::kSlurm));
  } catch (const CudaMpsError& e) {
    if (!probe.read_file(path)) throw CudaMpsError(fmt::format("cannot read {}; set SLURM_CONF or --slurm-conf", path));
    throw;
  }
  conf.files = std::move(tree.files);
  conf.problems = std::move(tree.problems);
  for (const auto& line : tree.lines) add_slurm_conf_line(line, conf);
  return conf;
}

Plugstack read_plugstack(NodeProbe& probe, const std::string& path, const std::vector<std::string>& plugin_dirs) {
  Plugstack out;
  out.path = path;
  if (!probe.read_file(path)) {
    if (probe.stat(path).exists) out.problems.push_back(fmt::format("{}: exists but cannot be read", path));
    return out;  // Slurm: a missing plugstack.conf is an empty one
  }
  ConfigSource src = probe_source(probe, ConfigSyntax::kPlugstack);
  src.on_line = [&](const ConfigLine& line, std::vector<std::string>& problems) {
    if (auto e = plugstack_entry(probe, line, plugin_dirs, problems)) out.entries.push_back(std::move(*e));
  };
  ConfigTree tree = read_config_tree(path, src);
  out.files = std::move(tree.files);
  out.includes = std::move(tree.includes);
  out.problems = std::move(tree.problems);
  return out;
}

std::string expand_node_pattern(const std::string& pattern, const std::string& node, const std::string& host) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size() && (pattern[i + 1] == 'n' || pattern[i + 1] == 'h')) {
      out += pattern[i + 1] == 'n' ? node : host;
      ++i;
    } else {
      out += pattern[i];
    }
  }
  return out;
}

// ------------------------------------------------------------------ gather
namespace {

void gather_slurm_conf(NodeProbe& probe, NodeFacts& f) {
  f.conf.path = f.options.slurm_conf;
  try {
    f.conf = read_slurm_conf(probe, f.options.slurm_conf);
  } catch (const CudaMpsError& e) {
    f.conf_error = e.what();
    const auto& loc = f.options.slurm_conf_location;
    if (loc && !loc->cache_problem.empty()) {
      *f.conf_error += fmt::format("; the configless cache {} is not used: {}", kConfiglessLink, loc->cache_problem);
    }
  }
  if (f.options.node) {
    f.node = *f.options.node;
    return;
  }
  f.node_candidates = nodes_for_host(f.conf, f.host);
  f.node = f.node_candidates.empty() ? f.host : f.node_candidates.front();
}

void gather_plugin(NodeProbe& probe, NodeFacts& f) {
  f.plugstack_path = f.conf.get("plugstackconfig").value_or(dir_of(f.options.slurm_conf) + "/plugstack.conf");
  f.plugin_dirs = split_colon(f.conf.get("plugindir").value_or(f.options.default_plugin_dir));
  f.stack = read_plugstack(probe, f.plugstack_path, f.plugin_dirs);
  for (const auto& e : f.stack.entries) {
    if (base_of(e.path) == kPluginFile) f.plugin_lines.push_back(e);
  }
  if (f.plugin_lines.empty()) return;
  const PlugstackEntry& entry = f.plugin_lines.front();
  if (!entry.resolved.empty()) f.plugin_file = probe.stat(entry.resolved);
  try {
    f.plugin_config = parse_plugin_args(entry.args);
    f.config = *f.plugin_config;
  } catch (const CudaMpsError& e) {
    f.plugin_args_error = e.what();
  }
}

// Every component of `path` from / down, up to the first that does not exist.
std::vector<PathFacts> dir_chain(NodeProbe& probe, const std::string& path) {
  std::vector<std::string> components;
  for (std::string p = path; p != "/" && !p.empty() && p != "."; p = dir_of(p)) components.push_back(p);
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
      [&](const std::string& p) { return probe.stat(p).is_dir; });
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
  } catch (const CudaMpsError& e) {
    f.gres_error = fmt::format("{}: {}", f.gres_path, e.what());
    return;
  }
  try {
    f.gpu_entries = map_node_gpu_entries(*f.gres, f.gpus.value_or(std::vector<GpuIdentity>{}),
                                         [&](const std::string& p) { return probe.device_minor(p); });
  } catch (const CudaMpsError& e) {
    f.gpu_map_error = e.what();
  }
}

// Dirs= of job_container.conf (Slurm >= 23.02; 22.05 always mounts a private /dev/shm).
void gather_job_container(NodeProbe& probe, NodeFacts& f) {
  f.namespace_yaml_path = dir_of(f.options.slurm_conf) + "/namespace.yaml";
  f.namespace_yaml = probe.read_file(f.namespace_yaml_path);
  f.job_container_conf_path = dir_of(f.options.slurm_conf) + "/job_container.conf";
  auto text = probe.read_file(f.job_container_conf_path);
  if (!text) return;
  for (const auto& line : tokenize_config(*text, f.job_container_conf_path, ConfigSyntax::kSlurm)) {
    for (const auto& tok : line.words) {
      if (lower(tok).starts_with("dirs=")) f.job_container_dirs = tok.substr(5);
    }
  }
}

void gather_cgroups(NodeProbe& probe, NodeFacts& f) {
  const std::string cgroup_path = dir_of(f.options.slurm_conf) + "/cgroup.conf";
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
  gather_slurm_conf(probe, f);
  gather_plugin(probe, f);
  gather_slurmd(probe, runner, f);
  f.state_dir_chain = dir_chain(probe, f.config.state_dir);
  f.run_dir_chain = dir_chain(probe, f.config.run_dir);
  gather_tools(probe, runner, f);
  gather_gres(probe, f);
  f.default_pipe = probe.probe_socket(std::string(kDefaultPipeDirectory) + "/control");
  gather_job_container(probe, f);
  gather_cgroups(probe, f);
  f.prolog_script = hook_script(probe, f, "prolog");
  f.epilog_script = hook_script(probe, f, "epilog");
  return f;
}

// ------------------------------------------------------------------ report

nlohmann::json NodeGpuRow::to_json() const {
  return {{"gres_index", gres_index},
          {"device", device},
          {"minor", minor},
          {"nvidia_smi_index", nvidia_smi_index ? nlohmann::json(*nvidia_smi_index) : nlohmann::json(nullptr)},
          {"uuid", uuid.empty() ? nlohmann::json(nullptr) : nlohmann::json(uuid)},
          {"problem", problem.empty() ? nlohmann::json(nullptr) : nlohmann::json(problem)}};
}

bool NodeDoctorReport::ok() const {
  return std::none_of(checks.begin(), checks.end(), [](const auto& c) { return c.status == CheckStatus::kFail; });
}

nlohmann::json NodeDoctorReport::to_json() const {
  nlohmann::json c = nlohmann::json::array();
  for (const auto& ch : checks) c.push_back(ch.to_json());
  nlohmann::json g = nlohmann::json::array();
  for (const auto& row : gpus) g.push_back(row.to_json());
  nlohmann::json j = {{"ok", ok()}, {"node", node}, {"slurm_conf", slurm_conf}, {"checks", c}, {"gpus", g}};
  if (slurm_conf_location) {
    j["slurm_conf_source"] = slurm_conf_location->source;
    if (slurm_conf_location->configless()) j["configless_cache"] = slurm_conf_location->cache_target;
  }
  return j;
}

std::string NodeDoctorReport::to_text() const {
  std::string out = fmt::format("node {} (slurm.conf {})\n", node.empty() ? "?" : node,
                                slurm_conf_location ? slurm_conf_location->describe() : slurm_conf);
  out += render_checks(checks);
  if (!gpus.empty()) {
    size_t w = 6;
    for (const auto& r : gpus) w = std::max(w, r.device.size());
    out += fmt::format("\n{:<5} {:<{}} {:<5} {:<4} {}\n", "GRES", "DEVICE", w, "MINOR", "SMI", "UUID");
    for (const auto& r : gpus) {
      out += fmt::format("{:<5} {:<{}} {:<5} {:<4} {}\n", r.gres_index, r.device, w, r.minor < 0 ? "-" : std::to_string(r.minor),
                         r.nvidia_smi_index ? std::to_string(*r.nvidia_smi_index) : "-",
                         r.problem.empty() ? r.uuid : "NOT MAPPED: " + r.problem);
    }
  }
  out += ok() ? "\nready\n" : "\nnot ready\n";
  return out;
}

NodeDoctorReport node_doctor(NodeProbe& probe, CommandRunner& runner, const NodeDoctorOptions& opt) {
  const NodeFacts facts = gather_node_facts(probe, runner, opt);
  NodeDoctorReport rep;
  rep.slurm_conf = opt.slurm_conf;
  rep.slurm_conf_location = opt.slurm_conf_location;
  rep.node = facts.node;
  rep.checks = run_node_checks(facts, node_checks());
  rep.gpus = node_gpu_rows(facts);
  return rep;
}

NodePluginConfig node_plugin_config(NodeProbe& probe, const std::string& slurm_conf, const std::optional<std::string>& node,
                                    const std::string& default_plugin_dir) {
  return node_plugin_config(probe, SlurmConfLocation{slurm_conf, "given", "", ""}, node, default_plugin_dir);
}

// The gather steps of the doctor, stopped at the plugin's arguments.
NodePluginConfig node_plugin_config(NodeProbe& probe, const SlurmConfLocation& slurm_conf, const std::optional<std::string>& node,
                                    const std::string& default_plugin_dir) {
  NodeFacts f;
  f.options.slurm_conf = slurm_conf.path;
  f.options.slurm_conf_location = slurm_conf;
  f.options.node = node;
  f.options.default_plugin_dir = default_plugin_dir;
  f.host = probe.hostname();
  gather_slurm_conf(probe, f);
  NodePluginConfig out;
  out.host_nodes = f.node_candidates;
  if (node || f.node_candidates.size() <= 1) out.node = f.node;
  if (f.conf_error) {
    out.problem = *f.conf_error;
    return out;
  }
  gather_plugin(probe, f);
  if (f.plugin_lines.empty()) {
    out.problem = fmt::format("no `optional .../{}` line in {}", kPluginFile,
                              f.stack.files.empty() ? f.plugstack_path : join(f.stack.files, ", "));
    return out;
  }
  out.plugin_line = fmt::format("{}:{}", f.plugin_lines.front().file, f.plugin_lines.front().line);
  if (f.plugin_config) {
    out.config = f.plugin_config;
  } else {
    out.problem = fmt::format("{}: {}", out.plugin_line, f.plugin_args_error);
  }
  return out;
}

}  // namespace unilab::mps
