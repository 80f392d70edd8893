#include "common/node_doctor.hpp"

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

#include "common/containment.hpp"
#include "common/errors.hpp"
#include "common/gpu.hpp"
#include "common/gres.hpp"
#include "common/mps_control.hpp"
#include "common/proc.hpp"
#include "common/safefs.hpp"
#include "common/config_text.hpp"
#include "common/slurm_config.hpp"

namespace unilab::mps {
namespace {

constexpr const char* kPluginFile = "unilab_mps.so";
constexpr int kMaxIncludeDepth = 8;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string dir_of(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string base_of(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string format_time(double t) {
  time_t secs = static_cast<time_t>(t);
  struct tm tm {};
  localtime_r(&secs, &tm);
  char buf[32];
  strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string octal_mode(mode_t m) { return fmt::format("{:04o}", static_cast<unsigned>(m & 07777)); }

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

// A directory the plugin creates or trusts: every existing component owned by
// root and not writable by group/other (a root-owned sticky dir such as /tmp
// is fine for ancestors), the leaf traversable by every user (tasks read
// records and reach their pipe directory as the job user).
std::pair<std::string, std::string> check_root_dir(NodeProbe& probe, const std::string& path, const std::string& role) {
  std::vector<std::string> components;
  for (std::string p = path; p != "/"; p = dir_of(p)) components.push_back(p);
  components.push_back("/");
  std::reverse(components.begin(), components.end());
  for (const auto& c : components) {
    FileFacts f = probe.stat(c);
    if (!f.exists) {
      return {"ok", fmt::format("{} does not exist yet; the first MPS job's prolog creates it (root, 0755)", path)};
    }
    const bool leaf = c == path;
    if (f.is_symlink) return {"fail", fmt::format("{} ({}) is a symlink: the plugin refuses symlinks in its {}", c, path, role)};
    if (!f.is_dir) return {"fail", fmt::format("{} is not a directory", c)};
    const bool sticky_root = !leaf && f.uid == 0 && (f.mode & S_ISVTX);
    if (f.uid != 0) {
      return {"fail", fmt::format("{} is owned by uid {}, not root: the plugin will not trust it as its {}", c, f.uid, role)};
    }
    if ((f.mode & (S_IWGRP | S_IWOTH)) && !sticky_root) {
      return {"fail", fmt::format("{} is writable by group/other (mode {}): fix with chmod go-w {}", c, octal_mode(f.mode), c)};
    }
    if (leaf && (f.mode & S_IXOTH) == 0) {
      return {"fail", fmt::format("{} has mode {}: job users must traverse it; chmod 0755 {}", c, octal_mode(f.mode), c)};
    }
  }
  return {"ok", fmt::format("{} (root, {})", path, octal_mode(probe.stat(path).mode))};
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
  return std::none_of(checks.begin(), checks.end(), [](const auto& c) { return c.status == "fail"; });
}

nlohmann::json NodeDoctorReport::to_json() const {
  nlohmann::json c = nlohmann::json::array();
  for (const auto& ch : checks) c.push_back(ch.to_json());
  nlohmann::json g = nlohmann::json::array();
  for (const auto& row : gpus) g.push_back(row.to_json());
  return {{"ok", ok()}, {"node", node}, {"slurm_conf", slurm_conf}, {"checks", c}, {"gpus", g}};
}

std::string NodeDoctorReport::to_text() const {
  std::string out = fmt::format("node {} (slurm.conf {})\n", node.empty() ? "?" : node, slurm_conf);
  for (const auto& c : checks) out += fmt::format("[{:<4}] {:<14} {}\n", c.status, c.name, c.detail);
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
  NodeDoctorReport rep;
  rep.slurm_conf = opt.slurm_conf;
  auto add = [&](std::string name, std::string status, std::string detail) {
    rep.checks.push_back({std::move(name), std::move(status), std::move(detail)});
  };
  const std::string host = probe.hostname();

  // slurm.conf
  SlurmConf conf;
  conf.path = opt.slurm_conf;
  try {
    conf = read_slurm_conf(probe, opt.slurm_conf);
    add("slurm.conf", conf.problems.empty() ? "ok" : "warn",
        conf.problems.empty() ? join(conf.files, ", ") : join(conf.files, ", ") + "; " + join(conf.problems, "; "));
  } catch (const CudaMpsError& e) {
    add("slurm.conf", "fail", e.what());
  }

  // node name
  if (opt.node) {
    rep.node = *opt.node;
    add("node", "ok", fmt::format("{} (given)", rep.node));
  } else {
    auto names = nodes_for_host(conf, host);
    if (names.size() == 1) {
      rep.node = names[0];
      add("node", "ok", fmt::format("{} (NodeName of host {} in slurm.conf)", rep.node, host));
    } else if (names.empty()) {
      rep.node = host;
      add("node", "warn", fmt::format("no NodeName/NodeHostname in slurm.conf matches host {}; assuming node {} "
                                      "(pass --node-name)", host, host));
    } else {
      rep.node = names[0];
      add("node", "fail", fmt::format("host {} is several Slurm nodes ({}); pass --node-name", host, join(names, ",")));
    }
  }

  // plugstack.conf and the plugin line
  std::string plugstack_path = conf.get("plugstackconfig").value_or(dir_of(opt.slurm_conf) + "/plugstack.conf");
  std::vector<std::string> plugin_dirs = split_colon(conf.get("plugindir").value_or(opt.default_plugin_dir));
  Plugstack stack = read_plugstack(probe, plugstack_path, plugin_dirs);
  if (stack.files.empty()) {
    add("plugstack", "fail", fmt::format("{} does not exist (PlugStackConfig{}): Slurm loads no SPANK plugin", plugstack_path,
                                         conf.get("plugstackconfig") ? "" : " unset: next to slurm.conf"));
  } else {
    add("plugstack", stack.problems.empty() ? "ok" : "warn",
        fmt::format("read {}{}{}", join(stack.files, ", "), stack.includes.empty() ? "" : "; " + join(stack.includes, "; "),
                    stack.problems.empty() ? "" : "; " + join(stack.problems, "; ")));
  }
  std::vector<const PlugstackEntry*> ours;
  for (const auto& e : stack.entries) {
    if (base_of(e.path) == kPluginFile) ours.push_back(&e);
  }
  const PlugstackEntry* entry = nullptr;
  if (ours.empty()) {
    add("plugin-listed", "fail",
        fmt::format("no `optional .../{}` line in {}: add one (example: /usr/share/doc/unilab-mps/examples/plugstack.conf.d/"
                    "unilab-mps.conf), then restart slurmd",
                    kPluginFile, stack.files.empty() ? plugstack_path : join(stack.files, ", ")));
  } else if (ours.size() > 1) {
    std::vector<std::string> where;
    for (const auto* e : ours) where.push_back(fmt::format("{}:{}", e->file, e->line));
    add("plugin-listed", "fail",
        fmt::format("{} is listed {} times ({}): Slurm refuses to load it a second time; keep one line", kPluginFile,
                    ours.size(), join(where, ", ")));
    entry = ours.front();
  } else {
    entry = ours.front();
    add("plugin-listed", "ok",
        fmt::format("{}:{}: {} {} ({} argument{})", entry->file, entry->line, entry->kind, entry->path, entry->args.size(),
                    entry->args.size() == 1 ? "" : "s"));
  }

  // the plugin file
  std::optional<FileFacts> so;
  if (entry) {
    if (entry->resolved.empty()) {
      add("plugin-file", "fail", fmt::format("{} is not in PluginDir ({}): give the absolute path", entry->path,
                                             join(plugin_dirs, ":")));
    } else {
      FileFacts f = probe.stat(entry->resolved);
      if (!f.exists) {
        add("plugin-file", "fail", fmt::format("{} does not exist: install unilab-mps (cmake --install or the .deb)", entry->resolved));
      } else if (!f.is_regular) {
        add("plugin-file", "fail", fmt::format("{} is not a regular file", entry->resolved));
      } else if (f.uid != 0 || (f.mode & (S_IWGRP | S_IWOTH))) {
        add("plugin-file", "fail",
            fmt::format("{} is owned by uid {} with mode {}: slurmd loads it as root, so it must be root-owned and writable by "
                        "root only",
                        entry->resolved, f.uid, octal_mode(f.mode)));
        so = f;
      } else {
        add("plugin-file", "ok", fmt::format("{} (root, {})", entry->resolved, octal_mode(f.mode)));
        so = f;
      }
    }
  }

  // the plugin's arguments: what the prolog will use
  PluginConfig cfg;
  bool cfg_from_plugin = false;
  if (entry) {
    try {
      cfg = parse_plugin_args(entry->args);
      cfg_from_plugin = true;
      add("plugin-args", "ok", entry->args.empty() ? "defaults" : join(entry->args, " "));
    } catch (const CudaMpsError& e) {
      add("plugin-args", "fail", fmt::format("{}: the plugin refuses to load with these arguments", e.what()));
    }
  }

  // slurmd: running, and started after the plugin and plugstack.conf last changed
  {
    std::string pid_file = expand_node_pattern(conf.get("slurmdpidfile").value_or(opt.default_slurmd_pid_file), rep.node, host);
    auto text = probe.read_file(pid_file);
    pid_t pid = 0;
    if (text) {
      std::string t = *text;
      while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
      auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), pid);
      if (ec != std::errc() || p != t.data() + t.size()) pid = 0;
    }
    auto name = pid > 0 ? probe.process_name(pid) : std::nullopt;
    auto started = pid > 0 ? probe.process_start_time(pid) : std::nullopt;
    if (pid <= 0 || !name || !name->starts_with("slurmd") || !started) {
      add("slurmd", "fail",
          fmt::format("slurmd is not running ({}): start it", !text ? "no pid file " + pid_file
                                                                    : fmt::format("pid file {} names {}", pid_file,
                                                                                  pid > 0 ? fmt::format("pid {} ({})", pid, name.value_or("gone"))
                                                                                          : "no pid")));
    } else {
      std::vector<std::pair<std::string, double>> changed;
      std::vector<std::string> watched = stack.files;
      if (entry && !entry->resolved.empty()) watched.push_back(entry->resolved);
      for (const auto& f : watched) {
        FileFacts facts = probe.stat(f);
        if (facts.exists && facts.mtime > *started + opt.mtime_slack_s) changed.emplace_back(f, facts.mtime);
      }
      if (changed.empty()) {
        add("slurmd", "ok", fmt::format("pid {} started {}, after the plugin and plugstack.conf last changed", pid,
                                        format_time(*started)));
      } else {
        std::vector<std::string> what;
        for (const auto& [f, t] : changed) what.push_back(fmt::format("{} ({})", f, format_time(t)));
        add("slurmd", "fail",
            fmt::format("pid {} started {}, before {} changed: restart slurmd (it decides at start whether to run the SPANK "
                        "prolog/epilog; scontrol reconfigure is not enough)",
                        pid, format_time(*started), join(what, ", ")));
      }
    }
  }

  // state and run directories
  if (entry) {
    auto [s1, d1] = check_root_dir(probe, cfg.state_dir, "state_dir");
    add("state-dir", s1, d1);
    auto [s2, d2] = check_root_dir(probe, cfg.run_dir, "run_dir");
    add("run-dir", s2, d2);
  }

  // NVIDIA tools, as the plugin will run them (its defaults when no usable line names them)
  const std::string defaults_note = cfg_from_plugin ? "" : " (plugin default: no usable plugstack line to take it from)";
  std::optional<std::vector<GpuIdentity>> gpus;
  if (!probe.executable(cfg.tools.nvidia_smi)) {
    add("nvidia-smi", "fail", fmt::format("{} is missing or not executable; install the driver tools or set nvidia_smi={}",
                                          cfg.tools.nvidia_smi, defaults_note));
  } else {
    try {
      gpus = discover_gpus(runner, cfg.tools.nvidia_smi);
      add("nvidia-smi", "ok", fmt::format("{} reports {} GPU{}{}", cfg.tools.nvidia_smi, gpus->size(), gpus->size() == 1 ? "" : "s",
                                          defaults_note));
    } catch (const CudaMpsError& e) {
      add("nvidia-smi", "fail", e.what());
    }
  }
  if (probe.executable(cfg.tools.mps_control)) {
    add("mps-control", "ok", cfg.tools.mps_control + " is executable" + defaults_note);
  } else {
    add("mps-control", "fail", fmt::format("{} is missing or not executable; install the NVIDIA MPS tools or set mps_control={}",
                                           cfg.tools.mps_control, defaults_note));
  }

  // gres.conf -> the node's GPU table
  std::string gres_path = gres_conf_path(cfg, opt.slurm_conf);
  std::optional<GresConf> gres;
  if (auto text = probe.read_file(gres_path)) {
    try {
      gres = parse_gres_conf(*text, rep.node);
      add("gres.conf", "ok",
          fmt::format("{}: {} for node {}", gres_path,
                      gres->gpu_files.empty() ? (gres->autodetect ? std::string("AutoDetect") : std::string("no GPU"))
                                              : fmt::format("{} GPU file{}", gres->gpu_files.size(),
                                                            gres->gpu_files.size() == 1 ? "" : "s"),
                      rep.node));
    } catch (const CudaMpsError& e) {
      add("gres.conf", "fail", fmt::format("{}: {}", gres_path, e.what()));
    }
  } else {
    add("gres.conf", "fail", fmt::format("cannot read {}; set gres_conf= in plugstack.conf", gres_path));
  }
  if (gres) {
    try {
      auto entries = map_node_gpu_entries(*gres, gpus.value_or(std::vector<GpuIdentity>{}),
                                          [&](const std::string& p) { return probe.device_minor(p); });
      std::vector<std::string> problems;
      std::map<std::string, std::vector<int>> by_uuid;
      for (const auto& m : entries) {
        NodeGpuRow row{m.gres_index, m.device, m.minor, std::nullopt, "", m.problem};
        if (m.gpu) {
          row.nvidia_smi_index = m.gpu->index;
          row.uuid = m.gpu->uuid;
          by_uuid[m.gpu->uuid].push_back(m.gres_index);
        } else if (!gpus && m.minor >= 0) {
          row.problem = fmt::format("minor {}: no nvidia-smi GPU table to map it with", m.minor);
        }
        if (!row.problem.empty()) problems.push_back(fmt::format("GRES {}", row.gres_index));
        rep.gpus.push_back(std::move(row));
      }
      for (const auto& [uuid, idx] : by_uuid) {
        if (idx.size() < 2) continue;
        std::vector<std::string> s;
        for (int i : idx) s.push_back(std::to_string(i));
        problems.push_back(fmt::format("GRES {} are the same GPU {}", join(s, ","), uuid));
      }
      if (entries.empty()) {
        add("gpu-map", "fail", fmt::format("no GPU for node {} (gres.conf AutoDetect and nvidia-smi found none)", rep.node));
      } else if (!problems.empty()) {
        add("gpu-map", "fail", fmt::format("{} of {} GPU(s) cannot be mapped to a UUID ({}): MPS jobs on them fail in the prolog",
                                           problems.size(), entries.size(), join(problems, "; ")));
      } else {
        add("gpu-map", "ok", fmt::format("{} GPU{} mapped GRES index -> device -> minor -> UUID", entries.size(),
                                         entries.size() == 1 ? "" : "s"));
      }
      if (gpus) {
        std::vector<std::string> unlisted;
        for (const auto& g : *gpus) {
          if (!by_uuid.count(g.uuid)) unlisted.push_back(fmt::format("nvidia-smi {} (minor {}, {})", g.index, g.minor_number, g.uuid));
        }
        if (!unlisted.empty()) {
          add("gpu-unlisted", "warn", fmt::format("{}: in no gres.conf File= entry, so Slurm never gives it to a job", join(unlisted, "; ")));
        }
      }
    } catch (const CudaMpsError& e) {
      add("gpu-map", "fail", e.what());
    }
  }

  // a daemon on the default pipe directory captures every CUDA program without CUDA_MPS_PIPE_DIRECTORY
  {
    const std::string def = std::string(kDefaultPipeDirectory) + "/control";
    switch (probe.probe_socket(def)) {
      case SocketState::kListening:
        add("default-pipe", "fail",
            fmt::format("an MPS daemon listens on {}: every CUDA program without CUDA_MPS_PIPE_DIRECTORY joins it (jobs without "
                        "--unilab-mps included); stop it (echo quit | nvidia-cuda-mps-control)",
                        def));
        break;
      case SocketState::kDenied:
        add("default-pipe", "warn", fmt::format("{} is a socket this user may not connect to: a daemon may listen there; run as root", def));
        break;
      case SocketState::kRefused:
        add("default-pipe", "warn", fmt::format("{} is a stale socket (no daemon answers); remove {} when no daemon runs", def,
                                                kDefaultPipeDirectory));
        break;
      case SocketState::kNotSocket:
        add("default-pipe", "ok", fmt::format("{} is not a socket: no daemon there", def));
        break;
      case SocketState::kMissing:
        add("default-pipe", "ok", fmt::format("no daemon on {}", def));
        break;
    }
  }

  // a job-private /dev/shm separates clients from the MPS server's mps.shm.* segments
  {
    std::string jc = conf.get("jobcontainertype").value_or("job_container/none");
    if (lower(jc).find("tmpfs") == std::string::npos) {
      add("dev-shm", "ok", fmt::format("JobContainerType={}: jobs share the host's /dev/shm with the MPS server", jc));
    } else {
      // Slurm 22.05's job_container/tmpfs always mounts a private /dev/shm;
      // later versions take Dirs= in job_container.conf (default /tmp,/dev/shm).
      std::string jc_path = dir_of(opt.slurm_conf) + "/job_container.conf";
      std::optional<std::string> dirs;
      if (auto text = probe.read_file(jc_path)) {
        for (const auto& line : tokenize_config(*text, jc_path, ConfigSyntax::kSlurm)) {
          for (const auto& tok : line.words) {
            if (lower(tok).starts_with("dirs=")) dirs = tok.substr(5);
          }
        }
      }
      if (dirs && dirs->find("/dev/shm") == std::string::npos) {
        add("dev-shm", "ok", fmt::format("JobContainerType={} with Dirs={} in {}: /dev/shm stays shared (Slurm >= 23.02)", jc,
                                         *dirs, jc_path));
      } else {
        add("dev-shm", "fail",
            fmt::format("JobContainerType={} gives every job a private /dev/shm{}: MPS clients then cannot reach the server "
                        "the prolog started (its mps.shm.* segments live in the host's /dev/shm); use job_container/none, or "
                        "on Slurm >= 23.02 Dirs=/tmp in job_container.conf",
                        jc, dirs ? fmt::format(" (Dirs={} in {})", *dirs, jc_path) : std::string(" (Slurm 22.05 always does)")));
      }
    }
  }

  // The Prolog= helper next to the plugin's own job_prolog: slurmd runs the
  // SPANK job_prolog first, then clears the SPANK option variables before
  // Prolog= runs (22.05's spank_clear_remote_options_env skips every other
  // one), so the helper sees some of the options, or none, and would start
  // daemons a second time when it does.
  if (entry) {
    std::string prolog = conf.get("prolog").value_or("");
    if (prolog.find("unilab-mps-prolog") != std::string::npos) {
      add("prolog-helper", "warn",
          fmt::format("Prolog={} runs after the plugin's own job_prolog, which already starts the daemons; remove it (the "
                      "helper is for nodes whose slurmd does not load the plugin)",
                      prolog));
    }
  }

  // when the daemons start
  {
    std::string flags = conf.get("prologflags").value_or("");
    if (lower(flags).find("alloc") != std::string::npos) {
      add("prolog-flags", "ok", fmt::format("PrologFlags={}: daemons start on every node at allocation", flags));
    } else {
      add("prolog-flags", "ok",
          "no PrologFlags=Alloc: daemons start when the job's first step reaches the node (the batch script, or the first "
          "srun of an salloc); set it to fail a broken node before user code runs");
    }
  }

  // whether the daemons can live in their job's cgroup
  {
    std::optional<SlurmConf> cgroup_conf;
    const std::string cgroup_path = dir_of(opt.slurm_conf) + "/cgroup.conf";
    if (probe.stat(cgroup_path).exists) {
      try {
        cgroup_conf = read_slurm_conf(probe, cgroup_path);
      } catch (const CudaMpsError& e) {
        add("containment", "fail", e.what());
      }
    }
    CgroupSite site = cgroup_site_from(conf, cgroup_conf);
    ContainmentAdvice advice = containment_advice(site, cfg.contain, probe.stat(site.mountpoint + "/freezer").is_dir);
    add("containment", advice.status, advice.detail);
  }
  return rep;
}

}  // namespace unilab::mps
