// GPU identity: UUID spelling rules, nvidia-smi parsing, visibility masks.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/mps/text.hpp"  // join
#include "common/mps/runner.hpp"

namespace unilab::mps {

// The comparison token of an NVIDIA UUID: lowercase hex without dashes and
// without the optional `GPU-` prefix. Torch, nvidia-smi and
// CUDA_VISIBLE_DEVICES spell the same UUID with different case, dashes and
// prefix; equality must compare this token. `MIG-` UUIDs keep a `mig-` prefix
// so they never compare equal to a GPU. Throws CudaMpsError when `value` is
// not a UUID at all.
std::string canonicalize_gpu_uuid(std::string_view value);

// The persisted/display form: `GPU-<lowercase 8-4-4-4-12>` (MIG: `MIG-...`).
std::string display_gpu_uuid(std::string_view value);

// True when `value` spells a GPU or MIG UUID (any accepted spelling).
bool looks_like_gpu_uuid(std::string_view value);

// One physical GPU as nvidia-smi reports it. `minor_number` is the
// /dev/nvidiaN minor, which differs from `index` and from Slurm's GRES index.
struct GpuIdentity {
  int index = -1;
  std::string uuid;  // display form
  int minor_number = -1;
  std::string pci_bus_id;  // as printed, e.g. 00000000:17:00.0 (8-hex-digit domain)
  std::string name;
  // Live modes, as nvidia-smi printed them ("Default", "Exclusive_Process",
  // "Prohibited"; "Enabled"/"Disabled"; "[N/A]" or "[Not Supported]" where
  // the GPU has no such mode). Empty when not queried (e.g. read from a
  // record). They are state, not identity: never written to records or
  // JSON, and not compared by ==.
  std::string compute_mode;
  std::string mig_mode;

  nlohmann::json to_json() const;
  static GpuIdentity from_json(const nlohmann::json& j);
  bool operator==(const GpuIdentity& o) const {
    return index == o.index && uuid == o.uuid && minor_number == o.minor_number && pci_bus_id == o.pci_bus_id &&
           name == o.name;
  }
};

// The fields of the one discovery query, in order. `name` is last because a
// name may itself contain commas.
inline constexpr const char* kNvidiaSmiQueryFields = "index,uuid,minor_number,pci.bus_id,compute_mode,mig.mode.current,name";

// nvidia-smi's exit code when the infoROM is corrupted: a warning, the
// output is still valid.
inline constexpr int kNvidiaSmiInfoRomWarning = 14;
// How long query_gpus lets nvidia-smi run.
inline constexpr std::chrono::seconds kNvidiaSmiTimeout{30};

// Parses `nvidia-smi --query-gpu=<kNvidiaSmiQueryFields> --format=csv,noheader`
// output. UUIDs are normalised here, once, to the display form (nvidia-smi
// may print them in either case). Throws CudaMpsError naming the first bad line.
std::vector<GpuIdentity> parse_nvidia_smi_query(std::string_view csv);

// The argv used for discovery (absolute nvidia-smi path first).
std::vector<std::string> nvidia_smi_query_argv(const std::string& nvidia_smi);

// What the one discovery call found: the GPUs and, when nvidia-smi exited
// with the infoROM warning (14) but printed valid rows, that warning.
struct GpuDiscovery {
  std::vector<GpuIdentity> gpus;
  std::optional<std::string> warning;
};

// Discovers physical host GPUs through the public nvidia-smi CLI (one call),
// run with tool_environment(driver_dir) (runner.hpp). Missing binary,
// non-zero exit (no driver; 14 with valid rows is only a warning) and
// unparsable output are CudaMpsError with the tool's own message and a hint.
GpuDiscovery query_gpus(CommandRunner& runner, const std::string& nvidia_smi,
                        const std::optional<std::string>& driver_dir = std::nullopt);
// query_gpus without the warning.
std::vector<GpuIdentity> discover_gpus(CommandRunner& runner, const std::string& nvidia_smi,
                                       const std::optional<std::string>& driver_dir = std::nullopt);

// Splits a CUDA_VISIBLE_DEVICES value into trimmed entries.
std::vector<std::string> split_mask(std::string_view mask);

// Resolves a CUDA_VISIBLE_DEVICES-style mask against the host GPUs: numeric
// indices, full UUIDs (any spelling), unique UUID prefixes. `-1` or an empty
// mask means no GPU is visible; like CUDA, entries after an invalid one are
// never reached, but here an unknown or ambiguous entry is an error naming it.
// `nullopt` (unset) means every GPU is visible. MIG entries are rejected here:
// a MIG slice cannot host a per-GPU MPS daemon.
std::vector<GpuIdentity> visible_gpus(const std::optional<std::string>& mask,
                                      const std::vector<GpuIdentity>& gpus);

// Finds the single host GPU that `entry` names (index, UUID or unique UUID
// prefix); throws CudaMpsError naming the entry otherwise.
const GpuIdentity& find_gpu(std::string_view entry, const std::vector<GpuIdentity>& gpus);

// Returns CUDA_VISIBLE_DEVICES entries with numeric indices replaced by the
// host GPU UUIDs (display form). Why: a per-GPU MPS server enumerates only
// its own device, so a client whose one-entry mask holds a nonzero numeric
// index overruns that namespace and CUDA init fails with "No CUDA GPUs are
// available". UUIDs survive the server-side remapping. UUID, `MIG-...` and
// `-1` entries pass through unchanged. A numeric entry with no host GPU is a
// CudaMpsError naming it.
std::vector<std::string> resolve_mps_visibility_entries(const std::vector<std::string>& entries,
                                                        const std::vector<GpuIdentity>& gpus);
// Same, discovering the host GPUs through nvidia-smi only when a numeric
// entry needs it.
std::vector<std::string> resolve_mps_visibility_entries(const std::vector<std::string>& entries,
                                                        CommandRunner& runner,
                                                        const std::string& nvidia_smi);

}  // namespace unilab::mps
