// What a job hands the hooks through the environment (its context, its
// --unilab-mps request), and the time bounds of the hooks.
#include "common/slurm/job.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <set>
#include <string_view>

#include <fmt/format.h>

#include "common/mps/errors.hpp"
#include "common/mps/gpu.hpp"
#include "common/mps/mps_control.hpp"
#include "common/mps/nvidia_checks.hpp"
#include "common/mps/safefs.hpp"
#include "common/mps/topology.hpp"
#include "common/slurm/containment.hpp"
#include "common/slurm/gres.hpp"
#include "common/slurm/slurm_conf_path.hpp"

namespace unilab::mps {

namespace {

template <typename T>
T parse_id(const std::optional<std::string>& v, const char* name) {
  T out{};
  if (!v || v->empty()) throw CudaMpsError(fmt::format("{} is not set; is this running as a Slurm prolog/epilog?", name));
  auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
  if (ec != std::errc() || p != v->data() + v->size()) throw CudaMpsError(fmt::format("{}='{}' is not a number", name, *v));
  return out;
}

}  // namespace

std::string describe_indices(const std::vector<int>& v) {
  std::vector<std::string> s;
  for (int i : v) s.push_back(std::to_string(i));
  return join(s, ",");
}

// The prolog: one nvidia-smi call, every daemon's start within one
// start_timeout, after a failed start the stop of what did start, and the
// wait for the job's cgroup. The epilog: every stop within one
// stop_timeout, then (cgroup v1 holding cgroups) the kill of what is held.
HookBound prolog_bound(const PluginConfig& cfg) {
  using std::chrono::milliseconds;
  const milliseconds smi = kNvidiaSmiTimeout, stop = cfg.stop_timeout + kStopOverrun, contain = cfg.start_timeout + kContainGrace;
  return {smi + cfg.start_timeout + stop + contain,
          fmt::format("nvidia-smi {} + start_timeout {} + a failed start's stop {} + the wait for the job's cgroup {}",
                      seconds_text(smi), seconds_text(cfg.start_timeout), seconds_text(stop), seconds_text(contain))};
}

HookBound epilog_bound(const PluginConfig& cfg) {
  const std::chrono::milliseconds stop = cfg.stop_timeout + kStopOverrun;
  return {stop + cfg.stop_timeout, fmt::format("the stops {} + the kill of held processes {}", seconds_text(stop),
                                               seconds_text(cfg.stop_timeout))};
}

JobContext job_context_from_env(const Getenv& env) {
  JobContext j;
  j.job_id = std::to_string(parse_id<unsigned long>(env("SLURM_JOB_ID"), "SLURM_JOB_ID"));
  j.uid = parse_id<uid_t>(env("SLURM_JOB_UID"), "SLURM_JOB_UID");
  j.gid = parse_id<gid_t>(env("SLURM_JOB_GID"), "SLURM_JOB_GID");
  j.user = escape_control(env("SLURM_JOB_USER").value_or(""));
  j.job_gpus = env("SLURM_JOB_GPUS");
  j.cuda_visible_devices = env("CUDA_VISIBLE_DEVICES");
  auto node = env("SLURMD_NODENAME");
  j.node = node && !node->empty() ? *node : current_host();
  j.slurm_conf = env("SLURM_CONF");
  if (auto sluid = env("SLURM_JOB_SLUID"); sluid && !sluid->empty()) {
    if (!std::all_of(sluid->begin(), sluid->end(), [](unsigned char c) { return std::isalnum(c); })) {
      throw CudaMpsError(fmt::format("SLURM_JOB_SLUID '{}' is not a Slurm SLUID (letters and digits)", escape_control(*sluid)));
    }
    j.sluid = sluid;
  }
  return j;
}

std::string spank_option_env_name(const std::string& option) {
  // Slurm: SPANK__SLURM_SPANK_OPTION_<plugin>_<option>, non-alphanumerics -> '_'.
  std::string name = "SPANK__SLURM_SPANK_OPTION_unilab_mps_" + option;
  for (size_t i = sizeof("SPANK__SLURM_SPANK_OPTION_") - 1; i < name.size(); ++i) {
    if (!std::isalnum(static_cast<unsigned char>(name[i]))) name[i] = '_';
  }
  return name;
}

std::optional<JobRequest> job_request_from_env(const Getenv& env, const PluginConfig& cfg) {
  auto mode = env(spank_option_env_name("unilab-mps").c_str());
  if (!mode) return std::nullopt;
  JobRequest req;
  req.mode = parse_mode(mode->c_str());
  auto raw_threads = env(spank_option_env_name("unilab-mps-threads").c_str());
  if (auto t = spank_option_value(raw_threads ? raw_threads->c_str() : nullptr); t && is_auto_threads(*t)) {
    req.limits.active_thread_share_auto = true;
  } else if (t) {
    req.limits.active_thread_percentage = parse_thread_percentage(*t, cfg.max_threads);
  } else if (cfg.default_threads) {
    req.limits.active_thread_percentage = cfg.default_threads;
  }
  auto raw_mem = env(spank_option_env_name("unilab-mps-mem").c_str());
  if (auto m = spank_option_value(raw_mem ? raw_mem->c_str() : nullptr)) {
    req.limits.pinned_mem_limit = parse_mem_limit(*m, cfg.max_mem_bytes);
  }
  auto raw_priority = env(spank_option_env_name("unilab-mps-priority").c_str());
  if (auto p = spank_option_value(raw_priority ? raw_priority->c_str() : nullptr)) {
    req.limits.client_priority = parse_client_priority(*p);
  }
  return req;
}

}  // namespace unilab::mps
