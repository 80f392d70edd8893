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

std::string seconds_text(std::chrono::milliseconds d) {
  return d.count() % 1000 == 0 ? fmt::format("{} s", d.count() / 1000) : fmt::format("{:.1f} s", static_cast<double>(d.count()) / 1000);
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

}  // namespace unilab::mps
