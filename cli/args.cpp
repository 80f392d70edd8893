#include "cli/args.hpp"

namespace unilab::mps::cli {

ParsedArgs parse_args(const std::vector<std::string>& argv, const std::map<std::string, CommandSpec>& commands,
                      const CommandSpec& global) {
  ParsedArgs out;
  const CommandSpec* spec = nullptr;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.size() > 1 && a[0] == '-' && a != "-") {
      std::string key = a;
      std::optional<std::string> inline_value;
      if (auto eq = a.find('='); eq != std::string::npos && a.rfind("--", 0) == 0) {
        key = a.substr(0, eq);
        inline_value = a.substr(eq + 1);
      }
      if (key == "-h") key = "--help";
      bool is_flag = global.flags.count(key) || (spec && spec->flags.count(key));
      bool takes_value = global.with_value.count(key) || (spec && spec->with_value.count(key));
      if (is_flag) {
        if (inline_value) throw UsageError(key + " takes no value");
        out.flags.insert(key);
      } else if (takes_value) {
        if (inline_value) {
          out.values[key] = *inline_value;
        } else {
          if (i + 1 >= argv.size()) throw UsageError(key + " needs a value");
          out.values[key] = argv[++i];
        }
      } else {
        throw UsageError("unknown option " + key + (out.command.empty() ? "" : " for '" + out.command + "'"));
      }
      continue;
    }
    if (out.command.empty()) {
      auto it = commands.find(a);
      if (it == commands.end()) throw UsageError("unknown command '" + a + "'");
      out.command = a;
      spec = &it->second;
      continue;
    }
    if (out.positional.size() >= spec->max_positional) throw UsageError("unexpected argument '" + a + "' for '" + out.command + "'");
    out.positional.push_back(a);
  }
  return out;
}

}  // namespace unilab::mps::cli
