#include "common/slurm/slurm_config.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string_view>

#include <fmt/format.h>

#include "common/mps/errors.hpp"
#include "common/mps/mps_control.hpp"
#include "common/mps/nvidia_checks.hpp"
#include "common/mps/safefs.hpp"
#include "common/mps/text.hpp"
#include "common/slurm/config_text.hpp"
#include "common/slurm/job.hpp"
#include "common/slurm/slurm_conf_path.hpp"

namespace unilab::mps {
namespace {

std::string absolute_path(const std::string& key, const std::string& value) {
  if (value.empty() || value[0] != '/' || value.find("/../") != std::string::npos || value.ends_with("/..")) {
    throw CudaMpsError(fmt::format("plugin argument {}={}: needs a normalized absolute path", key, value));
  }
  return value;
}

// A user's value as an error message shows it: at most 40 characters, the
// unprintable ones as '?'.
std::string shown_value(const std::string& v) {
  std::string shown = v.size() > 40 ? v.substr(0, 40) + "..." : v;
  for (auto& c : shown) if (!std::isprint(static_cast<unsigned char>(c))) c = '?';
  return shown;
}

std::chrono::milliseconds seconds(const std::string& key, const std::string& value) {
  try {
    return parse_seconds(value);
  } catch (const CudaMpsError&) {
    throw CudaMpsError(fmt::format("plugin argument {}={}: needs seconds in (0, 3600]", key, value));
  }
}

// One parse in progress: the config, and what the keys given so far said
// that needs the whole line (driver_dir= against nvidia_smi=/mps_control=).
struct ArgParse {
  PluginConfig cfg;
  std::optional<std::string> driver_dir;
  bool nvidia_smi_given = false;
  bool mps_control_given = false;
};

// A plugin argument: its key, its default as the docs show it (computed from
// a default PluginConfig, so docs and code cannot disagree), its meaning in
// README.md's words and in docs/ADMIN.md's, and what its value does.
struct PluginArgSpec {
  std::string_view key;
  std::string (*default_cell)(const PluginConfig& defaults);
  std::string_view brief;
  std::string_view full;
  void (*apply)(ArgParse& p, const std::string& key, const std::string& value);
};

std::string code(const std::string& s) { return "`" + s + "`"; }
std::string none(const PluginConfig&) { return "none"; }
std::string whole_seconds(std::chrono::milliseconds ms) { return code(std::to_string(ms.count() / 1000)); }

void set_dir_size(ArgParse& p, const std::string&, const std::string& value) {
  if (value == "off") {
    p.cfg.dir_size.reset();
    return;
  }
  unsigned long long bytes = parse_size_bytes(value);
  if (bytes < (1ULL << 20)) throw CudaMpsError(fmt::format("plugin argument dir_size={}: give at least 1M, or off", value));
  p.cfg.dir_size = PrivateFsLimits{bytes, PrivateFsLimits{}.inodes};
}

void set_contain(ArgParse& p, const std::string&, const std::string& value) {
  if (value != "auto" && value != "off") {
    throw CudaMpsError(fmt::format("plugin argument contain={}: use auto (the daemon joins the job's cgroup where the "
                                   "site uses cgroups) or off",
                                   value));
  }
  p.cfg.contain = value;
}

void set_history(ArgParse& p, const std::string& k, const std::string& v) {
  if (v == "off") {
    p.cfg.history.reset();
  } else {
    p.cfg.history = absolute_path(k, v);
  }
}

void set_history_max(ArgParse& p, const std::string& k, const std::string& v) {
  const unsigned long long bytes = parse_size_bytes(v);
  if (bytes < (64ULL << 10)) throw CudaMpsError(fmt::format("plugin argument {}={}: give at least 64K", k, v));
  p.cfg.history_max = bytes;
}

// Every plugin argument, in the order the docs list them.
const PluginArgSpec kPluginArgs[] = {
    {"state_dir", [](const PluginConfig& d) { return code(d.state_dir); },
     "root-owned records (0755 dir, 0644 files: tasks read them)",
     "records of the job daemons (root, 0755 dir, 0644 files: tasks read them as the job user). `unilab-mps status --job` reads "
     "it from plugstack.conf",
     [](ArgParse& p, const std::string& k, const std::string& v) { p.cfg.state_dir = absolute_path(k, v); }},
    {"run_dir", [](const PluginConfig& d) { return code(d.run_dir); },
     "parent of per-daemon `pipe/` and `log/` dirs (0700, owned by the job user); at most 64 characters (the daemon's sockets "
     "must fit a UNIX socket address)",
     "parent of each daemon's `pipe/` and `log/` dirs (`<run_dir>/<ID>.<GRES index>.<node tag>/`, `<ID>.m.<node tag>` for "
     "multi, 0700, owned by the job user). At most 64 characters, checked at load: the daemon's "
     "`<run_dir>/<dir>/pipe/control_privileged` must fit the 107 bytes of a UNIX socket address for any job id and node name",
     [](ArgParse& p, const std::string& k, const std::string& v) { p.cfg.run_dir = absolute_path(k, v); }},
    {"nvidia_smi", [](const PluginConfig& d) { return code(d.tools.nvidia_smi); }, "absolute path (the prolog has no PATH)",
     "absolute path (the prolog has no `PATH`)",
     [](ArgParse& p, const std::string& k, const std::string& v) {
       p.cfg.tools.nvidia_smi = absolute_path(k, v);
       p.nvidia_smi_given = true;
     }},
    {"mps_control", [](const PluginConfig& d) { return code(d.tools.mps_control); }, "absolute path", "absolute path",
     [](ArgParse& p, const std::string& k, const std::string& v) {
       p.cfg.tools.mps_control = absolute_path(k, v);
       p.mps_control_given = true;
     }},
    {"driver_dir", none,
     "the driver's folder when its tools and libraries are not in `/usr/bin` and the linker path (containers: "
     "`/usr/local/nvidia`). `nvidia-smi` and the daemon then run with `DIR/bin` first in `PATH` and `LD_LIBRARY_PATH=DIR/lib64`, "
     "and are `DIR/bin/...` unless `nvidia_smi=`/`mps_control=` say otherwise",
     "where the driver keeps `bin/` and `lib64/` when that is not `/usr/bin` and the linker path (containers: "
     "`/usr/local/nvidia`). `nvidia-smi` and the daemon run with `DIR/bin` first in `PATH` and `LD_LIBRARY_PATH=DIR/lib64`; the "
     "two tools default to `DIR/bin/...` (`nvidia_smi=`/`mps_control=` still win). `doctor --node` names the folder when it "
     "finds `nvidia-smi` there but not where configured",
     [](ArgParse& p, const std::string& k, const std::string& v) { p.driver_dir = absolute_path(k, v); }},
    {"gres_conf", [](const PluginConfig&) { return std::string("`gres.conf` next to `SLURM_CONF`"); },
     "where GRES indices are mapped to device files", "where GRES indices are mapped to device files",
     [](ArgParse& p, const std::string& k, const std::string& v) { p.cfg.gres_conf = absolute_path(k, v); }},
    {"driver_proc", [](const PluginConfig& d) { return code(d.tools.driver_proc); },
     "where the NVIDIA kernel module shows itself: each GPU's device minor, MIG capability minors",
     "where the NVIDIA kernel module shows itself: `nvidia/gpus/<bus>/information` gives each GPU's device minor (nvidia-smi 580 "
     "has no `minor_number` field), `nvidia-caps/mig-minors` the capability minors of MIG instances (a MIG GRES's "
     "`MultipleFiles=` names two of `/dev/nvidia-caps/nvidia-cap<m>`). Change it only for tests",
     [](ArgParse& p, const std::string& k, const std::string& v) { p.cfg.tools.driver_proc = absolute_path(k, v); }},
    {"start_timeout", [](const PluginConfig& d) { return whole_seconds(d.start_timeout); },
     "seconds the job's daemons (started at once) have to answer before the prolog fails",
     "seconds the job's daemons, started at once, have to answer before the prolog fails (and the node drains)",
     [](ArgParse& p, const std::string& k, const std::string& v) { p.cfg.start_timeout = seconds(k, v); }},
    {"stop_timeout", [](const PluginConfig& d) { return whole_seconds(d.stop_timeout); },
     "seconds for quit → SIGTERM → SIGKILL in the epilog (the job's daemons at once)",
     "seconds for `quit` → SIGTERM → SIGKILL in the epilog; the job's daemons are stopped at once, so this bounds the whole "
     "epilog",
     [](ArgParse& p, const std::string& k, const std::string& v) { p.cfg.stop_timeout = seconds(k, v); }},
    {"max_threads", none, "site maximum for `--unilab-mps-threads`",
     "site maximum for `--unilab-mps-threads` (percent, (0, 100])",
     [](ArgParse& p, const std::string&, const std::string& v) { p.cfg.max_threads = parse_thread_percentage(v, std::nullopt); }},
    {"default_threads", none, "active thread percentage when the user gives none",
     "active thread percentage of every MPS job that gives none (≤ `max_threads`)",
     [](ArgParse& p, const std::string&, const std::string& v) { p.cfg.default_threads = parse_thread_percentage(v, std::nullopt); }},
    {"max_mem", none, "site maximum for `--unilab-mps-mem` (e.g. `40G`)",
     "site maximum for `--unilab-mps-mem`, e.g. `40G` (integer + K/M/G/T, or bytes)",
     [](ArgParse& p, const std::string&, const std::string& v) { p.cfg.max_mem_bytes = parse_size_bytes(v); }},
    {"contain", [](const PluginConfig& d) { return code(d.contain); },
     "`auto`: on cgroup nodes the daemon joins the job's extern-step cgroup (needs `PrologFlags=Contain`, or `RunInJob` on "
     "24.05+, where `ConstrainDevices=yes`); `off`: never",
     "`auto`: on nodes that use cgroups (`ConstrainDevices=yes` or `ProctrackType=proctrack/cgroup`) each daemon joins the job's "
     "extern-step cgroup (section 2, \"Containment\"); `off`: never (the daemon then runs in slurmd's cgroup)",
     set_contain},
    {"dir_size", [](const PluginConfig& d) { return code(std::to_string(d.dir_size->bytes >> 20) + "M"); },
     "each daemon dir is its own tmpfs of this size; `off`: plain dirs under `run_dir`",
     "each daemon's directory `<run_dir>/<name>` is its own tmpfs of this size (4096 inodes); `off`: plain directories on the "
     "run dir's file system",
     set_dir_size},
    {"history", [](const PluginConfig& d) { return code(d.history.value_or("off")); },
     "the node's journal of every job daemon (JSON lines, root's; `unilab-mps history` reads it); `off`: none",
     "the node's MPS history: the epilog appends one JSON line per daemon (job, user, GPUs, mode, limits, start and stop "
     "times, how it stopped and how long that took, MPS servers started, faults) to this root-owned file, rotated to "
     "`<file>.1` at `history_max=`; `unilab-mps history` reads both. A full disk or a refused file is one warning, never a "
     "failed epilog; `off`: no journal",
     set_history},
    {"history_max", [](const PluginConfig& d) { return code(d.history_max % (1ULL << 20) == 0 ? std::to_string(d.history_max >> 20) + "M" : std::to_string(d.history_max >> 10) + "K"); },
     "the journal rotates at this size (so it holds at most twice it)",
     "size at which the journal is rotated to `<file>.1` (the older `.1` goes): the journal holds at most twice this; at "
     "least 64K",
     set_history_max},
};

const PluginArgSpec* find_plugin_arg(std::string_view key) {
  for (const auto& spec : kPluginArgs) {
    if (spec.key == key) return &spec;
  }
  return nullptr;
}

std::string known_keys() {
  std::vector<std::string> keys;
  for (const auto& spec : kPluginArgs) keys.emplace_back(spec.key);
  return "known keys: " + join(keys, ", ");
}

}  // namespace

PluginConfig parse_plugin_args(const std::vector<std::string>& args) {
  ArgParse p;
  for (const auto& arg : args) {
    auto eq = arg.find('=');
    if (eq == std::string::npos) throw CudaMpsError(fmt::format("plugin argument '{}' is not key=value ({})", arg, known_keys()));
    std::string key = arg.substr(0, eq), value = arg.substr(eq + 1);
    const PluginArgSpec* spec = find_plugin_arg(key);
    if (spec == nullptr) throw CudaMpsError(fmt::format("unknown plugin argument '{}' ({})", key, known_keys()));
    spec->apply(p, key, value);
  }
  PluginConfig& cfg = p.cfg;
  // After the loop: nvidia_smi= / mps_control= win whatever their order.
  if (p.driver_dir) apply_driver_dir(cfg.tools, *p.driver_dir, p.nvidia_smi_given, p.mps_control_given);
  if (cfg.default_threads && cfg.max_threads && *cfg.default_threads > *cfg.max_threads) {
    throw CudaMpsError("plugin argument default_threads exceeds max_threads");
  }
  // The longest pipe path we create must fit a UNIX socket address, for any
  // job id and node name (job_run_entry).
  if (cfg.run_dir.size() > max_run_dir_length()) {
    throw CudaMpsError(fmt::format("plugin argument run_dir={} is too long ({} characters): the daemons' sockets in it would not "
                                   "fit a UNIX socket address (107 bytes); give a run_dir of at most {} characters",
                                   cfg.run_dir, cfg.run_dir.size(), max_run_dir_length()));
  }
  return cfg;
}

std::string plugin_args_table(PluginArgWords words) {
  const PluginConfig defaults;
  std::string out = "| key | default | meaning |\n|---|---|---|\n";
  for (const auto& spec : kPluginArgs) {
    out += fmt::format("| `{}=` | {} | {} |\n", spec.key, spec.default_cell(defaults),
                       words == PluginArgWords::kBrief ? spec.brief : spec.full);
  }
  return out;
}

std::vector<std::string> plugin_args_from_config(std::string_view text, const std::string& file) {
  std::vector<std::string> out;
  for (const auto& line : tokenize_config(text, file, ConfigSyntax::kSlurm)) {
    if (line.include) throw CudaMpsError(fmt::format("{}: Include is not supported here; list the arguments in this file", line.where()));
    for (const auto& word : line.words) {
      if (!split_key_value(word)) throw CudaMpsError(fmt::format("{}: '{}' is not key=value", line.where(), word));
      out.push_back(word);
    }
  }
  return out;
}

std::optional<std::string> spank_option_value(const char* value) {
  if (value == nullptr || std::string_view(value) == "(null)") return std::nullopt;
  return std::string(value);
}

JobMode parse_mode(const char* value) {
  auto given = spank_option_value(value);
  if (!given || given->empty()) return JobMode::kAuto;
  const std::string& v = *given;
  if (auto mode = kJobModeNames.lookup(v)) return *mode;
  throw CudaMpsError(fmt::format("invalid --unilab-mps value '{}': use --unilab-mps (one daemon per GPU) or --unilab-mps=multi "
                                 "(one daemon for all the job's GPUs on a node)",
                                 shown_value(v)));
}

bool is_auto_threads(const std::string& value) { return value == "auto"; }

double parse_thread_percentage(const std::string& value, const std::optional<double>& site_max) {
  if (!value.empty() && std::isspace(static_cast<unsigned char>(value.front()))) {
    throw CudaMpsError(fmt::format("invalid MPS thread percentage '{}': give a number in (0, 100]", value.substr(0, 40)));
  }
  char* end = nullptr;
  double v = std::strtod(value.c_str(), &end);
  if (value.empty() || end == value.c_str() || *end != '\0' || !(v > 0) || v > 100 || !std::isfinite(v)) {
    throw CudaMpsError(fmt::format("invalid MPS thread percentage '{}': give a number in (0, 100]", value.substr(0, 40)));
  }
  if (site_max && v > *site_max) {
    throw CudaMpsError(fmt::format("MPS thread percentage {} exceeds this site's maximum {}; ask for at most {}", value, *site_max,
                                   *site_max));
  }
  return v;
}

ClientPriority parse_client_priority(const std::string& value) {
  std::string v = lower(value);
  std::replace(v.begin(), v.end(), '_', '-');  // NVIDIA writes BELOW_NORMAL
  if (v == "0") return ClientPriority::kNormal;
  if (v == "1") return ClientPriority::kBelowNormal;
  if (auto p = kClientPriorityNames.lookup(v)) return *p;
  throw CudaMpsError(fmt::format("invalid MPS client priority '{}': give 0 (normal, the default) or 1 (below-normal), the two "
                                 "levels of CUDA_MPS_CLIENT_PRIORITY",
                                 shown_value(value)));
}

std::string parse_mem_limit(const std::string& value, const std::optional<unsigned long long>& site_max) {
  unsigned long long bytes = parse_size_bytes(value);
  if (site_max && bytes > *site_max) {
    throw CudaMpsError(fmt::format("MPS memory limit {} exceeds this site's maximum of {} MiB", value, *site_max >> 20));
  }
  // MPS takes M/G suffixes; express the value in whole MiB (rounded up).
  unsigned long long mib = (bytes + (1ULL << 20) - 1) >> 20;
  return fmt::format("{}M", mib);
}

std::string gres_conf_path(const PluginConfig& cfg, const std::optional<std::string>& slurm_conf) {
  if (cfg.gres_conf) return *cfg.gres_conf;
  if (slurm_conf && !slurm_conf->empty() && (*slurm_conf)[0] == '/') return split_parent(*slurm_conf).first + "/gres.conf";
  return locate_slurm_conf().dir() + "/gres.conf";
}

}  // namespace unilab::mps
