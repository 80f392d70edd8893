#include "common/runner.hpp"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include <fmt/format.h>

namespace unilab::mps {
namespace {

constexpr size_t kMaxCapture = 1 << 20;  // per stream; more is dropped

// Everything the child needs, prepared before fork: after fork in a possibly
// multi-threaded process only async-signal-safe calls are allowed.
struct Prepared {
  std::vector<char*> argv;
  std::vector<char*> envp;
  std::vector<gid_t> groups;
  bool drop = false;
  uid_t uid = 0;
  gid_t gid = 0;
};

std::string prepare(const Command& c, Prepared& p) {
  if (c.argv.empty() || c.argv[0].empty() || c.argv[0][0] != '/') {
    return fmt::format("cannot execute '{}': not an absolute path", c.argv.empty() ? "" : c.argv[0]);
  }
  if (access(c.argv[0].c_str(), X_OK) != 0) {
    return fmt::format("cannot execute {}: {}", c.argv[0], std::strerror(errno));
  }
  for (const auto& a : c.argv) p.argv.push_back(const_cast<char*>(a.c_str()));
  p.argv.push_back(nullptr);
  for (const auto& e : c.env) p.envp.push_back(const_cast<char*>(e.c_str()));
  p.envp.push_back(nullptr);
  if (c.credentials && (geteuid() == 0) && (c.credentials->uid != 0 || c.credentials->gid != 0)) {
    p.drop = true;
    p.uid = c.credentials->uid;
    p.gid = c.credentials->gid;
    // Supplementary groups of the target user; a user unknown to NSS gets
    // only its primary group rather than keeping root's groups.
    struct passwd pw {};
    struct passwd* found = nullptr;
    std::vector<char> buf(16384);
    if (getpwuid_r(p.uid, &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr) {
      int n = 64;
      p.groups.resize(static_cast<size_t>(n));
      if (getgrouplist(pw.pw_name, p.gid, p.groups.data(), &n) < 0) {
        p.groups.resize(static_cast<size_t>(n));
        getgrouplist(pw.pw_name, p.gid, p.groups.data(), &n);
      }
      p.groups.resize(static_cast<size_t>(n));
    } else {
      p.groups = {p.gid};
    }
  } else if (c.credentials && geteuid() != 0 && c.credentials->uid != geteuid()) {
    return fmt::format("cannot run {} as uid {}: only root can switch users", c.argv[0], c.credentials->uid);
  }
  return {};
}

[[noreturn]] void child_fail(int fd, int err) {
  ssize_t ignored = write(fd, &err, sizeof err);
  (void)ignored;
  _exit(127);
}

// Runs in the child between fork and exec: async-signal-safe calls only.
[[noreturn]] void child_exec(const Prepared& p, int in_fd, int out_fd, int err_fd, int status_fd) {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int s = 1; s < NSIG; ++s) signal(s, SIG_DFL);
  setpgid(0, 0);  // own process group, so a timeout kills the whole tree
  // The host process may run with fds 0-2 closed (slurmstepd can), so a pipe
  // end may sit on 0..2: move every end above 2 before the dup2s.
  status_fd = fcntl(status_fd, F_DUPFD_CLOEXEC, 10);
  in_fd = fcntl(in_fd, F_DUPFD, 10);
  out_fd = fcntl(out_fd, F_DUPFD, 10);
  err_fd = fcntl(err_fd, F_DUPFD, 10);
  if (status_fd < 0 || in_fd < 0 || out_fd < 0 || err_fd < 0) _exit(127);
  if (dup2(in_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0) child_fail(status_fd, errno);
  // Close everything above 2 except the exec-status pipe (close-on-exec).
  for (int fd = 3; fd < 1024; ++fd) {
    if (fd != status_fd) close(fd);
  }
  syscall(SYS_close_range, 1024U, ~0U, 0);
  if (p.drop) {
    if (setgroups(p.groups.size(), p.groups.data()) != 0) child_fail(status_fd, errno);
    if (setgid(p.gid) != 0) child_fail(status_fd, errno);
    if (setuid(p.uid) != 0) child_fail(status_fd, errno);
    if (setuid(0) == 0) child_fail(status_fd, EPERM);  // the drop must be irreversible
  }
  execve(p.argv[0], p.argv.data(), p.envp.data());
  child_fail(status_fd, errno);
}

void set_nonblock(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

// Reads what is available now; returns false on EOF/error.
bool drain(int fd, std::string& into) {
  char buf[8192];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) {
      if (into.size() < kMaxCapture) into.append(buf, std::min(static_cast<size_t>(n), kMaxCapture - into.size()));
      continue;
    }
    if (n == 0) return false;
    return errno == EAGAIN || errno == EINTR;
  }
}

}  // namespace

std::string CommandResult::describe() const {
  if (!exec_error.empty()) return exec_error;
  if (timed_out) return "timed out";
  if (term_signal != 0) return fmt::format("killed by signal {}", term_signal);
  return fmt::format("exit {}", exit_code);
}

std::string CommandResult::first_output_line() const {
  for (const std::string* s : {&err, &out}) {
    size_t pos = 0;
    while (pos < s->size()) {
      size_t end = s->find('\n', pos);
      if (end == std::string::npos) end = s->size();
      std::string line = s->substr(pos, end - pos);
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
      if (!line.empty()) return line;
      pos = end + 1;
    }
  }
  return {};
}

CommandResult SystemRunner::run(const Command& c) {
  CommandResult result;
  Prepared p;
  if (std::string e = prepare(c, p); !e.empty()) {
    result.exec_error = e;
    return result;
  }
  int in[2], out[2], err[2], status[2];
  if (pipe2(in, O_CLOEXEC) != 0) { result.exec_error = fmt::format("pipe: {}", std::strerror(errno)); return result; }
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 || pipe2(status, O_CLOEXEC) != 0) {
    result.exec_error = fmt::format("pipe: {}", std::strerror(errno));
    return result;  // the few fds leaked here are closed at exit; this path needs fd exhaustion
  }
  pid_t pid = fork();
  if (pid < 0) {
    result.exec_error = fmt::format("fork: {}", std::strerror(errno));
    for (int fd : {in[0], in[1], out[0], out[1], err[0], err[1], status[0], status[1]}) close(fd);
    return result;
  }
  if (pid == 0) child_exec(p, in[0], out[1], err[1], status[1]);
  for (int fd : {in[0], out[1], err[1], status[1]}) close(fd);

  int exec_errno = 0;
  ssize_t got = read(status[0], &exec_errno, sizeof exec_errno);  // EOF once exec succeeded
  close(status[0]);

  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  set_nonblock(in[1]);
  set_nonblock(out[0]);
  set_nonblock(err[0]);
  size_t written = 0;
  if (c.stdin_data.empty() || got == sizeof exec_errno) { close(in[1]); in[1] = -1; }
  bool out_open = true, err_open = true, exited = false;
  int wstatus = 0;
  auto deadline = std::chrono::steady_clock::now() + c.timeout;
  while (!exited) {
    pollfd fds[4];
    nfds_t n = 0;
    if (out_open) fds[n++] = {out[0], POLLIN, 0};
    if (err_open) fds[n++] = {err[0], POLLIN, 0};
    if (in[1] >= 0) fds[n++] = {in[1], POLLOUT, 0};
    if (pidfd >= 0) fds[n++] = {pidfd, POLLIN, 0};
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      waitpid(pid, &wstatus, 0);
      result.timed_out = true;
      exited = true;
      break;
    }
    int wait_ms = pidfd >= 0 ? static_cast<int>(std::min<long>(left.count(), 1000)) : 10;
    poll(fds, n, wait_ms);
    if (out_open) out_open = drain(out[0], result.out);
    if (err_open) err_open = drain(err[0], result.err);
    if (in[1] >= 0) {
      ssize_t w = write(in[1], c.stdin_data.data() + written, c.stdin_data.size() - written);
      if (w > 0) written += static_cast<size_t>(w);
      if ((w < 0 && errno != EAGAIN) || written == c.stdin_data.size()) { close(in[1]); in[1] = -1; }
    }
    if (waitpid(pid, &wstatus, WNOHANG) == pid) exited = true;
  }
  // The child is gone; take what its pipes already hold, without waiting for
  // EOF (a daemon it forked may keep them open).
  if (out_open) drain(out[0], result.out);
  if (err_open) drain(err[0], result.err);
  for (int fd : {in[1], out[0], err[0], pidfd}) if (fd >= 0) close(fd);

  if (got == sizeof exec_errno) {
    result.exec_error = fmt::format("cannot execute {}: {}", c.argv[0], std::strerror(exec_errno));
  } else if (!result.timed_out) {
    if (WIFEXITED(wstatus)) result.exit_code = WEXITSTATUS(wstatus);
    if (WIFSIGNALED(wstatus)) result.term_signal = WTERMSIG(wstatus);
  }
  return result;
}

std::string exec_replace(const Command& c) {
  Prepared p;
  if (std::string e = prepare(c, p); !e.empty()) return e;
  int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd >= 0) { dup2(null_fd, 0); close(null_fd); }
  for (int fd = 3; fd < 1024; ++fd) close(fd);
  if (p.drop) {
    if (setgroups(p.groups.size(), p.groups.data()) != 0 || setgid(p.gid) != 0 || setuid(p.uid) != 0) {
      return fmt::format("cannot switch to uid {}: {}", p.uid, std::strerror(errno));
    }
  }
  execve(p.argv[0], p.argv.data(), p.envp.data());
  return fmt::format("cannot execute {}: {}", c.argv[0], std::strerror(errno));
}

std::chrono::steady_clock::time_point SystemClock::now() { return std::chrono::steady_clock::now(); }
void SystemClock::sleep_for(std::chrono::milliseconds d) { std::this_thread::sleep_for(d); }
double SystemClock::wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace unilab::mps
