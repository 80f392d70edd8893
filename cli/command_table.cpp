// The one table of unilab-mps commands: dispatch, `--help`,
// `unilab-mps COMMAND --help` and the man page (unilab-mps-manpage) all come
// from it. A new command is one row; a new option is one line in its row
// (name, value name, help, value check), and shows up in the synopsis, the
// help, the man page and the parser at once.
#include "cli/commands.hpp"
#include "cli/option_values.hpp"

namespace unilab::mps::cli {

namespace {

// The daemon's life: start it, use it, look at it, stop it.
const std::vector<CommandSpec>& daemon_commands() {
  static const std::vector<CommandSpec> table = {
      {"start", "[SELECTOR]", "Start a user-owned MPS control daemon and record its identity",
       "SELECTOR: none = the sole visible GPU; N, GPU-UUID or a unique UUID prefix = single_gpu; a MIG-UUID (nvidia-smi -L) "
       "= a MIG device, one daemon per MIG device as NVIDIA runs MPS on MIG; A,B = one daemon over several whole GPUs; "
       "per-gpu:A,B = one daemon per GPU or MIG device. Pipe and log dirs default to $XDG_RUNTIME_DIR/unilab-mps/NAME or "
       "/tmp/unilab-mps-UID/NAME (0700). The limits are checked and sent exactly as the Slurm plugin's "
       "--unilab-mps-threads/--unilab-mps-mem.",
       {{"--name", "NAME", "daemon name: letters, digits, '.', '_', '-', not starting with '.' (default: from the GPU UUID)",
         daemon_name_value},
        {"--pipe-dir", "DIR", "the daemon's pipe directory (absolute; one daemon only)", absolute_path_value},
        {"--log-dir", "DIR", "the daemon's log directory (absolute; one daemon only)", absolute_path_value},
        {"--timeout", "SEC", "seconds the daemon has to answer, in (0, 3600] (default 10)", seconds_value},
        {"--threads", "PCT", "set_default_active_thread_percentage, in (0, 100]; per daemon: a client can only lower its own", thread_percentage_value},
        {"--mem", "SIZE", "set_default_device_pinned_mem_limit per GPU: an integer with K, M, G or T (e.g. 8G); sent in "
                          "whole MiB (8G -> 8192M); per daemon: a client can only lower its own", mem_limit_value},
        {"--foreground", "", "run the daemon until it ends, then remove the directories this call created"}},
       1, cmd_start},
      {"env", "[NAME | --gpu UUID]", "Print `export` lines for eval in the shell that launches your program",
       "CUDA_VISIBLE_DEVICES as UUIDs, CUDA_MPS_PIPE_DIRECTORY, CUDA_MPS_LOG_DIRECTORY; never changes this shell itself. "
       "A daemon that is not running: its record is cleaned, exit 3.",
       {{"--gpu", "UUID", "the daemon that serves this GPU instead of NAME"}},
       1, cmd_env},
      {"status", "[--job JOBID [--node NAME] [--slurm-conf FILE]]",
       "Show visible GPUs, your recorded daemons with PID/start-time liveness, and control pipes",
       "With --job, on a Slurm node: only the daemons the plugin started for that job on this node (as root: every "
       "user's; else your own), their GPUs, limits and pipes. The records directory and nvidia-smi are the plugin's "
       "state_dir= and nvidia_smi= from the node's plugstack.conf, read as doctor --node reads it (--state-dir and "
       "--nvidia-smi override). Exit 1 when the job has no daemon on this node.",
       {{"--job", "JOBID", "a Slurm job's daemons on this node", job_id_value},
        {"--node", "NAME", "with --job: the Slurm node (default $SLURMD_NODENAME, else this host's NodeName in slurm.conf)",
         node_name_value},
        {"--slurm-conf", "FILE", "with --job: slurm.conf (default $SLURM_CONF, else /etc/slurm/slurm.conf if it exists, else "
         "slurmd's configless cache /run/slurm/conf/slurm.conf)",
         absolute_path_value}},
       0, cmd_status},
      {"stop", "[NAME] | stop --all", "Stop a recorded daemon",
       "Identity-checked quit, then verified SIGTERM/SIGKILL within --timeout; removes its directories and record. A stale "
       "record is cleaned without signalling anything (exit 3; --all: exit 3 when one was stale and nothing failed).",
       {{"--all", "", "every daemon recorded for you on this host"},
        {"--timeout", "SEC", "seconds for quit -> SIGTERM -> SIGKILL, in (0, 3600] (default 10)", seconds_value}},
       1, cmd_stop},
  };
  return table;
}

// The node's commands: checks, the probe, and what an admin reads of the
// jobs' MPS (history, metrics).
const std::vector<CommandSpec>& node_commands() {
  static const std::vector<CommandSpec> table = {
      {"doctor", "[SELECTOR] | doctor --node [--node-name NAME] [--slurm-conf FILE]",
       "Check, without changing anything, that this host (or, with --node, this Slurm node) is ready",
       "Host: nvidia-smi works, the selector resolves, the MPS control binary is executable, records are sound and no "
       "system daemon sits on the default pipe. With --node (on a Slurm node, as root or any user): the plugin is listed "
       "in plugstack.conf (PlugStackConfig of the slurm.conf read, which the report names, the configless cache "
       "included; include lines and plugstack.conf.d followed) "
       "and its arguments parse; slurmd was restarted after the plugin and plugstack.conf last changed; the state and run "
       "directories are root-owned and safe; the nvidia_smi and mps_control of the plugin's arguments are executable; "
       "every GPU maps Slurm GRES index -> gres.conf device -> minor -> the driver's GPU -> UUID (table printed; MIG slices "
       "with their parent); the history journal is root's and bounded; no daemon "
       "listens on /tmp/nvidia-mps; no job-private /dev/shm (job_container/tmpfs). Exit 4 when a check fails.",
       {{"--node", "", "check this Slurm node instead of the host"},
        {"--node-name", "NAME", "with --node: the Slurm node (default $SLURMD_NODENAME, else this host's NodeName)",
         node_name_value},
        {"--slurm-conf", "FILE", "with --node: slurm.conf (default $SLURM_CONF, else /etc/slurm/slurm.conf if it exists, else "
         "slurmd's configless cache /run/slurm/conf/slurm.conf)",
         absolute_path_value}},
       1, cmd_doctor},
      {"visible-devices", "[MASK]", "Print MASK with numeric entries replaced by GPU UUIDs",
       "MASK defaults to $CUDA_VISIBLE_DEVICES: the value a launcher should export before CUDA starts under per-GPU MPS.",
       {},
       1, cmd_visible_devices},
      {"probe",
       "--requested {none|mps} --learner-device cuda:N [--collector-device cuda:N] --backend NAME [--rank R --world-size W] "
       "[--manifest FILE]",
       "Validate (mps) or record (none) the CUDA process-sharing state of one rank",
       "Prints the evidence and, with --manifest, records it atomically under \"cuda_process_sharing\". Exit 1 with the "
       "first unmet prerequisite.",
       {{"--requested", "MODE", "none (record) or mps (validate)", requested_sharing_value, true},
        {"--learner-device", "DEVICE", "the learner's device, e.g. cuda:0", nullptr, true},
        {"--collector-device", "DEVICE", "the collector's device (default: the learner's)"},
        {"--backend", "NAME", "the collector backend", nullptr, true},
        {"--rank", "R", "this rank (default 0)", integer_value},
        {"--world-size", "W", "number of ranks (default 1)", integer_value},
        {"--manifest", "FILE", "JSON manifest to record the evidence in"}},
       0, cmd_probe},
      {"history", "[--job JOBID] [--since TIME] [--file PATH]", "Show the node's journal of job MPS daemons",
       "One line per daemon the epilog stopped: job, user, node, GPUs, when it started and stopped, how it stopped and how "
       "long that took, the MPS servers it started, faults. The journal is the plugin's history= from the node's "
       "plugstack.conf (and its .1 rotation), read as status --job reads the plugin's arguments.",
       {{"--job", "JOBID", "only this job's daemons", job_id_value},
        {"--since", "TIME", "only daemons stopped since TIME: seconds since the epoch, YYYY-MM-DD[THH:MM[:SS]] (UTC), or "
                            "an age such as 90m, 12h, 7d", since_value},
        {"--file", "PATH", "the journal to read instead of the plugin's history=", absolute_path_value},
        {"--node", "NAME", "the Slurm node whose plugstack.conf to read (default $SLURMD_NODENAME, else this host's)",
         node_name_value},
        {"--slurm-conf", "FILE", "slurm.conf (default $SLURM_CONF, else as status --job)", absolute_path_value}},
       0, cmd_history},
      {"metrics", "[--node NAME] [--slurm-conf FILE]", "Print OpenMetrics for the node's job MPS daemons",
       "For node_exporter's textfile collector: per daemon and GPU UUID, labelled by job, user, node and daemon: up, start "
       "time, MPS servers, client processes, limits, faults; ends in # EOF. Reads the plugin's records and /proc only "
       "(run as root to see every user's clients); never asks a daemon anything.",
       {{"--node", "NAME", "the Slurm node (default $SLURMD_NODENAME, else this host's NodeName in slurm.conf)", node_name_value},
        {"--slurm-conf", "FILE", "slurm.conf (default $SLURM_CONF, else as status --job)", absolute_path_value}},
       0, cmd_metrics},
  };
  return table;
}

}  // namespace

const std::vector<CommandSpec>& command_table() {
  static const std::vector<CommandSpec> table = [] {
    std::vector<CommandSpec> all = daemon_commands();
    const auto& more = node_commands();
    all.insert(all.end(), more.begin(), more.end());
    return all;
  }();
  return table;
}

const std::vector<OptionSpec>& global_options() {
  static const std::vector<OptionSpec> options = {
      {"--state-dir", "DIR",
       "records directory (default $XDG_STATE_HOME/unilab-mps or ~/.local/state/unilab-mps; env UNILAB_MPS_STATE_DIR). "
       "With status --job: instead of the plugin's state_dir= from plugstack.conf",
       absolute_path_value},
      {"--run-dir", "DIR", "parent of per-daemon pipe/log dirs (default $XDG_RUNTIME_DIR/unilab-mps or /tmp/unilab-mps-UID; env "
                           "UNILAB_MPS_RUN_DIR)", absolute_path_value},
      {"--nvidia-smi", "PATH", "absolute path (default /usr/bin/nvidia-smi; env UNILAB_MPS_NVIDIA_SMI; with status --job: the "
                               "plugin's nvidia_smi=)", absolute_path_value},
      {"--mps-control", "PATH", "absolute path (default /usr/bin/nvidia-cuda-mps-control; env UNILAB_MPS_CONTROL)",
       absolute_path_value},
      {"--driver-dir", "DIR",
       "the driver's folder when its tools are not in /usr/bin (e.g. /usr/local/nvidia): nvidia-smi and the MPS daemon run "
       "with DIR/bin in PATH and DIR/lib64 in LD_LIBRARY_PATH, and are DIR/bin/... unless given (default none; env "
       "UNILAB_MPS_DRIVER_DIR; the plugin's driver_dir=)",
       absolute_path_value},
      {"--driver-proc", "DIR",
       "where the NVIDIA kernel module shows itself (default /proc/driver: nvidia/gpus/<bus>/information gives each GPU's "
       "device minor; env UNILAB_MPS_DRIVER_PROC; the plugin's driver_proc=); change it only for tests",
       absolute_path_value},
      {"--json", "", "machine-readable output on stdout"},
      {"--help", "", "this text; `unilab-mps COMMAND --help` for one command"},
  };
  return options;
}

ParsedArgs parse_command_line(const std::vector<std::string>& argv) { return parse_args(argv, command_table(), global_options()); }

int run_command(const ParsedArgs& a) {
  if (a.spec == nullptr || a.spec->handler == nullptr) throw UsageError("no command given");
  try {
    Context c(a);
    return a.spec->handler(c, a);
  } catch (const UsageError& e) {
    if (!e.command().empty()) throw;
    throw UsageError(e.what(), a.command);
  }
}

std::string usage_text(const std::string& command) { return usage_text(command_table(), global_options(), command); }

std::string man_page() { return man_page(command_table(), global_options()); }

}  // namespace unilab::mps::cli
