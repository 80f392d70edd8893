// What the fake MPS control daemon, its front end and fake-cuda-client share:
// where the pipe directory is and how to talk over its `control` socket.
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <string>

#include "fake_config.hpp"

namespace fake {

// Relative paths are made absolute: the daemon chdir()s to "/".
inline std::string absolute_path(const std::string& path) {
  if (path.empty() || path.front() == '/') return path;
  char cwd[PATH_MAX];
  if (!::getcwd(cwd, sizeof cwd)) return path;
  return std::string(cwd) + "/" + path;
}

inline std::string mps_pipe_dir() {
  const std::string v = getenv_str("CUDA_MPS_PIPE_DIRECTORY");
  return absolute_path(v.empty() ? "/tmp/nvidia-mps" : v);
}

inline std::string mps_log_dir() {
  const std::string v = getenv_str("CUDA_MPS_LOG_DIRECTORY");
  return absolute_path(v.empty() ? "/var/log/nvidia-mps" : v);
}

// sun_path holds 108 bytes including the NUL: a longer path cannot be bound
// or connected to, which is why a real daemon "silently cannot be found".
inline bool fits_sun_path(const std::string& path) { return path.size() < sizeof(sockaddr_un::sun_path); }

// Returns a connected fd or -1 (no socket, refused, path too long).
inline int connect_control(const std::string& path) {
  if (!fits_sun_path(path)) return -1;
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  path.copy(addr.sun_path, path.size());
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Writes everything, waiting on a non-blocking fd; MSG_NOSIGNAL so a peer
// that went away is an error, not a SIGPIPE.
inline bool send_all(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, 5000) <= 0) return false;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return false;
    }
  }
  return true;
}

// Private command of fake-cuda-client:
//   `_client_connect <client pid>[ =<CUDA_VISIBLE_DEVICES>]` (no `=` part when
//   the client has the variable unset). Reply, connection kept open while
//   the client runs: `OK <server pid> <device,device|unknown>` or `ERR <text>`.
constexpr const char* kClientConnect = "_client_connect";

// Private test command: `_open_devices PATH...`: a process the daemon forks
// now tries open() on each path; one line each, `PATH ok` or `PATH EPERM`
// (denied by a device cgroup), `PATH ENXIO` (allowed, no driver), ...
constexpr const char* kOpenDevices = "_open_devices";

}  // namespace fake
