// Command table and help text: one source for `--help` and the man page.
#include <map>
#include <string>
#include <vector>

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
       {"doctor [SELECTOR] [--json] | doctor --node [--node-name NAME] [--slurm-conf FILE] [--json]",
        "Check, without changing anything, that nvidia-smi works, the selector resolves, the MPS control binary is "
        "executable, records are sound and no system daemon sits on the default pipe. Exit 4 when a check fails. "
        "With --node (on a Slurm node, as root or any user): the plugin is listed in plugstack.conf (PlugStackConfig of "
        "SLURM_CONF or --slurm-conf, include lines and plugstack.conf.d followed) and its arguments parse; slurmd was "
        "restarted after the plugin and plugstack.conf last changed; the state and run directories are root-owned and "
        "safe; the nvidia_smi and mps_control of the plugin's arguments are executable; every GPU maps Slurm GRES index -> "
        "gres.conf device -> minor -> nvidia-smi index -> UUID (table printed); no daemon listens on /tmp/nvidia-mps; no "
        "job-private /dev/shm (job_container/tmpfs). --node-name defaults to SLURMD_NODENAME, else the slurm.conf node of "
        "this host."}},
      {"start",
       {"start [SELECTOR] [--name NAME] [--pipe-dir DIR] [--log-dir DIR] [--timeout SEC] [--threads PCT] [--mem SIZE] "
        "[--foreground] [--json]",
        "Start a user-owned MPS control daemon and record its identity. SELECTOR: none = the sole visible GPU; N, "
        "GPU-UUID or a unique UUID prefix = single_gpu; A,B = one daemon over several GPUs; per-gpu:A,B = one daemon "
        "per GPU. Pipe and log dirs default to $XDG_RUNTIME_DIR/unilab-mps/NAME or /tmp/unilab-mps-UID/NAME (0700). "
        "NAME: letters, digits, '.', '_', '-', not starting with '.'. --foreground runs the daemon until it ends, then "
        "removes the directories it created."}},
      {"stop",
       {"stop [NAME] | stop --all [--timeout SEC] [--json]",
        "Stop a recorded daemon: identity-checked quit, then verified SIGTERM/SIGKILL within --timeout; removes its "
        "directories and record. A stale record is cleaned without signalling anything (exit 3; --all: exit 3 when one "
        "was stale and nothing failed)."}},
      {"env",
       {"env [NAME | --gpu UUID] [--json]",
        "Print `export` lines (CUDA_VISIBLE_DEVICES as UUIDs, CUDA_MPS_PIPE_DIRECTORY, CUDA_MPS_LOG_DIRECTORY) for "
        "eval in the shell that launches your program; never changes this shell itself. A daemon that is not running: "
        "its record is cleaned, exit 3."}},
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
      {"doctor", {{"--node"}, {"--node-name", "--slurm-conf"}, 1}},
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
  static const CommandSpec spec = {{"--help", "--json"}, {"--state-dir", "--run-dir", "--nvidia-smi", "--mps-control", "--driver-dir"}, 0};
  return spec;
}

namespace {

struct OptionHelp {
  const char* option;
  const char* text;
};

const std::vector<OptionHelp>& global_options_help() {
  static const std::vector<OptionHelp> opts = {
      {"--state-dir DIR",
       "records directory (default $XDG_STATE_HOME/unilab-mps or ~/.local/state/unilab-mps; env UNILAB_MPS_STATE_DIR). "
       "With status --job: the plugin's state_dir (default /run/unilab-mps)"},
      {"--run-dir DIR", "parent of per-daemon pipe/log dirs (default $XDG_RUNTIME_DIR/unilab-mps or /tmp/unilab-mps-UID; env "
                        "UNILAB_MPS_RUN_DIR)"},
      {"--nvidia-smi PATH", "absolute path (default /usr/bin/nvidia-smi; env UNILAB_MPS_NVIDIA_SMI)"},
      {"--mps-control PATH", "absolute path (default /usr/bin/nvidia-cuda-mps-control; env UNILAB_MPS_CONTROL)"},
      {"--driver-dir DIR",
       "the driver's folder when its tools are not in /usr/bin (e.g. /usr/local/nvidia): nvidia-smi and the MPS daemon run "
       "with DIR/bin in PATH and DIR/lib64 in LD_LIBRARY_PATH, and are DIR/bin/... unless given (default none; env "
       "UNILAB_MPS_DRIVER_DIR)"},
      {"--json", "machine-readable output on stdout"},
      {"--help", "this text; `unilab-mps COMMAND --help` for one command"},
  };
  return opts;
}

const std::vector<OptionHelp>& exit_codes_help() {
  static const std::vector<OptionHelp> codes = {
      {"0", "ok"},
      {"1", "error (one line on stderr says what to do)"},
      {"2", "usage"},
      {"3", "a stale record was found and cleaned (nothing was signalled)"},
      {"4", "doctor: not ready"},
  };
  return codes;
}

// Wraps `text` (which starts at column `indent`) at `width` columns,
// continuation lines indented by `indent`.
std::string wrap(const std::string& text, size_t width, size_t indent) {
  std::string out, line;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(' ', pos);
    if (end == std::string::npos) end = text.size();
    std::string word = text.substr(pos, end - pos);
    pos = end + 1;
    if (!line.empty() && indent + line.size() + 1 + word.size() > width) {
      out += line + "\n" + std::string(indent, ' ');
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  return out + line;
}

// roff: a backslash is \e, a minus is \- (so that options can be searched and
// copied), a line must not start with a control character.
std::string roff(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\\') {
      out += "\\e";
    } else if (c == '-') {
      out += "\\-";
    } else {
      out += c;
    }
  }
  if (!out.empty() && (out[0] == '.' || out[0] == '\'')) out = "\\&" + out;
  return out;
}

}  // namespace

std::string usage_text(const std::string& command) {
  const auto& entries = help_entries();
  if (auto it = entries.find(command); it != entries.end()) {
    return std::string("usage: unilab-mps ") + it->second.synopsis + "\n\n" + wrap(it->second.description, 100, 0) + "\n";
  }
  std::string out =
      "usage: unilab-mps [GLOBAL OPTIONS] COMMAND [ARGS]\n\n"
      "User-owned NVIDIA CUDA MPS daemons, identity-checked.\n\ncommands:\n";
  for (const auto& [name, e] : entries) out += std::string("  ") + e.synopsis + "\n";
  out += "\nglobal options:\n";
  for (const auto& o : global_options_help()) {
    std::string head = std::string("  ") + o.option;
    head += std::string(head.size() < 22 ? 22 - head.size() : 1, ' ');
    out += head + wrap(o.text, 100, 22) + "\n";
  }
  std::string codes;
  for (const auto& c : exit_codes_help()) codes += std::string(codes.empty() ? "" : ", ") + c.option + " " + c.text;
  out += "\nexit codes: " + wrap(codes, 100, 12) + "\n";
  return out;
}

std::string man_page() {
#ifndef UNILAB_MPS_VERSION
#define UNILAB_MPS_VERSION "unknown"
#endif
  std::string out;
  out += ".\\\" Generated from cli/help.cpp by unilab-mps-manpage; do not edit.\n";
  out += ".TH UNILAB\\-MPS 1 \"\" \"unilab-mps " UNILAB_MPS_VERSION "\" \"User Commands\"\n";
  out += ".SH NAME\nunilab\\-mps \\- user\\-owned NVIDIA CUDA MPS daemons, identity\\-checked\n";
  out += ".SH SYNOPSIS\n.B unilab\\-mps\n[\\fIGLOBAL OPTIONS\\fR] \\fICOMMAND\\fR [\\fIARGS\\fR]\n";
  out += ".SH DESCRIPTION\n"
         "Starts, inspects and stops NVIDIA CUDA MPS control daemons that run as the calling user, and checks a host or a "
         "Slurm node. In a Slurm cluster the SPANK plugin unilab_mps.so starts one daemon per job GPU (srun/sbatch/salloc "
         "\\-\\-unilab\\-mps) and this command inspects them (status \\-\\-job) and the node (doctor \\-\\-node).\n";
  out += ".SH COMMANDS\n";
  for (const auto& [name, e] : help_entries()) {
    out += ".SS " + roff(name) + "\n.B unilab\\-mps " + roff(e.synopsis) + "\n.PP\n" + roff(e.description) + "\n";
  }
  out += ".SH GLOBAL OPTIONS\n";
  for (const auto& o : global_options_help()) out += ".TP\n.B " + roff(o.option) + "\n" + roff(o.text) + "\n";
  out += ".SH EXIT STATUS\n";
  for (const auto& c : exit_codes_help()) out += ".TP\n.B " + roff(c.option) + "\n" + roff(c.text) + "\n";
  out += ".SH ENVIRONMENT\n"
         ".TP\n.B SLURM_CONF\nslurm.conf for doctor \\-\\-node (default /etc/slurm/slurm.conf when it exists, else the configless cache /run/slurm/conf/slurm.conf)\n"
         ".TP\n.B SLURMD_NODENAME\nthe Slurm node name for status \\-\\-job and doctor \\-\\-node\n"
         ".TP\n.B CUDA_VISIBLE_DEVICES\nthe GPUs start, status and doctor consider\n"
         ".TP\n.B CUDA_MPS_PIPE_DIRECTORY\nthe pipe directory status and probe inspect\n";
  out += ".SH FILES\n"
         ".TP\n.I /run/unilab\\-mps\nrecords of the daemons the Slurm plugin started (plugin argument state_dir)\n"
         ".TP\n.I /usr/share/doc/unilab\\-mps/ADMIN.md\ninstallation, plugin arguments, troubleshooting\n";
  out += ".SH SEE ALSO\n.BR nvidia\\-cuda\\-mps\\-control (1),\n.BR srun (1),\n.BR spank (8)\n";
  return out;
}

}  // namespace unilab::mps::cli
