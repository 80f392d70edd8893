#include "common/mps/mps_control.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string_view>

#include <fmt/format.h>

#include "common/mps/errors.hpp"
#include "common/mps/gpu.hpp"
#include "common/mps/private_fs.hpp"
#include "common/mps/safefs.hpp"

namespace unilab::mps {

std::string control_pipe_kind(const std::string& control_path) {
  struct stat st {};
  if (lstat(control_path.c_str(), &st) != 0) return "missing";
  if (S_ISSOCK(st.st_mode)) return "socket";
  if (S_ISFIFO(st.st_mode)) return "fifo";
  return "other";
}

size_t max_pipe_directory_length() { return kMaxUnixSocketPath - 1 - std::string_view(kLongestPipeSocketName).size(); }

void check_control_path_length(const std::string& pipe_directory) {
  std::string longest = pipe_directory + "/" + kLongestPipeSocketName;
  if (longest.size() > kMaxUnixSocketPath) {
    throw CudaMpsError(fmt::format(
        "pipe directory '{}' is too long: the daemon's socket '{}' is {} bytes and UNIX sockets allow {}; choose a "
        "pipe directory of at most {} characters",
        pipe_directory, longest, longest.size(), kMaxUnixSocketPath, max_pipe_directory_length()));
  }
}

std::vector<std::string> mps_environment(const MpsEndpoint& ep, const std::vector<std::string>& gpu_uuids,
                                         const std::optional<std::string>& driver_dir) {
  std::vector<std::string> env = tool_environment("/usr/sbin:/usr/bin:/sbin:/bin", driver_dir);
  env.push_back("CUDA_MPS_PIPE_DIRECTORY=" + ep.pipe_directory);
  env.push_back("CUDA_MPS_LOG_DIRECTORY=" + ep.log_directory);
  if (!gpu_uuids.empty()) env.push_back("CUDA_VISIBLE_DEVICES=" + join(gpu_uuids, ","));
  return env;
}

Command MpsControl::base(const MpsEndpoint& ep, const std::vector<std::string>& gpu_uuids) const {
  Command c;
  c.argv = {path_};
  c.env = mps_environment(ep, gpu_uuids, driver_dir_);
  if (geteuid() == 0 && ep.uid != 0) c.credentials = Credentials{ep.uid, ep.gid};
  return c;
}

CommandResult MpsControl::send(const MpsEndpoint& ep, const std::string& command, std::chrono::milliseconds timeout) {
  Command c = base(ep, {});
  c.stdin_data = command + "\n";
  c.timeout = timeout;
  return runner_.run(c);
}

bool MpsControl::has_socket(const MpsEndpoint& ep) const {
  // A file system mounted there (a user's FUSE) could hang root's lstat.
  if (mount_at_or_below(ep.pipe_directory)) return false;
  return control_pipe_kind(ep.pipe_directory + "/control") == "socket";
}

bool MpsControl::answers(const MpsEndpoint& ep, std::chrono::milliseconds timeout) {
  if (!has_socket(ep)) return false;
  CommandResult r = send(ep, "get_server_list", timeout);
  return r.ok() && r.out.find("Cannot find MPS control daemon") == std::string::npos;
}

CommandResult MpsControl::launch(const MpsEndpoint& ep, const std::vector<std::string>& gpu_uuids,
                                 std::chrono::milliseconds timeout, const std::vector<std::string>& cgroups) {
  Command c = base(ep, gpu_uuids);
  c.argv.push_back("-d");
  c.timeout = timeout;
  c.cgroups = cgroups;
  return runner_.run(c);
}

Command MpsControl::foreground_command(const MpsEndpoint& ep, const std::vector<std::string>& gpu_uuids) const {
  Command c = base(ep, gpu_uuids);
  c.argv.push_back("-f");
  return c;
}

std::string control_log_tail(const std::string& log_directory, uid_t uid, size_t lines) {
  return join(read_user_file_tail(log_directory, "control.log", uid, kLogTailBytes, lines), "\n");
}

}  // namespace unilab::mps
