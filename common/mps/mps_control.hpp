// Talking to an MPS control daemon through its own front end
// (`nvidia-cuda-mps-control` with CUDA_MPS_PIPE_DIRECTORY set), as the
// daemon's user. Never a shell; the front end is exec'd by absolute path.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "common/mps/runner.hpp"

namespace unilab::mps {

inline constexpr const char* kDefaultPipeDirectory = "/tmp/nvidia-mps";
inline constexpr const char* kDefaultLogDirectory = "/var/log/nvidia-mps";
inline constexpr const char* kPidFileName = "nvidia-cuda-mps-control.pid";
// sun_path is 108 bytes including the terminating NUL.
inline constexpr size_t kMaxUnixSocketPath = 107;
// The most of a user's control.log root ever reads (its end).
inline constexpr size_t kLogTailBytes = 64 * 1024;

struct MpsEndpoint {
  std::string pipe_directory;
  std::string log_directory;
  uid_t uid = 0;
  gid_t gid = 0;
};

// "socket", "fifo", "missing" or "other" for `<pipe dir>/control` (lstat).
std::string control_pipe_kind(const std::string& control_path);

// The daemon binds two sockets in its pipe directory: `control` and
// `control_privileged`, the longer name; both must fit.
inline constexpr const char* kLongestPipeSocketName = "control_privileged";

// Throws CudaMpsError when `<pipe dir>/control_privileged` (the longer of the
// daemon's two sockets) exceeds the AF_UNIX limit: the daemon would then be
// silently unreachable or fail to start.
void check_control_path_length(const std::string& pipe_directory);
// The longest pipe directory whose sockets fit (107 - "/control_privileged").
size_t max_pipe_directory_length();

// The environment a front end or daemon gets: built from scratch, PATH and
// LD_LIBRARY_PATH from tool_environment(driver_dir) (the daemon finds
// nvidia-cuda-mps-server and the driver's libraries through them).
std::vector<std::string> mps_environment(const MpsEndpoint& ep, const std::vector<std::string>& gpu_uuids,
                                         const std::optional<std::string>& driver_dir = std::nullopt);

class MpsControl {
 public:
  MpsControl(CommandRunner& runner, std::string mps_control, std::optional<std::string> driver_dir = std::nullopt)
      : runner_(runner), path_(std::move(mps_control)), driver_dir_(std::move(driver_dir)) {}
  const std::string& path() const { return path_; }

  // Sends one command through the front end; the raw result.
  CommandResult send(const MpsEndpoint& ep, const std::string& command,
                     std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // True when the endpoint's control socket exists (one lstat, no front-end
  // run): nothing can answer before it does.
  bool has_socket(const MpsEndpoint& ep) const;
  // True when a daemon answers `get_server_list` on this endpoint.
  bool answers(const MpsEndpoint& ep, std::chrono::milliseconds timeout = std::chrono::seconds(5));
  // Runs `nvidia-cuda-mps-control -d` as the endpoint's user with
  // CUDA_VISIBLE_DEVICES = the UUIDs, born in `cgroups` (Command::cgroups).
  CommandResult launch(const MpsEndpoint& ep, const std::vector<std::string>& gpu_uuids,
                       std::chrono::milliseconds timeout, const std::vector<std::string>& cgroups = {});
  // The foreground command (`-f`), for exec_replace.
  Command foreground_command(const MpsEndpoint& ep, const std::vector<std::string>& gpu_uuids) const;

 private:
  Command base(const MpsEndpoint& ep, const std::vector<std::string>& gpu_uuids) const;
  CommandRunner& runner_;
  std::string path_;
  std::optional<std::string> driver_dir_;
};

// The last `lines` lines of `<log dir>/control.log`, joined by newlines, best
// effort (for diagnostics when a start fails). Read as read_user_file_tail
// does: only a file (and directory) owned by `uid`, the daemon's user, with
// control characters escaped. Empty when missing or refused.
std::string control_log_tail(const std::string& log_directory, uid_t uid, size_t lines);

}  // namespace unilab::mps
