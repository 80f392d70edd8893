#include "cli/option_values.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <ctime>

#include <fmt/format.h>

#include "cli/args.hpp"
#include "common/mps/errors.hpp"
#include "common/mps/safefs.hpp"
#include "common/slurm/history.hpp"
#include "common/slurm/slurm_config.hpp"

namespace unilab::mps::cli {
namespace {

// Values are echoed in messages: cut and made printable.
std::string shown(const std::string& value) {
  std::string s = value.size() > 40 ? value.substr(0, 40) + "..." : value;
  for (auto& c : s) if (!std::isprint(static_cast<unsigned char>(c))) c = '?';
  return s;
}

// A message of common/ becomes a usage error that names the option.
template <typename Parse>
std::string through_plugin_parser(const std::string& option, Parse parse) {
  try {
    return parse();
  } catch (const CudaMpsError& e) {
    throw UsageError(option + ": " + e.what());
  }
}

}  // namespace

std::string absolute_path_value(const std::string& option, const std::string& value) {
  if (value.empty() || value[0] != '/') {
    throw UsageError(fmt::format("{}: '{}' must be an absolute path (starting with /)", option, shown(value)));
  }
  return value;
}

std::string seconds_value(const std::string& option, const std::string& value) {
  char* end = nullptr;
  double v = std::strtod(value.c_str(), &end);
  if (value.empty() || end == value.c_str() || *end != '\0' || !(v > 0) || v > 3600 || !std::isfinite(v)) {
    throw UsageError(fmt::format("{}: '{}' is not a number of seconds; give one in (0, 3600], e.g. 10", option, shown(value)));
  }
  return value;
}

std::string integer_value(const std::string& option, const std::string& value) {
  int out = 0;
  auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), out);
  if (value.empty() || ec != std::errc() || p != value.data() + value.size()) {
    throw UsageError(fmt::format("{}: '{}' is not an integer; give one such as 0", option, shown(value)));
  }
  return value;
}

std::string daemon_name_value(const std::string& option, const std::string& value) {
  if (!is_safe_name(value)) {
    throw UsageError(fmt::format("{}: '{}' is not a valid daemon name: letters, digits, '.', '_' and '-', not starting with "
                                 "'.', at most 128 characters", option, shown(value)));
  }
  return value;
}

std::string node_name_value(const std::string& option, const std::string& value) {
  if (!is_safe_name(value)) {
    throw UsageError(fmt::format("{}: '{}' is not a Slurm node name; give the name sinfo shows, e.g. n1", option, shown(value)));
  }
  return value;
}

std::string job_id_value(const std::string& option, const std::string& value) {
  bool digits = !value.empty() && value.size() <= 20 &&
                std::all_of(value.begin(), value.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
  if (!digits) throw UsageError(fmt::format("{}: '{}' is not a Slurm job id; give the number squeue shows", option, shown(value)));
  return value;
}

std::string since_value(const std::string& option, const std::string& value) {
  auto t = parse_since(value, static_cast<double>(std::time(nullptr)));
  if (!t) {
    throw UsageError(fmt::format("{}: '{}' is not a time; give seconds since the epoch, a UTC date such as 2026-12-04 or "
                                 "2026-12-04T18:30, or an age such as 90m, 12h, 7d", option, shown(value)));
  }
  return fmt::format("{:.0f}", *t);
}

std::string requested_sharing_value(const std::string& option, const std::string& value) {
  if (value != "none" && value != "mps") throw UsageError(fmt::format("{}: '{}' is neither none nor mps", option, shown(value)));
  return value;
}

std::string thread_percentage_value(const std::string& option, const std::string& value) {
  return through_plugin_parser(option, [&] {
    parse_thread_percentage(value, std::nullopt);
    return value;
  });
}

std::string mem_limit_value(const std::string& option, const std::string& value) {
  return through_plugin_parser(option, [&] { return parse_mem_limit(value, std::nullopt); });
}

}  // namespace unilab::mps::cli
