// job_prolog / job_epilog (root, in slurmd's spank prolog process): the flow
// is common/slurm/job_hook.hpp's; here only Slurm's logging and return convention.
// No PATH/HOME there and spank_getenv does not work: plain getenv(3).
#include <exception>
#include <string>

#include "common/mps/errors.hpp"
#include "common/mps/gpu.hpp"
#include "common/slurm/job.hpp"
#include "common/slurm/job_logs.hpp"
#include "common/slurm/job_hook.hpp"
#include "spank/plugin.hpp"
#include "spank/state.hpp"

namespace unilab::mps::spank {
namespace {

HookLog slurm_log() {
  return {[](const std::string& m) { slurm_info("unilab-mps: %s", m.c_str()); },
          [](const std::string& m) { slurm_error("unilab-mps: %s", m.c_str()); }};
}

}  // namespace

PluginState& state() {
  static PluginState s;
  return s;
}

std::vector<std::string> plugin_args(int argc, char** argv) {
  std::vector<std::string> out;
  for (int i = 0; i < argc; ++i) out.emplace_back(argv[i] ? argv[i] : "");
  return out;
}

int slurmd_init(int argc, char** argv) {
  try {
    parse_plugin_args(plugin_args(argc, argv));
    return 0;
  } catch (const std::exception& e) {
    slurm_error("unilab-mps: refusing to load: %s", e.what());
    return -1;
  }
}

int job_script_prolog(int argc, char** argv) {
  return run_prolog_hook(process_getenv(), [=] { return plugin_args(argc, argv); }, slurm_log()) ? 0 : -1;
}

int job_script_epilog(int argc, char** argv) {
  return run_epilog_hook(process_getenv(), [=] { return plugin_args(argc, argv); }, slurm_log()) ? 0 : -1;
}

}  // namespace unilab::mps::spank
