// The process-sharing probe (the `cuda_process_sharing` manifest key): fail-closed
// validation of an explicit `mps` request for one rank, and best-effort
// recording of ambient MPS state for an unconfigured (null) one.
//
// The off-policy learner and collector are separate processes on one
// rank-local GPU; MPS lets their CUDA contexts overlap kernels. This module
// never starts or stops a daemon: an explicit request is either validated
// against the host state or rejected before anything is constructed.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/mps/mps_control.hpp"
#include "common/mps/proc.hpp"
#include "common/mps/runner.hpp"

namespace unilab::mps {

// The one manifest key the evidence lives under, as an object keyed by rank.
inline constexpr const char* kProcessSharingManifestKey = "cuda_process_sharing";
// The only explicit mode.
inline constexpr const char* kProcessSharingMps = "mps";

// Structured per-rank evidence for a requested mode plus ambient state.
// `pipe_directory_env` is the raw CUDA_MPS_PIPE_DIRECTORY (nullopt when
// unset); pipe_directory/control_pipe/control_pipe_kind/server_pid describe
// the effective pipe this rank's CUDA contexts would use. `ambient_server` is
// true only for an unconfigured run whose effective control pipe answered a
// daemon query (the transparent-MPS case). `effective` names a mode only when
// it was validated: ambient MPS is reported by `ambient_server`, never by
// `effective`. Unknown facts are nullopt (JSON null).
struct CudaProcessSharingEvidence {
  std::optional<std::string> configured;
  std::optional<std::string> effective;
  bool validated = false;
  int rank = 0;
  int world_size = 1;
  std::optional<std::string> learner_device;
  std::optional<std::string> collector_device;
  std::optional<std::string> learner_gpu_uuid;    // display form
  std::optional<std::string> collector_gpu_uuid;  // display form
  std::optional<std::string> pipe_directory_env;
  std::optional<std::string> pipe_directory;
  std::optional<std::string> control_pipe;
  std::optional<std::string> control_pipe_kind;   // socket | fifo | missing | other
  std::optional<pid_t> server_pid;
  bool ambient_server = false;
  // What this rank's own clients ask MPS for, as its environment says (the
  // plugin's --unilab-mps-threads=auto share, --unilab-mps-priority, or the
  // launcher's own): CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, which NVIDIA lets a
  // client only lower below its server's, and CUDA_MPS_CLIENT_PRIORITY.
  std::optional<std::string> active_thread_percentage;
  std::optional<std::string> client_priority;
  // The learner's GPU is a MIG device: the GPU it is part of (nvidia-smi -L).
  std::optional<std::string> learner_gpu_parent_uuid;

  // The JSON-shaped diagnostics stored in a runtime manifest (every field,
  // unknown ones as null).
  nlohmann::json to_json() const;
  bool operator==(const CudaProcessSharingEvidence&) const = default;
};

// The index a torch-style CUDA device names: `cuda` -> 0 (the default
// device), `cuda:N` -> N. nullopt for anything else (`cpu`, `cuda:x`, ...).
std::optional<int> parse_cuda_device_index(std::string_view device);

// Maps a torch-style CUDA device of this process to a GPU UUID (a launcher
// injects torch for this). nullopt: the device names no GPU visible to this
// process. May throw CudaMpsError when the lookup itself fails (e.g.
// nvidia-smi is broken); the message says why. Abstract so it can be mocked
// out for tests.
class CudaDeviceResolver {
 public:
  virtual ~CudaDeviceResolver() = default;
  virtual std::optional<std::string> uuid_for(const std::string& device) = 0;
};

// Environment lookup, injectable for tests.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
std::optional<std::string> system_env(const std::string& key);

// The default resolver: `cuda:N` is the N-th entry of this process's
// CUDA_VISIBLE_DEVICES, as CUDA enumerates it. Entries may be UUIDs in any
// spelling (returned in display form), `MIG-` UUIDs (returned as is) or
// numeric indices (resolved through nvidia-smi with
// resolve_mps_visibility_entries); enumeration stops at the first `-1`, as in
// CUDA. An N beyond the mask, or an index nvidia-smi does not list, is
// nullopt. With CUDA_VISIBLE_DEVICES unset, `cuda:N` is nvidia-smi index N
// (CUDA's order matches it under CUDA_DEVICE_ORDER=PCI_BUS_ID and on nodes of
// identical GPUs). Works under MPS, where the mask holds UUIDs.
class VisibleDevicesResolver final : public CudaDeviceResolver {
 public:
  VisibleDevicesResolver(CommandRunner& runner, std::string nvidia_smi, EnvLookup env = system_env)
      : runner_(runner), nvidia_smi_(std::move(nvidia_smi)), env_(std::move(env)) {}
  std::optional<std::string> uuid_for(const std::string& device) override;

 private:
  CommandRunner& runner_;
  std::string nvidia_smi_;
  EnvLookup env_;
};

// The host seams the probe reads through besides the command runner.
struct ProbeHost {
  ProcReader& proc;
  EnvLookup env = system_env;  // CUDA_MPS_PIPE_DIRECTORY, CUDA_MPS_LOG_DIRECTORY
  std::string mps_control = "/usr/bin/nvidia-cuda-mps-control";
  std::string nvidia_smi = "/usr/bin/nvidia-smi";
  uid_t uid = getuid();  // "the current user" a validated daemon must run as
  gid_t gid = getgid();
  std::chrono::milliseconds query_timeout{5000};
};

// Validates one rank's requested CUDA process-sharing mode.
//
// `requested` is nullopt (unconfigured) or "mps"; anything else is a
// CudaMpsError. For "mps" the prerequisites are checked in this order, and
// the FIRST unmet one is a CudaMpsError whose one-line message starts with
// `cuda_process_sharing=mps needs <prerequisite>:` and ends with the fix:
//   1. a valid rank / world size (single host: 0 <= rank < world_size);
//   2. a CUDA learner device (`cuda` or `cuda:N`);
//   3. a CUDA collector device bound by the backend;
//   4. learner and collector on the same physical GPU (canonical UUIDs);
//   5. an effective pipe directory (CUDA_MPS_PIPE_DIRECTORY, else
//      /tmp/nvidia-mps; absolute, `<dir>/control` within the AF_UNIX limit)
//      whose `control` is a socket;
//   6. a daemon that answers `get_server_list` through it and runs as
//      `host.uid` (pid file `<dir>/nvidia-cuda-mps-control.pid` in a trusted
//      directory, live per /proc);
//   7. that daemon serving the learner's GPU (its CUDA_VISIBLE_DEVICES from
//      /proc, numeric entries resolved through nvidia-smi; unset = every GPU).
// Success: configured = effective = "mps", validated = true, every fact set.
//
// For nullopt it records ambient state, best effort, and never throws:
// device UUIDs when resolvable, the raw and effective pipe directory, the
// control pipe and its kind, the pid-file daemon's pid when that process is
// live, and ambient_server = true only when the pipe answered a query.
CudaProcessSharingEvidence probe_cuda_process_sharing(const std::optional<std::string>& requested,
                                                      const std::string& learner_device,
                                                      const std::optional<std::string>& collector_device,
                                                      const std::string& backend, int rank, int world_size,
                                                      CudaDeviceResolver& devices, CommandRunner& runner,
                                                      const ProbeHost& host);

// Records `evidence` in a producer-owned manifest object under
// "cuda_process_sharing" -> "<rank>", leaving every other key alone.
// Re-applying identical evidence is a no-op; a different entry for the same
// rank, a manifest that is not an object, or a "cuda_process_sharing" value
// that is not an object is a CudaMpsError.
void apply_cuda_process_sharing_manifest(nlohmann::json& manifest, const CudaProcessSharingEvidence& evidence);

// The same on a JSON file: missing file = `{}`. The directory is opened
// without following a symlink as its last component, the file is read and
// replaced without following symlinks (write_file_atomic: temp file, fsync,
// rename), keeping an existing file's permission bits (0644 for a new file).
// Concurrent updaters in one directory (ranks sharing a manifest) are
// serialized with flock on the directory, where the filesystem supports it.
void update_manifest_file(const std::string& path, const CudaProcessSharingEvidence& evidence);

}  // namespace unilab::mps
