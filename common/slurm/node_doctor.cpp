// doctor --node, step two: the check table run over the facts, the GPU
// table, and the report as text and JSON.
#include "common/slurm/node_doctor.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace unilab::mps {

nlohmann::json NodeGpuRow::to_json() const {
  return {{"gres_index", gres_index},
          {"device", device},
          {"minor", minor},
          {"nvidia_smi_index", nvidia_smi_index ? nlohmann::json(*nvidia_smi_index) : nlohmann::json(nullptr)},
          {"uuid", uuid.empty() ? nlohmann::json(nullptr) : nlohmann::json(uuid)},
          {"problem", problem.empty() ? nlohmann::json(nullptr) : nlohmann::json(problem)},
          {"mig", mig ? mig->to_json() : nlohmann::json(nullptr)}};
}

bool NodeDoctorReport::ok() const {
  return std::none_of(checks.begin(), checks.end(), [](const auto& c) { return c.status == CheckStatus::kFail; });
}

nlohmann::json NodeDoctorReport::to_json() const {
  nlohmann::json c = nlohmann::json::array();
  for (const auto& ch : checks) c.push_back(ch.to_json());
  nlohmann::json g = nlohmann::json::array();
  for (const auto& row : gpus) g.push_back(row.to_json());
  nlohmann::json j = {{"ok", ok()}, {"node", node}, {"slurm_conf", slurm_conf}, {"checks", c}, {"gpus", g}};
  if (slurm_conf_location) {
    j["slurm_conf_source"] = slurm_conf_location->source;
    if (slurm_conf_location->configless()) j["configless_cache"] = slurm_conf_location->cache_target;
  }
  return j;
}

std::string NodeDoctorReport::to_text() const {
  std::string out = fmt::format("node {} (slurm.conf {})\n", node.empty() ? "?" : node,
                                slurm_conf_location ? slurm_conf_location->describe() : slurm_conf);
  out += render_checks(checks);
  if (!gpus.empty()) {
    size_t w = 6;
    for (const auto& r : gpus) w = std::max(w, r.device.size());
    out += fmt::format("\n{:<5} {:<{}} {:<5} {:<4} {}\n", "GRES", "DEVICE", w, "MINOR", "SMI", "UUID");
    for (const auto& r : gpus) {
      // A MIG slice: its UUID, then what it is part of.
      std::string what = r.problem.empty() ? r.uuid : "NOT MAPPED: " + r.problem;
      if (r.mig && r.problem.empty()) {
        what += fmt::format(" (MIG {} of {}, GPU instance {}, compute instance {})", r.mig->profile, r.mig->parent_uuid,
                            r.mig->gpu_instance, r.mig->compute_instance);
      }
      out += fmt::format("{:<5} {:<{}} {:<5} {:<4} {}\n", r.gres_index, r.device, w, r.minor < 0 ? "-" : std::to_string(r.minor),
                         r.nvidia_smi_index ? std::to_string(*r.nvidia_smi_index) : "-", what);
    }
  }
  out += ok() ? "\nready\n" : "\nnot ready\n";
  return out;
}

NodeDoctorReport node_doctor(NodeProbe& probe, CommandRunner& runner, const NodeDoctorOptions& opt) {
  const NodeFacts facts = gather_node_facts(probe, runner, opt);
  NodeDoctorReport rep;
  rep.slurm_conf = opt.slurm_conf;
  rep.slurm_conf_location = opt.slurm_conf_location;
  rep.node = facts.node;
  rep.checks = run_node_checks(facts, node_checks());
  rep.gpus = node_gpu_rows(facts);
  return rep;
}

}  // namespace unilab::mps
