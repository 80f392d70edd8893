#include "common/mps/env.hpp"
#include "common/mps/probe.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "common/mps/errors.hpp"
#include "common/mps/gpu.hpp"
#include "common/mps/mig.hpp"
#include "common/mps/safefs.hpp"
#include "common/mps/text.hpp"
#include "common/mps/mps_pid_file.hpp"

namespace unilab::mps {
namespace {

// Values from the command line or the environment end up in one-line
// messages: keep them on one line.
std::string printable(std::string_view s) {
  std::string out(s);
  for (auto& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return out;
}

bool is_number(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// Display form of a resolved UUID; an old-style MIG name (`MIG-GPU-.../1/2`)
// is not a canonical UUID and stays as it is.
std::string display_or_raw(const std::string& uuid) {
  return looks_like_gpu_uuid(uuid) ? display_gpu_uuid(uuid) : uuid;
}

// Same GPU, whatever spelling each side used.
bool same_gpu(const std::string& a, const std::string& b) {
  if (looks_like_gpu_uuid(a) && looks_like_gpu_uuid(b)) return canonicalize_gpu_uuid(a) == canonicalize_gpu_uuid(b);
  return a == b;
}

[[noreturn]] void unmet(std::string_view prerequisite, const std::string& detail) {
  throw CudaMpsError(fmt::format("cuda_process_sharing=mps needs {}: {}", prerequisite, detail));
}

constexpr std::string_view kStartHint =
    "start one with `unilab-mps start` and `eval \"$(unilab-mps env)\"` in the launching shell, or point "
    "CUDA_MPS_PIPE_DIRECTORY at a running daemon's pipe directory";

// The effective pipe directory a CUDA client of this process would use. An
// empty CUDA_MPS_PIPE_DIRECTORY counts as unset.
std::string effective_pipe_directory(const std::optional<std::string>& env_value) {
  return env_value && !env_value->empty() ? *env_value : std::string(kDefaultPipeDirectory);
}

MpsEndpoint endpoint_for(const ProbeHost& host, const std::string& pipe_directory) {
  auto log = host.env("CUDA_MPS_LOG_DIRECTORY");
  return MpsEndpoint{pipe_directory, log && !log->empty() ? *log : std::string(kDefaultLogDirectory), host.uid, host.gid};
}

// Best effort: a device's UUID or nullopt, never an exception.
std::optional<std::string> try_uuid(CudaDeviceResolver& devices, const std::optional<std::string>& device) {
  if (!device || !parse_cuda_device_index(*device)) return std::nullopt;
  try {
    auto uuid = devices.uuid_for(*device);
    if (uuid) return display_or_raw(*uuid);
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

// Best effort, never a failure: the rank's own client settings and, for a
// MIG learner, its parent GPU.
void record_client_settings(CudaProcessSharingEvidence& ev, CommandRunner& runner, const ProbeHost& host) {
  auto set = [](const std::optional<std::string>& v) { return v && !v->empty() ? std::optional<std::string>(printable(*v)) : std::nullopt; };
  ev.active_thread_percentage = set(host.env("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"));
  ev.client_priority = set(host.env("CUDA_MPS_CLIENT_PRIORITY"));
  if (!ev.learner_gpu_uuid || !has_prefix_ci(*ev.learner_gpu_uuid, "mig-")) return;
  try {
    Command cmd;
    cmd.argv = {host.nvidia_smi, "-L"};
    cmd.env = tool_environment("/usr/bin:/bin", std::nullopt);
    cmd.timeout = host.query_timeout;
    CommandResult r = runner.run(cmd);
    if (!r.ok()) return;
    for (const ListedGpu& g : parse_nvidia_smi_list(r.out)) {
      for (const ListedMig& m : g.migs) {
        if (same_gpu(m.uuid, *ev.learner_gpu_uuid)) ev.learner_gpu_parent_uuid = g.uuid;
      }
    }
  } catch (const std::exception&) {
    // Evidence of what was seen; the parent stays unknown (null).
  }
}

CudaProcessSharingEvidence record_ambient(const std::string& learner_device,
                                          const std::optional<std::string>& collector_device, int rank, int world_size,
                                          CudaDeviceResolver& devices, CommandRunner& runner, const ProbeHost& host) {
  CudaProcessSharingEvidence ev;
  ev.rank = rank;
  ev.world_size = world_size;
  ev.learner_device = learner_device;
  ev.collector_device = collector_device;
  ev.learner_gpu_uuid = try_uuid(devices, learner_device);
  ev.collector_gpu_uuid = try_uuid(devices, collector_device);
  try {
    ev.pipe_directory_env = host.env("CUDA_MPS_PIPE_DIRECTORY");
    std::string pipe = effective_pipe_directory(ev.pipe_directory_env);
    ev.pipe_directory = pipe;
    ev.control_pipe = pipe + "/control";
    ev.control_pipe_kind = control_pipe_kind(*ev.control_pipe);
    std::string why;
    if (auto pid = read_mps_pid_file(pipe, host.uid, &why); pid && running_stat(host.proc, *pid)) ev.server_pid = *pid;
    // answers() runs the front end only when `control` is a socket.
    MpsControl control(runner, host.mps_control);
    ev.ambient_server = control.answers(endpoint_for(host, pipe), host.query_timeout);
  } catch (const std::exception&) {
    // Ambient observation never fails closed: what was found stays recorded.
  }
  record_client_settings(ev, runner, host);
  return ev;
}

// 1. rank / world size
void require_single_host_rank(int rank, int world_size) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    unmet("a valid rank and world size",
          fmt::format("rank {} with world size {} is not a single-host rank (need world_size >= 1 and 0 <= rank < "
                      "world_size); pass this rank's index and the number of ranks on this host",
                      rank, world_size));
  }
}

// 2. learner device, 3. collector device bound by the backend: both CUDA.
void require_cuda_devices(const std::string& learner_device, const std::optional<std::string>& collector_device,
                          const std::string& backend) {
  if (!parse_cuda_device_index(learner_device)) {
    unmet("a CUDA learner device",
          fmt::format("learner device '{}' is not a CUDA device; run the learner on `cuda` or `cuda:N`, or leave "
                      "cuda_process_sharing unset",
                      printable(learner_device)));
  }
  if (!collector_device) {
    unmet("a CUDA collector device",
          fmt::format("backend '{}' binds no collector device; use a backend whose collector runs on the learner's "
                      "CUDA device, or leave cuda_process_sharing unset",
                      printable(backend)));
  }
  if (!parse_cuda_device_index(*collector_device)) {
    unmet("a CUDA collector device",
          fmt::format("backend '{}' binds collector device '{}', which is not a CUDA device; bind the collector to "
                      "the learner's CUDA device, or leave cuda_process_sharing unset",
                      printable(backend), printable(*collector_device)));
  }
}

// 4. a device's GPU UUID (display form).
std::string require_gpu_uuid(CudaDeviceResolver& devices, const ProbeHost& host, const std::string& role,
                             const std::string& device) {
  std::optional<std::string> uuid;
  try {
    uuid = devices.uuid_for(device);
  } catch (const CudaMpsError& e) {
    unmet("learner and collector on one GPU",
          fmt::format("cannot resolve {} device '{}' to a GPU UUID ({}); fix GPU discovery first", role, printable(device),
                      e.what()));
  }
  if (!uuid) {
    unmet("learner and collector on one GPU",
          fmt::format("{} device '{}' names no GPU visible to this process (CUDA_VISIBLE_DEVICES={}); use a device "
                      "index below the number of visible GPUs",
                      role, printable(device), printable(host.env("CUDA_VISIBLE_DEVICES").value_or("(unset)"))));
  }
  return display_or_raw(*uuid);
}

// 5. an effective control pipe that is a socket.
struct ControlPipe {
  std::optional<std::string> env;  // CUDA_MPS_PIPE_DIRECTORY
  std::string dir;                 // effective pipe directory
  std::string control;             // <dir>/control
  std::string kind;                // control_pipe_kind
};

ControlPipe require_control_socket(const ProbeHost& host) {
  ControlPipe p;
  p.env = host.env("CUDA_MPS_PIPE_DIRECTORY");
  p.dir = effective_pipe_directory(p.env);
  if (p.dir.empty() || p.dir[0] != '/') {
    unmet("an MPS control pipe",
          fmt::format("CUDA_MPS_PIPE_DIRECTORY '{}' is not an absolute path; export the daemon's absolute pipe directory",
                      printable(p.dir)));
  }
  try {
    check_control_path_length(p.dir);
  } catch (const CudaMpsError& e) {
    unmet("an MPS control pipe", printable(e.what()));
  }
  p.control = p.dir + "/control";
  p.kind = control_pipe_kind(p.control);
  if (p.kind == "missing") {
    unmet("an MPS control pipe",
          fmt::format("{} does not exist, so no MPS control daemon serves pipe directory {}; {}", printable(p.control),
                      printable(p.dir), kStartHint));
  }
  if (p.kind != "socket") {
    unmet("an MPS control pipe",
          fmt::format("{} is {}, not a socket; remove it and {}", printable(p.control),
                      p.kind == "fifo" ? "a FIFO" : "another kind of file", kStartHint));
  }
  return p;
}

// 6. a daemon of this user answering through the pipe; its pid.
pid_t require_own_daemon(CommandRunner& runner, const ProbeHost& host, const ControlPipe& p) {
  MpsControl mps(runner, host.mps_control);
  MpsEndpoint ep = endpoint_for(host, p.dir);
  if (!mps.answers(ep, host.query_timeout)) {
    // Diagnostics only: one more query for the front end's own words.
    CommandResult r = mps.send(ep, "get_server_list", host.query_timeout);
    std::string reason = r.first_output_line();
    if (reason.empty()) reason = r.describe();
    unmet("an answering MPS control daemon",
          fmt::format("`get_server_list` through {} failed ({}); the socket may be stale; {}", printable(p.control),
                      printable(reason), kStartHint));
  }
  std::string why;
  auto pid = read_mps_pid_file(p.dir, host.uid, &why);
  if (!pid) {
    unmet("an answering MPS control daemon",
          fmt::format("cannot tell which process answers on {}: {}; {}", printable(p.control), printable(why), kStartHint));
  }
  auto st = running_stat(host.proc, *pid);
  if (!st) {
    unmet("an answering MPS control daemon",
          fmt::format("pid {} from {}/{} is not running; {}", *pid, printable(p.dir), kPidFileName, kStartHint));
  }
  if (st->uid != host.uid) {
    unmet("an MPS control daemon of your own",
          fmt::format("the daemon on {} (pid {}) runs as uid {}, not as uid {}; start your own daemon with "
                      "`unilab-mps start` and `eval \"$(unilab-mps env)\"`",
                      printable(p.control), *pid, st->uid, host.uid));
  }
  return *pid;
}

// 7. the daemon serves the learner's GPU (when its environment names GPUs).
void require_daemon_serves(CommandRunner& runner, const ProbeHost& host, const ControlPipe& p, pid_t pid,
                           const std::string& learner_uuid) {
  auto mask = host.proc.environ_value(pid, "CUDA_VISIBLE_DEVICES");
  if (!mask) return;
  std::vector<std::string> served;
  try {
    served = resolve_mps_visibility_entries(split_mask(*mask), runner, host.nvidia_smi);
  } catch (const CudaMpsError& e) {
    unmet("a daemon serving the learner's GPU",
          fmt::format("cannot resolve the daemon's CUDA_VISIBLE_DEVICES '{}' (pid {}): {}", printable(*mask), pid,
                      printable(e.what())));
  }
  bool serves = false;
  std::vector<std::string> shown;
  for (const auto& entry : served) {
    if (entry == "-1") break;  // CUDA enumerates nothing after it
    shown.push_back(display_or_raw(entry));
    if (same_gpu(entry, learner_uuid)) serves = true;
  }
  if (!serves) {
    unmet("a daemon serving the learner's GPU",
          fmt::format("the daemon on {} (pid {}) serves {} but the learner runs on {}; start a daemon for that GPU "
                      "(`unilab-mps start {}`) and export its environment",
                      printable(p.control), pid, shown.empty() ? "no GPU" : printable(join(shown, ",")), learner_uuid,
                      learner_uuid));
  }
}

CudaProcessSharingEvidence validate_mps(const std::string& learner_device,
                                        const std::optional<std::string>& collector_device, const std::string& backend,
                                        int rank, int world_size, CudaDeviceResolver& devices, CommandRunner& runner,
                                        const ProbeHost& host) {
  require_single_host_rank(rank, world_size);
  require_cuda_devices(learner_device, collector_device, backend);
  std::string learner_uuid = require_gpu_uuid(devices, host, "learner", learner_device);
  std::string collector_uuid = require_gpu_uuid(devices, host, "collector", *collector_device);
  if (!same_gpu(learner_uuid, collector_uuid)) {
    unmet("learner and collector on one GPU",
          fmt::format("learner '{}' is {} but collector '{}' is {}; put both on the same GPU (MPS shares one GPU "
                      "between them)",
                      printable(learner_device), learner_uuid, printable(*collector_device), collector_uuid));
  }
  const ControlPipe pipe = require_control_socket(host);
  const pid_t pid = require_own_daemon(runner, host, pipe);
  require_daemon_serves(runner, host, pipe, pid, learner_uuid);
  CudaProcessSharingEvidence ev;
  ev.configured = kProcessSharingMps;
  ev.effective = kProcessSharingMps;
  ev.validated = true;
  ev.rank = rank;
  ev.world_size = world_size;
  ev.learner_device = learner_device;
  ev.collector_device = collector_device;
  ev.learner_gpu_uuid = learner_uuid;
  ev.collector_gpu_uuid = collector_uuid;
  ev.pipe_directory_env = pipe.env;
  ev.pipe_directory = pipe.dir;
  ev.control_pipe = pipe.control;
  ev.control_pipe_kind = pipe.kind;
  ev.server_pid = pid;
  ev.ambient_server = false;  // a configured run: the daemon is validated, not ambient
  record_client_settings(ev, runner, host);
  return ev;
}

}  // namespace

nlohmann::json CudaProcessSharingEvidence::to_json() const {
  auto opt = [](const auto& v) -> nlohmann::json { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  return {
      {"configured", opt(configured)},
      {"effective", opt(effective)},
      {"validated", validated},
      {"rank", rank},
      {"world_size", world_size},
      {"learner_device", opt(learner_device)},
      {"collector_device", opt(collector_device)},
      {"learner_gpu_uuid", opt(learner_gpu_uuid)},
      {"collector_gpu_uuid", opt(collector_gpu_uuid)},
      {"pipe_directory_env", opt(pipe_directory_env)},
      {"pipe_directory", opt(pipe_directory)},
      {"control_pipe", opt(control_pipe)},
      {"control_pipe_kind", opt(control_pipe_kind)},
      {"server_pid", opt(server_pid)},
      {"ambient_server", ambient_server},
      {"active_thread_percentage", opt(active_thread_percentage)},
      {"client_priority", opt(client_priority)},
      {"learner_gpu_parent_uuid", opt(learner_gpu_parent_uuid)},
  };
}

std::optional<int> parse_cuda_device_index(std::string_view device) {
  if (device == "cuda") return 0;
  if (device.substr(0, 5) != "cuda:") return std::nullopt;
  std::string_view n = device.substr(5);
  int index = -1;
  if (!is_number(n)) return std::nullopt;
  auto [p, ec] = std::from_chars(n.data(), n.data() + n.size(), index);
  if (ec != std::errc() || p != n.data() + n.size()) return std::nullopt;
  return index;
}

std::optional<std::string> system_env(const std::string& key) { return process_env(key.c_str()); }

std::optional<std::string> VisibleDevicesResolver::uuid_for(const std::string& device) {
  auto index = parse_cuda_device_index(device);
  if (!index) return std::nullopt;
  auto n = static_cast<size_t>(*index);
  auto mask = env_("CUDA_VISIBLE_DEVICES");
  std::optional<std::vector<GpuIdentity>> gpus;  // discovered once, only when an entry needs nvidia-smi
  auto host_gpus = [&]() -> const std::vector<GpuIdentity>& {
    if (!gpus) {
      Tools tools;
      tools.nvidia_smi = nvidia_smi_;
      gpus = discover_gpus(runner_, tools);
    }
    return *gpus;
  };
  if (!mask) {
    const auto all = visible_gpus(std::nullopt, host_gpus());
    return n < all.size() ? std::optional<std::string>(all[n].uuid) : std::nullopt;
  }
  // CUDA enumerates the mask in order and stops at the first invalid entry.
  size_t position = 0;
  for (const auto& entry : split_mask(*mask)) {
    if (entry == "-1") break;
    std::string uuid;
    if (looks_like_gpu_uuid(entry)) {
      uuid = display_gpu_uuid(entry);
    } else if (has_prefix_ci(entry, "mig-")) {
      uuid = entry;  // old-style MIG name: passes through, as in resolve_mps_visibility_entries
    } else if (is_number(entry)) {
      try {
        uuid = resolve_mps_visibility_entries({entry}, host_gpus()).front();
      } catch (const CudaMpsError&) {
        if (!gpus) throw;  // nvidia-smi itself failed: not "no such GPU"
        break;             // an index nvidia-smi does not list ends the enumeration
      }
    } else {
      try {
        uuid = find_gpu(entry, host_gpus()).uuid;  // a unique UUID prefix, as CUDA accepts
      } catch (const CudaMpsError&) {
        if (!gpus) throw;
        break;
      }
    }
    if (position == n) return uuid;
    ++position;
  }
  return std::nullopt;
}

CudaProcessSharingEvidence probe_cuda_process_sharing(const std::optional<std::string>& requested,
                                                      const std::string& learner_device,
                                                      const std::optional<std::string>& collector_device,
                                                      const std::string& backend, int rank, int world_size,
                                                      CudaDeviceResolver& devices, CommandRunner& runner,
                                                      const ProbeHost& host) {
  if (!requested) return record_ambient(learner_device, collector_device, rank, world_size, devices, runner, host);
  if (*requested != kProcessSharingMps) {
    throw CudaMpsError(fmt::format(
        "cuda_process_sharing must be null (unset) or 'mps', not '{}'; set it to mps or leave it unset",
        printable(*requested)));
  }
  return validate_mps(learner_device, collector_device, backend, rank, world_size, devices, runner, host);
}

void apply_cuda_process_sharing_manifest(nlohmann::json& manifest, const CudaProcessSharingEvidence& evidence) {
  if (!manifest.is_object()) {
    throw CudaMpsError(fmt::format("the runtime manifest is a JSON {}, not an object; cannot record {} evidence in it",
                                   manifest.type_name(), kProcessSharingManifestKey));
  }
  const std::string rank = std::to_string(evidence.rank);
  nlohmann::json entry = evidence.to_json();
  auto section = manifest.find(kProcessSharingManifestKey);
  if (section == manifest.end()) {
    manifest[kProcessSharingManifestKey] = nlohmann::json::object({{rank, entry}});
    return;
  }
  if (!section->is_object()) {
    throw CudaMpsError(fmt::format("the manifest's \"{}\" is a JSON {}, not an object keyed by rank; remove it or use a "
                                   "fresh manifest",
                                   kProcessSharingManifestKey, section->type_name()));
  }
  if (auto existing = section->find(rank); existing != section->end()) {
    if (*existing == entry) return;  // idempotent
    throw CudaMpsError(fmt::format("the manifest already records different {} evidence for rank {}; each rank records "
                                   "once per run: use a fresh manifest or check for a duplicate rank",
                                   kProcessSharingManifestKey, rank));
  }
  (*section)[rank] = std::move(entry);
}

void update_manifest_file(const std::string& path, const CudaProcessSharingEvidence& evidence) {
  auto [dir_path, name] = split_parent(path);
  if (name.empty() || name == "." || name == "..") {
    throw CudaMpsError(fmt::format("manifest path '{}' does not name a file", printable(path)));
  }
  Fd dir(open(dir_path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir) {
    throw CudaMpsError(fmt::format("cannot open the manifest's directory {}: {}", printable(dir_path),
                                   std::strerror(errno)));
  }
  // Ranks of one run may share a manifest: serialize read-modify-write.
  // flock on a directory works on local filesystems; elsewhere go on without.
  while (flock(dir.get(), LOCK_EX) != 0 && errno == EINTR) {
  }
  auto text = read_file_at(dir.get(), name, 64u << 20);
  nlohmann::json manifest = nlohmann::json::object();
  mode_t mode = 0644;
  if (text) {
    try {
      manifest = nlohmann::json::parse(*text);
    } catch (const nlohmann::json::exception& e) {
      throw CudaMpsError(fmt::format("manifest {} is not valid JSON ({}); fix or remove it", printable(path),
                                     printable(e.what())));
    }
    struct stat st {};
    if (fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) mode = st.st_mode & 07777;
  }
  nlohmann::json before = manifest;
  try {
    apply_cuda_process_sharing_manifest(manifest, evidence);
  } catch (const CudaMpsError& e) {
    throw CudaMpsError(fmt::format("manifest {}: {}", printable(path), e.what()));
  }
  if (text && manifest == before) return;  // identical evidence already recorded
  write_file_atomic(dir.get(), name, manifest.dump(2) + "\n", mode);
}

}  // namespace unilab::mps
