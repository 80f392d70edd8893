// A NodeProbe for tests: the machine as a set of maps.
#pragma once

#include <sys/stat.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/slurm/node_probe.hpp"

namespace unilab::mps {

// The machine as a set of maps; anything not put there does not exist.
class FakeNodeProbe final : public NodeProbe {
 public:
  std::optional<std::string> read_file(const std::string& path) override {
    auto it = files.find(path);
    return it == files.end() ? std::nullopt : std::optional<std::string>(it->second);
  }
  FileFacts stat(const std::string& path) override {
    if (auto it = facts.find(path); it != facts.end()) return it->second;
    if (files.count(path)) return file(0, 0644);
    return {};
  }
  std::vector<std::string> glob(const std::string& pattern) override {
    auto it = globs.find(pattern);
    return it == globs.end() ? std::vector<std::string>{} : it->second;
  }
  bool executable(const std::string& path) override { return executables.count(path) != 0; }
  int device_minor(const std::string& path) override {
    auto it = minors.find(path);
    return it == minors.end() ? -1 : it->second;
  }
  std::optional<std::string> process_name(pid_t pid) override {
    auto it = procs.find(pid);
    return it == procs.end() ? std::nullopt : std::optional<std::string>(it->second.first);
  }
  std::optional<double> process_start_time(pid_t pid) override {
    auto it = procs.find(pid);
    return it == procs.end() ? std::nullopt : std::optional<double>(it->second.second);
  }
  std::optional<std::string> process_exe(pid_t pid) override {
    auto it = exes.find(pid);
    return it == exes.end() ? std::nullopt : std::optional<std::string>(it->second);
  }
  std::optional<uid_t> process_uid(pid_t pid) override {
    if (!procs.count(pid)) return std::nullopt;
    auto it = uids.find(pid);
    return it == uids.end() ? 0 : it->second;
  }
  bool process_runs(pid_t pid, const std::string& path) override {
    auto it = exes.find(pid);
    return it != exes.end() && it->second == path && !replaced.count(path);
  }
  std::optional<std::string> read_root_file(const std::string& path, std::string& problem) override {
    problem.clear();
    if (auto it = root_file_problems.find(path); it != root_file_problems.end()) {
      problem = it->second;
      return std::nullopt;
    }
    return read_file(path);
  }
  SocketState probe_socket(const std::string& path) override {
    auto it = sockets.find(path);
    return it == sockets.end() ? SocketState::kMissing : it->second;
  }
  std::string hostname() override { return host; }

  static FileFacts dir(uid_t uid, mode_t mode) {
    FileFacts f;
    f.exists = f.is_dir = true;
    f.uid = uid;
    f.mode = mode;
    return f;
  }
  static FileFacts file(uid_t uid, mode_t mode, double mtime = 900) {
    FileFacts f;
    f.exists = f.is_regular = true;
    f.uid = uid;
    f.mode = mode;
    f.mtime = mtime;
    return f;
  }

  std::map<std::string, std::string> files;
  std::map<std::string, FileFacts> facts;
  std::map<std::string, std::vector<std::string>> globs;
  std::set<std::string> executables;
  std::map<std::string, int> minors;
  std::map<pid_t, std::pair<std::string, double>> procs;
  std::map<std::string, SocketState> sockets;
  std::map<pid_t, std::string> exes;
  std::map<pid_t, uid_t> uids;                            // absent: root
  std::set<std::string> replaced;                         // on disk, no longer the file the process runs
  std::map<std::string, std::string> root_file_problems;  // read_root_file refuses these
  std::string host = "host2";
};

}  // namespace unilab::mps
