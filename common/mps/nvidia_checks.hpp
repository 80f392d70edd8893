// The NVIDIA tools and GPUs as MPS needs them: where the driver's tools are
// (driver_dir), whether they run, and whether each GPU's compute mode and
// MIG mode let an MPS daemon serve it. Each check is a small function over
// gathered facts; gathering is the only part that touches the machine.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/mps/check_status.hpp"
#include "common/mps/daemon.hpp"
#include "common/mps/gpu.hpp"
#include "common/mps/runner.hpp"

namespace unilab::mps {

// Where containers (NVIDIA's container toolkit, GKE) mount the driver's
// bin/ and lib64/, outside /usr/bin and the linker path.
inline constexpr const char* kContainerDriverDir = "/usr/local/nvidia";

// Applies driver_dir: the tools run with tool_environment(driver_dir), and
// nvidia-smi / nvidia-cuda-mps-control are <driver_dir>/bin/... unless their
// own path was given (`*_given`).
void apply_driver_dir(Tools& tools, const std::string& driver_dir, bool nvidia_smi_given, bool mps_control_given);

// Why `gpu` cannot host an MPS daemon (compute mode Prohibited, MIG
// enabled), nullopt when it can. Modes nvidia-smi reports as [N/A] or
// [Not Supported] do not refuse.
std::optional<std::string> gpu_refuses_mps(const GpuIdentity& gpu);

// Throws CudaMpsError, one line naming the GPU and the reason, for the first
// of `gpus` whose UUID is in `uuids` (any spelling) that cannot host a
// daemon. Without this the daemon would start and its clients fail later
// with CUDA error 805. Other GPUs of the node are not looked at.
void require_gpus_suit_mps(const std::vector<GpuIdentity>& gpus, const std::vector<std::string>& uuids);

struct NvidiaCheckResult {
  std::string id;      // e.g. "nvidia-tools-run"
  CheckStatus status = CheckStatus::kOk;
  std::string detail;  // one line
};

// What the node says about its NVIDIA tools, gathered once.
struct NvidiaToolFacts {
  Tools tools;
  bool nvidia_smi_executable = false;
  // driver_dir set: whether <driver_dir>/lib64 is a directory.
  bool driver_lib_dir_exists = false;
  // The configured nvidia-smi is missing but kContainerDriverDir/bin holds
  // one: that folder.
  std::optional<std::string> driver_dir_elsewhere;
  std::optional<GpuDiscovery> discovery;       // nvidia-smi ran and its rows parsed
  std::optional<std::string> discovery_error;  // its one-line error otherwise
};

// Reads the facts: runs the one nvidia-smi query (as the prolog would) when
// the configured nvidia-smi is executable.
NvidiaToolFacts gather_nvidia_tool_facts(CommandRunner& runner, const Tools& tools,
                                         const std::function<bool(const std::string&)>& executable,
                                         const std::function<bool(const std::string&)>& is_directory,
                                         const DriverFileReader& read = read_driver_file);

// "The NVIDIA tools run": nvidia-smi is where configured, runs with the
// configured PATH/LD_LIBRARY_PATH and lists GPUs. An infoROM warning (exit
// 14 with valid rows) is a warn; a driver folder found elsewhere is named.
NvidiaCheckResult check_nvidia_tools_run(const NvidiaToolFacts& facts);

// Compute and MIG modes: fail for a GPU that refuses MPS, warn for Default
// (NVIDIA recommends Exclusive_Process with MPS: then only the MPS server
// opens the GPU), ok when every GPU is Exclusive_Process.
NvidiaCheckResult check_compute_modes(const std::vector<GpuIdentity>& gpus);

}  // namespace unilab::mps
