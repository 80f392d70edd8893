#include "common/mps/mps_pid_file.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>

#include <fmt/format.h>

#include "common/mps/errors.hpp"
#include "common/mps/mps_control.hpp"
#include "common/mps/private_fs.hpp"
#include "common/mps/safefs.hpp"

namespace unilab::mps {

std::optional<pid_t> parse_pid_file_text(std::string_view t) {
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.remove_suffix(1);
  pid_t pid = 0;
  auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), pid);
  if (t.empty() || ec != std::errc() || p != t.data() + t.size() || pid <= 0) return std::nullopt;
  return pid;
}

std::optional<pid_t> read_mps_pid_file(const std::string& pipe_directory, uid_t uid, std::string* why) {
  std::string reason;
  std::optional<pid_t> pid;
  try {
    if (auto m = mount_at_or_below(pipe_directory)) {
      throw CudaMpsError(fmt::format("{} is mounted in the pipe directory; not looking into it", *m));
    }
    Fd dir = open_trusted_dir(pipe_directory, uid);
    auto text = read_file_at(dir.get(), kPidFileName, 64);
    if (!text) {
      reason = fmt::format("{}/{} does not exist", pipe_directory, kPidFileName);
    } else if (pid = parse_pid_file_text(*text); !pid) {
      reason = fmt::format("{}/{} holds no pid", pipe_directory, kPidFileName);
    }
  } catch (const CudaMpsError& e) {
    reason = e.what();
  }
  if (why != nullptr && !pid) *why = std::move(reason);
  return pid;
}

std::optional<pid_t> await_mps_pid_file(const std::string& pipe_directory, uid_t uid, Clock& clock,
                                        std::chrono::steady_clock::time_point deadline, std::string* why) {
  using std::chrono::milliseconds;
  milliseconds step(1);
  for (;;) {
    if (auto pid = read_mps_pid_file(pipe_directory, uid, why)) return pid;
    const auto now = clock.now();
    if (now >= deadline) return std::nullopt;
    auto left = std::chrono::duration_cast<milliseconds>(deadline - now);
    clock.sleep_for(std::clamp(left, milliseconds(1), step));
    step = std::min(step * 2, milliseconds(20));
  }
}

}  // namespace unilab::mps
