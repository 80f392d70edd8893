// Slurm GRES index -> physical GPU. GRES indices in SLURM_JOB_GPUS /
// SLURM_STEP_GPUS are positions in the node's gres.conf `File=` list (with
// AutoDetect, PCI bus order), not /dev/nvidiaN minors and not nvidia-smi
// indices. Identity therefore goes GRES index -> device file -> minor ->
// nvidia-smi minor_number -> UUID.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/mps/gpu.hpp"
#include "common/mps/record.hpp"

namespace unilab::mps {

// One GPU GRES of gres.conf: a File= entry (one file each, after range
// expansion) or a MultipleFiles= line (one GRES over several files: a MIG
// slice, /dev/nvidia<parent minor>,<GI capability>,<CI capability>).
struct GresGpuEntry {
  std::vector<std::string> files;
  std::string type;  // Type=, empty when not given
  bool operator==(const GresGpuEntry&) const = default;
};

struct GresConf {
  bool autodetect = false;               // AutoDetect=nvml/nvidia/rsmi for this node
  std::vector<GresGpuEntry> gpus;        // Name=gpu entries in GRES order
};

// One GRES of a node's Gres= in slurm.conf: `gpu:h200:2` is {"h200", 2},
// `gpu:4` {"", 4}, in the order slurm.conf lists them (slurm_files.hpp
// node_gres reads them).
struct NodeGres {
  std::string type;  // empty: untyped
  unsigned long count = 0;
  bool operator==(const NodeGres&) const = default;
};

// Puts gres.conf's GPU entries in the order Slurm gives them GRES indices:
// slurmd merges gres.conf into slurm.conf's Gres= (gres.c _merge_config),
// taking for each of its types in slurm.conf's order the gres.conf lines of
// that type (any type for an untyped Gres=), in file order, up to its
// count; lines no Gres= entry takes get no index (Slurm discards them).
// Seen with slurmd -G on 22.05.8: Gres=gpu:h200:2,gpu:1g.18gb:2,gpu:3g.71gb:2
// indexes the 1g.18gb lines before the 3g.71gb ones whatever gres.conf's
// order. An empty `node_gres` (no Gres= known) leaves the order as it is.
// Returns the entries no Gres= entry took (for the doctor to name).
std::vector<GresGpuEntry> order_gres_as_slurm(GresConf& conf, const std::vector<NodeGres>& node_gres);

// Expands a Slurm hostlist such as `n[1-3,7],gpu-a` (also used for File=
// ranges like `/dev/nvidia[0-3]`). Throws CudaMpsError when malformed.
std::vector<std::string> expand_hostlist(std::string_view expr);

// Parses gres.conf text for `node`: lines with a NodeName= that does not
// include `node` are skipped; lines without NodeName apply to every node.
// Throws CudaMpsError naming the bad line.
GresConf parse_gres_conf(std::string_view text, const std::string& node);

// Reads a device file's minor number (stat st_rdev); -1 when not a char device.
int device_minor(const std::string& path);

// One GPU of the node's gres.conf and the nvidia-smi GPU it maps to.
struct GresGpuMapping {
  int gres_index = -1;
  // The file that tells this GRES apart: File= (AutoDetect: /dev/nvidia<minor>);
  // a MIG slice's compute-instance capability file.
  std::string device;
  std::vector<std::string> files;  // every file of the GRES (a MIG slice: parent, GI and CI capabilities)
  int minor = -1;                  // device's minor; -1: not a character device
  std::optional<GpuIdentity> gpu;  // the nvidia-smi GPU (or MIG device) it is
  std::string problem;             // why it maps to no GPU; empty when mapped
};

// What the MIG mapping reads besides nvidia-smi: the driver's capability
// minors (/proc/driver/nvidia-caps/mig-minors), or why they are missing.
struct MigCaps {
  std::optional<MigMinors> minors;
  std::string error;  // why `minors` is missing, for the message of a MIG GRES
};

// Every entry of the node's GPU table in GRES order, mapped or not, so that a
// diagnosis (`unilab-mps doctor --node`) can show all of them. `gpus` is
// what query_gpus found: the GPUs, then the MIG devices of MIG-enabled
// ones. Throws CudaMpsError only when gres.conf names no GPU for the node
// and AutoDetect is off.
//  - File=: the entry's minor must match one GPU's minor_number;
//  - MultipleFiles= (a MIG slice): the first file is the parent GPU, the
//    other two its GI and CI capability files, whose minors name one
//    (gi, ci) of that GPU in `caps` and so one MIG device;
//  - AutoDetect without File= entries: as Slurm's gpu/nvml orders them
//    (24.11+): the GPUs without MIG in PCI bus order, then every MIG
//    device, by parent minor and GI capability minor; a MIG-enabled GPU
//    itself is no GRES.
std::vector<GresGpuMapping> map_node_gpu_entries(const GresConf& conf, const std::vector<GpuIdentity>& gpus,
                                                 const std::function<int(const std::string&)>& minor_of,
                                                 const MigCaps& caps = {});

// Builds the node's GPU table in GRES order (map_node_gpu_entries). Throws
// CudaMpsError naming the GPU that cannot be mapped.
std::vector<NodeGpu> map_node_gpus(const GresConf& conf, const std::vector<GpuIdentity>& gpus,
                                   int (*minor_of)(const std::string&) = device_minor, const MigCaps& caps = {});

// Slurm's own pairing of the job's GRES indices with UUIDs: where the
// prolog's CUDA_VISIBLE_DEVICES holds UUIDs (Slurm's gpu/nvml puts a MIG
// slice's UUID there, and from 26.05 a GPU's), its i-th entry is the GPU
// of the i-th index of SLURM_JOB_GPUS. Those entries of `table` are made
// Slurm's: an entry that names another device is replaced by the one the
// UUID names among `gpus` (Slurm 22.05 orders MIG GRES other than 24.11,
// which map_node_gpu_entries follows). Returns what was replaced, for the
// log. Throws CudaMpsError when the UUID names no device of this node, or
// the lists differ in length. A mask of indices changes nothing.
std::vector<std::string> apply_slurm_uuids(std::vector<NodeGpu>& table, const std::vector<int>& job_gpus,
                                           const std::optional<std::string>& prolog_cvd, const std::vector<GpuIdentity>& gpus,
                                           const MigCaps& caps);

// Reads /proc/driver/nvidia-caps/mig-minors (or `path`) for the MIG mapping.
MigCaps read_mig_caps(const std::string& path);

// Parses SLURM_JOB_GPUS / SLURM_STEP_GPUS ("0,2" or ranges "0-3").
std::vector<int> parse_gpu_index_list(std::string_view value);

}  // namespace unilab::mps
