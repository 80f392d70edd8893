// Test double of `nvidia-cuda-mps-control`: a real daemon on a real UNIX
// socket, so the code under test exercises its actual process handling
// (daemonizing, pid files, flock, signals, stale sockets) without a GPU.
//
//   -d   daemonize (front end returns once the daemon holds the lock and has
//        written its pid file)
//   -f   the same daemon in the foreground, messages also on stderr
//   none front end: one command per stdin line, each over its own connection
//
// Fault knobs come from fake.conf (see README.md). Fake "MPS servers" are
// forked children that sleep until the daemon stops them.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "fake_config.hpp"
#include "fake_mps_protocol.hpp"

namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr const char* kTool = "nvidia-cuda-mps-control";
constexpr const char* kDaemonTool = "mps-daemon";  // call-log name of the daemon process itself
constexpr const char* kNoDaemon = "Cannot find MPS control daemon process";
constexpr const char* kAlreadyRunning = "An instance of this daemon is already running";
constexpr const char* kNoGpus = "No CUDA GPUs are available";
// A server that met a fatal exception (mps_server_fault=legacy) exits with 1.
constexpr int kServerFatalExit = 1;

struct Paths {
  std::string pipe_dir;
  std::string log_dir;
  std::string control() const { return pipe_dir + "/control"; }
  std::string lock() const { return pipe_dir + "/control_lock"; }
  std::string privileged() const { return pipe_dir + "/control_privileged"; }
  std::string fifo() const { return pipe_dir + "/log"; }
  std::string pid_file() const { return pipe_dir + "/nvidia-cuda-mps-control.pid"; }
  std::string control_log() const { return log_dir + "/control.log"; }
  std::string server_log() const { return log_dir + "/server.log"; }
};

std::string errno_text() { return std::strerror(errno); }

// mkdir -p with 0755; the directory itself must not be a symlink (a planted
// link would redirect the daemon's files). Parents may be links (/var/run).
bool ensure_dir(const std::string& path, std::string* error) {
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos != path.size() && path[pos] != '/') continue;
    const std::string prefix = path.substr(0, pos);
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      *error = "cannot create directory " + prefix + ": " + errno_text();
      return false;
    }
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    *error = path + " is not a directory (symlinks are not followed)";
    return false;
  }
  return true;
}

// The daemon keeps only the fds it names; everything a caller leaked to us
// (pipes of a parent reading our output above all) is closed.
void close_fds_except(const std::set<int>& keep) {
  std::vector<int> fds;
  if (DIR* dir = ::opendir("/proc/self/fd")) {
    while (const dirent* e = ::readdir(dir)) {
      if (const auto fd = fake::parse_uint<int>(e->d_name); fd && *fd > 2 && !keep.count(*fd)) fds.push_back(*fd);
    }
    ::closedir(dir);
  }
  for (const int fd : fds) ::close(fd);  // includes the DIR's own fd: EBADF is harmless
}

void redirect_stdio_to_null() {
  const int null_fd = ::open("/dev/null", O_RDWR);
  if (null_fd < 0) return;
  for (int fd = 0; fd <= 2; ++fd) ::dup2(null_fd, fd);
  if (null_fd > 2) ::close(null_fd);
}

std::vector<std::string> words_of(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

std::string format_percentage(double value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", value);
  return buf;
}

// Pinned memory limits look like `2G`, `512M`, `1024K` or plain bytes.
bool valid_mem_limit(const std::string& v) {
  if (v.empty()) return false;
  size_t digits = v.find_first_not_of("0123456789");
  if (digits == 0) return false;
  if (digits == std::string::npos) return true;
  return digits == v.size() - 1 && std::string("KMGkmg").find(v.back()) != std::string::npos;
}

// CUDA's reading of a CUDA_VISIBLE_DEVICES value against the devices a
// process can see (`base`, display UUIDs): a number is a position in `base`,
// a UUID must name a member of `base` (or a MIG instance of one); the first
// invalid entry hides it and everything after it. This is what makes a
// numeric global index fail under a per-GPU MPS daemon.
std::vector<std::string> apply_mask(const std::optional<std::string>& mask, const std::vector<std::string>& base,
                                    const fake::GpuTable& table) {
  if (!mask) return base;
  std::vector<std::string> out;
  if (fake::trim(*mask).empty()) return out;
  for (const auto& entry : fake::split(*mask, ',')) {
    std::optional<std::string> hit;
    if (const auto n = fake::parse_uint<size_t>(entry)) {
      if (*n < base.size()) hit = base[*n];
    } else {
      const std::string token = fake::uuid_token(entry);
      for (const auto& b : base) {
        if (fake::uuid_token(b) == token) hit = b;
      }
      for (const auto& m : table.migs) {
        if (hit || fake::uuid_token(m.uuid) != token) continue;
        for (const auto& g : table.gpus) {
          if (g.index != m.parent) continue;
          for (const auto& b : base) {
            if (fake::uuid_token(b) == fake::uuid_token(g.uuid)) hit = m.uuid;
          }
        }
      }
    }
    if (!hit) break;
    if (std::find(out.begin(), out.end(), *hit) == out.end()) out.push_back(*hit);
  }
  return out;
}

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

// ---------------------------------------------------------------------------

class Daemon {
 public:
  Daemon(Paths paths, fake::Config cfg, int lock_fd, bool foreground, int argc, char** argv)
      : paths_(std::move(paths)), cfg_(std::move(cfg)), lock_fd_(lock_fd), foreground_(foreground), argc_(argc), argv_(argv) {}

  // ready_fd (-1 in the foreground) gets "OK" once the pid file exists, or
  // the reason the start failed; the front end waits for it.
  [[noreturn]] void run(int ready_fd) {
    pid_ = ::getpid();
    const auto started = SteadyClock::now();
    fake::log_call(cfg_, kDaemonTool, argc_, argv_);
    setup_signals();

    std::string error;
    if (!prepare_files(&error)) {
      if (foreground_) std::fprintf(stderr, "%s: %s\n", kTool, error.c_str());
      if (ready_fd >= 0) (void)!::write(ready_fd, error.data(), error.size());
      ::unlink(paths_.pid_file().c_str());
      ::_exit(1);
    }
    const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
    if (cvd) daemon_mask_ = cvd;
    log("Starting control daemon using socket " + paths_.control());
    log(std::string("CUDA_VISIBLE_DEVICES=") + (cvd ? cvd : "(unset)"));
    log("uid=" + std::to_string(::getuid()) + " gid=" + std::to_string(::getgid()));
    // Attacks a user of the daemon could mount, made deterministic here:
    // both happen before the front end reports the daemon ready.
    if (cfg_.flag("mps_pid_file_decoy")) plant_decoy();
    if (cfg_.flag("mps_stray_child")) plant_stray();
    if (ready_fd >= 0) {
      (void)!::write(ready_fd, "OK", 2);
      ::close(ready_fd);
    }

    listen_at_ = started + std::chrono::milliseconds(cfg_.get_ms("mps_start_delay_ms"));
    if (const long ms = cfg_.get_ms("mps_die_after_ms"); ms > 0) die_at_ = started + std::chrono::milliseconds(ms);
    if (const long ms = cfg_.get_ms("mps_pid_file_delay_ms"); ms > 0) pid_file_at_ = started + std::chrono::milliseconds(ms);
    // The real daemon forks a server at the first client; this knob makes
    // one at once (for status and stop checks without a client).
    if (cfg_.flag("mps_server_at_start") && server_for(::getuid()) < 0) log("(fake) mps_server_at_start: fork failed");
    loop();
  }

 private:
  struct Pending {  // a connection whose command line is still arriving
    uid_t peer_uid = 0;
    std::string buf;
  };
  struct Client {  // a fake-cuda-client held for as long as it runs
    pid_t client_pid = 0;
    pid_t server_pid = 0;
  };
  struct Reply {
    std::string text;
    std::optional<Client> hold;  // keep the connection open as this client
    bool quit = false;
    std::optional<SteadyClock::time_point> quit_deadline;
  };

  // ---- startup --------------------------------------------------------------

  void setup_signals() {
    // Dispositions inherited from the caller must not hide these signals
    // (an ignored SIGCHLD would auto-reap, an ignored SIGTERM never arrives).
    ::signal(SIGCHLD, SIG_DFL);
    ::signal(SIGPIPE, SIG_IGN);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGINT);
    if (cfg_.flag("mps_ignore_term")) {
      ::signal(SIGTERM, SIG_IGN);
    } else {
      ::signal(SIGTERM, SIG_DFL);
      sigaddset(&set, SIGTERM);
    }
    ::sigprocmask(SIG_SETMASK, &set, nullptr);
    signal_fd_ = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  }

  bool write_pid_file(std::string* error) {
    const int pid_fd = ::open(paths_.pid_file().c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (pid_fd < 0) {
      *error = "cannot write " + paths_.pid_file() + ": " + errno_text();
      return false;
    }
    const std::string pid_line = std::to_string(pid_) + "\n";
    const bool written = ::write(pid_fd, pid_line.data(), pid_line.size()) == static_cast<ssize_t>(pid_line.size());
    ::close(pid_fd);
    if (!written) *error = "cannot write " + paths_.pid_file();
    return written;
  }

  bool prepare_files(std::string* error) {
    // mps_pid_file_delay_ms: the pid file comes later, from the loop (the
    // real daemon's socket and pid file appear in either order).
    if (cfg_.get_ms("mps_pid_file_delay_ms") <= 0 && !write_pid_file(error)) return false;

    struct stat st {};
    if (::lstat(paths_.fifo().c_str(), &st) == 0 && !S_ISFIFO(st.st_mode)) ::unlink(paths_.fifo().c_str());
    if (::mkfifo(paths_.fifo().c_str(), 0644) != 0 && errno != EEXIST) {
      *error = "cannot create FIFO " + paths_.fifo() + ": " + errno_text();
      return false;
    }

    log_fd_ = ::open(paths_.control_log().c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (log_fd_ < 0) {
      *error = "cannot open " + paths_.control_log() + ": " + errno_text();
      return false;
    }
    const int server_fd = ::open(paths_.server_log().c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (server_fd < 0) {
      *error = "cannot open " + paths_.server_log() + ": " + errno_text();
      return false;
    }
    ::close(server_fd);
    return true;
  }

  // A line of server.log in the real server's format ("[... Server PID] ..."),
  // for the server `pid` (written by the daemon on its behalf).
  void server_log(pid_t pid, const std::string& message) {
    const int fd = ::open(paths_.server_log().c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) return;
    const std::string line = stamped("Server", pid) + message + "\n";
    (void)!::write(fd, line.data(), line.size());
    ::close(fd);
  }

  // "[<local time>.<ms> <who> <pid>] ", the prefix of every real log line.
  static std::string stamped(const char* who, pid_t pid) {
    timespec ts{};
    ::clock_gettime(CLOCK_REALTIME, &ts);
    tm local{};
    ::localtime_r(&ts.tv_sec, &local);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &local);
    char prefix[96];
    std::snprintf(prefix, sizeof prefix, "[%s.%03ld %s %ld] ", stamp, ts.tv_nsec / 1000000L, who, static_cast<long>(pid));
    return prefix;
  }

  // `[2026-11-29 23:00:00.123 Control 12345] message`, like the real log.
  void log(const std::string& message) {
    const std::string line = stamped("Control", pid_) + message + "\n";
    if (log_fd_ >= 0) (void)!::write(log_fd_, line.data(), line.size());
    if (foreground_) (void)!::write(STDERR_FILENO, line.data(), line.size());
  }

  // mps_pid_file_decoy: what a user racing the start with inotify did (a
  // pid file renamed over the daemon's): the pid file names a decoy, a
  // process of the same user with the same pipe directory in its
  // environment (a child that sleeps and dies with the daemon), comm "decoy".
  void plant_decoy() {
    const pid_t decoy = ::fork();
    if (decoy < 0) return log("(fake) mps_pid_file_decoy: fork failed");
    if (decoy == 0) {
      ::prctl(PR_SET_NAME, "decoy");
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      close_fds_except({});
      ::alarm(120);
      ::signal(SIGALRM, SIG_DFL);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      for (;;) ::pause();
    }
    const std::string tmp = paths_.pid_file() + ".decoy";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) return;
    const std::string line = std::to_string(decoy) + "\n";
    (void)!::write(fd, line.data(), line.size());
    ::close(fd);
    ::rename(tmp.c_str(), paths_.pid_file().c_str());
    log("(fake) mps_pid_file_decoy: the pid file names decoy " + std::to_string(decoy));
  }

  // mps_stray_child: what a user tracing the daemon before it is contained
  // could inject: a double-forked process outside the daemon's tree (its
  // parent is gone), running /bin/sleep 300, its pid in <log dir>/stray.pid.
  void plant_stray() {
    const pid_t child = ::fork();
    if (child < 0) return log("(fake) mps_stray_child: fork failed");
    if (child == 0) {
      ::setsid();
      const pid_t stray = ::fork();
      if (stray == 0) {
        close_fds_except({});
        sigset_t none;
        sigemptyset(&none);
        ::sigprocmask(SIG_SETMASK, &none, nullptr);
        ::signal(SIGTERM, SIG_DFL);
        char sleep_path[] = "/bin/sleep", arg0[] = "sleep", arg1[] = "300";
        char* argv[] = {arg0, arg1, nullptr};
        ::execv(sleep_path, argv);
        ::_exit(127);
      }
      if (stray > 0) {
        const std::string path = paths_.log_dir + "/stray.pid";
        const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd >= 0) {
          const std::string line = std::to_string(stray) + "\n";
          (void)!::write(fd, line.data(), line.size());
          ::close(fd);
        }
      }
      ::_exit(0);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    log("(fake) mps_stray_child: planted");
  }

  // ---- event loop -----------------------------------------------------------

  [[noreturn]] void loop() {
    for (;;) {
      reap();
      if (quitting_ && (clients_.empty() || (quit_deadline_ && SteadyClock::now() >= *quit_deadline_))) exit_cleanly(0);

      std::vector<pollfd> fds;
      fds.push_back({signal_fd_, POLLIN, 0});
      if (listen_fd_ >= 0) fds.push_back({listen_fd_, POLLIN, 0});
      for (const auto& [fd, p] : pending_) fds.push_back({fd, POLLIN, 0});
      for (const auto& [fd, c] : clients_) fds.push_back({fd, POLLIN, 0});

      ::poll(fds.data(), fds.size(), poll_timeout_ms());

      const auto now = SteadyClock::now();
      if (die_at_ && now >= *die_at_) {
        // Simulated crash: no cleanup, socket and pid file stay behind.
        log("(fake) mps_die_after_ms reached: dying abruptly");
        ::_exit(1);
      }
      if (listen_fd_ < 0 && now >= listen_at_) open_socket();
      if (pid_file_at_ && now >= *pid_file_at_) {
        std::string error;
        if (!write_pid_file(&error)) log("(fake) " + error);
        pid_file_at_.reset();
      }

      for (const pollfd& p : fds) {
        if (p.revents == 0) continue;
        if (p.fd == signal_fd_) {
          handle_signals();
        } else if (p.fd == listen_fd_) {
          accept_all();
        } else if (pending_.count(p.fd)) {
          read_pending(p.fd);
        } else if (clients_.count(p.fd)) {
          read_client(p.fd);
        }
      }
    }
  }

  int poll_timeout_ms() const {
    std::optional<SteadyClock::time_point> next;
    auto consider = [&](std::optional<SteadyClock::time_point> t) {
      if (t && (!next || *t < *next)) next = t;
    };
    if (listen_fd_ < 0) consider(listen_at_);
    consider(die_at_);
    consider(pid_file_at_);
    if (quitting_) consider(quit_deadline_);
    // The fault knobs act on servers at their age: wake for them.
    if (!servers_.empty() && (cfg_.get_ms("mps_server_fault_after_ms") > 0 || cfg_.get_ms("mps_server_die_after_ms") > 0)) {
      consider(SteadyClock::now() + std::chrono::milliseconds(50));
    }
    if (!next) return -1;
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(*next - SteadyClock::now()).count();
    return ms <= 0 ? 0 : static_cast<int>(std::min<long long>(ms + 1, 60000));
  }

  // Binds and listens on `path`; logs and exits when it cannot (too long,
  // a non-socket in the way), like the real daemon.
  int bind_socket(const std::string& path) {
    if (!fake::fits_sun_path(path)) {
      log("Failed to bind control socket " + path + ": path longer than " +
          std::to_string(sizeof(sockaddr_un::sun_path) - 1) + " bytes");
      exit_cleanly(1);
    }
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0) {
      if (!S_ISSOCK(st.st_mode)) {
        log("Failed to bind control socket " + path + ": a non-socket file is in the way");
        exit_cleanly(1);
      }
      ::unlink(path.c_str());  // stale socket of a killed daemon
    }
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    path.copy(addr.sun_path, path.size());
    if (fd < 0 || ::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 128) != 0) {
      log("Failed to bind control socket " + path + ": " + errno_text());
      exit_cleanly(1);
    }
    return fd;
  }

  // The real daemon binds two sockets: `control_privileged` (the longer
  // name; nothing here talks to it) and `control`. Either too long for
  // sun_path: the daemon exits and cannot be found.
  void open_socket() {
    privileged_fd_ = bind_socket(paths_.privileged());
    listen_fd_ = bind_socket(paths_.control());
    socket_bound_ = true;
    log("Listening on " + paths_.control());
  }

  void handle_signals() {
    signalfd_siginfo info{};
    while (::read(signal_fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
      if (info.ssi_signo == SIGTERM || info.ssi_signo == SIGINT) {
        log("Received signal " + std::to_string(info.ssi_signo) + ", shutting down");
        if (cfg_.flag("mps_orphan_servers_on_term") && !servers_.empty()) {
          // What NVIDIA does not document: a control daemon that exits on
          // SIGTERM without taking its servers down.
          log("(fake) mps_orphan_servers_on_term=1: leaving " + std::to_string(servers_.size()) + " server(s) running");
          servers_.clear();
        }
        exit_cleanly(0);
      }
    }  // SIGCHLD: reap() runs every iteration
  }

  void reap() {
    int status = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
      if (servers_.erase(pid)) {
        // As driver 580's daemon says it, a server killed by a signal included
        // ("exited with status 0" after a SIGKILL, seen on an H200).
        const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 0;
        if (code == kServerFatalExit) log("Server encountered a fatal exception. Shutting down");
        log("Server " + std::to_string(pid) + " exited with status " + std::to_string(code));
        faulted_.erase(pid);
        drop_clients_of(pid);
      }
    }
    fault_servers();
  }

  void accept_all() {
    for (;;) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;
      ucred cred{};
      socklen_t len = sizeof cred;
      Pending p;
      p.peer_uid = ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 ? cred.uid : static_cast<uid_t>(-1);
      pending_[fd] = p;
    }
  }

  // One command per connection, terminated by a newline or by EOF.
  void read_pending(int fd) {
    Pending& p = pending_[fd];
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n > 0) p.buf.append(buf, static_cast<size_t>(n));
    const auto nl = p.buf.find('\n');
    if (nl == std::string::npos && n > 0 && p.buf.size() < 65536) return;
    const std::string line = fake::trim(p.buf.substr(0, nl));
    const uid_t peer = p.peer_uid;
    pending_.erase(fd);
    if (line.empty()) {
      ::close(fd);
      return;
    }
    serve(fd, line, peer);
  }

  void serve(int fd, const std::string& line, uid_t peer) {
    log("Cmd: " + line + " (uid=" + std::to_string(peer) + ")");
    fake::sleep_ms(cfg_.get_ms("mps_latency_ms"));
    Reply reply = execute(line);
    fake::send_all(fd, reply.text);
    if (reply.hold) {
      clients_[fd] = *reply.hold;
      log("NEW CLIENT " + std::to_string(reply.hold->client_pid) + " from user " + std::to_string(peer) +
          ": Server already exists");
    }
    if (reply.quit) {
      if (cfg_.flag("mps_ignore_quit")) {
        log("(fake) mps_ignore_quit=1: not quitting");
      } else {
        quitting_ = true;
        if (reply.quit_deadline && (!quit_deadline_ || *reply.quit_deadline < *quit_deadline_)) {
          quit_deadline_ = reply.quit_deadline;
        }
        // With no client to wait for, clean up before the front end sees
        // EOF, so its caller finds the socket and pid file already gone.
        if (clients_.empty()) exit_cleanly(0);
        log("Waiting for " + std::to_string(clients_.size()) + " client(s) before exiting");
      }
    }
    if (!reply.hold) ::close(fd);
  }

  void read_client(int fd) {
    char buf[256];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR))) return;  // clients say nothing more
    log("Client " + std::to_string(clients_[fd].client_pid) + " disconnected");
    clients_.erase(fd);
    ::close(fd);
  }

  void drop_clients_of(pid_t server) {
    for (auto it = clients_.begin(); it != clients_.end();) {
      if (it->second.server_pid == server) {
        ::close(it->first);
        it = clients_.erase(it);
      } else {
        ++it;
      }
    }
  }

  // ---- commands ---------------------------------------------------------------

  static Reply say(std::string text) { return Reply{std::move(text), std::nullopt, false, std::nullopt}; }

  Reply execute(const std::string& line) {
    const auto w = words_of(line);
    const std::string& cmd = w[0];
    const Reply invalid = say("Invalid input\n");

    if (cmd == "get_server_list" && w.size() == 1) {
      std::string out;
      for (const auto& [pid, uid] : servers_) out += std::to_string(pid) + "\n";
      return say(out);
    }
    if (cmd == "start_server") {
      const auto uid = w.size() == 3 && w[1] == "-uid" ? fake::parse_uint<uid_t>(w[2]) : std::nullopt;
      if (!uid) return invalid;
      const pid_t pid = server_for(*uid);
      if (pid < 0) return say("Failed to start server\n");
      return say(std::to_string(pid) + "\n");
    }
    if (cmd == "get_server_status") {
      if (w.size() < 2) return say("A server PID is required\n");
      const auto pid = fake::parse_uint<pid_t>(w[1]);
      if (!pid || !servers_.count(*pid)) return say("Server " + w[1] + " not found\n");
      return say(faulted_.count(*pid) ? "FAULT\n" : "ACTIVE\n");
    }
    if (cmd == "get_client_list") {
      const auto server = w.size() == 2 ? fake::parse_uint<pid_t>(w[1]) : std::nullopt;
      if (!server) return invalid;
      std::string out;
      for (const auto& [fd, c] : clients_) {
        if (c.server_pid == *server) out += std::to_string(c.client_pid) + "\n";
      }
      return say(out);
    }
    if (cmd == "set_default_active_thread_percentage") {
      double value = 0;
      const bool parsed = w.size() == 2 && std::from_chars(w[1].data(), w[1].data() + w[1].size(), value).ptr ==
                                               w[1].data() + w[1].size();
      if (!parsed || !std::isfinite(value) || value <= 0 || value > 100) return invalid;
      thread_percentage_ = value;
      return say(format_percentage(value) + "\n");
    }
    if (cmd == "get_default_active_thread_percentage" && w.size() == 1) {
      return say(format_percentage(thread_percentage_) + "\n");
    }
    if (cmd == "set_default_device_pinned_mem_limit") {
      if (w.size() != 3 || !valid_mem_limit(w[2])) return invalid;
      pinned_limits_[w[1]] = w[2];
      return say("");
    }
    if (cmd == "get_default_device_pinned_mem_limit") {
      if (w.size() != 2) return invalid;
      const auto it = pinned_limits_.find(w[1]);
      return say((it == pinned_limits_.end() ? "0" : it->second) + "\n");
    }
    if (cmd == "shutdown_server") {
      const auto pid = w.size() >= 2 ? fake::parse_uint<pid_t>(w[1]) : std::nullopt;
      const bool force = w.size() == 3 && w[2] == "-f";
      if (!pid || (w.size() == 3 && !force) || w.size() > 3) return invalid;
      if (!servers_.count(*pid)) return say("No server with PID " + w[1] + "\n");
      stop_server(*pid, force);
      return say("");
    }
    if (cmd == "quit") {
      if (w.size() == 1) return Reply{"", std::nullopt, true, std::nullopt};
      const auto seconds = w.size() == 3 && w[1] == "-t" ? fake::parse_uint<long>(w[2]) : std::nullopt;
      if (!seconds) return invalid;
      return Reply{"", std::nullopt, true, SteadyClock::now() + std::chrono::seconds(*seconds)};
    }
    if (cmd == fake::kClientConnect) return client_connect(w);
    if (cmd == fake::kOpenDevices) return open_devices(w);
    return say("Unknown command\n");
  }

  Reply client_connect(const std::vector<std::string>& w) {
    const auto client = w.size() >= 2 ? fake::parse_uint<pid_t>(w[1]) : std::nullopt;
    if (!client || w.size() > 3 || (w.size() == 3 && w[2].front() != '=')) return say("ERR Invalid input\n");
    if (quitting_) return say("ERR MPS control daemon is shutting down\n");
    const std::optional<std::string> client_mask = w.size() == 3 ? std::optional(w[2].substr(1)) : std::nullopt;

    std::string devices = "unknown";
    std::string table_error;
    const auto table = fake::read_gpu_table(fake::gpu_table_path(cfg_), &table_error);
    if (table && cfg_.get("mps_check_visibility").value_or("1") != "0") {
      std::vector<std::string> all;
      for (const auto& g : table->gpus) all.push_back(g.uuid);
      const auto visible = apply_mask(client_mask, apply_mask(daemon_mask_, all, *table), *table);
      if (visible.empty()) return say(std::string("ERR ") + kNoGpus + "\n");
      devices = join(visible, ",");
    }
    const pid_t server = server_for(::getuid());
    if (server < 0) return say("ERR MPS server failed to start\n");
    // NVIDIA: a server in FAULT refuses new clients until its clients exit.
    if (faulted_.count(server)) return say("ERR MPS server is not ready to accept new MPS client requests\n");
    return Reply{"OK " + std::to_string(server) + " " + devices + "\n", Client{*client, server}, false, std::nullopt};
  }

  // What a process forked by the daemon now (as an MPS server is, at a
  // client's first connection) may open: "PATH ok" or "PATH <errno name>" per
  // path. open() is where a device cgroup denies (EPERM); a fake device node
  // without a driver answers ENXIO, which means allowed.
  Reply open_devices(const std::vector<std::string>& w) {
    if (w.size() < 2) return say("Invalid input\n");
    int out[2];
    if (::pipe(out) != 0) return say("ERR pipe\n");
    const pid_t child = ::fork();
    if (child < 0) return say("ERR fork\n");
    if (child == 0) {
      ::close(out[0]);
      std::string text;
      for (size_t i = 1; i < w.size(); ++i) {
        const int fd = ::open(w[i].c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        const int err = errno;
        if (fd >= 0) ::close(fd);
        text += w[i] + " " + (fd >= 0 ? "ok" : err == EPERM ? "EPERM" : err == ENXIO ? "ENXIO" : err == ENODEV ? "ENODEV" :
                                                   err == EACCES ? "EACCES" : err == ENOENT ? "ENOENT" : std::to_string(err)) + "\n";
      }
      (void)!::write(out[1], text.data(), text.size());
      ::_exit(0);
    }
    ::close(out[1]);
    std::string text;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(out[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
      if (n > 0) text.append(buf, static_cast<size_t>(n));
    }
    ::close(out[0]);
    int status = 0;
    ::waitpid(child, &status, 0);
    return say(text);
  }

  // The fault knobs, checked every loop turn: a server N ms after its start
  //  - mps_server_fault_after_ms=N, mps_server_fault=legacy (default): the
  //    pre-Volta way, "Server encountered a fatal exception. Shutting down",
  //    the server exits with status 1 and its clients lose it;
  //  - mps_server_fault=volta: as driver 580's server wrote it on an H200
  //    when a client made an illegal memory access, server.log's
  //    "Client {PID: C, Context: 1} encountered a fatal GPU error." (C: its
  //    first client) and "Server is handling a fatal GPU error.", every
  //    client's connection cut (they all get the error), the server staying
  //    and taking new clients (ACTIVE) once they are gone; with
  //    mps_server_fault_sticky=1 it answers FAULT and refuses new clients
  //    instead, as NVIDIA documents for a server still recovering;
  //  - mps_server_die_after_ms=N: the server is SIGKILLed from outside.
  void fault_servers() {
    const auto now = SteadyClock::now();
    const auto fault_ms = cfg_.get_ms("mps_server_fault_after_ms");
    const auto die_ms = cfg_.get_ms("mps_server_die_after_ms");
    for (const auto& [pid, uid] : servers_) {
      const auto age = std::chrono::duration_cast<std::chrono::milliseconds>(now - server_started_[pid]).count();
      if (die_ms > 0 && age >= die_ms && !killed_.count(pid)) {
        killed_.insert(pid);
        ::kill(pid, SIGKILL);
      }
      if (fault_ms <= 0 || age < fault_ms || handled_.count(pid)) continue;
      handled_.insert(pid);
      if (cfg_.get("mps_server_fault").value_or("legacy") == "volta") {
        for (const auto& [fd, client] : clients_) {
          if (client.server_pid != pid) continue;
          server_log(pid, "Client {PID: " + std::to_string(client.client_pid) + ", Context: 1} encountered a fatal GPU error.");
          break;
        }
        server_log(pid, "Server is handling a fatal GPU error.");
        faulted_.insert(pid);
        drop_clients_of(pid);
        faulted_.erase(pid);  // no client left: ACTIVE again, as NVIDIA documents
        if (cfg_.flag("mps_server_fault_sticky")) faulted_.insert(pid);
      } else {
        ::kill(pid, SIGUSR1);  // the server exits with kServerFatalExit
      }
    }
  }
  std::set<pid_t> handled_, killed_;

  // ---- fake MPS servers ---------------------------------------------------------

  pid_t server_for(uid_t uid) {
    for (const auto& [pid, owner] : servers_) {
      if (owner == uid) return pid;
    }
    const pid_t pid = ::fork();
    if (pid < 0) return -1;
    if (pid == 0) server_main();
    servers_[pid] = uid;
    server_started_[pid] = SteadyClock::now();
    // The real daemon's words (driver 580, MPS binary 13000).
    log("Starting new server " + std::to_string(pid) + " for user " + std::to_string(uid));
    server_log(pid, "Server has started");
    log("NEW SERVER " + std::to_string(pid) + ": Ready");
    return pid;
  }

  // A server is a sleeping child. It must hold none of the daemon's fds (a
  // held lock or socket would outlive the daemon) and dies with the daemon.
  [[noreturn]] void server_main() {
    // The real server's comm: "nvidia-cuda-mps-server" cut to 15 characters.
    ::prctl(PR_SET_NAME, "nvidia-cuda-mps-server");
    if (!cfg_.flag("mps_orphan_servers_on_term")) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != pid_) ::_exit(0);
    }
    ::signal(SIGTERM, SIG_DFL);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGUSR1, [](int) { ::_exit(kServerFatalExit); });  // mps_server_fault (legacy)
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    close_fds_except({});
    for (;;) ::pause();
  }

  void stop_server(pid_t pid, bool force) {
    ::kill(pid, force ? SIGKILL : SIGTERM);
    int status = 0;
    for (int i = 0; i < 200; ++i) {  // up to 2 s, then SIGKILL
      const pid_t r = ::waitpid(pid, &status, WNOHANG);
      if (r == pid || (r < 0 && errno == ECHILD)) break;
      if (i == 199) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
      }
      fake::sleep_ms(10);
    }
    servers_.erase(pid);
    drop_clients_of(pid);
    log("Server " + std::to_string(pid) + " shut down" + (force ? " (forced)" : ""));
  }

  [[noreturn]] void exit_cleanly(int code) {
    while (!servers_.empty()) stop_server(servers_.begin()->first, false);
    for (const auto& [fd, c] : clients_) ::close(fd);
    clients_.clear();
    if (privileged_fd_ >= 0) ::unlink(paths_.privileged().c_str());
    if (socket_bound_) ::unlink(paths_.control().c_str());
    ::unlink(paths_.pid_file().c_str());
    log("Exit");
    ::close(lock_fd_);
    ::_exit(code);
  }

  Paths paths_;
  fake::Config cfg_;
  int lock_fd_;
  bool foreground_;
  int argc_;
  char** argv_;

  pid_t pid_ = 0;
  int log_fd_ = -1;
  int signal_fd_ = -1;
  int listen_fd_ = -1;
  bool socket_bound_ = false;
  SteadyClock::time_point listen_at_{};
  int privileged_fd_ = -1;                            // control_privileged (bound, never read)
  std::optional<SteadyClock::time_point> die_at_;
  std::optional<SteadyClock::time_point> pid_file_at_;  // mps_pid_file_delay_ms: when the pid file is written
  bool quitting_ = false;
  std::optional<SteadyClock::time_point> quit_deadline_;

  std::optional<std::string> daemon_mask_;  // the daemon's CUDA_VISIBLE_DEVICES
  double thread_percentage_ = 100.0;
  std::map<std::string, std::string> pinned_limits_;  // device -> value as given
  std::map<pid_t, uid_t> servers_;                    // server pid -> uid
  std::map<pid_t, SteadyClock::time_point> server_started_;
  std::set<pid_t> faulted_;                           // servers in FAULT (mps_server_fault=volta)
  std::map<int, Pending> pending_;                    // fd -> partial command
  std::map<int, Client> clients_;                     // fd -> held client
};

// ---------------------------------------------------------------------------

// -d / -f. The lock is taken here, before forking: the daemon inherits the
// locked open file description, so two racing `-d` can never both start.
int start_daemon(bool foreground, int argc, char** argv, const fake::Config& cfg) {
  if (cfg.flag("mps_fail_start")) {
    std::fprintf(stderr, "%s: failed to start the MPS control daemon (fake: mps_fail_start=1)\n", kTool);
    return 1;
  }
  // One daemon of several failing, whichever starts first: the daemon for
  // this GPU (a UUID in its CUDA_VISIBLE_DEVICES) fails, the others start.
  if (const auto uuid = cfg.get("mps_fail_start_for"); uuid && !uuid->empty()) {
    const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
    for (const auto& token : fake::split(cvd ? cvd : "", ',')) {
      if (fake::lower(token) != fake::lower(*uuid)) continue;
      std::fprintf(stderr, "%s: failed to start the MPS control daemon for %s (fake: mps_fail_start_for)\n", kTool, token.c_str());
      return 1;
    }
  }
  const Paths paths{fake::mps_pipe_dir(), fake::mps_log_dir()};
  std::string error;
  if (!ensure_dir(paths.pipe_dir, &error) || !ensure_dir(paths.log_dir, &error)) {
    std::fprintf(stderr, "%s: %s\n", kTool, error.c_str());
    return 1;
  }
  const int lock_fd = ::open(paths.lock().c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (lock_fd < 0) {
    std::fprintf(stderr, "%s: cannot open %s: %s\n", kTool, paths.lock().c_str(), errno_text().c_str());
    return 1;
  }
  if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    std::printf("%s\n", kAlreadyRunning);
    return 1;
  }
  if (foreground) Daemon(paths, cfg, lock_fd, true, argc, argv).run(-1);

  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) {
    std::fprintf(stderr, "%s: pipe: %s\n", kTool, errno_text().c_str());
    return 1;
  }
  std::fflush(nullptr);
  const pid_t child = ::fork();
  if (child < 0) {
    std::fprintf(stderr, "%s: fork: %s\n", kTool, errno_text().c_str());
    return 1;
  }
  if (child == 0) {
    // Classic double fork: a new session, then a grandchild that is no
    // session leader and is reparented away from the caller.
    ::close(ready[0]);
    ::setsid();
    const pid_t grandchild = ::fork();
    if (grandchild != 0) ::_exit(grandchild < 0 ? 1 : 0);
    redirect_stdio_to_null();
    close_fds_except({lock_fd, ready[1]});
    if (::chdir("/") != 0) ::_exit(1);
    Daemon(paths, cfg, lock_fd, false, argc, argv).run(ready[1]);
  }
  ::close(ready[1]);
  ::close(lock_fd);  // the daemon's copy keeps the lock
  int status = 0;
  ::waitpid(child, &status, 0);

  // Wait for "OK" (lock held, pid file written) or a reason, bounded.
  std::string answer;
  const auto deadline = SteadyClock::now() + std::chrono::seconds(10);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now()).count();
    pollfd p{ready[0], POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) break;
    char buf[512];
    const ssize_t n = ::read(ready[0], buf, sizeof buf);
    if (n <= 0) break;
    answer.append(buf, static_cast<size_t>(n));
  }
  if (answer == "OK") return 0;
  std::fprintf(stderr, "%s: control daemon failed to start: %s\n", kTool,
               answer.empty() ? "it exited during startup" : answer.c_str());
  return 1;
}

// No flag: each stdin line is one command on its own connection.
int front_end() {
  ::signal(SIGPIPE, SIG_IGN);
  const std::string control = fake::mps_pipe_dir() + "/control";
  std::string line;
  while (std::getline(std::cin, line)) {
    line = fake::trim(line);
    if (line.empty()) continue;
    const int fd = fake::connect_control(control);
    if (fd < 0) {
      std::printf("%s\n", kNoDaemon);
      return 1;
    }
    fake::send_all(fd, line + "\n");
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
      if (n > 0) std::fwrite(buf, 1, static_cast<size_t>(n), stdout);
    }
    std::fflush(stdout);
    ::close(fd);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const fake::Config cfg = fake::Config::load();
  fake::log_call(cfg, kTool, argc, argv);
  const std::string mode = argc > 1 ? argv[1] : "";
  if (argc == 1) return front_end();
  if (argc == 2 && (mode == "-d" || mode == "-f")) return start_daemon(mode == "-f", argc, argv, cfg);
  if (argc == 2 && (mode == "-h" || mode == "--help")) {
    std::printf("usage: %s [-d | -f]   (no flag: read commands from stdin)\n", kTool);
    return 0;
  }
  std::fprintf(stderr, "%s: unknown option %s\nusage: %s [-d | -f]\n", kTool, argv[1], kTool);
  return 1;
}
