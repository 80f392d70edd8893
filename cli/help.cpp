// Command table and help text: one source for `--help` and the man page.
#include <map>
#include <string>

#include "cli/commands.hpp"

namespace unilab::mps::cli {
namespace {

struct HelpEntry {
  const char* synopsis;
  const char* description;
};

const std::map<std::string, HelpEntry>& help_entries() {
  static const std::map<std::string, HelpEntry> entries = {
      {"status",
       {"status [--job JOBID [--node NAME]] [--json]",
        "Show visible GPUs, your recorded daemons with PID/start-time liveness, and control pipes. "
        "With --job, the daemons the Slurm plugin started for that job (records in /run/unilab-mps or --state-dir)."}},
      {"doctor",
       {"doctor [SELECTOR] [--json]",
        "Check, without changing anything, that nvidia-smi works, the selector resolves, the MPS control binary is "
        "executable, records are sound and no system daemon sits on the default pipe. Exit 4 when a check fails."}},
      {"start",
       {"start [SELECTOR] [--name NAME] [--pipe-dir DIR] [--log-dir DIR] [--timeout SEC] [--threads PCT] [--mem SIZE] "
        "[--foreground] [--json]",
        "Start a user-owned MPS control daemon and record its identity. SELECTOR: none = the sole visible GPU; N, "
        "GPU-UUID or a unique UUID prefix = single_gpu; A,B = one daemon over several GPUs; per-gpu:A,B = one daemon "
        "per GPU. Pipe and log dirs default to $XDG_RUNTIME_DIR/unilab-mps/NAME or /tmp/unilab-mps-UID/NAME (0700)."}},
      {"stop",
       {"stop [NAME] | stop --all [--timeout SEC] [--json]",
        "Stop a recorded daemon: identity-checked quit, then verified SIGTERM/SIGKILL within --timeout; removes its "
        "directories and record. A stale record is cleaned without signalling anything (exit 3)."}},
      {"env",
       {"env [NAME | --gpu UUID] [--json]",
        "Print `export` lines (CUDA_VISIBLE_DEVICES as UUIDs, CUDA_MPS_PIPE_DIRECTORY, CUDA_MPS_LOG_DIRECTORY) for "
        "eval in the shell that launches your program; never changes this shell itself."}},
      {"visible-devices",
       {"visible-devices [MASK] [--json]",
        "Print MASK (default: $CUDA_VISIBLE_DEVICES) with numeric entries replaced by GPU UUIDs: the value a launcher "
        "should export before CUDA starts under per-GPU MPS."}},
      {"probe",
       {"probe --requested {none|mps} --learner-device cuda:N [--collector-device cuda:N] --backend NAME "
        "[--rank R --world-size W] [--manifest FILE] [--json]",
        "Validate (mps) or record (none) the CUDA process-sharing state of one rank; prints the evidence and, with "
        "--manifest, records it atomically under \"cuda_process_sharing\". Exit 1 with the first unmet prerequisite."}},
  };
  return entries;
}

}  // namespace

const std::map<std::string, CommandSpec>& command_specs() {
  static const std::map<std::string, CommandSpec> specs = {
      {"status", {{}, {"--job", "--node"}, 0}},
      {"doctor", {{}, {}, 1}},
      {"start", {{"--foreground"}, {"--name", "--pipe-dir", "--log-dir", "--timeout", "--threads", "--mem"}, 1}},
      {"stop", {{"--all"}, {"--timeout"}, 1}},
      {"env", {{}, {"--gpu"}, 1}},
      {"visible-devices", {{}, {}, 1}},
      {"probe",
       {{}, {"--requested", "--learner-device", "--collector-device", "--backend", "--rank", "--world-size", "--manifest"}, 0}},
  };
  return specs;
}

const CommandSpec& global_spec() {
  static const CommandSpec spec = {{"--help", "--json"}, {"--state-dir", "--run-dir", "--nvidia-smi", "--mps-control"}, 0};
  return spec;
}

std::string usage_text(const std::string& command) {
  const auto& entries = help_entries();
  if (auto it = entries.find(command); it != entries.end()) {
    return std::string("usage: unilab-mps ") + it->second.synopsis + "\n\n" + it->second.description + "\n";
  }
  std::string out =
      "usage: unilab-mps [GLOBAL OPTIONS] COMMAND [ARGS]\n\n"
      "User-owned NVIDIA CUDA MPS daemons, identity-checked.\n\ncommands:\n";
  for (const auto& [name, e] : entries) out += std::string("  ") + e.synopsis + "\n";
  out +=
      "\nglobal options:\n"
      "  --state-dir DIR     records directory (default $XDG_STATE_HOME/unilab-mps or ~/.local/state/unilab-mps;\n"
      "                      env UNILAB_MPS_STATE_DIR)\n"
      "  --run-dir DIR       parent of per-daemon pipe/log dirs (default $XDG_RUNTIME_DIR/unilab-mps or\n"
      "                      /tmp/unilab-mps-UID; env UNILAB_MPS_RUN_DIR)\n"
      "  --nvidia-smi PATH   absolute path (default /usr/bin/nvidia-smi; env UNILAB_MPS_NVIDIA_SMI)\n"
      "  --mps-control PATH  absolute path (default /usr/bin/nvidia-cuda-mps-control; env UNILAB_MPS_CONTROL)\n"
      "  --json              machine-readable output on stdout\n"
      "  --help              this text; `unilab-mps COMMAND --help` for one command\n"
      "\nexit codes: 0 ok, 1 error (the message says what to do), 2 usage, 3 stale record cleaned, 4 doctor: not ready\n";
  return out;
}

}  // namespace unilab::mps::cli
