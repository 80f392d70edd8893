#include "common/slurm/slurm_series.hpp"

#include <cctype>
#include <charconv>
#include <tuple>

#include <fmt/format.h>

namespace unilab::mps {
namespace {

// Reads digits at `pos`; -1 when there are none.
int number_at(std::string_view s, size_t& pos) {
  int value = 0;
  auto [end, ec] = std::from_chars(s.data() + pos, s.data() + s.size(), value);
  if (ec != std::errc()) return -1;
  pos = static_cast<size_t>(end - s.data());
  return value;
}

}  // namespace

std::string SlurmVersion::series() const { return fmt::format("{}.{:02}", major, minor); }
std::string SlurmVersion::to_string() const { return fmt::format("{}.{:02}.{}", major, minor, micro); }

std::optional<SlurmVersion> parse_slurm_version(std::string_view output) {
  // The first line: a word starting with "slurm", blanks, then MAJOR.MINOR.MICRO.
  output = output.substr(0, output.find('\n'));
  if (!output.starts_with("slurm")) return std::nullopt;
  size_t pos = output.find(' ');
  if (pos == std::string_view::npos) return std::nullopt;
  while (pos < output.size() && output[pos] == ' ') ++pos;
  SlurmVersion v;
  v.major = number_at(output, pos);
  if (v.major < 0 || pos >= output.size() || output[pos++] != '.') return std::nullopt;
  v.minor = number_at(output, pos);
  if (v.minor < 0 || v.minor > 12 || pos >= output.size() || output[pos++] != '.') return std::nullopt;
  v.micro = number_at(output, pos);
  if (v.micro < 0 || v.major < 2) return std::nullopt;
  return v;
}

bool has_run_in_job(const SlurmVersion& v) { return v.at_least(kRunInJobMajor, kRunInJobMinor); }
bool has_run_in_job_multinode_gres_fix(const SlurmVersion& v) { return v.at_least(25, 11); }
bool has_run_in_job_user_epilog_race(const SlurmVersion& v) {
  const auto release = std::tie(v.major, v.minor, v.micro);
  return release >= std::tuple(24, 11, 0) && release < std::tuple(25, 11, 4);
}
bool has_run_in_job_x11_epilog_race(const SlurmVersion& v) {
  const auto release = std::tie(v.major, v.minor, v.micro);
  return release >= std::tuple(24, 5, 0) && release < std::tuple(26, 5, 0);
}
bool has_cgroup_v1_deprecated(const SlurmVersion& v) { return v.at_least(25, 5); }
bool has_prolog_and_epilog_timeouts(const SlurmVersion& v) { return v.at_least(25, 5); }
bool has_sluid_job_cgroup(const SlurmVersion& v) { return v.at_least(26, 5); }
bool has_cgroup_job_id_paths(const SlurmVersion& v) { return std::tie(v.major, v.minor, v.micro) >= std::tuple(26, 5, 2); }
bool has_cgroup_v2_plugin(const SlurmVersion& v) { return v.at_least(22, 5); }
bool has_cgroup_plugin_disabled(const SlurmVersion& v) { return v.at_least(24, 5); }

}  // namespace unilab::mps
