#include "common/mps/runner.hpp"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <sched.h>
#include <sys/prctl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <pthread.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/mps/text.hpp"

namespace unilab::mps {
namespace {

constexpr size_t kMaxCapture = 1 << 20;  // per stream; more is dropped

// What a tool started as the job's user gets instead of slurmd's process
// state (docs/ADMIN.md, "What the daemon's process looks like"):
//  - RLIMIT_NOFILE: soft 16384 (what NVIDIA recommends for the MPS server,
//    one descriptor per client connection and more), hard at least that;
//    slurmd's own soft limit may be far lower (1024) or huge.
//  - RLIMIT_CORE: soft 0 (slurmd often runs with unlimited core dumps for
//    its own debugging; a user daemon should not dump GPU state into its
//    cwd or the system's core pattern), hard kept so the user may raise it.
//  - RLIMIT_STACK: soft 8 MiB (an unlimited stack changes the mmap layout).
//  - RLIMIT_AS, RLIMIT_DATA, RLIMIT_FSIZE, RLIMIT_CPU: soft raised to the
//    inherited hard limit, the hard limit kept: CUDA reserves very large
//    virtual address ranges and the daemon lives as long as the job, so a
//    low soft limit of slurmd's must not cut it short, but a hard limit the
//    site gave slurmd bounds the job's tasks too and is never raised for a
//    user's process (unlimited where slurmd's is, as by default).
//  - RLIMIT_MEMLOCK: soft raised to the inherited hard limit (pinned host
//    memory; sites that raise it for RDMA get the same for MPS).
//  - Others (NPROC, NICE, RTPRIO, SIGPENDING, MSGQUEUE) stay as inherited.
//    NPROC counts every thread of the user on the node: the job's tasks
//    have the limit srun propagated, which the prolog does not know, and a
//    lower guess would fail the server's fork under a busy job.
constexpr rlim_t kNofile = 16384;
constexpr rlim_t kStack = 8u << 20;

// Everything the child needs, prepared before fork: after fork in a possibly
// multi-threaded process only async-signal-safe calls are allowed.
struct Prepared {
  Prepared() = default;
  Prepared(const Prepared&) = delete;
  Prepared& operator=(const Prepared&) = delete;
  ~Prepared() {
    for (int fd : cgroup_fds) close(fd);
  }
  std::vector<char*> argv;
  std::vector<char*> envp;
  std::vector<gid_t> groups;
  std::vector<ToolLimit> limits;
  std::vector<int> cgroup_fds;  // Command::cgroups, open for writing
  bool drop = false;
  bool new_session = false;
  uid_t uid = 0;
  gid_t gid = 0;
};

}  // namespace

std::vector<ToolLimit> user_limits() {
  std::vector<ToolLimit> out;
  auto add = [&](int r, rlimit want) {
    rlimit cur {};
    if (getrlimit(r, &cur) != 0) cur = {RLIM_INFINITY, RLIM_INFINITY};
    if (want.rlim_max == 0) want.rlim_max = cur.rlim_max;  // 0: keep the inherited hard limit
    auto below = [](rlim_t a, rlim_t b) { return a != RLIM_INFINITY && (b == RLIM_INFINITY || a < b); };
    rlimit fallback = want;
    if (below(cur.rlim_max, want.rlim_max)) {
      fallback.rlim_max = cur.rlim_max;
      if (below(cur.rlim_max, fallback.rlim_cur)) fallback.rlim_cur = cur.rlim_max;
    }
    out.push_back({r, want, fallback});
  };
  rlimit nofile {};
  getrlimit(RLIMIT_NOFILE, &nofile);
  add(RLIMIT_NOFILE, {kNofile, nofile.rlim_max == RLIM_INFINITY || nofile.rlim_max > kNofile ? nofile.rlim_max : kNofile});
  add(RLIMIT_CORE, {0, 0});
  rlimit stack {};
  getrlimit(RLIMIT_STACK, &stack);
  add(RLIMIT_STACK, {stack.rlim_max != RLIM_INFINITY && stack.rlim_max < kStack ? stack.rlim_max : kStack, 0});
  for (int r : {RLIMIT_AS, RLIMIT_DATA, RLIMIT_FSIZE, RLIMIT_CPU}) {
    rlimit inherited {};
    if (getrlimit(r, &inherited) != 0) inherited = {RLIM_INFINITY, RLIM_INFINITY};
    add(r, {inherited.rlim_max, 0});
  }
  rlimit memlock {};
  getrlimit(RLIMIT_MEMLOCK, &memlock);
  add(RLIMIT_MEMLOCK, {memlock.rlim_max, 0});
  return out;
}

std::string user_name_of(uid_t uid) {
  struct passwd pw {};
  struct passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr) return pw.pw_name;
  return std::to_string(uid);
}

namespace {

// The supplementary groups of `uid` (primary group `gid`); a user unknown to
// NSS gets only its primary group rather than keeping root's groups. Looked
// up once per user and process: a prolog runs the tools of a node's daemons
// as one user from several threads, and each lookup reads the NSS sources
// (the first also loads their modules).
std::optional<std::vector<gid_t>> supplementary_groups(uid_t uid, gid_t gid) {
  static std::mutex mu;
  static std::map<std::pair<uid_t, gid_t>, std::vector<gid_t>> known;
  std::lock_guard lock(mu);
  if (auto it = known.find({uid, gid}); it != known.end()) return it->second;
  std::vector<gid_t> groups{gid};
  struct passwd pw {};
  struct passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr) {
    int n = 64;
    groups.resize(static_cast<size_t>(n));
    if (getgrouplist(pw.pw_name, gid, groups.data(), &n) < 0) {
      // Too small: n is now the count. A second failure (the groups
      // changed in between) is no list to trust: refuse, never a partial one.
      groups.resize(static_cast<size_t>(n));
      if (getgrouplist(pw.pw_name, gid, groups.data(), &n) < 0) return std::nullopt;
    }
    groups.resize(static_cast<size_t>(n));
  }
  return known[{uid, gid}] = groups;
}

std::string prepare(const Command& c, Prepared& p, bool new_session) {
  if (c.argv.empty() || c.argv[0].empty() || c.argv[0][0] != '/') {
    return fmt::format("cannot execute '{}': not an absolute path", c.argv.empty() ? "" : c.argv[0]);
  }
  if (access(c.argv[0].c_str(), X_OK) != 0) {
    return fmt::format("cannot execute {}: {}", c.argv[0], std::strerror(errno));
  }
  p.new_session = new_session;
  for (const auto& path : c.cgroups) {
    int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return fmt::format("cannot put {} into the cgroup {}: {}", c.argv[0], path, std::strerror(errno));
    // Above 9, like the child's pipe ends: a host running with fds 0-2
    // closed (slurmd's prolog) would otherwise hand out 0, which the
    // child's dup2 of its stdin replaces before the join.
    int high = fcntl(fd, F_DUPFD_CLOEXEC, 10);
    const int e = errno;
    close(fd);
    if (high < 0) return fmt::format("cannot put {} into the cgroup {}: {}", c.argv[0], path, std::strerror(e));
    p.cgroup_fds.push_back(high);
  }
  for (const auto& a : c.argv) p.argv.push_back(const_cast<char*>(a.c_str()));
  p.argv.push_back(nullptr);
  for (const auto& e : c.env) p.envp.push_back(const_cast<char*>(e.c_str()));
  p.envp.push_back(nullptr);
  // Root is root in all three uids. A caller with a mixed set (ruid 0 and
  // euid the user, say) is neither: its "user" tool would run with uid 0
  // and could regain root, so it is refused, never run as it is.
  uid_t ruid = 0, euid = 0, suid = 0;
  getresuid(&ruid, &euid, &suid);
  const bool root = ruid == 0 && euid == 0 && suid == 0;
  const bool mixed = !root && (ruid == 0 || euid == 0 || suid == 0);
  if (c.credentials && root && (c.credentials->uid != 0 || c.credentials->gid != 0)) {
    p.drop = true;
    p.uid = c.credentials->uid;
    p.gid = c.credentials->gid;
    p.limits = user_limits();
    auto groups = supplementary_groups(p.uid, p.gid);
    if (!groups) return fmt::format("cannot run {} as uid {}: cannot list that user's groups", c.argv[0], p.uid);
    p.groups = *groups;
  } else if (c.credentials && mixed) {
    return fmt::format("cannot run {} as uid {}: this process has mixed credentials (uids {} {} {}); refusing rather than run "
                       "a tool that could regain root",
                       c.argv[0], c.credentials->uid, ruid, euid, suid);
  } else if (c.credentials && !root && c.credentials->uid != euid) {
    return fmt::format("cannot run {} as uid {}: only root can switch users", c.argv[0], c.credentials->uid);
  }
  return {};
}

// Code that runs in the child of SystemRunner (which shares its parent's
// memory, see spawn_child) carries no sanitizer instrumentation: its shadow
// memory and fake stack frames are the parent's.
#define UNILAB_CHILD_CODE __attribute__((no_sanitize("address")))

// Raw system calls for what the child changes of its credentials and signal
// state. glibc's setuid/setgid/setgroups, in a process with threads, mark
// and signal every thread on the process's thread list to make all of them
// change (the "setxid" broadcast): in a child, that list is the parent's
// threads (shared under CLONE_VM, a stale copy after a raw fork). And a
// sanitizer's sigaction interceptor would record the child's dispositions
// in the parent's memory (CLONE_VM). A raw call changes the calling task
// alone and writes nothing of the parent's. For exec_replace (no child)
// the same is right: exec follows at once and ends every other thread.
UNILAB_CHILD_CODE long raw_setgroups(const std::vector<gid_t>& g) { return syscall(SYS_setgroups, g.size(), g.data()); }
UNILAB_CHILD_CODE long raw_setresgid(gid_t g) { return syscall(SYS_setresgid, g, g, g); }
UNILAB_CHILD_CODE long raw_setresuid(uid_t u) { return syscall(SYS_setresuid, u, u, u); }

// The kernel's struct sigaction (x86_64, aarch64, ppc64le: handler, flags,
// restorer, 64-bit mask); only SIG_DFL is ever set through it.
struct KernelSigaction {
  void (*handler)(int);
  unsigned long flags;
  void (*restorer)();
  uint64_t mask;
};

// Every signal back to its default action, then none blocked: the tool
// starts with neither the host's ignored signals (slurmstepd ignores some)
// nor its mask. Dispositions first: until the mask is cleared no handler of
// the parent can run in the child.
UNILAB_CHILD_CODE void reset_signals() {
  const KernelSigaction dfl{SIG_DFL, 0, nullptr, 0};
  for (int s = 1; s < NSIG; ++s) {
    if (s == SIGKILL || s == SIGSTOP) continue;
    syscall(SYS_rt_sigaction, s, &dfl, nullptr, sizeof dfl.mask);
  }
  const uint64_t none = 0;
  syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, nullptr, sizeof none);
}

// The process state every tool starts with, and the privilege drop, in one
// place for SystemRunner's child and exec_replace. Async-signal-safe calls
// only, on data prepare() computed. Returns 0, or the errno of the step that
// failed (the caller must not exec then).
//  - umask 077: what the tool creates (sockets, logs) is its user's alone.
//  - cwd "/": never the caller's directory (slurmd's spool, a user's cwd
//    that pins a mount).
//  - its own session (SystemRunner only): no controlling terminal, and a
//    process group a timeout can kill whole. The foreground daemon of
//    `unilab-mps start -f` keeps its terminal so Ctrl-C reaches it.
//  - as root dropping to a user: oom_score_adj 0 (slurmd runs at -1000,
//    unkillable by the OOM killer, and children inherit that), the limits
//    of user_limits(), then groups, gid and uid (raw calls, see above), and
//    a check that the drop cannot be undone.
UNILAB_CHILD_CODE int become_tool_process(const Prepared& p) {
  umask(077);
  if (chdir("/") != 0) return errno;
  if (p.new_session && setsid() < 0) return errno;
  if (p.drop) {
    int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
      // From slurmd's -1000 up to 0 needs no privilege. Lowering a positive
      // value needs CAP_SYS_RESOURCE, which a containerized root may lack:
      // then the tool keeps a value that only makes it likelier to be
      // OOM-killed, never less, so it is not worth refusing to start for.
      ssize_t n = write(fd, "0", 1);
      int e = errno;
      close(fd);
      if (n != 1 && e != EACCES && e != EPERM) return e;
    } else if (errno != ENOENT) {  // no /proc at all: nothing inherited to undo there
      return errno;
    }
    for (const ToolLimit& l : p.limits) {
      if (setrlimit(l.resource, &l.value) != 0 && (errno != EPERM || setrlimit(l.resource, &l.fallback) != 0)) return errno;
    }
    if (raw_setgroups(p.groups) != 0) return errno;
    if (raw_setresgid(p.gid) != 0) return errno;
    if (raw_setresuid(p.uid) != 0) return errno;
    if (raw_setresuid(0) == 0 || raw_setresgid(0) == 0) return EPERM;  // the drop must be irreversible
    // Not traceable or readable by the user until the exec (which sets
    // dumpable again from the binary): with fs.suid_dumpable=1 the kernel
    // leaves a process that changed its uid dumpable, and this one still
    // holds the root caller's data.
    if (syscall(SYS_prctl, PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) return errno;
  }
  return 0;
}

// Or'ed into the exec-status errno when joining a cgroup failed.
constexpr int kCgroupJoinFailed = 1 << 20;

// The exec-status pipe gets the errno; the child ends (exit_group itself:
// a sanitizer's _exit interceptor would run in the parent's memory).
UNILAB_CHILD_CODE [[noreturn]] void child_fail(int fd, int err) {
  if (fd >= 0) {
    ssize_t ignored = write(fd, &err, sizeof err);
    (void)ignored;
  }
  for (;;) syscall(SYS_exit_group, 127);
}

// Closes fds lo..hi: close_range from Linux 5.9, one by one (up to 65535) before.
UNILAB_CHILD_CODE void close_fd_range(int lo, int hi) {
  if (lo > hi) return;
  if (syscall(SYS_close_range, static_cast<unsigned>(lo), static_cast<unsigned>(hi), 0U) == 0) return;
  for (int fd = lo; fd <= hi && fd <= 65535; ++fd) close(fd);
}

// Closes every fd from `from` up, but `keep` (-1: none kept).
UNILAB_CHILD_CODE void close_fds_from(int from, int keep) {
  if (keep >= from) {
    close_fd_range(from, keep - 1);
    from = keep + 1;
  }
  close_fd_range(from, std::numeric_limits<int>::max());
}

// Runs in the child between clone and exec, in the parent's memory with all
// signals blocked: async-signal-safe calls on prepared data only, nothing
// that allocates or writes the parent's state (no sanitizer instrumentation:
// its shadow of this stack would outlive the child).
struct ChildArgs {
  const Prepared* p;
  int in, out, err, status;
  void (*after_drop)() = nullptr;  // RunnerOptions::after_drop
};
UNILAB_CHILD_CODE [[noreturn]] void child_exec(const ChildArgs& a) {
  reset_signals();
  // The host process may run with fds 0-2 closed (slurmstepd can), so a pipe
  // end may sit on 0..2: move every end above 2 before the dup2s.
  int status_fd = fcntl(a.status, F_DUPFD_CLOEXEC, 10);
  int in_fd = fcntl(a.in, F_DUPFD, 10);
  int out_fd = fcntl(a.out, F_DUPFD, 10);
  int err_fd = fcntl(a.err, F_DUPFD, 10);
  if (status_fd < 0 || in_fd < 0 || out_fd < 0 || err_fd < 0) child_fail(-1, 0);
  if (dup2(in_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0) child_fail(status_fd, errno);
  // Into its cgroups while still root ("0": the writing process), so the
  // user's process is never anywhere else. kCgroupJoinFailed marks the step.
  for (int fd : a.p->cgroup_fds) {
    if (write(fd, "0", 1) != 1) child_fail(status_fd, errno | kCgroupJoinFailed);
  }
  // Everything above 2 but the exec-status pipe (close-on-exec) is closed.
  close_fds_from(3, status_fd);
  if (int e = become_tool_process(*a.p); e != 0) child_fail(status_fd, e);
  if (a.after_drop != nullptr && a.p->drop) a.after_drop();
  execve(a.p->argv[0], a.p->argv.data(), a.p->envp.data());
  child_fail(status_fd, errno);
}

UNILAB_CHILD_CODE int child_main(void* arg) { child_exec(*static_cast<const ChildArgs*>(arg)); }

// Starts the child of SystemRunner::run.
//  - A root tool (no credential change): clone(CLONE_VM | CLONE_VFORK), as
//    posix_spawn does, not fork. A fork copies the page tables of a process
//    with several threads (the prolog starts a node's daemons at once, each
//    thread running tools) and every page either side then writes costs a
//    copy and a TLB shoot-down. This thread waits until the child has
//    exec'd or died, so the child's stack is a buffer on this thread's own
//    (as musl's posix_spawn does): nothing is allocated, which a caller at
//    its address-space limit (RLIMIT_AS) could not do.
//  - A tool that drops to a user: fork. After the drop the user owns the
//    child and can signal it; a SIGSTOP then, under CLONE_VFORK, would hold
//    this root thread inside clone() (no timeout runs there), and a child in
//    the caller's memory would be a root write primitive to whoever can
//    trace it. A forked child holds a copy, and this thread returns at
//    once, so the timeout covers the whole start.
// Every signal is blocked across the clone or fork, so no handler of ours
// runs in the child.
UNILAB_CHILD_CODE pid_t spawn_child(const ChildArgs& args) {
  alignas(64) char stack[64 * 1024];
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_t pid;
  if (args.p->drop) {
    pid = static_cast<pid_t>(syscall(SYS_clone, SIGCHLD, nullptr, nullptr, nullptr, 0));
    if (pid == 0) child_exec(args);
  } else {
    pid = clone(child_main, stack + sizeof stack, CLONE_VM | CLONE_VFORK | SIGCHLD, const_cast<ChildArgs*>(&args));
  }
  const int e = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  errno = e;
  return pid;
}

// write() to a pipe whose reader is gone raises SIGPIPE, and its default
// action ends the whole process: here the root prolog/epilog, or slurmstepd.
// A tool that exits without reading its stdin is simply done reading, so the
// signal is blocked on this thread for the write and the one it raised is
// consumed. The process-wide disposition belongs to the host, not to us.
ssize_t write_without_sigpipe(int fd, const char* data, size_t len) {
  sigset_t pipe_set, old;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
  sigset_t pending;
  sigemptyset(&pending);
  sigpending(&pending);
  const bool was_pending = sigismember(&pending, SIGPIPE) == 1;
  ssize_t n = write(fd, data, len);
  const int e = errno;
  if (n < 0 && e == EPIPE && !was_pending) {
    timespec zero {};
    while (sigtimedwait(&pipe_set, nullptr, &zero) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  errno = e;
  return n;
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
  if (abandoned) return fmt::format("timed out, and pid {} was still there after SIGKILL: abandoned", pid);
  if (timed_out) return "timed out";
  if (term_signal != 0) return fmt::format("killed by signal {}", term_signal);
  return fmt::format("exit {}", exit_code);
}

std::string CommandResult::first_output_line() const {
  for (const std::string* s : {&err, &out}) {
    for (std::string_view line : split_lines(*s)) {
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
      if (!line.empty()) return std::string(line);
    }
  }
  return {};
}

ChildWait wait_child_until(pid_t pid, std::chrono::steady_clock::time_point deadline) {
  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  ChildWait w;
  for (;;) {
    int status = 0;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      w.reaped = true;
      w.status = status;
      break;
    }
    if (r < 0 && errno == ECHILD) {  // not ours to reap any more (SIGCHLD ignored): it is gone
      w.reaped = true;
      w.lost = true;
      break;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    if (pidfd >= 0) {
      pollfd pfd{pidfd, POLLIN, 0};
      poll(&pfd, 1, static_cast<int>(std::min<long>(left.count(), 1000)));
    } else {
      std::this_thread::sleep_for(std::min(left, std::chrono::milliseconds(10)));
    }
  }
  if (pidfd >= 0) close(pidfd);
  return w;
}

namespace {

// The parent's side of one running tool: its pipe ends (-1 once closed),
// how much of its stdin went out, and what the exec-status pipe said.
struct Child {
  pid_t pid = -1;
  int pidfd = -1;
  int in = -1, out = -1, err = -1, status = -1;
  size_t written = 0;
  int exec_errno = 0;
  bool exec_failed = false;
  bool out_open = true, err_open = true;
  int wstatus = 0;  // -1: reaped by someone else, no status

  void close_in() {
    if (in >= 0) close(in);
    in = -1;
  }
  // The exec-status pipe: 4 bytes (errno) when the exec failed, EOF once it
  // succeeded.
  void read_status() {
    ssize_t got = read(status, &exec_errno, sizeof exec_errno);
    if (got < 0 && (errno == EAGAIN || errno == EINTR)) return;
    exec_failed = got == sizeof exec_errno;
    close(status);
    status = -1;
    if (exec_failed) close_in();
  }
};

// The four pipes of a tool, close-on-exec: [stdin, stdout, stderr, exec
// status], each {read end, write end}. "" or the error.
std::string open_pipes(int (&fds)[4][2]) {
  for (auto& f : fds) f[0] = f[1] = -1;
  for (auto& f : fds) {
    if (pipe2(f, O_CLOEXEC) != 0) {
      const int e = errno;
      for (auto& g : fds) for (int fd : g) if (fd >= 0) close(fd);
      return fmt::format("pipe: {}", std::strerror(e));
    }
  }
  return "";
}

// One round of the wait for the tool: its output read, its stdin fed, and
// whether it has exited. Polls at most `wait_ms`.
bool pump(Child& ch, const Command& c, CommandResult& result, int wait_ms) {
  pollfd fds[5];
  nfds_t n = 0;
  if (ch.out_open) fds[n++] = {ch.out, POLLIN, 0};
  if (ch.err_open) fds[n++] = {ch.err, POLLIN, 0};
  if (ch.in >= 0) fds[n++] = {ch.in, POLLOUT, 0};
  if (ch.status >= 0) fds[n++] = {ch.status, POLLIN, 0};
  if (ch.pidfd >= 0) fds[n++] = {ch.pidfd, POLLIN, 0};
  poll(fds, n, wait_ms);
  if (ch.status >= 0) ch.read_status();
  if (ch.out_open) ch.out_open = drain(ch.out, result.out);
  if (ch.err_open) ch.err_open = drain(ch.err, result.err);
  if (ch.in >= 0) {
    ssize_t w = write_without_sigpipe(ch.in, c.stdin_data.data() + ch.written, c.stdin_data.size() - ch.written);
    if (w > 0) ch.written += static_cast<size_t>(w);
    // EPIPE: the child is done reading (or gone); that is its business.
    if ((w < 0 && errno != EAGAIN && errno != EINTR) || ch.written == c.stdin_data.size()) ch.close_in();
  }
  pid_t r = waitpid(ch.pid, &ch.wstatus, WNOHANG);
  if (r == ch.pid) return true;
  if (r < 0 && errno == ECHILD) {  // reaped by someone else (SIGCHLD ignored): no status, not a success
    ch.wstatus = -1;
    return true;
  }
  return false;
}

// The deadline passed: the tool's group and the tool itself are killed, and
// reaped within the grace, or else abandoned. Our unreaped child's pid (and
// so its group id) cannot be reused; the pidfd names the child itself
// whatever happens.
void kill_timed_out(const Child& ch, const RunnerOptions& options, CommandResult& result) {
  kill(-ch.pid, SIGKILL);
  if (ch.pidfd < 0 || syscall(SYS_pidfd_send_signal, ch.pidfd, SIGKILL, nullptr, 0) != 0) kill(ch.pid, SIGKILL);
  result.timed_out = true;
  auto wait = options.wait_until ? options.wait_until : wait_child_until;
  ChildWait w = wait(ch.pid, std::chrono::steady_clock::now() + options.kill_grace);
  result.abandoned = !w.reaped;
}

// The child is gone (or abandoned): what its pipes already hold, without
// waiting for EOF (a daemon it forked may keep them open), and its outcome.
void finish(Child& ch, const Command& c, CommandResult& result) {
  if (ch.status >= 0 && !result.abandoned) ch.read_status();
  if (ch.out_open) drain(ch.out, result.out);
  if (ch.err_open) drain(ch.err, result.err);
  for (int fd : {ch.in, ch.out, ch.err, ch.status, ch.pidfd}) if (fd >= 0) close(fd);
  if (ch.exec_failed && (ch.exec_errno & kCgroupJoinFailed) != 0) {
    result.exec_error = fmt::format("cannot put {} into its cgroup ({}): {}", c.argv[0], fmt::join(c.cgroups, ", "),
                                    std::strerror(ch.exec_errno & ~kCgroupJoinFailed));
  } else if (ch.exec_failed) {
    result.exec_error = fmt::format("cannot execute {}: {}", c.argv[0], std::strerror(ch.exec_errno));
  } else if (!result.timed_out && ch.wstatus != -1) {
    if (WIFEXITED(ch.wstatus)) result.exit_code = WEXITSTATUS(ch.wstatus);
    if (WIFSIGNALED(ch.wstatus)) result.term_signal = WTERMSIG(ch.wstatus);
  }
}

}  // namespace

CommandResult SystemRunner::run(const Command& c) {
  CommandResult result;
  Prepared p;
  if (std::string e = prepare(c, p, true); !e.empty()) {
    result.exec_error = e;
    return result;
  }
  int pipes[4][2];
  if (std::string e = open_pipes(pipes); !e.empty()) {
    result.exec_error = e;
    return result;
  }
  auto& [in, out, err, status] = pipes;
  const auto deadline = std::chrono::steady_clock::now() + c.timeout;
  pid_t pid = spawn_child(ChildArgs{&p, in[0], out[1], err[1], status[1], options_.after_drop});
  if (pid < 0) {
    result.exec_error = fmt::format("cannot start {}: {}", c.argv[0], std::strerror(errno));
    for (auto& f : pipes) for (int fd : f) close(fd);
    return result;
  }
  result.pid = pid;
  for (int fd : {in[0], out[1], err[1], status[1]}) close(fd);

  Child ch;
  ch.pid = pid;
  ch.pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  ch.in = in[1], ch.out = out[0], ch.err = err[0], ch.status = status[0];
  for (int fd : {ch.in, ch.out, ch.err, ch.status}) set_nonblock(fd);
  if (c.stdin_data.empty()) ch.close_in();
  // spawn_child has returned, so the exec is already over: the child either
  // runs the tool or has written why not on the status pipe. (What the
  // timeout cannot bound is a program path on a hung filesystem: the
  // access() in prepare() and the exec itself wait in the kernel; Slurm's
  // PrologEpilogTimeout bounds the prolog then.)
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      kill_timed_out(ch, options_, result);
      break;
    }
    if (pump(ch, c, result, ch.pidfd >= 0 ? static_cast<int>(std::min<long>(left.count(), 1000)) : 10)) break;
  }
  finish(ch, c, result);
  return result;
}

std::string exec_replace(const Command& c) {
  Prepared p;
  if (std::string e = prepare(c, p, false); !e.empty()) return e;
  int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd >= 0) { dup2(null_fd, 0); close(null_fd); }
  close_fds_from(3, -1);
  if (int e = become_tool_process(p); e != 0) {
    return fmt::format("cannot prepare {} to run as uid {}: {}", c.argv[0], p.drop ? p.uid : geteuid(), std::strerror(e));
  }
  execve(p.argv[0], p.argv.data(), p.envp.data());
  return fmt::format("cannot execute {}: {}", c.argv[0], std::strerror(errno));
}

std::chrono::steady_clock::time_point SystemClock::now() { return std::chrono::steady_clock::now(); }
void SystemClock::sleep_for(std::chrono::milliseconds d) { std::this_thread::sleep_for(d); }
double SystemClock::wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::vector<std::string> tool_environment(std::string_view base_path, const std::optional<std::string>& driver_dir) {
  if (!driver_dir) return {"PATH=" + std::string(base_path)};
  return {"PATH=" + *driver_dir + "/bin:" + std::string(base_path), "LD_LIBRARY_PATH=" + *driver_dir + "/lib64"};
}

}  // namespace unilab::mps
