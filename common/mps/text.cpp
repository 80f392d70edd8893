#include "common/mps/text.hpp"

#include <cctype>

#include <fmt/format.h>

namespace unilab::mps {

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool has_prefix_ci(std::string_view s, std::string_view lower_prefix) {
  if (s.size() < lower_prefix.size()) return false;
  for (size_t i = 0; i < lower_prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(s[i])) != lower_prefix[i]) return false;
  }
  return true;
}

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> out;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    out.push_back(text.substr(0, end));
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
  }
  return out;
}

std::vector<std::string_view> split_nonempty(std::string_view text, char sep) {
  std::vector<std::string_view> out;
  while (!text.empty()) {
    const size_t at = text.find(sep);
    if (at != 0) out.push_back(text.substr(0, at));
    text.remove_prefix(at == std::string_view::npos ? text.size() : at + 1);
  }
  return out;
}

bool list_has(std::string_view list, std::string_view item, char sep) {
  for (;;) {
    const size_t end = list.find(sep);
    if (list.substr(0, end) == item) return true;
    if (end == std::string_view::npos) return false;
    list.remove_prefix(end + 1);
  }
}

std::string seconds_text(std::chrono::milliseconds d) {
  return d.count() % 1000 == 0 ? fmt::format("{} s", d.count() / 1000) : fmt::format("{:.1f} s", static_cast<double>(d.count()) / 1000);
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

}  // namespace unilab::mps
