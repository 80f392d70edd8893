// Selector syntax -> GPUs + topology mode, before any host service exists.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/mps/gpu.hpp"
#include "common/mps/modes.hpp"

namespace unilab::mps {

struct TopologyPlan {
  std::string selector;  // as given ("" for none)
  TopologyMode topology_mode = TopologyMode::kSingle;
  std::vector<GpuIdentity> gpus;
  nlohmann::json to_json() const;
};

// Selectors: none = the sole visible GPU (error listing them when several);
// `N`, `GPU-...` or a unique UUID prefix, or a whole `MIG-...` = single_gpu;
// `A,B` = single_task_multi_gpu (one daemon over those GPUs; refused when
// one is a MIG device: NVIDIA runs MPS on MIG one daemon per MIG device);
// `per-gpu:A,B` = task_per_gpu (one daemon per GPU). Entries resolve among the GPUs visible
// under `cuda_visible_devices` (indices are host nvidia-smi indices).
TopologyPlan resolve_topology(const std::optional<std::string>& selector,
                              const std::optional<std::string>& cuda_visible_devices,
                              const std::vector<GpuIdentity>& host_gpus);

// The first 8 hex digits of a UUID, `mig-` first for a MIG device.
std::string uuid_tag(const std::string& uuid);

// The daemon name a plan gets by default: `gpu-<first 8 hex>` per GPU
// (`mig-<first 8 hex>` per MIG device), or `multi-<8hex>-<8hex>...` for one
// daemon over several.
std::string default_daemon_name(const std::vector<GpuIdentity>& gpus);

}  // namespace unilab::mps
