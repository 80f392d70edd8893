#include "cli/context.hpp"

#include <pwd.h>

#include <cstdlib>

#include <fmt/format.h>

#include "common/mps/errors.hpp"
#include "common/mps/env.hpp"
#include "common/mps/nvidia_checks.hpp"

namespace unilab::mps::cli {

std::optional<std::string> getenv_opt(const char* key) { return process_env(key); }

std::string default_user_state_dir() {
  auto xdg = process_env("XDG_STATE_HOME");
  if (xdg && !xdg->empty() && (*xdg)[0] == '/') return *xdg + "/unilab-mps";
  auto home = process_env("HOME");
  std::string h = home && !home->empty() && (*home)[0] == '/' ? *home : "";
  if (h.empty()) {
    struct passwd* pw = getpwuid(getuid());
    if (pw != nullptr && pw->pw_dir != nullptr) h = pw->pw_dir;
  }
  if (h.empty()) throw CudaMpsError("cannot find a state directory: set HOME or XDG_STATE_HOME, or pass --state-dir");
  return h + "/.local/state/unilab-mps";
}

std::string default_user_run_dir(uid_t uid) {
  if (auto xdg = getenv_opt("XDG_RUNTIME_DIR"); xdg && !xdg->empty() && (*xdg)[0] == '/') return *xdg + "/unilab-mps";
  return fmt::format("/tmp/unilab-mps-{}", uid);
}

Context::Context(const ParsedArgs& a) {
  json = a.has("--json");
  auto smi = a.value("--nvidia-smi");
  if (!smi) smi = getenv_opt("UNILAB_MPS_NVIDIA_SMI");
  auto control = a.value("--mps-control");
  if (!control) control = getenv_opt("UNILAB_MPS_CONTROL");
  tools.nvidia_smi = smi.value_or(tools.nvidia_smi);
  tools.mps_control = control.value_or(tools.mps_control);
  auto driver_dir = a.value("--driver-dir");
  if (!driver_dir) driver_dir = getenv_opt("UNILAB_MPS_DRIVER_DIR");
  if (driver_dir) {
    if (driver_dir->empty() || (*driver_dir)[0] != '/') throw UsageError(fmt::format("'{}' must be an absolute path", *driver_dir));
    apply_driver_dir(tools, *driver_dir, smi.has_value(), control.has_value());
  }
  auto driver_proc = a.value("--driver-proc");
  if (!driver_proc) driver_proc = getenv_opt("UNILAB_MPS_DRIVER_PROC");
  tools.driver_proc = driver_proc.value_or(tools.driver_proc);
  auto sd = a.value("--state-dir");
  if (!sd) sd = getenv_opt("UNILAB_MPS_STATE_DIR");
  state_dir = sd ? *sd : default_user_state_dir();
  auto rd = a.value("--run-dir");
  if (!rd) rd = getenv_opt("UNILAB_MPS_RUN_DIR");
  run_dir = rd ? *rd : default_user_run_dir(uid);
  // Flags were checked by the table; the environment is checked here.
  for (const auto* p : {&tools.nvidia_smi, &tools.mps_control, &tools.driver_proc, &state_dir, &run_dir}) {
    if (p->empty() || (*p)[0] != '/') throw UsageError(fmt::format("'{}' must be an absolute path", *p));
  }
}

StatusQuery caller_query(const Context& c) {
  StatusQuery q;
  q.cuda_visible_devices = getenv_opt("CUDA_VISIBLE_DEVICES");
  q.pipe_directory_env = getenv_opt("CUDA_MPS_PIPE_DIRECTORY");
  q.uid = c.uid;
  q.host = c.host;
  return q;
}

}  // namespace unilab::mps::cli
