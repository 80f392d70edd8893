// Slurm-style configuration text, tokenized in one place for every file we
// read: slurm.conf and cgroup.conf (with their Include lines), gres.conf,
// plugstack.conf and the prolog/epilog helpers' --config file.
//
// What Slurm itself accepts (src/common/parse_config.c, used for slurm.conf,
// gres.conf, cgroup.conf): `#` starts a comment unless escaped as `\#`; a
// line whose (comment-stripped) end is an odd run of `\` continues on the
// next line, joined without adding a space; `\x` stands for `x` elsewhere;
// a value may be double-quoted to hold spaces (`Key="a b"`, no escapes inside
// the quotes); spaces around `=` are allowed; `Include FILE` (keyword in any
// case) reads FILE, a relative path taken from slurm.conf's directory.
// plugstack.conf is read by src/common/spank.c instead: `#` always starts a
// comment, no continuations or escapes, words split on blanks, `include GLOB`.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace unilab::mps {

enum class ConfigSyntax {
  kSlurm,      // parse_config.c: slurm.conf, gres.conf, cgroup.conf, --config
  kPlugstack,  // spank.c: plugstack.conf
};

struct ConfigLine {
  std::string file;
  int line = 0;                        // first physical line of a continued line
  std::vector<std::string> words;      // kSlurm: `key=value` (quotes removed) or a bare word
  std::optional<std::string> include;  // an Include line: the path or pattern as written
  std::string where() const;           // "file:line"
};

// Tokenizes one file's text. Throws CudaMpsError naming file:line (kSlurm:
// an unterminated quote, a `Key=` without a value, an Include without a
// file). kPlugstack never throws: Slurm skips its bad lines, and a bare
// `include` comes back as a word for the caller to report.
std::vector<ConfigLine> tokenize_config(std::string_view text, const std::string& file, ConfigSyntax syntax);

// Splits a `key=value` word; nullopt for a bare word.
std::optional<std::pair<std::string, std::string>> split_key_value(const std::string& word);

// The path an Include names: absolute as written, else relative to `base_dir`.
std::string include_target(const std::string& base_dir, const std::string& path);

// A file and everything it includes, in reading order. `read` returns a
// file's text (nullopt when it cannot be read); `expand` turns an include
// pattern into files (kPlugstack globs; nullptr: the path itself). Includes
// nest at most `max_depth` deep. A top file that cannot be read throws
// CudaMpsError; an unreadable include or one nested too deep is a problem.
struct ConfigTree {
  std::vector<ConfigLine> lines;  // without the Include lines themselves
  std::vector<std::string> files;
  std::vector<std::string> problems;
  std::vector<std::string> includes;  // "file:line: include PATTERN (N files)"
};
struct ConfigSource {
  std::function<std::optional<std::string>(const std::string&)> read;
  std::function<std::vector<std::string>(const std::string&)> expand;
  ConfigSyntax syntax = ConfigSyntax::kSlurm;
  int max_depth = 8;
  // Optional: sees each line as it is read, with the tree's problem list,
  // so that a caller's own problems stay in reading order.
  std::function<void(const ConfigLine&, std::vector<std::string>& problems)> on_line;
};
ConfigTree read_config_tree(const std::string& path, const ConfigSource& source);

}  // namespace unilab::mps
