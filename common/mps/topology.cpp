#include "common/mps/topology.hpp"

#include <fmt/format.h>

#include "common/mps/errors.hpp"
#include "common/mps/nvidia_checks.hpp"

namespace unilab::mps {

nlohmann::json TopologyPlan::to_json() const {
  nlohmann::json g = nlohmann::json::array();
  for (const auto& gpu : gpus) g.push_back(gpu.to_json());
  return {{"selector", selector}, {"topology_mode", std::string(to_string(topology_mode))}, {"gpus", g}};
}

TopologyPlan resolve_topology(const std::optional<std::string>& selector,
                              const std::optional<std::string>& cuda_visible_devices,
                              const std::vector<GpuIdentity>& host_gpus) {
  std::vector<GpuIdentity> visible = visible_gpus(cuda_visible_devices, host_gpus);
  TopologyPlan plan;
  plan.selector = selector.value_or("");
  std::string sel = plan.selector;
  if (sel.empty()) {
    if (visible.size() == 1) {
      plan.topology_mode = TopologyMode::kSingle;
      plan.gpus = visible;
      return plan;
    }
    std::vector<std::string> listed;
    for (const auto& g : visible) listed.push_back(fmt::format("{}={}", g.index, g.uuid));
    if (visible.empty()) throw CudaMpsError("no GPU is visible (CUDA_VISIBLE_DEVICES hides them all); select one explicitly");
    throw CudaMpsError(fmt::format("{} GPUs are visible ({}); select one (e.g. `0`), several (`0,1`) or `per-gpu:0,1`",
                                   visible.size(), join(listed, ", ")));
  }
  bool per_gpu = sel.starts_with("per-gpu:");
  if (per_gpu) sel = sel.substr(8);
  auto entries = split_mask(sel);
  if (entries.empty()) throw CudaMpsError(fmt::format("selector '{}' names no GPU", plan.selector));
  for (const auto& e : entries) {
    const GpuIdentity& g = find_gpu(e, host_gpus);
    // CUDA does not list a MIG-enabled GPU, so say why, not "not visible".
    if (mig_enabled(g)) throw CudaMpsError(fmt::format("GPU {} ({}) {}", e, g.uuid, gpu_refuses_mps(g).value_or("")));
    bool is_visible = false;
    for (const auto& v : visible) is_visible = is_visible || v.uuid == g.uuid;
    if (!is_visible) {
      throw CudaMpsError(fmt::format("GPU {} ({}) is not visible under CUDA_VISIBLE_DEVICES='{}'; widen the mask or pick a visible GPU",
                                     e, g.uuid, cuda_visible_devices.value_or("")));
    }
    for (const auto& p : plan.gpus) {
      if (p.uuid == g.uuid) throw CudaMpsError(fmt::format("selector '{}' names GPU {} twice", plan.selector, g.uuid));
    }
    plan.gpus.push_back(g);
  }
  if (!per_gpu && plan.gpus.size() > 1) {
    for (const auto& g : plan.gpus) {
      if (!g.mig) continue;
      throw CudaMpsError(fmt::format("selector '{}' puts MIG device {} under one daemon with other GPUs, but NVIDIA runs MPS on "
                                     "MIG as one daemon per MIG device; use per-gpu:{}",
                                     plan.selector, g.uuid, sel));
    }
  }
  if (plan.gpus.size() == 1 && !per_gpu) {
    plan.topology_mode = TopologyMode::kSingle;
  } else {
    plan.topology_mode = per_gpu ? TopologyMode::kPerGpu : TopologyMode::kSingleTaskMulti;
  }
  return plan;
}

std::string uuid_tag(const std::string& uuid) {
  const std::string token = canonicalize_gpu_uuid(uuid);
  // A MIG device's token is "mig-" + hex: its tag says so.
  return token.starts_with("mig-") ? "mig-" + token.substr(4, 8) : token.substr(0, 8);
}

std::string default_daemon_name(const std::vector<GpuIdentity>& gpus) {
  if (gpus.size() == 1) return gpus[0].mig ? uuid_tag(gpus[0].uuid) : "gpu-" + uuid_tag(gpus[0].uuid);
  std::string name = "multi";
  for (const auto& g : gpus) name += "-" + uuid_tag(g.uuid);
  return name;
}

}  // namespace unilab::mps
