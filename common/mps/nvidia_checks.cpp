#include "common/mps/nvidia_checks.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "common/mps/errors.hpp"

namespace unilab::mps {
namespace {

constexpr const char* kExclusiveProcess = "Exclusive_Process";

std::string gpu_label(const GpuIdentity& g) {
  return fmt::format("GPU {} ({}, {})", g.index, g.uuid, g.pci_bus_id);
}

std::string plural(size_t n) { return n == 1 ? "" : "s"; }

}  // namespace

void apply_driver_dir(Tools& tools, const std::string& driver_dir, bool nvidia_smi_given, bool mps_control_given) {
  tools.driver_dir = driver_dir;
  if (!nvidia_smi_given) tools.nvidia_smi = driver_dir + "/bin/nvidia-smi";
  if (!mps_control_given) tools.mps_control = driver_dir + "/bin/nvidia-cuda-mps-control";
}

std::optional<std::string> gpu_refuses_mps(const GpuIdentity& gpu) {
  if (gpu.mig) return std::nullopt;  // a MIG device: its parent's compute mode decides (require_gpus_suit_mps)
  if (gpu.compute_mode == "Prohibited") {
    return "is in compute mode Prohibited: no CUDA process, the MPS server included, may use it (an administrator sets "
           "Exclusive_Process or Default with nvidia-smi -c)";
  }
  if (mig_enabled(gpu)) {
    return "has MIG enabled: MPS runs on its MIG devices, one daemon each, never on the whole GPU; ask for a MIG slice "
           "(Slurm: a MIG GRES such as --gres=gpu:1g.18gb:1; the CLI: its MIG-<uuid> from nvidia-smi -L)";
  }
  return std::nullopt;
}

void require_gpus_suit_mps(const std::vector<GpuIdentity>& gpus, const std::vector<std::string>& uuids) {
  for (const auto& g : gpus) {
    const std::string token = canonicalize_gpu_uuid(g.uuid);
    bool wanted = std::any_of(uuids.begin(), uuids.end(), [&](const auto& u) { return canonicalize_gpu_uuid(u) == token; });
    if (!wanted) continue;
    if (auto why = gpu_refuses_mps(g)) throw CudaMpsError(fmt::format("{} {}", gpu_label(g), *why));
    if (!g.mig) continue;
    auto parent = std::find_if(gpus.begin(), gpus.end(), [&](const auto& p) { return !p.mig && p.uuid == g.mig->parent_uuid; });
    if (parent != gpus.end() && parent->compute_mode == "Prohibited") {
      throw CudaMpsError(fmt::format("MIG device {} is part of {}, which is in compute mode Prohibited: no CUDA process may use "
                                     "it (an administrator sets Default with nvidia-smi -c)",
                                     g.uuid, gpu_label(*parent)));
    }
  }
}

NvidiaToolFacts gather_nvidia_tool_facts(CommandRunner& runner, const Tools& tools,
                                         const std::function<bool(const std::string&)>& executable,
                                         const std::function<bool(const std::string&)>& is_directory,
                                         const DriverFileReader& read) {
  NvidiaToolFacts f;
  f.tools = tools;
  f.nvidia_smi_executable = executable(tools.nvidia_smi);
  if (tools.driver_dir) f.driver_lib_dir_exists = is_directory(*tools.driver_dir + "/lib64");
  const std::string elsewhere = std::string(kContainerDriverDir) + "/bin/nvidia-smi";
  if (!f.nvidia_smi_executable && tools.nvidia_smi != elsewhere && executable(elsewhere)) {
    f.driver_dir_elsewhere = kContainerDriverDir;
  }
  if (!f.nvidia_smi_executable) return f;
  try {
    f.discovery = query_gpus(runner, tools, read);
  } catch (const CudaMpsError& e) {
    f.discovery_error = e.what();
  }
  return f;
}

NvidiaCheckResult check_nvidia_tools_run(const NvidiaToolFacts& f) {
  NvidiaCheckResult r{"nvidia-tools-run", CheckStatus::kOk, ""};
  const Tools& t = f.tools;
  if (!f.nvidia_smi_executable) {
    r.status = CheckStatus::kFail;
    r.detail = f.driver_dir_elsewhere
                   ? fmt::format("{} is missing or not executable, but {}/bin/nvidia-smi exists: set driver_dir={}",
                                 t.nvidia_smi, *f.driver_dir_elsewhere, *f.driver_dir_elsewhere)
                   : fmt::format("{} is missing or not executable; install the driver tools or set nvidia_smi= or driver_dir=",
                                 t.nvidia_smi);
    return r;
  }
  if (f.discovery_error) {
    r.status = CheckStatus::kFail;
    r.detail = *f.discovery_error;
    return r;
  }
  const size_t n = f.discovery ? f.discovery->gpus.size() : 0;
  r.detail = fmt::format("{} reports {} GPU{}", t.nvidia_smi, n, plural(n));
  if (t.driver_dir) {
    r.detail += fmt::format(" (run with {}/bin in PATH and {}/lib64 in LD_LIBRARY_PATH)", *t.driver_dir, *t.driver_dir);
    if (!f.driver_lib_dir_exists) {
      r.status = CheckStatus::kWarn;
      r.detail += fmt::format("; {}/lib64 is not a directory: the MPS daemon may not find the driver's libraries", *t.driver_dir);
    }
  }
  if (f.discovery && f.discovery->warning) {
    r.status = CheckStatus::kWarn;
    r.detail += "; " + *f.discovery->warning;
  }
  return r;
}

NvidiaCheckResult check_compute_modes(const std::vector<GpuIdentity>& gpus) {
  NvidiaCheckResult r{"compute-mode", CheckStatus::kOk, ""};
  std::vector<std::string> refused, not_exclusive, mig;
  size_t whole = 0;
  for (const auto& g : gpus) {
    if (g.mig) continue;  // a MIG device has no compute mode of its own
    if (mig_enabled(g)) {
      // NVIDIA: Exclusive_Process is not supported in MIG mode (one MPS
      // server per MIG device shares the GPU); jobs get its MIG devices.
      const auto n = std::count_if(gpus.begin(), gpus.end(), [&](const auto& m) { return m.mig && m.mig->parent_uuid == g.uuid; });
      mig.push_back(fmt::format("GPU {} has MIG enabled ({} MIG device{}: one daemon each)", g.index, n, plural(static_cast<size_t>(n))));
      continue;
    }
    ++whole;
    if (auto why = gpu_refuses_mps(g)) {
      refused.push_back(fmt::format("{} {}", gpu_label(g), *why));
    } else if (g.compute_mode != kExclusiveProcess) {
      not_exclusive.push_back(fmt::format("GPU {} is {}", g.index, g.compute_mode.empty() ? "(not reported)" : g.compute_mode));
    }
  }
  if (!refused.empty()) {
    r.status = CheckStatus::kFail;
    r.detail = fmt::format("{}; jobs asking for MPS on {} fail", join(refused, "; "), refused.size() == 1 ? "it" : "them");
  } else if (!not_exclusive.empty()) {
    r.status = CheckStatus::kWarn;
    r.detail = fmt::format("{}: MPS works, but NVIDIA recommends Exclusive_Process with MPS (then only the MPS server "
                           "uses the GPU); unilab-mps never changes the mode",
                           join(not_exclusive, ", "));
  } else if (whole > 0) {
    r.detail = fmt::format("{} GPU{} in Exclusive_Process{}", whole, plural(whole), mig.empty() ? ", MIG off" : "");
  } else {
    r.detail = "no whole GPU: compute modes do not apply to MIG devices";
  }
  if (!mig.empty()) r.detail += "; " + join(mig, "; ");
  return r;
}

}  // namespace unilab::mps
