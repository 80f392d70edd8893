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

struct GresConf {
  bool autodetect = false;               // AutoDetect=nvml/nvidia/rsmi for this node
  std::vector<std::string> gpu_files;    // Name=gpu File= entries in GRES order
};

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
  std::string device;              // File= entry (AutoDetect: /dev/nvidia<minor>)
  int minor = -1;                  // -1: not a character device
  std::optional<GpuIdentity> gpu;  // the nvidia-smi GPU whose minor_number matches
  std::string problem;             // why it maps to no GPU; empty when mapped
};

// Every entry of the node's GPU table in GRES order, mapped or not, so that a
// diagnosis (`unilab-mps doctor --node`) can show all of them. Throws
// CudaMpsError only when gres.conf names no GPU for the node and AutoDetect is off.
std::vector<GresGpuMapping> map_node_gpu_entries(const GresConf& conf, const std::vector<GpuIdentity>& gpus,
                                                 const std::function<int(const std::string&)>& minor_of);

// Builds the node's GPU table in GRES order. With File= entries: each
// entry's minor must match exactly one nvidia-smi GPU's minor_number. With
// AutoDetect and no File=: nvidia-smi GPUs sorted by PCI bus id. Throws
// CudaMpsError naming the GPU that cannot be mapped.
std::vector<NodeGpu> map_node_gpus(const GresConf& conf, const std::vector<GpuIdentity>& gpus,
                                   int (*minor_of)(const std::string&) = device_minor);

// Parses SLURM_JOB_GPUS / SLURM_STEP_GPUS ("0,2" or ranges "0-3").
std::vector<int> parse_gpu_index_list(std::string_view value);

}  // namespace unilab::mps
