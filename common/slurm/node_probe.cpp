#include "common/slurm/node_probe.hpp"

#include <fcntl.h>
#include <glob.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "common/mps/daemon.hpp"  // current_host
#include "common/mps/proc.hpp"
#include "common/slurm/gres.hpp"  // device_minor

namespace unilab::mps {

std::optional<std::string> SystemNodeProbe::read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::nullopt;
  std::string out;
  char buf[8192];
  while (f.read(buf, sizeof buf) || f.gcount() > 0) {
    out.append(buf, static_cast<size_t>(f.gcount()));
    if (out.size() > (4u << 20)) return std::nullopt;
  }
  return out;
}

FileFacts SystemNodeProbe::stat(const std::string& path) {
  FileFacts f;
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return f;
  f.exists = true;
  f.is_symlink = S_ISLNK(st.st_mode);
  if (f.is_symlink && ::stat(path.c_str(), &st) != 0) return f;
  f.is_dir = S_ISDIR(st.st_mode);
  f.is_regular = S_ISREG(st.st_mode);
  f.uid = st.st_uid;
  f.mode = st.st_mode & 07777;
  f.mtime = static_cast<double>(st.st_mtim.tv_sec) + static_cast<double>(st.st_mtim.tv_nsec) / 1e9;
  f.size = static_cast<unsigned long long>(st.st_size);
  f.nlink = static_cast<unsigned long>(st.st_nlink);
  struct statvfs vfs {};
  if (::statvfs(path.c_str(), &vfs) == 0) {
    f.read_only_fs = (vfs.f_flag & ST_RDONLY) != 0;
    f.free_bytes = static_cast<unsigned long long>(vfs.f_bavail) * vfs.f_frsize;  // root may use f_bfree; bavail is the safe floor
  }
  return f;
}

std::vector<std::string> SystemNodeProbe::glob(const std::string& pattern) {
  glob_t g {};
  std::vector<std::string> out;
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  }
  globfree(&g);
  return out;
}

bool SystemNodeProbe::executable(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

int SystemNodeProbe::device_minor(const std::string& path) { return unilab::mps::device_minor(path); }

std::optional<std::string> SystemNodeProbe::process_name(pid_t pid) {
  auto comm = read_file(fmt::format("/proc/{}/comm", pid));
  if (!comm) return std::nullopt;
  while (!comm->empty() && comm->back() == '\n') comm->pop_back();
  return comm;
}

std::optional<double> SystemNodeProbe::process_start_time(pid_t pid) {
  // now - uptime + start ticks: /proc/stat's btime is whole seconds, uptime
  // has centisecond resolution.
  auto stat_text = read_file(fmt::format("/proc/{}/stat", pid));
  auto uptime_text = read_file("/proc/uptime");
  if (!stat_text || !uptime_text) return std::nullopt;
  auto st = parse_proc_stat(*stat_text);
  if (!st) return std::nullopt;
  double uptime = std::strtod(uptime_text->c_str(), nullptr);
  struct timespec now {};
  clock_gettime(CLOCK_REALTIME, &now);
  double wall = static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) / 1e9;
  long hz = sysconf(_SC_CLK_TCK);
  return wall - uptime + static_cast<double>(st->start_ticks) / static_cast<double>(hz > 0 ? hz : 100);
}

std::optional<std::string> SystemNodeProbe::process_exe(pid_t pid) {
  char buf[4096];
  ssize_t n = ::readlink(fmt::format("/proc/{}/exe", pid).c_str(), buf, sizeof buf - 1);
  if (n <= 0) return std::nullopt;
  return std::string(buf, static_cast<size_t>(n));
}

std::optional<uid_t> SystemNodeProbe::process_uid(pid_t pid) {
  auto status = read_file(fmt::format("/proc/{}/status", pid));
  if (!status) return std::nullopt;
  auto uids = parse_proc_status_uids(*status);
  if (!uids) return std::nullopt;
  for (uid_t u : *uids) {
    if (u != 0) return u;
  }
  return 0;
}

bool SystemNodeProbe::process_runs(pid_t pid, const std::string& path) {
  struct stat running {};
  struct stat file {};
  return ::stat(fmt::format("/proc/{}/exe", pid).c_str(), &running) == 0 && ::stat(path.c_str(), &file) == 0 &&
         running.st_dev == file.st_dev && running.st_ino == file.st_ino;
}

std::optional<std::string> SystemNodeProbe::read_root_file(const std::string& path, std::string& problem) {
  problem.clear();
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    if (errno != ENOENT) {
      problem = errno == ELOOP ? fmt::format("{} is a symlink", path) : fmt::format("cannot open {}: {}", path, std::strerror(errno));
    }
    return std::nullopt;
  }
  struct stat st {};
  std::optional<std::string> out;
  if (::fstat(fd, &st) != 0) {
    problem = fmt::format("cannot stat {}: {}", path, std::strerror(errno));
  } else if (!S_ISREG(st.st_mode)) {
    problem = fmt::format("{} is not a regular file", path);
  } else if (st.st_uid != 0 || (st.st_mode & (S_IWGRP | S_IWOTH))) {
    problem = fmt::format("{} is owned by uid {} with mode {:o}: not a file only root can write", path, st.st_uid,
                          st.st_mode & 07777);
  } else {
    out.emplace();
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0 && out->size() < (1u << 16)) out->append(buf, static_cast<size_t>(n));
    if (n < 0) {
      problem = fmt::format("cannot read {}: {}", path, std::strerror(errno));
      out.reset();
    }
  }
  ::close(fd);
  return out;
}

SocketState SystemNodeProbe::probe_socket(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return SocketState::kMissing;
  if (!S_ISSOCK(st.st_mode)) return SocketState::kNotSocket;
  sockaddr_un addr {};
  if (path.size() >= sizeof addr.sun_path) return SocketState::kRefused;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return SocketState::kRefused;
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  int err = errno;
  close(fd);
  if (rc == 0 || err == EAGAIN || err == EINPROGRESS) return SocketState::kListening;  // EAGAIN: backlog full
  if (err == EACCES || err == EPERM) return SocketState::kDenied;
  return SocketState::kRefused;
}

std::string SystemNodeProbe::hostname() {
  std::string h = current_host();
  if (auto dot = h.find('.'); dot != std::string::npos) h.resize(dot);
  return h;
}

}  // namespace unilab::mps
