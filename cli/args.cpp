#include "cli/args.hpp"

#include <algorithm>

namespace unilab::mps::cli {
namespace {

const OptionSpec* find_option(const std::vector<OptionSpec>& options, const std::string& name) {
  auto it = std::find_if(options.begin(), options.end(), [&](const OptionSpec& o) { return o.name == name; });
  return it == options.end() ? nullptr : &*it;
}

const CommandSpec* find_command(const std::vector<CommandSpec>& commands, const std::string& name) {
  auto it = std::find_if(commands.begin(), commands.end(), [&](const CommandSpec& c) { return c.name == name; });
  return it == commands.end() ? nullptr : &*it;
}

// The command's own options first: a command may give a global name a
// meaning of its own.
const OptionSpec* lookup(const ParsedArgs& out, const std::vector<OptionSpec>& global, const std::string& key) {
  if (out.spec != nullptr) {
    if (const OptionSpec* o = find_option(out.spec->options, key)) return o;
  }
  return find_option(global, key);
}

std::string command_list(const std::vector<CommandSpec>& commands) {
  std::string names;
  for (const auto& c : commands) names += (names.empty() ? "" : ", ") + c.name;
  return names;
}

// One option at argv[i]; advances i past its value.
void parse_option(const std::vector<std::string>& argv, size_t& i, const std::vector<OptionSpec>& global, ParsedArgs& out) {
  const std::string& a = argv[i];
  std::string key = a;
  std::optional<std::string> inline_value;
  if (auto eq = a.find('='); eq != std::string::npos && a.rfind("--", 0) == 0) {
    key = a.substr(0, eq);
    inline_value = a.substr(eq + 1);
  }
  if (key == "-h") key = "--help";
  const OptionSpec* opt = lookup(out, global, key);
  if (opt == nullptr) {
    throw UsageError("unknown option " + key + (out.command.empty() ? "" : " for '" + out.command + "'"), out.command);
  }
  if (opt->is_flag()) {
    if (inline_value) throw UsageError(key + " takes no value", out.command);
    out.flags.insert(key);
    return;
  }
  if (!inline_value) {
    if (i + 1 >= argv.size()) throw UsageError(key + " needs a value (" + opt->value_name + ")", out.command);
    inline_value = argv[++i];
  }
  try {
    out.values[key] = opt->check != nullptr ? opt->check(key, *inline_value) : *inline_value;
  } catch (const UsageError& e) {
    throw UsageError(e.what(), out.command);  // its fix is in COMMAND --help
  }
}

void parse_word(const std::string& a, const std::vector<CommandSpec>& commands, ParsedArgs& out) {
  if (out.spec == nullptr) {
    out.spec = find_command(commands, a);
    if (out.spec == nullptr) throw UsageError("unknown command '" + a + "' (commands: " + command_list(commands) + ")");
    out.command = a;
    return;
  }
  if (out.positional.size() >= out.spec->max_positional) {
    throw UsageError("unexpected argument '" + a + "' for '" + out.command + "'", out.command);
  }
  out.positional.push_back(a);
}

void check_required(const ParsedArgs& out) {
  if (out.spec == nullptr || out.has("--help")) return;
  for (const auto& o : out.spec->options) {
    if (o.required && out.value(o.name).value_or("").empty()) {
      throw UsageError("'" + out.command + "' needs " + o.name + " " + o.value_name, out.command);
    }
  }
}

}  // namespace

ParsedArgs parse_args(const std::vector<std::string>& argv, const std::vector<CommandSpec>& commands,
                      const std::vector<OptionSpec>& global) {
  ParsedArgs out;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.size() > 1 && a[0] == '-') {
      parse_option(argv, i, global, out);
    } else {
      parse_word(a, commands, out);
    }
  }
  check_required(out);
  return out;
}

}  // namespace unilab::mps::cli
