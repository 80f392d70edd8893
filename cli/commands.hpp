// The unilab-mps commands: one table (cli/command_table.cpp) of rows
// {name, synopsis, summary, options with help and checks, handler}; each
// handler calls common/ and prints.
#pragma once

#include <string>
#include <vector>

#include "cli/args.hpp"
#include "cli/context.hpp"
#include "common/slurm/slurm_conf_path.hpp"

namespace unilab::mps::cli {

// Exit codes (documented in README.md and --help).
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;      // a CudaMpsError: the one-line message says what to do
inline constexpr int kExitUsage = 2;      // bad command line
inline constexpr int kExitStale = 3;      // a stale record was found and cleaned; nothing was signalled
inline constexpr int kExitNotReady = 4;   // doctor: a check failed

// The table: adding a command is one row, adding an option one line in it.
const std::vector<CommandSpec>& command_table();
const std::vector<OptionSpec>& global_options();

// Parses argv[1..] against the table.
ParsedArgs parse_command_line(const std::vector<std::string>& argv);
// Runs the parsed command's handler; a UsageError it throws names the command.
int run_command(const ParsedArgs& args);
std::string usage_text(const std::string& command);
std::string man_page();

// The handlers (cli/commands.cpp unless noted).
int cmd_start(Context& c, const ParsedArgs& a);
int cmd_stop(Context& c, const ParsedArgs& a);
int cmd_env(Context& c, const ParsedArgs& a);
int cmd_status(Context& c, const ParsedArgs& a);         // cli/status_command.cpp
int cmd_doctor(Context& c, const ParsedArgs& a);
int cmd_visible_devices(Context& c, const ParsedArgs& a);
int cmd_probe(Context& c, const ParsedArgs& a);          // cli/probe_command.cpp
int cmd_node_doctor(Context& c, const ParsedArgs& a);    // cli/node_doctor_command.cpp
int cmd_history(Context& c, const ParsedArgs& a);        // cli/ops_commands.cpp
int cmd_metrics(Context& c, const ParsedArgs& a);        // cli/ops_commands.cpp

// slurm.conf for status --job and doctor --node: --slurm-conf, else
// $SLURM_CONF, else /etc/slurm/slurm.conf when it exists, else slurmd's
// configless cache /run/slurm/conf when trusted (cli/node_doctor_command.cpp).
SlurmConfLocation slurm_conf_of(const ParsedArgs& a);
// The Slurm node: --node/--node-name as given, else $SLURMD_NODENAME, else
// nullopt (then slurm.conf decides, as doctor --node does).
std::optional<std::string> slurm_node_of(const ParsedArgs& a, const std::string& option);
// Slurm's PluginDir when slurm.conf sets none (the build's).
std::string default_plugin_dir();

}  // namespace unilab::mps::cli
