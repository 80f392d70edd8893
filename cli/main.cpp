// unilab-mps: parse argv against the command table, run one command, map the
// outcome to an exit code.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "common/mps/errors.hpp"

int main(int argc, char** argv) {
  using namespace unilab::mps;
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    cli::ParsedArgs parsed = cli::parse_command_line(args);
    if (parsed.has("--help") || parsed.command.empty()) {
      std::fputs(cli::usage_text(parsed.command).c_str(), parsed.command.empty() && !parsed.has("--help") ? stderr : stdout);
      return parsed.has("--help") ? cli::kExitOk : cli::kExitUsage;
    }
    return cli::run_command(parsed);
  } catch (const cli::UsageError& e) {
    std::string help = e.command().empty() ? "unilab-mps --help" : "unilab-mps " + e.command() + " --help";
    std::fprintf(stderr, "unilab-mps: %s (see `%s`)\n", e.what(), help.c_str());
    return cli::kExitUsage;
  } catch (const CudaMpsError& e) {
    std::fprintf(stderr, "unilab-mps: %s\n", e.what());
    return cli::kExitError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unilab-mps: internal error: %s\n", e.what());
    return cli::kExitError;
  }
}
