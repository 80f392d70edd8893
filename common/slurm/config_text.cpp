#include "common/slurm/config_text.hpp"

#include <cctype>

#include <fmt/format.h>

#include "common/mps/errors.hpp"
#include "common/mps/text.hpp"

namespace unilab::mps {
namespace {

bool blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f'; }
bool key_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.'; }

// parse_config.c's _strip_comments: `#` after an even run of `\` (or none).
std::string_view strip_slurm_comment(std::string_view line) {
  size_t run = 0;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '#' && run % 2 == 0) return line.substr(0, i);
    run = line[i] == '\\' ? run + 1 : 0;
  }
  return line;
}

// parse_config.c's _strip_continuation: an odd run of `\` before trailing
// blanks continues the line; the last `\` and what follows it go.
bool strip_continuation(std::string& line) {
  size_t end = line.size();
  while (end > 0 && blank(line[end - 1])) --end;
  size_t run = 0;
  while (run < end && line[end - 1 - run] == '\\') ++run;
  if (run % 2 == 0) return false;
  line.resize(end - 1);
  return true;
}

// parse_config.c's _strip_escapes: `\x` -> `x`.
std::string strip_escapes(const std::string& line) {
  std::string out;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '\\' && ++i >= line.size()) break;
    out += line[i];
  }
  return out;
}

// One `key[op]=value` word at `p` (the regex of parse_config.c), or nullopt.
std::optional<std::string> key_value_at(const std::string& s, size_t& p, const std::string& where) {
  size_t q = p;
  while (q < s.size() && key_char(s[q])) ++q;
  if (q == p) return std::nullopt;
  std::string key = s.substr(p, q - p);
  size_t r = q;
  while (r < s.size() && blank(s[r])) ++r;
  if (r < s.size() && std::string_view("-*+/").find(s[r]) != std::string_view::npos && r + 1 < s.size() && s[r + 1] == '=') {
    key += s[r++];
  }
  if (r >= s.size() || s[r] != '=') return std::nullopt;
  for (++r; r < s.size() && blank(s[r]);) ++r;
  if (r >= s.size()) throw CudaMpsError(fmt::format("{}: '{}=' has no value", where, key));
  std::string value;
  if (s[r] == '"') {
    size_t close = s.find('"', r + 1);
    if (close == std::string::npos) throw CudaMpsError(fmt::format("{}: unterminated quote in the value of {}", where, key));
    value = s.substr(r + 1, close - r - 1);
    r = close + 1;
  } else {
    size_t e = r;
    while (e < s.size() && !blank(s[e])) ++e;
    value = s.substr(r, e - r);
    r = e;
  }
  p = r;
  return key + "=" + value;
}

std::vector<std::string> slurm_words(const std::string& s, const std::string& where) {
  std::vector<std::string> out;
  size_t p = 0;
  while (true) {
    while (p < s.size() && blank(s[p])) ++p;
    if (p >= s.size()) break;
    if (auto kv = key_value_at(s, p, where)) {
      out.push_back(std::move(*kv));
      continue;
    }
    size_t e = p;
    while (e < s.size() && !blank(s[e])) ++e;
    out.push_back(s.substr(p, e - p));
    p = e;
  }
  return out;
}

std::vector<std::string> blank_words(std::string_view s) {
  std::vector<std::string> out;
  size_t p = 0;
  while (true) {
    while (p < s.size() && blank(s[p])) ++p;
    if (p >= s.size()) break;
    size_t e = p;
    while (e < s.size() && !blank(s[e])) ++e;
    out.emplace_back(s.substr(p, e - p));
    p = e;
  }
  return out;
}

// Slurm's _parse_include_directive: "include" in any case, then blanks,
// then the file name up to the next blank.
std::optional<std::string> slurm_include(const std::string& s, const std::string& where) {
  if (s.size() < 8 || lower(s.substr(0, 7)) != "include" || !blank(s[7])) return std::nullopt;
  auto words = blank_words(std::string_view(s).substr(7));
  if (words.empty()) throw CudaMpsError(fmt::format("{}: Include without a file", where));
  if (words.size() > 1) throw CudaMpsError(fmt::format("{}: text after the Include file '{}'", where, words[1]));
  return words[0];
}

std::vector<ConfigLine> tokenize_slurm(std::string_view text, const std::string& file) {
  std::vector<ConfigLine> out;
  auto lines = split_lines(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    ConfigLine cl;
    cl.file = file;
    cl.line = static_cast<int>(i) + 1;
    std::string joined(strip_slurm_comment(lines[i]));
    while (strip_continuation(joined) && i + 1 < lines.size()) joined += strip_slurm_comment(lines[++i]);
    std::string s = strip_escapes(joined);
    size_t start = 0;
    while (start < s.size() && blank(s[start])) ++start;
    s.erase(0, start);
    if (s.find_first_not_of(" \t\r\n\v\f") == std::string::npos) continue;
    cl.include = slurm_include(s, cl.where());
    if (!cl.include) cl.words = slurm_words(s, cl.where());
    out.push_back(std::move(cl));
  }
  return out;
}

// spank.c's _plugin_stack_parse_line: the first `#` ends the line; words
// split on blanks; `include` (exactly) takes one pattern.
std::vector<ConfigLine> tokenize_plugstack(std::string_view text, const std::string& file) {
  std::vector<ConfigLine> out;
  auto lines = split_lines(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string_view l = lines[i];
    if (auto hash = l.find('#'); hash != std::string_view::npos) l = l.substr(0, hash);
    ConfigLine cl{file, static_cast<int>(i) + 1, blank_words(l), std::nullopt};
    if (cl.words.empty()) continue;
    if (cl.words[0] == "include" && cl.words.size() >= 2) {  // a bare `include` is the caller's to report
      cl.include = cl.words[1];
      cl.words.clear();
    }
    out.push_back(std::move(cl));
  }
  return out;
}

std::string dir_of(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

void read_into(ConfigTree& tree, const std::string& path, const std::string& base_dir, const ConfigSource& src, int depth);

void follow_include(ConfigTree& tree, const ConfigLine& l, const std::string& base_dir, const ConfigSource& src, int depth) {
  // Slurm: relative to slurm.conf's directory; spank.c: to the including file's.
  const std::string target =
      include_target(src.syntax == ConfigSyntax::kSlurm ? base_dir : dir_of(l.file), *l.include);
  if (depth >= src.max_depth) {
    tree.problems.push_back(fmt::format("{}: includes nested deeper than {}; not followed", l.where(), src.max_depth));
    return;
  }
  std::vector<std::string> files = src.expand ? src.expand(target) : std::vector<std::string>{target};
  tree.includes.push_back(fmt::format("{}: include {} ({} file{})", l.where(), target, files.size(), files.size() == 1 ? "" : "s"));
  for (const auto& f : files) read_into(tree, f, base_dir, src, depth + 1);
}

void read_into(ConfigTree& tree, const std::string& path, const std::string& base_dir, const ConfigSource& src, int depth) {
  auto text = src.read(path);
  if (!text) {
    if (depth == 0) throw CudaMpsError(fmt::format("cannot read {}", path));
    tree.problems.push_back(fmt::format("{}: cannot read this included file", path));
    return;
  }
  tree.files.push_back(path);
  for (auto& l : tokenize_config(*text, path, src.syntax)) {
    if (l.include) {
      follow_include(tree, l, base_dir, src, depth);
    } else {
      if (src.on_line) src.on_line(l, tree.problems);
      tree.lines.push_back(std::move(l));
    }
  }
}

}  // namespace

std::string ConfigLine::where() const { return fmt::format("{}:{}", file, line); }

std::vector<ConfigLine> tokenize_config(std::string_view text, const std::string& file, ConfigSyntax syntax) {
  return syntax == ConfigSyntax::kSlurm ? tokenize_slurm(text, file) : tokenize_plugstack(text, file);
}

std::optional<std::pair<std::string, std::string>> split_key_value(const std::string& word) {
  auto eq = word.find('=');
  if (eq == std::string::npos) return std::nullopt;
  return std::make_pair(word.substr(0, eq), word.substr(eq + 1));
}

std::string include_target(const std::string& base_dir, const std::string& path) {
  if (!path.empty() && path[0] == '/') return path;
  return (base_dir.ends_with("/") ? base_dir : base_dir + "/") + path;
}

ConfigTree read_config_tree(const std::string& path, const ConfigSource& source) {
  ConfigTree tree;
  read_into(tree, path, dir_of(path), source, 0);
  return tree;
}

}  // namespace unilab::mps
