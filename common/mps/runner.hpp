// Running external programs safely: argv by absolute path, environment built
// from scratch, stdin from a buffer (or /dev/null), fds above 2 closed,
// optional credential drop. Never a shell. Abstract so it can be mocked out
// for tests.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace unilab::mps {

// Who a child runs as. With `uid` set and the caller root, the child calls
// setgroups(supplementary groups of the user), setresgid, setresuid before exec.
struct Credentials {
  uid_t uid = 0;
  gid_t gid = 0;
};

struct Command {
  std::vector<std::string> argv;  // argv[0] is the absolute program path
  std::vector<std::string> env;   // "KEY=VALUE", the child's whole environment
  std::string stdin_data;         // written to the child's stdin, then EOF
  std::optional<Credentials> credentials;
  std::chrono::milliseconds timeout{10000};
  // cgroup.procs files the child writes itself into, as root, before its
  // credential change and exec (SystemRunner only): the tool and all it
  // forks are born there, with no moment outside (a daemon that starts
  // contained). Opened by the caller's side first; a join that fails is an
  // exec_error and nothing runs.
  std::vector<std::string> cgroups;
};

struct CommandResult {
  int exit_code = -1;       // valid when exited normally
  int term_signal = 0;      // non-zero when killed by a signal
  bool timed_out = false;   // killed by us after `timeout`
  bool abandoned = false;   // timed out and still not gone kill_grace after SIGKILL: left behind, not waited for
  pid_t pid = 0;            // the child's pid (named when abandoned)
  std::string exec_error;   // non-empty when the program could not be started
  std::string out;
  std::string err;

  bool ok() const { return exec_error.empty() && !timed_out && term_signal == 0 && exit_code == 0; }
  // "exit 1", "killed by signal 9", "timed out after 5000 ms", "cannot execute ...: reason"
  std::string describe() const;
  // The first non-empty line of stderr, else of stdout (for one-line messages).
  std::string first_output_line() const;
};

class CommandRunner {
 public:
  virtual ~CommandRunner() = default;
  virtual CommandResult run(const Command& command) = 0;
};

// How long a child gets to disappear after SIGKILL before it is reported and
// abandoned: one in uninterruptible sleep (a hung filesystem, a stuck
// driver call) never does, and the prolog/epilog must not wait for it forever.
inline constexpr std::chrono::milliseconds kKillGrace{2000};

struct ChildWait {
  bool reaped = false;  // false: still there at the deadline
  bool lost = false;    // reaped by someone else (SIGCHLD ignored by the host process): no status
  int status = 0;       // waitpid status when reaped
};
// Waits for our child `pid` until `deadline` and never longer (pidfd poll,
// else short WNOHANG polls).
ChildWait wait_child_until(pid_t pid, std::chrono::steady_clock::time_point deadline);

struct RunnerOptions {
  std::chrono::milliseconds kill_grace = kKillGrace;
  // Test seam: how a killed child is waited for (default wait_child_until).
  std::function<ChildWait(pid_t, std::chrono::steady_clock::time_point)> wait_until;
  // Test seam: runs in the child right after its credential change, before
  // the exec: the moment a user could first signal it. Async-signal-safe
  // code only (e.g. raising SIGSTOP, as that user could).
  void (*after_drop)() = nullptr;
};

// The real runner: clone or fork, then execve (spawn_child, runner.cpp). Output is collected until the child exits;
// whatever a daemonizing child leaves open does not keep us waiting. Every
// wait has a deadline: `timeout` for the whole run (exec included), then
// SIGKILL to the child's process group and at most kill_grace more; a child
// still there is reported (abandoned) rather than waited for. A child that
// exits without reading its stdin is no error (SIGPIPE is caught on this
// thread only, see runner.cpp).
class SystemRunner final : public CommandRunner {
 public:
  SystemRunner() = default;
  explicit SystemRunner(RunnerOptions options) : options_(std::move(options)) {}
  CommandResult run(const Command& command) override;

 private:
  RunnerOptions options_;
};

// A resource limit a tool run as the job's user gets: `value`, or where
// root cannot raise a hard limit (no CAP_SYS_RESOURCE: a container)
// `fallback`, the same within the inherited hard limit.
struct ToolLimit {
  int resource;
  rlimit value;
  rlimit fallback;
};
// What user_limits() sets, from this process's own limits now
// (docs/ADMIN.md, "What the daemon's process looks like").
std::vector<ToolLimit> user_limits();

// The login name of `uid` (NSS), else the number.
std::string user_name_of(uid_t uid);

// Replaces the current process image (for `--foreground`): same hygiene as
// SystemRunner (env from scratch, fds closed, credentials dropped). Returns
// only on failure, with the reason.
std::string exec_replace(const Command& command);

// The PATH (and LD_LIBRARY_PATH) an NVIDIA tool runs with. Without a
// driver directory: exactly `PATH=<base_path>`. With one (containers keep
// the driver's tools and libraries under e.g. /usr/local/nvidia, outside
// /usr/bin and the linker path): `PATH=<driver_dir>/bin:<base_path>` and
// `LD_LIBRARY_PATH=<driver_dir>/lib64`, nothing else of the caller's.
std::vector<std::string> tool_environment(std::string_view base_path, const std::optional<std::string>& driver_dir);

// Monotonic time and sleeping, abstract so tests need not wait.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual std::chrono::steady_clock::time_point now() = 0;
  virtual void sleep_for(std::chrono::milliseconds duration) = 0;
  virtual double wall_seconds() = 0;  // for created_at
};

class SystemClock final : public Clock {
 public:
  std::chrono::steady_clock::time_point now() override;
  void sleep_for(std::chrono::milliseconds duration) override;
  double wall_seconds() override;
};

}  // namespace unilab::mps
