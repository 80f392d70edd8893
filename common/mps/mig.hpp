// MIG slices as GPUs: what nvidia-smi and the driver say about the MIG
// devices of a node, read through public formats only.
//
// NVIDIA documents MPS on MIG as one control daemon per MIG device, with
// CUDA_VISIBLE_DEVICES=MIG-<uuid> for the daemon and its clients (MIG User
// Guide, "MIG with CUDA MPS"). A MIG device is a compute instance (CI) in a
// GPU instance (GI) of a parent GPU. Three sources name it:
//   - `nvidia-smi -L`: each GPU, then its MIG devices indented under it:
//       GPU 0: NVIDIA H200 (UUID: GPU-...)
//         MIG 1g.18gb     Device  0: (UUID: MIG-...)
//   - `nvidia-smi` (the human table), whose "MIG devices:" block has one
//     row per MIG device starting `| GPU GI CI MIG-Dev |`: the only place
//     nvidia-smi pairs a MIG device index with its GI and CI ids;
//   - /proc/driver/nvidia-caps/mig-minors: `gpu<minor>/gi<G>/access <m>` and
//     `gpu<minor>/gi<G>/ci<C>/access <m>`, the minors of
//     /dev/nvidia-caps/nvidia-cap<m>, which Slurm's gres.conf lists for a
//     MIG GRES (MultipleFiles=/dev/nvidia<minor>,<gi cap>,<ci cap>).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

namespace unilab::mps {

// Where the NVIDIA driver lists the capability minors of MIG instances.
inline constexpr const char* kMigMinorsPath = "/proc/driver/nvidia-caps/mig-minors";
// Where the driver's capability device files live.
inline constexpr const char* kNvidiaCapsDir = "/dev/nvidia-caps";

// What makes a GpuIdentity a MIG device: its parent GPU and its place there.
struct MigSlice {
  std::string parent_uuid;    // GPU-... (display form)
  int parent_index = -1;      // the parent's nvidia-smi index
  int parent_minor = -1;      // /dev/nvidia<minor> of the parent
  int device = -1;            // the MIG device index on the parent (`nvidia-smi -L` "Device N")
  std::string profile;        // e.g. "1g.18gb"
  int gpu_instance = -1;      // GI id; -1 when nvidia-smi did not say
  int compute_instance = -1;  // CI id; -1 likewise

  nlohmann::json to_json() const;
  static MigSlice from_json(const nlohmann::json& j);  // throws CudaMpsError
  bool operator==(const MigSlice&) const = default;
};

// One GPU of `nvidia-smi -L`, with the MIG devices listed under it.
struct ListedMig {
  std::string profile;
  int device = -1;
  std::string uuid;  // MIG-... (display form)
};
struct ListedGpu {
  int index = -1;
  std::string name;
  std::string uuid;  // GPU-... (display form)
  std::vector<ListedMig> migs;
};

// Parses `nvidia-smi -L`. Blank lines are skipped; any other line that is
// neither a GPU nor a MIG line, a MIG line before any GPU, or a MIG device
// named the pre-R470 way (`MIG-GPU-<uuid>/<gi>/<ci>`, no UUID of its own)
// is a CudaMpsError naming the line.
std::vector<ListedGpu> parse_nvidia_smi_list(std::string_view text);

// One row of the "MIG devices:" block of nvidia-smi's human table.
struct MigTableRow {
  int gpu = -1;  // nvidia-smi index of the parent
  int gpu_instance = -1;
  int compute_instance = -1;
  int device = -1;  // MIG device index on the parent, as in `nvidia-smi -L`
  bool operator==(const MigTableRow&) const = default;
};
// The rows of that block (none when the table has no MIG block). Only the
// first line of each device's cell is a row: `| 0  1  0  0 | ...`.
std::vector<MigTableRow> parse_mig_device_table(std::string_view table);

// /proc/driver/nvidia-caps/mig-minors, read: the capability minor of each
// GPU instance (ci = -1) and compute instance of each GPU (by its minor).
class MigMinors {
 public:
  // Throws CudaMpsError naming the first malformed line.
  static MigMinors parse(std::string_view text);
  std::optional<int> gi_minor(int gpu_minor, int gi) const;
  std::optional<int> ci_minor(int gpu_minor, int gi, int ci) const;
  // Which instance a pair of capability minors opens on `gpu_minor`: the
  // (gi, ci) whose access minors are exactly `gi_cap` and `ci_cap`.
  std::optional<std::pair<int, int>> instance_of(int gpu_minor, int gi_cap, int ci_cap) const;
  bool empty() const { return minors_.empty(); }

 private:
  std::map<std::tuple<int, int, int>, int> minors_;  // (gpu minor, gi, ci or -1) -> cap minor
};

// The device files Slurm's gpu/nvml plugin gives a MIG GRES, in its order:
// /dev/nvidia<parent minor>, then the GI and CI capability files.
std::vector<std::string> mig_device_files(const MigSlice& mig, const MigMinors& minors);

}  // namespace unilab::mps
