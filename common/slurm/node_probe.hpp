// The machine as unilab-mps's readers of Slurm's files and the node doctor
// see it: files, stat, glob, processes, sockets. Abstract so it can be
// mocked out for tests; SystemNodeProbe is the real one.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace unilab::mps {

struct FileFacts {
  bool exists = false;
  bool is_symlink = false;  // the path itself (lstat)
  bool is_dir = false;      // the rest follows a symlink
  bool is_regular = false;
  uid_t uid = 0;
  mode_t mode = 0;          // permission bits (incl. sticky)
  double mtime = 0;         // seconds since the epoch
  unsigned long long size = 0;
  unsigned long nlink = 0;
  // The file system it is on (statvfs): read-only, and the bytes root may
  // still write there.
  bool read_only_fs = false;
  unsigned long long free_bytes = 0;
};

// What connect(2) on a UNIX socket path says.
enum class SocketState { kMissing, kNotSocket, kListening, kRefused, kDenied };

// The machine as the node doctor sees it. Abstract so it can be mocked out for tests.
class NodeProbe {
 public:
  virtual ~NodeProbe() = default;
  // Whole file (bounded); nullopt when missing or unreadable.
  virtual std::optional<std::string> read_file(const std::string& path) = 0;
  virtual FileFacts stat(const std::string& path) = 0;
  // glob(3) matches, sorted; none is an empty list.
  virtual std::vector<std::string> glob(const std::string& pattern) = 0;
  virtual bool executable(const std::string& path) = 0;
  // Minor number of a character device; -1 otherwise.
  virtual int device_minor(const std::string& path) = 0;
  // /proc/PID/comm and the start time (wall clock, seconds); nullopt when gone.
  virtual std::optional<std::string> process_name(pid_t pid) = 0;
  virtual std::optional<double> process_start_time(pid_t pid) = 0;
  // The executable of a process (readlink /proc/PID/exe); nullopt when unknown.
  virtual std::optional<std::string> process_exe(pid_t pid) = 0;
  // The process's uid when its real, effective, saved and filesystem uids
  // are one; else the first of them that is not 0 (so "0" means root in all
  // four). nullopt when gone or unreadable.
  virtual std::optional<uid_t> process_uid(pid_t pid) = 0;
  // Whether `path` (followed) is the very file the process executes: the
  // same device and inode as /proc/PID/exe.
  virtual bool process_runs(pid_t pid, const std::string& path) = 0;
  // A file root wrote and only root can change: read only when it is a
  // regular file (never through a symlink, never a FIFO or device, opened
  // without blocking) owned by uid 0 and not writable by group or others.
  // Otherwise nullopt, and `problem` says why ("" when it does not exist).
  virtual std::optional<std::string> read_root_file(const std::string& path, std::string& problem) = 0;
  virtual SocketState probe_socket(const std::string& path) = 0;
  virtual std::string hostname() = 0;  // short host name
};

class SystemNodeProbe final : public NodeProbe {
 public:
  std::optional<std::string> read_file(const std::string& path) override;
  FileFacts stat(const std::string& path) override;
  std::vector<std::string> glob(const std::string& pattern) override;
  bool executable(const std::string& path) override;
  int device_minor(const std::string& path) override;
  std::optional<std::string> process_name(pid_t pid) override;
  std::optional<double> process_start_time(pid_t pid) override;
  std::optional<std::string> process_exe(pid_t pid) override;
  std::optional<uid_t> process_uid(pid_t pid) override;
  bool process_runs(pid_t pid, const std::string& path) override;
  std::optional<std::string> read_root_file(const std::string& path, std::string& problem) override;
  SocketState probe_socket(const std::string& path) override;
  std::string hostname() override;
};

}  // namespace unilab::mps
