// The unilab-mps subcommands: each parses its options, calls common/, prints.
#pragma once

#include <string>

#include "cli/args.hpp"

namespace unilab::mps::cli {

// Exit codes (documented in README.md and --help).
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;      // a CudaMpsError: the one-line message says what to do
inline constexpr int kExitUsage = 2;      // bad command line
inline constexpr int kExitStale = 3;      // a stale record was found and cleaned; nothing was signalled
inline constexpr int kExitNotReady = 4;   // doctor: a check failed

int run_command(const ParsedArgs& args);
// `probe` (cli/probe_command.cpp).
int cmd_probe(const ParsedArgs& a, bool json, const std::string& nvidia_smi, const std::string& mps_control);
// `doctor --node` (cli/node_doctor_command.cpp).
int cmd_node_doctor(const ParsedArgs& a, bool json);
std::string usage_text(const std::string& command);
// The man page (roff), from the same table as usage_text.
std::string man_page();
const std::map<std::string, CommandSpec>& command_specs();
const CommandSpec& global_spec();

}  // namespace unilab::mps::cli
