#include "common/mps/proc.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <dirent.h>

#include <charconv>
#include <fstream>
#include <set>
#include <sstream>

namespace unilab::mps {

std::optional<std::string> read_proc_file(const std::string& path, size_t max) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return std::nullopt;
  std::string data;
  char buf[4096];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0) { close(fd); return std::nullopt; }
    if (n == 0) break;
    data.append(buf, static_cast<size_t>(n));
    if (data.size() > max) break;
  }
  close(fd);
  return data;
}

namespace {

template <typename T>
bool parse_num(std::string_view s, T& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

std::optional<ProcStat> parse_proc_stat(std::string_view text) {
  size_t close_paren = text.rfind(')');
  if (close_paren == std::string_view::npos || text.find('(') == std::string_view::npos) return std::nullopt;
  std::string_view rest = text.substr(close_paren + 1);
  // rest = " S ppid pgrp ..." : field 3 is the first token after ')'.
  ProcStat st;
  int field = 3;
  size_t pos = 0;
  bool have_state = false, have_start = false;
  while (pos < rest.size()) {
    while (pos < rest.size() && (rest[pos] == ' ' || rest[pos] == '\n')) ++pos;
    if (pos >= rest.size()) break;
    size_t end = rest.find_first_of(" \n", pos);
    if (end == std::string_view::npos) end = rest.size();
    std::string_view tok = rest.substr(pos, end - pos);
    if (field == 3) {
      if (tok.size() != 1) return std::nullopt;
      st.state = tok[0];
      have_state = true;
    } else if (field == 4) {
      if (!parse_num(tok, st.ppid)) return std::nullopt;
    } else if (field == 22) {
      if (!parse_num(tok, st.start_ticks)) return std::nullopt;
      have_start = true;
      break;
    }
    ++field;
    pos = end;
  }
  if (!have_state || !have_start) return std::nullopt;
  return st;
}

std::optional<std::array<uid_t, 4>> parse_proc_status_uids(std::string_view text) {
  size_t pos = text.find("\nUid:");
  if (pos == std::string_view::npos) {
    if (text.substr(0, 4) != "Uid:") return std::nullopt;
    pos = 0;
  } else {
    pos += 1;
  }
  pos += 4;
  std::array<uid_t, 4> out {};
  for (auto& uid : out) {
    while (pos < text.size() && (text[pos] == '\t' || text[pos] == ' ')) ++pos;
    size_t end = text.find_first_of("\t \n", pos);
    if (end == std::string_view::npos) end = text.size();
    if (!parse_num(text.substr(pos, end - pos), uid)) return std::nullopt;
    pos = end;
  }
  return out;
}

std::optional<uid_t> parse_proc_status_uid(std::string_view text) {
  auto uids = parse_proc_status_uids(text);
  if (!uids) return std::nullopt;
  return (*uids)[0];
}

std::optional<ProcStat> SystemProcReader::stat(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  const std::string dir = root_ + "/" + std::to_string(pid);
  auto text = read_proc_file(dir + "/stat");
  if (!text) return std::nullopt;
  auto st = parse_proc_stat(*text);
  if (!st) return std::nullopt;
  auto status = read_proc_file(dir + "/status");
  if (!status) return std::nullopt;
  auto uid = parse_proc_status_uid(*status);
  if (!uid) return std::nullopt;
  st->uid = *uid;
  return st;
}

std::string SystemProcReader::boot_id() {
  auto text = read_proc_file(root_ + "/sys/kernel/random/boot_id");
  if (!text) return {};
  while (!text->empty() && (text->back() == '\n' || text->back() == ' ')) text->pop_back();
  return *text;
}

std::optional<std::string> SystemProcReader::environ_value(pid_t pid, std::string_view key) {
  if (pid <= 0) return std::nullopt;
  auto text = read_proc_file(root_ + "/" + std::to_string(pid) + "/environ");
  if (!text) return std::nullopt;
  size_t pos = 0;
  while (pos < text->size()) {
    size_t end = text->find('\0', pos);
    if (end == std::string::npos) end = text->size();
    std::string_view entry(text->data() + pos, end - pos);
    if (entry.size() > key.size() && entry.substr(0, key.size()) == key && entry[key.size()] == '=') {
      return std::string(entry.substr(key.size() + 1));
    }
    pos = end + 1;
  }
  return std::nullopt;
}

std::vector<pid_t> SystemProcReader::pids() {
  std::vector<pid_t> out;
  DIR* d = opendir(root_.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    pid_t pid = 0;
    if (parse_num(e->d_name, pid) && pid > 0) out.push_back(pid);
  }
  closedir(d);
  return out;
}

std::vector<pid_t> SystemProcReader::children(pid_t pid) {
  std::vector<pid_t> out;
  if (pid <= 0) return out;
  const std::string task_dir = root_ + "/" + std::to_string(pid) + "/task";
  DIR* d = opendir(task_dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    auto text = read_proc_file(task_dir + "/" + e->d_name + "/children");
    if (!text) continue;
    std::string_view t = *text;
    size_t pos = 0;
    while (pos < t.size()) {
      size_t end = t.find(' ', pos);
      if (end == std::string_view::npos) end = t.size();
      pid_t child = 0;
      if (parse_num(t.substr(pos, end - pos), child) && child > 0) out.push_back(child);
      pos = end + 1;
    }
  }
  closedir(d);
  return out;
}

std::optional<std::string> SystemProcReader::comm(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  auto text = read_proc_file(root_ + "/" + std::to_string(pid) + "/comm", 64);
  if (!text) return std::nullopt;
  while (!text->empty() && text->back() == '\n') text->pop_back();
  return text;
}

std::optional<std::string> SystemProcReader::cgroup(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  return read_proc_file(root_ + "/" + std::to_string(pid) + "/cgroup", 64 << 10);
}

std::optional<FileId> SystemProcReader::exe(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  return file(root_ + "/" + std::to_string(pid) + "/exe");
}

std::optional<FileId> SystemProcReader::file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return FileId{st.st_dev, st.st_ino};
}

pid_t SystemProcReader::self() { return getpid(); }

// /proc/PID/stat's start time is CLOCK_BOOTTIME in USER_HZ ticks.
uint64_t SystemProcReader::ticks_now() {
  timespec ts {};
  clock_gettime(CLOCK_BOOTTIME, &ts);
  const auto hz = static_cast<uint64_t>(sysconf(_SC_CLK_TCK));
  return static_cast<uint64_t>(ts.tv_sec) * hz + static_cast<uint64_t>(ts.tv_nsec) / (1000000000ULL / hz);
}

std::vector<ProcessIdentity> descendants_of(const ProcessIdentity& root, ProcReader& proc) {
  std::vector<ProcessIdentity> out;
  std::vector<pid_t> queue{root.pid};
  std::set<pid_t> seen{root.pid};
  for (size_t i = 0; i < queue.size() && queue.size() < 4096; ++i) {
    for (pid_t c : proc.children(queue[i])) {
      if (seen.count(c)) continue;
      auto st = running_stat(proc, c);
      if (!st || st->ppid != queue[i] || st->uid != root.uid) continue;
      seen.insert(c);
      queue.push_back(c);
      out.push_back({c, st->start_ticks, root.boot_id, st->uid});
    }
  }
  return out;
}

bool process_state_gone(char state) { return state == 'Z' || state == 'X' || state == 'x'; }

std::optional<ProcStat> running_stat(ProcReader& proc, pid_t pid) {
  auto st = proc.stat(pid);
  if (!st || process_state_gone(st->state)) return std::nullopt;
  return st;
}

Liveness check_identity(const ProcessIdentity& id, ProcReader& proc) {
  if (!id.boot_id.empty()) {
    std::string now = proc.boot_id();
    if (!now.empty() && now != id.boot_id) return Liveness::kOtherBoot;
  }
  if (id.pid <= 0) return Liveness::kGone;
  auto st = running_stat(proc, id.pid);
  if (!st) return Liveness::kGone;
  if (st->start_ticks != id.start_ticks || st->uid != id.uid) return Liveness::kReused;
  return Liveness::kLive;
}

Liveness SystemSignaller::send_verified(const ProcessIdentity& id, int sig, ProcReader& proc) {
  if (id.pid <= 0) return Liveness::kGone;
  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, id.pid, 0));
  if (pidfd < 0 && errno == ESRCH) return Liveness::kGone;
  // Verify after the pidfd exists: if the PID was reused before pidfd_open,
  // the start time now differs and we refuse.
  Liveness l = check_identity(id, proc);
  if (l != Liveness::kLive) {
    if (pidfd >= 0) close(pidfd);
    return l;
  }
  if (pidfd >= 0) {
    long rc = syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0);
    close(pidfd);
    if (rc != 0 && errno == ESRCH) return Liveness::kGone;
    return Liveness::kLive;
  }
  // No pidfd support (old kernel): the identity was verified just now.
  if (kill(id.pid, sig) != 0 && errno == ESRCH) return Liveness::kGone;
  return Liveness::kLive;
}

}  // namespace unilab::mps
