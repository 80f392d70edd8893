// The command table's row type and a small, strict argv parser over it: every
// option is declared with its help and its value check, an unknown option, a
// missing value or a bad value is a usage error (exit 2) naming the option.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace unilab::mps::cli {

class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& what, std::string command = "")
      : std::runtime_error(what), command_(std::move(command)) {}
  // The command whose `--help` explains the fix; empty: the global one.
  const std::string& command() const { return command_; }

 private:
  std::string command_;
};

// Checks one option value; returns it normalized (or unchanged), or throws
// UsageError naming `option` and the fix.
using ValueCheck = std::string (*)(const std::string& option, const std::string& value);

struct OptionSpec {
  std::string name;             // "--mem"
  std::string value_name;       // "SIZE"; empty: a flag
  std::string help;             // for COMMAND --help and the man page
  ValueCheck check = nullptr;   // nullptr: any value
  bool required = false;
  bool is_flag() const { return value_name.empty(); }
};

struct ParsedArgs;
struct Context;
using Handler = int (*)(Context&, const ParsedArgs&);

// One row of the command table: dispatch, `--help`, `COMMAND --help` and the
// man page all come from it.
struct CommandSpec {
  std::string name;
  std::string operands;     // synopsis after the name; options it does not name are appended
  std::string summary;      // one line, for the command list
  std::string description;  // for COMMAND --help and the man page
  std::vector<OptionSpec> options;
  size_t max_positional = 0;
  Handler handler = nullptr;
};

struct ParsedArgs {
  std::string command;
  const CommandSpec* spec = nullptr;  // nullptr: no command given
  std::vector<std::string> positional;
  std::map<std::string, std::string> values;  // --opt VALUE / --opt=VALUE, after the option's check
  std::set<std::string> flags;                // --flag
  bool has(const std::string& f) const { return flags.count(f) != 0; }
  std::optional<std::string> value(const std::string& k) const {
    auto it = values.find(k);
    return it == values.end() ? std::nullopt : std::optional<std::string>(it->second);
  }
};

// Parses argv[1..]: global options may come before or after the command.
// Values are checked (and normalized) by their option's check; required
// options are enforced unless --help was given.
ParsedArgs parse_args(const std::vector<std::string>& argv, const std::vector<CommandSpec>& commands,
                      const std::vector<OptionSpec>& global);

// `name OPERANDS [--opt VALUE]...`: the operands, then every option of the
// row that the operands do not already name, then [--json].
std::string synopsis(const CommandSpec& spec);

// The help texts, from the same table.
std::string usage_text(const std::vector<CommandSpec>& commands, const std::vector<OptionSpec>& global,
                       const std::string& command);
std::string man_page(const std::vector<CommandSpec>& commands, const std::vector<OptionSpec>& global);

}  // namespace unilab::mps::cli
