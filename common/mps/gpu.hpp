// GPU identity: UUID spelling rules, nvidia-smi parsing, visibility masks.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/mps/mig.hpp"
#include "common/mps/text.hpp"  // join
#include "common/mps/runner.hpp"
#include "common/mps/tools.hpp"

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
// A MIG device is a GpuIdentity too: its `uuid` is MIG-..., `mig` says
// which GPU it is part of, `index` is -1 (no numeric index names a MIG
// device), and minor, bus id and name are its parent's.
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
  std::optional<MigSlice> mig;  // set for a MIG device

  nlohmann::json to_json() const;
  static GpuIdentity from_json(const nlohmann::json& j);
  bool operator==(const GpuIdentity& o) const {
    return index == o.index && uuid == o.uuid && minor_number == o.minor_number && pci_bus_id == o.pci_bus_id &&
           name == o.name && mig == o.mig;
  }
};

// The fields of the one discovery query, in order. `name` is last because a
// name may itself contain commas. No minor_number: nvidia-smi 580 refuses it
// ("Field "minor_number" is not a valid field to query.", exit 2; seen with
// driver 580.159.04 on an H200); the minor comes from the driver's own
// /proc/driver/nvidia/gpus/<bus>/information (read_driver_minors).
inline constexpr const char* kNvidiaSmiQueryFields = "index,uuid,pci.bus_id,compute_mode,mig.mode.current,name";

// nvidia-smi's exit code when the infoROM is corrupted: a warning, the
// output is still valid.
inline constexpr int kNvidiaSmiInfoRomWarning = 14;
// How long query_gpus lets nvidia-smi run.
inline constexpr std::chrono::seconds kNvidiaSmiTimeout{30};

// Parses `nvidia-smi --query-gpu=<kNvidiaSmiQueryFields> --format=csv,noheader`
// output (minor_number stays -1). UUIDs are normalised here, once, to the
// display form (nvidia-smi may print them in either case). Throws
// CudaMpsError naming the first bad line.
std::vector<GpuIdentity> parse_nvidia_smi_query(std::string_view csv);

// What the driver's /proc/driver/nvidia/gpus/<bus>/information says of one
// GPU ("GPU UUID: \t GPU-...", "Device Minor: \t 0", tab-padded).
struct DriverGpuInformation {
  std::optional<std::string> uuid;  // display form
  std::optional<int> minor;
};
DriverGpuInformation parse_driver_gpu_information(std::string_view text);
// The directory name of a GPU there: the bus id with a 4-digit domain, in
// lower case ("00000000:2A:00.0" -> "0000:2a:00.0").
std::string driver_bus_directory(std::string_view pci_bus_id);
// How the driver's files are read: a path -> its text, nullopt when it cannot
// be read. The default is read_proc_file (bounded, no symlink followed);
// the node doctor reads through its NodeProbe.
using DriverFileReader = std::function<std::optional<std::string>(const std::string& path)>;
std::optional<std::string> read_driver_file(const std::string& path);
// Sets each GPU's minor_number from <driver_proc>/nvidia/gpus/<bus>/information
// when that file names the same UUID (or none); leaves -1 otherwise.
void read_driver_minors(std::vector<GpuIdentity>& gpus, const std::string& driver_proc,
                        const DriverFileReader& read = read_driver_file);

// The argv used for discovery (absolute nvidia-smi path first).
std::vector<std::string> nvidia_smi_query_argv(const std::string& nvidia_smi);

// What the one discovery call found: the GPUs and, when nvidia-smi exited
// with the infoROM warning (14) but printed valid rows, that warning.
struct GpuDiscovery {
  std::vector<GpuIdentity> gpus;
  std::optional<std::string> warning;
};

// Discovers physical host GPUs through the public nvidia-smi CLI (one call;
// where a GPU has MIG enabled, query_mig_devices adds its MIG devices after
// the GPUs), run with tool_environment(driver_dir) (runner.hpp), and their
// minors from the driver (read_driver_minors). Missing binary,
// non-zero exit (no driver; 14 with valid rows is only a warning) and
// unparsable output are CudaMpsError with the tool's own message and a hint.
GpuDiscovery query_gpus(CommandRunner& runner, const Tools& tools, const DriverFileReader& read = read_driver_file);
// The MIG devices of `gpus` (those nvidia-smi reports with MIG enabled), as
// GpuIdentity with `mig` set: `nvidia-smi -L` names them and their parents,
// the human table's "MIG devices:" block their GPU and compute instances
// (left -1 when the block does not list a device). Runs nothing and returns
// none when no GPU has MIG enabled. Errors as query_gpus.
std::vector<GpuIdentity> query_mig_devices(CommandRunner& runner, const Tools& tools, const std::vector<GpuIdentity>& gpus);
// Joins the two outputs query_mig_devices reads (exposed for tests).
std::vector<GpuIdentity> mig_devices_from(const std::vector<GpuIdentity>& gpus, std::string_view list_output,
                                          std::string_view table_output);
// Whether nvidia-smi reports MIG mode enabled for `gpu`.
bool mig_enabled(const GpuIdentity& gpu);

// query_gpus without the warning.
std::vector<GpuIdentity> discover_gpus(CommandRunner& runner, const Tools& tools);

// Splits a CUDA_VISIBLE_DEVICES value into trimmed entries.
std::vector<std::string> split_mask(std::string_view mask);

// Resolves a CUDA_VISIBLE_DEVICES-style mask against the host GPUs: numeric
// indices, full UUIDs (any spelling), unique UUID prefixes. `-1` or an empty
// mask means no GPU is visible; like CUDA, entries after an invalid one are
// never reached, but here an unknown or ambiguous entry is an error naming it.
// `nullopt` (unset) means every GPU is visible. A MIG UUID names one of the
// MIG devices among `gpus` (query_mig_devices).
std::vector<GpuIdentity> visible_gpus(const std::optional<std::string>& mask,
                                      const std::vector<GpuIdentity>& gpus);

// Finds the single host GPU that `entry` names (index, UUID or unique UUID
// prefix; a MIG UUID names a MIG device of `gpus`); throws CudaMpsError
// naming the entry otherwise.
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
