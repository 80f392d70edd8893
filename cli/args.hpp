// A small, strict argv parser: every option is declared, an unknown option
// or a missing value is a usage error (exit 2).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace unilab::mps::cli {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ParsedArgs {
  std::string command;
  std::vector<std::string> positional;
  std::map<std::string, std::string> values;  // --opt VALUE / --opt=VALUE
  std::set<std::string> flags;                // --flag
  bool has(const std::string& f) const { return flags.count(f) != 0; }
  std::optional<std::string> value(const std::string& k) const {
    auto it = values.find(k);
    return it == values.end() ? std::nullopt : std::optional<std::string>(it->second);
  }
};

struct CommandSpec {
  std::set<std::string> flags;        // e.g. "--json"
  std::set<std::string> with_value;   // e.g. "--name"
  size_t max_positional = 0;
};

// Parses argv[1..]: global options may come before or after the command.
ParsedArgs parse_args(const std::vector<std::string>& argv, const std::map<std::string, CommandSpec>& commands,
                      const CommandSpec& global);

}  // namespace unilab::mps::cli
