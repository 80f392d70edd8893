#include "common/slurm/slurm_config.hpp"

#include <cctype>
#include <cmath>
#include <string_view>

#include <fmt/format.h>

#include "common/mps/errors.hpp"
#include "common/mps/mps_control.hpp"
#include "common/mps/nvidia_checks.hpp"
#include "common/mps/safefs.hpp"
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

std::chrono::milliseconds seconds(const std::string& key, const std::string& value) {
  try {
    return parse_seconds(value);
  } catch (const CudaMpsError&) {
    throw CudaMpsError(fmt::format("plugin argument {}={}: needs seconds in (0, 3600]", key, value));
  }
}

}  // namespace

PluginConfig parse_plugin_args(const std::vector<std::string>& args) {
  PluginConfig cfg;
  bool nvidia_smi_given = false, mps_control_given = false;
  std::optional<std::string> driver_dir;
  for (const auto& arg : args) {
    auto eq = arg.find('=');
    if (eq == std::string::npos) {
      throw CudaMpsError(fmt::format("plugin argument '{}' is not key=value (known keys: state_dir, run_dir, nvidia_smi, "
                                     "mps_control, driver_dir, gres_conf, start_timeout, stop_timeout, max_threads, max_mem, default_threads, contain, dir_size)",
                                     arg));
    }
    std::string key = arg.substr(0, eq), value = arg.substr(eq + 1);
    if (key == "state_dir") {
      cfg.state_dir = absolute_path(key, value);
    } else if (key == "run_dir") {
      cfg.run_dir = absolute_path(key, value);
    } else if (key == "nvidia_smi") {
      cfg.tools.nvidia_smi = absolute_path(key, value);
      nvidia_smi_given = true;
    } else if (key == "mps_control") {
      cfg.tools.mps_control = absolute_path(key, value);
      mps_control_given = true;
    } else if (key == "driver_dir") {
      driver_dir = absolute_path(key, value);
    } else if (key == "gres_conf") {
      cfg.gres_conf = absolute_path(key, value);
    } else if (key == "start_timeout") {
      cfg.start_timeout = seconds(key, value);
    } else if (key == "stop_timeout") {
      cfg.stop_timeout = seconds(key, value);
    } else if (key == "max_threads") {
      cfg.max_threads = parse_thread_percentage(value, std::nullopt);
    } else if (key == "default_threads") {
      cfg.default_threads = parse_thread_percentage(value, std::nullopt);
    } else if (key == "max_mem") {
      cfg.max_mem_bytes = parse_size_bytes(value);
    } else if (key == "dir_size") {
      if (value == "off") {
        cfg.dir_size.reset();
      } else {
        unsigned long long bytes = parse_size_bytes(value);
        if (bytes < (1ULL << 20)) throw CudaMpsError(fmt::format("plugin argument dir_size={}: give at least 1M, or off", value));
        cfg.dir_size = PrivateFsLimits{bytes, PrivateFsLimits{}.inodes};
      }
    } else if (key == "contain") {
      if (value != "auto" && value != "off") {
        throw CudaMpsError(fmt::format("plugin argument contain={}: use auto (the daemon joins the job's cgroup where the "
                                       "site uses cgroups) or off",
                                       value));
      }
      cfg.contain = value;
    } else {
      throw CudaMpsError(fmt::format("unknown plugin argument '{}' (known keys: state_dir, run_dir, nvidia_smi, mps_control, "
                                     "driver_dir, gres_conf, start_timeout, stop_timeout, max_threads, max_mem, default_threads, contain, dir_size)",
                                     key));
    }
  }
  // After the loop: nvidia_smi= / mps_control= win whatever their order.
  if (driver_dir) apply_driver_dir(cfg.tools, *driver_dir, nvidia_smi_given, mps_control_given);
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
  std::string shown = v.size() > 40 ? v.substr(0, 40) + "..." : v;
  for (auto& c : shown) if (!std::isprint(static_cast<unsigned char>(c))) c = '?';
  throw CudaMpsError(fmt::format("invalid --unilab-mps value '{}': use --unilab-mps (one daemon per GPU) or --unilab-mps=multi "
                                 "(one daemon for all the job's GPUs on a node)",
                                 shown));
}

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
