#include "common/mps/daemon.hpp"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <exception>
#include <functional>
#include <set>
#include <system_error>
#include <thread>

#include <fmt/format.h>

#include "common/mps/errors.hpp"
#include "common/mps/gpu.hpp"
#include "common/mps/mps_pid_file.hpp"
#include "common/mps/safefs.hpp"

namespace unilab::mps {
namespace {

using std::chrono::milliseconds;

// The longest pause between two readiness looks (see await_answer).
constexpr milliseconds kReadinessStepCap{32};
// The longest pause between two looks for the control socket (await_socket).
constexpr milliseconds kSocketStepCap{4};

milliseconds remaining(Clock& clock, std::chrono::steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<milliseconds>(deadline - clock.now());
  return std::max(left, milliseconds(0));
}

// Polls until the identity is no longer live or the deadline passes.
bool wait_gone(Services& s, const ProcessIdentity& id, std::chrono::steady_clock::time_point deadline) {
  milliseconds step(10);
  for (;;) {
    if (check_identity(id, s.proc) != Liveness::kLive) return true;
    if (s.clock.now() >= deadline) return false;
    s.clock.sleep_for(std::min(step, std::max(remaining(s.clock, deadline), milliseconds(1))));
    step = std::min(step * 2, milliseconds(100));
  }
}

// `pid` accepted as the daemon only when /proc says that process runs as
// `uid` with exactly this pipe directory in its environment.
std::optional<ProcessIdentity> identify_pid(pid_t pid, const std::string& pipe_directory, uid_t uid, ProcReader& proc,
                                            std::string* why) {
  auto st = running_stat(proc, pid);
  if (!st) {
    if (why) *why = fmt::format("pid {} from {} is not running", pid, kPidFileName);
    return std::nullopt;
  }
  if (st->uid != uid) {
    if (why) *why = fmt::format("pid {} runs as uid {}, not {}", pid, st->uid, uid);
    return std::nullopt;
  }
  auto env_pipe = proc.environ_value(pid, "CUDA_MPS_PIPE_DIRECTORY");
  if (!env_pipe || *env_pipe != pipe_directory) {
    if (why) *why = fmt::format("pid {} does not serve pipe directory {}", pid, pipe_directory);
    return std::nullopt;
  }
  return ProcessIdentity{pid, st->start_ticks, proc.boot_id(), uid};
}

// The daemon the pid file names, verified by identify_pid.
std::optional<ProcessIdentity> identify_daemon(const std::string& pipe_directory, uid_t uid, ProcReader& proc,
                                               std::string* why) {
  auto pid = read_mps_pid_file(pipe_directory, uid, why);
  if (!pid) return std::nullopt;
  return identify_pid(*pid, pipe_directory, uid, proc, why);
}

struct SweepResult {
  int killed = 0;
  std::vector<pid_t> alive;
};

// What of a daemon may outlive it: the descendants seen before it was
// signalled, and any process of its user running an MPS binary (comm
// "nvidia-cuda-mps", the name the kernel keeps of nvidia-cuda-mps-control
// and -server) whose CUDA_MPS_PIPE_DIRECTORY is the daemon's. A user's own
// clients carry that variable too, but not that name: they are left alone.
SweepResult sweep_mps_processes(Services& s, const DaemonRecord& record, const std::vector<ProcessIdentity>& tree,
                                std::chrono::steady_clock::time_point deadline) {
  std::vector<ProcessIdentity> targets;
  std::set<pid_t> seen;
  for (const auto& t : tree) {
    if (check_identity(t, s.proc) == Liveness::kLive && seen.insert(t.pid).second) targets.push_back(t);
  }
  const std::string boot = s.proc.boot_id();
  for (pid_t pid : s.proc.pids()) {
    if (seen.count(pid)) continue;
    // The name first: one small read, and almost no process on a node is an
    // MPS one (stat and status are two larger reads per process, per daemon).
    auto comm = s.proc.comm(pid);
    if (!comm || !comm->starts_with("nvidia-cuda-mps")) continue;
    auto st = running_stat(s.proc, pid);
    if (!st || st->uid != record.uid) continue;
    if (s.proc.environ_value(pid, "CUDA_MPS_PIPE_DIRECTORY") != record.pipe_directory) continue;
    seen.insert(pid);
    targets.push_back({pid, st->start_ticks, boot, st->uid});
  }
  SweepResult out;
  for (const auto& t : targets) {
    if (s.signaller.send_verified(t, SIGKILL, s.proc) == Liveness::kLive) ++out.killed;
  }
  for (const auto& t : targets) {
    if (!wait_gone(s, t, deadline)) out.alive.push_back(t.pid);
  }
  return out;
}

// Ends a daemon we launched but could not finish recording: SIGTERM, then
// SIGKILL, identity-verified.
void kill_launched(Services& s, const ProcessIdentity& id) {
  if (s.signaller.send_verified(id, SIGTERM, s.proc) != Liveness::kLive) return;
  if (wait_gone(s, id, s.clock.now() + milliseconds(2000))) return;
  s.signaller.send_verified(id, SIGKILL, s.proc);
  wait_gone(s, id, s.clock.now() + milliseconds(2000));
}

std::string tail_suffix(const std::string& log_directory, uid_t uid) {
  std::string tail = control_log_tail(log_directory, uid, 3);
  for (auto& c : tail) if (c == '\n') c = '|';
  return tail.empty() ? "" : fmt::format(" [control.log: {}]", tail);
}

struct Layout {
  std::string pipe;
  std::string log;
  std::vector<std::string> owned;    // ours from now on: removed on stop
  std::vector<std::string> created;  // made by this call: all a refusal may remove
};

// Mounts the daemon's private tmpfs on `<base>/<name>` (root only) and
// returns that directory again (now the tmpfs root). The mount point is
// root's, 0700, until the tmpfs is on it, and the tmpfs root is the user's
// from its uid=/gid=/mode= options: at no moment can the user open the
// directory underneath (and write past dir_size= on the run dir's own file
// system, /run, through a descriptor kept from before the mount).
Fd mount_private_dir(int base, const StartRequest& req, const std::string& path, bool& created) {
  if (std::string e = unmount_private_fs(base, req.entry(), path); !e.empty()) throw CudaMpsError(e);
  ensure_private_dir(base, req.entry(), 0, 0, &created);
  try {
    mount_private_fs(base, req.entry(), path, req.uid, req.gid, *req.private_fs);
  } catch (const CudaMpsError&) {
    if (created) unlinkat(base, req.entry().c_str(), AT_REMOVEDIR);
    throw;
  }
  return ensure_private_dir(base, req.entry(), req.uid, req.gid);
}

// The default layout (daemon_directories) for what the request does not name.
void prepare_default_layout(const StartRequest& req, Layout& l) {
  if (req.base_directory.empty()) throw CudaMpsError("no base directory for the daemon's pipe and log directories");
  const DaemonDirectories dirs = daemon_directories(req.base_directory, req.entry());
  // The base is created by whoever runs us (root for Slurm: 0755 so tasks
  // can traverse; a user: 0700), so only that identity may own its path.
  const bool root = geteuid() == 0;
  Fd base = ensure_trusted_dir(req.base_directory, geteuid(), geteuid(), getegid(), root ? 0755 : 0700);
  bool created = false;
  Fd named = req.private_fs && root ? mount_private_dir(base.get(), req, dirs.root, created)
                                    : ensure_private_dir(base.get(), req.entry(), req.uid, req.gid, &created);
  l.owned.push_back(dirs.root);
  if (created) l.created.push_back(dirs.root);
  if (!req.pipe_directory) {
    ensure_private_dir(named.get(), kPipeLeaf, req.uid, req.gid);
    l.pipe = dirs.pipe;
  }
  if (!req.log_directory) {
    ensure_private_dir(named.get(), kLogLeaf, req.uid, req.gid);
    l.log = dirs.log;
  }
}

// Creates the daemon's directories, 0700 for the user, never through a
// symlink; refuses foreign or loose existing ones.
Layout prepare_directories(const StartRequest& req) {
  Layout l;
  if (!req.pipe_directory || !req.log_directory) prepare_default_layout(req, l);
  for (auto [explicit_dir, out] : {std::pair{&req.pipe_directory, &l.pipe}, std::pair{&req.log_directory, &l.log}}) {
    if (!*explicit_dir) continue;
    auto [parent, leaf] = split_parent(**explicit_dir);
    Fd p = open_trusted_dir(parent, req.uid);
    bool created = false;
    ensure_private_dir(p.get(), leaf, req.uid, req.gid, &created);
    if (created) {
      l.owned.push_back(**explicit_dir);
      l.created.push_back(**explicit_dir);
    }
    *out = **explicit_dir;
  }
  return l;
}

void validate_request(const StartRequest& req) {
  if (!is_safe_name(req.name)) {
    throw CudaMpsError(fmt::format("'{}' is not a valid daemon name (letters, digits, '.', '_', '-'; at most 128)", req.name));
  }
  if (!is_safe_name(req.entry())) {
    throw CudaMpsError(fmt::format("'{}' is not a valid directory name (letters, digits, '.', '_', '-'; at most 128)", req.entry()));
  }
  if (req.gpu_uuids.empty()) throw CudaMpsError("no GPU selected for the daemon");
  for (const auto* d : {&req.pipe_directory, &req.log_directory}) {
    if (*d && ((*d)->empty() || (**d)[0] != '/')) throw CudaMpsError(fmt::format("'{}' is not an absolute path", **d));
  }
  std::string pipe = req.pipe_directory ? *req.pipe_directory : daemon_directories(req.base_directory, req.entry()).pipe;
  check_control_path_length(pipe);
}

void apply_limits(MpsControl& mps, const MpsEndpoint& ep, const StartRequest& req) {
  auto check = [&](const std::string& cmd) {
    CommandResult r = mps.send(ep, cmd);
    std::string line = r.first_output_line();
    if (!r.ok() || line.find("Invalid") != std::string::npos || line.find("Unknown") != std::string::npos) {
      throw CudaMpsError(fmt::format("the MPS daemon refused '{}' ({}{}{})", cmd, r.describe(), line.empty() ? "" : ": ", line));
    }
  };
  if (req.limits.active_thread_percentage) {
    check(fmt::format("set_default_active_thread_percentage {}", *req.limits.active_thread_percentage));
  }
  if (req.limits.pinned_mem_limit) {
    // Device indices as the daemon sees them: its CUDA_VISIBLE_DEVICES order.
    for (size_t i = 0; i < req.gpu_uuids.size(); ++i) {
      check(fmt::format("set_default_device_pinned_mem_limit {} {}", i, *req.limits.pinned_mem_limit));
    }
  }
}

// The record a start writes before it launches anything ("starting").
DaemonRecord starting_record(Services& s, const StartRequest& req, const Layout& layout) {
  DaemonRecord rec;
  rec.name = req.name;
  rec.uid = req.uid;
  rec.gid = req.gid;
  rec.host = req.host;
  rec.topology_mode = req.topology_mode;
  rec.gpu_uuids = req.gpu_uuids;
  rec.pipe_directory = layout.pipe;
  rec.log_directory = layout.log;
  rec.created_at = s.clock.wall_seconds();
  rec.boot_id = s.proc.boot_id();
  rec.state = RecordState::kStarting;
  rec.job_id = req.job_id;
  rec.slurm = req.slurm;
  rec.limits = req.limits;
  rec.owned_directories = layout.owned;
  rec.containment = req.containment;
  return rec;
}

// One start in progress: what it has made so far, for the steps below and
// for abandon, which undoes all of it.
struct Starting {
  Starting(Services& s_, const Tools& tools, RecordStore& store_, const StartRequest& req_,
           std::chrono::steady_clock::time_point deadline_, Layout layout_)
      : s(s_), store(store_), req(req_), deadline(deadline_), layout(std::move(layout_)), mps(s_.runner, tools.mps_control, tools.driver_dir),
        ep{layout.pipe, layout.log, req_.uid, req_.gid}, rec(starting_record(s_, req_, layout)) {}
  Services& s;
  RecordStore& store;
  const StartRequest& req;
  const std::chrono::steady_clock::time_point deadline;
  const Layout layout;
  MpsControl mps;
  const MpsEndpoint ep;
  DaemonRecord rec;
  // Set by launch(): the configured binary and the moment it was launched,
  // what the daemon is proven by (verify_started).
  std::optional<FileId> binary;
  uint64_t launch_ticks = 0;
};

// The processes this start launched that could be its daemon: children of
// this process (the subreaper that adopted what `-d` forked; a user can
// fork its own processes but never make one a child of this one), started
// after the launch, running the configured binary (the file, by device and
// inode, not a name), as the user, for this pipe directory.
// Why `pid` is not a process this start launched as its daemon; empty
// when it is one. The one rule, for launched_daemons and for messages.
std::string not_launched_because(Starting& st, pid_t pid) {
  const pid_t self = st.s.proc.self();
  auto stat = running_stat(st.s.proc, pid);
  if (!stat) return fmt::format("pid {} is not running", pid);
  if (stat->uid != st.req.uid) return fmt::format("pid {} runs as uid {}, not {}", pid, stat->uid, st.req.uid);
  if (stat->ppid != self) return fmt::format("pid {} is a child of pid {}, not of this process (pid {}), which launched the daemon", pid, stat->ppid, self);
  if (stat->start_ticks < st.launch_ticks) return fmt::format("pid {} started before the launch", pid);
  if (st.s.proc.exe(pid) != st.binary) {
    // The proof is the executable itself: a script, or a wrapper that execs
    // the real binary, never is what the daemon runs.
    auto comm = st.s.proc.comm(pid);
    return fmt::format("pid {} does not run {} (it runs '{}'; mps_control= must name the daemon's binary itself, not a script or a wrapper)",
                       pid, st.mps.path(), comm ? escape_control(*comm) : std::string("?"));
  }
  if (st.s.proc.environ_value(pid, "CUDA_MPS_PIPE_DIRECTORY") != st.layout.pipe) {
    return fmt::format("pid {} does not serve pipe directory {}", pid, st.layout.pipe);
  }
  return {};
}

std::vector<ProcessIdentity> launched_daemons(Starting& st) {
  std::vector<ProcessIdentity> out;
  const pid_t self = st.s.proc.self();
  for (pid_t c : st.s.proc.children(self)) {
    if (!st.binary || !not_launched_because(st, c).empty()) continue;
    if (auto stat = running_stat(st.s.proc, c)) out.push_back({c, stat->start_ticks, st.s.proc.boot_id(), stat->uid});
  }
  return out;
}

// Stops what the start launched (or what its ancestry proves it launched),
// removes its directories and record; the error to throw, with the log tail.
CudaMpsError abandon(Starting& st, const std::string& why, const std::optional<ProcessIdentity>& launched) {
  std::string tail = tail_suffix(st.layout.log, st.req.uid);
  if (launched) {
    kill_launched(st.s, *launched);
  } else if (st.binary) {
    for (const auto& found : launched_daemons(st)) kill_launched(st.s, found);
  }
  // The pid the start went by comes from the user's own pipe directory: a
  // decoy's, while the real daemon runs unnamed. Every MPS process of the
  // user on this pipe directory goes too, as at a stop (the sweep's rule).
  DaemonRecord swept = st.rec;
  swept.pipe_directory = st.layout.pipe;
  swept.uid = st.req.uid;
  sweep_mps_processes(st.s, swept, {}, st.s.clock.now() + milliseconds(1000));
  remove_owned_directories(st.rec);
  try {
    st.store.remove(st.req.name);
  } catch (const CudaMpsError&) {
  }
  return CudaMpsError(why + tail);
}

// Refuses a pipe directory another daemon already answers on (removing only
// what this start made), then writes the "starting" record: from here on the
// daemon can always be found.
void claim(Starting& st) {
  if (st.mps.answers(st.ep)) {
    DaemonRecord made = st.rec;
    made.owned_directories = st.layout.created;
    remove_owned_directories(made);
    throw CudaMpsError(fmt::format("an MPS daemon already answers on {}; stop it or choose another pipe directory", st.layout.pipe));
  }
  try {
    st.store.write(st.rec);
  } catch (const CudaMpsError&) {
    remove_owned_directories(st.rec);
    throw;
  }
}

void launch(Starting& st) {
  // What `-d` forks outlives it: as a subreaper this process, not init,
  // becomes its parent, and a parent is a proof no user process can forge.
  if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) {
    throw abandon(st, fmt::format("cannot start MPS daemon '{}': prctl(PR_SET_CHILD_SUBREAPER): {}", st.req.name, std::strerror(errno)),
                  std::nullopt);
  }
  // A binary that cannot be stat'ed fails its launch below, with the
  // runner's own "cannot execute" message; nothing is ever proven against it.
  st.binary = st.s.proc.file(st.mps.path());
  st.launch_ticks = st.s.proc.ticks_now();
  // At least a moment for `-d` itself, even when the deadline has come.
  const milliseconds limit = std::max(remaining(st.s.clock, st.deadline), milliseconds(100));
  CommandResult launched = st.mps.launch(st.ep, st.req.gpu_uuids, limit, st.req.launch_cgroups);
  if (launched.ok()) return;
  std::string line = launched.first_output_line();
  throw abandon(st, fmt::format("{} -d failed for daemon '{}' ({}){}{}", st.mps.path(), st.req.name, launched.describe(),
                                line.empty() ? "" : ": ", line),
                std::nullopt);
}

// Until the daemon's control socket exists nothing can answer, and a look
// for it is one lstat, not a front-end run: looked for every 1, 2, then 4 ms,
// so a daemon that takes long to bind it is found within 4 ms, not within
// the front-end back-off's 32. False at the deadline.
bool await_socket(Starting& st) {
  milliseconds step(1);
  while (!st.mps.has_socket(st.ep)) {
    milliseconds left = remaining(st.s.clock, st.deadline);
    if (left.count() == 0) return false;
    st.s.clock.sleep_for(std::min(step, left));
    step = std::min(step * 2, kSocketStepCap);
  }
  return true;
}

// Asks right after `-d` returned (once the socket exists, await_socket),
// then after 1, 2, 4 .. ms, capped: a daemon is up within milliseconds to a
// few hundred, a late look wastes up to a whole step of the prolog, and each
// look costs one front-end run.
bool await_answer(Starting& st) {
  milliseconds step(1);
  for (;;) {
    if (!await_socket(st)) return false;
    milliseconds left = remaining(st.s.clock, st.deadline);
    if (left.count() == 0) return false;
    if (st.mps.answers(st.ep, left)) return true;
    st.s.clock.sleep_for(std::min(step, remaining(st.s.clock, st.deadline)));
    step = std::min(step * 2, kReadinessStepCap);
  }
}

// The daemon that answers, proven by ancestry (launched_daemons): exactly
// one process this start launched, and the one its pid file names. The pid
// file lives in the user's pipe directory and may appear after the socket
// (looked for until the deadline); the daemon is adopted once the process
// `-d` forked it from has exited (looked for until the deadline too). A pid
// file naming another process, or two launched candidates, is a user
// process at work: refused, and abandon() sweeps the pipe directory.
ProcessIdentity verify_started(Starting& st) {
  std::string why;
  auto pid = await_mps_pid_file(st.layout.pipe, st.req.uid, st.s.clock, st.deadline, &why);
  if (!pid) throw abandon(st, fmt::format("cannot verify MPS daemon '{}': {}", st.req.name, why), std::nullopt);
  milliseconds step(1);
  for (;;) {
    auto found = launched_daemons(st);
    if (found.size() > 1) {
      throw abandon(st, fmt::format("cannot verify MPS daemon '{}': {} processes launched by this start run {} for {} (pids {} and {}); "
                                    "a process of uid {} forked from the launch",
                                    st.req.name, found.size(), st.mps.path(), st.layout.pipe, found[0].pid, found[1].pid, st.req.uid),
                    std::nullopt);
    }
    if (found.size() == 1 && found[0].pid == *pid) return found[0];
    if (found.size() == 1) {
      throw abandon(st, fmt::format("cannot verify MPS daemon '{}': {} in {} names pid {}, but the daemon this start launched is pid {}; "
                                    "a process of uid {} rewrote it",
                                    st.req.name, kPidFileName, st.layout.pipe, *pid, found[0].pid, st.req.uid),
                    std::nullopt);
    }
    milliseconds left = remaining(st.s.clock, st.deadline);
    if (left.count() == 0) break;
    st.s.clock.sleep_for(std::min(step, left));
    step = std::min(step * 2, kReadinessStepCap);
  }
  throw abandon(st, fmt::format("cannot verify MPS daemon '{}': {} in {} names a process this start did not launch ({})",
                                st.req.name, kPidFileName, st.layout.pipe, not_launched_because(st, *pid)),
                std::nullopt);
}

// Runs job(i) for every i < n at once, one thread each (this thread takes
// the first), and waits for all of them; what each threw is kept, not thrown.
std::vector<std::exception_ptr> run_each_concurrently(size_t n, const std::function<void(size_t)>& job) {
  std::vector<std::exception_ptr> errors(n);
  auto guarded = [&](size_t i) {
    try {
      job(i);
    } catch (...) {
      errors[i] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  for (size_t i = 1; i < n; ++i) {
    try {
      threads.emplace_back(guarded, i);
    } catch (const std::system_error&) {
      guarded(i);  // no thread to be had: in turn, then
    }
  }
  if (n > 0) guarded(0);
  for (auto& t : threads) t.join();
  return errors;
}

// The CudaMpsError messages of `errors`, in order. Anything else one threw
// (no CudaMpsError: a bug or no memory) is rethrown as it is, after all
// threads ended, as it would have been without threads.
std::vector<std::string> error_messages(const std::vector<std::exception_ptr>& errors) {
  std::vector<std::string> out;
  for (const auto& e : errors) {
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const CudaMpsError& x) {
      out.push_back(x.what());
    }
  }
  return out;
}

// One stop in progress (see stop_daemon).
struct Stopping {
  Services& s;
  const Tools& tools;
  RecordStore& store;
  const DaemonRecord& record;
  const milliseconds timeout;
  const std::chrono::steady_clock::time_point start;
  const std::chrono::steady_clock::time_point deadline;
  std::vector<ProcessIdentity> tree;  // the daemon's descendants before any signal (its MPS servers)
  StopReport rep;
};

// Nothing of the daemon's tree may outlive it (a control daemon may die and
// leave its servers, holding the GPU, behind): kills the rest; what it did,
// or throws when something survives SIGKILL.
std::string sweep_leftovers(Stopping& st) {
  auto left = sweep_mps_processes(st.s, st.record, st.tree, std::max(st.deadline, st.s.clock.now()) + milliseconds(1000));
  if (left.alive.empty()) return left.killed == 0 ? "" : fmt::format("killed {} leftover MPS process(es)", left.killed);
  std::vector<std::string> pids;
  for (pid_t p : left.alive) pids.push_back(std::to_string(p));
  throw CudaMpsError(fmt::format("MPS process(es) {} of daemon '{}' survive SIGKILL; its record is kept in {}; the node needs attention",
                                 join(pids, ","), st.record.name, st.store.root()));
}

StopReport finish_stop(Stopping& st, StopOutcome outcome) {
  std::string swept = sweep_leftovers(st);
  auto errors = remove_owned_directories(st.record);
  st.store.remove(st.record.name);
  st.rep.outcome = outcome;
  std::vector<std::string> details;
  if (!st.rep.detail.empty()) details.push_back(st.rep.detail);
  if (!swept.empty()) details.push_back(swept);
  if (!errors.empty()) details.push_back("could not remove " + join(errors, "; "));
  st.rep.detail = join(details, "; ");
  return st.rep;
}

// The recorded process is gone (or the pid names another): clean up, signal
// nothing but leftovers of its tree, and say so.
[[noreturn]] void clean_stale(Stopping& st, Liveness l) {
  std::string swept = sweep_leftovers(st);
  auto errors = remove_owned_directories(st.record);
  st.store.remove(st.record.name);
  throw StaleCudaMpsDaemonError(fmt::format(
      "daemon '{}' (pid {}) is no longer running ({}); its record{} removed and nothing was signalled{}", st.record.name,
      st.record.pid, to_string(l), errors.empty() ? " and directories were" : " was", swept.empty() ? "" : " but " + swept));
}

// `quit -t` through its own pipe, then SIGTERM, then SIGKILL, each
// re-verified, in 60/30/10 % of the stop timeout.
StopReport escalate_stop(Stopping& st, const ProcessIdentity& id) {
  Services& s = st.s;
  const auto quit_until = st.start + st.timeout * 6 / 10;
  const auto term_until = st.start + st.timeout * 9 / 10;
  MpsControl mps(s.runner, st.tools.mps_control, st.tools.driver_dir);
  MpsEndpoint ep{st.record.pipe_directory, st.record.log_directory, st.record.uid, st.record.gid};
  // A plain `quit` waits for every client; `quit -t` ends them after that
  // many seconds, inside the time the quit phase has.
  const long quit_seconds = std::max<long>(1, std::chrono::duration_cast<std::chrono::seconds>(st.timeout / 2).count());
  CommandResult q = mps.send(ep, fmt::format("quit -t {}", quit_seconds), std::max(remaining(s.clock, quit_until), milliseconds(100)));
  if (wait_gone(s, id, quit_until)) return finish_stop(st, StopOutcome::kQuit);
  std::string quit_note = q.ok() ? "ignored quit" : "quit failed: " + q.describe();
  if (s.signaller.send_verified(id, SIGTERM, s.proc) != Liveness::kLive || wait_gone(s, id, term_until)) {
    st.rep.detail = quit_note;
    return finish_stop(st, StopOutcome::kTerminated);
  }
  if (s.signaller.send_verified(id, SIGKILL, s.proc) != Liveness::kLive ||
      wait_gone(s, id, std::max(st.deadline, s.clock.now() + milliseconds(1000)))) {
    st.rep.detail = quit_note + ", ignored SIGTERM";
    return finish_stop(st, StopOutcome::kKilled);
  }
  throw CudaMpsError(fmt::format(
      "daemon '{}' (pid {}) is still alive after quit, SIGTERM and SIGKILL; its record is kept in {}; the node needs attention",
      st.record.name, id.pid, st.store.root()));
}

}  // namespace

DaemonDirectories daemon_directories(const std::string& base, const std::string& name) {
  const std::string root = base + "/" + name;
  return {root, root + "/" + kPipeLeaf, root + "/" + kLogLeaf};
}

std::string current_host() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

std::optional<ProcessIdentity> recover_starting_identity(const DaemonRecord& record, ProcReader& proc) {
  return identify_daemon(record.pipe_directory, record.uid, proc, nullptr);
}

std::vector<std::string> remove_owned_directories(const DaemonRecord& record) {
  std::vector<std::string> errors;
  for (const auto& dir : record.owned_directories) {
    try {
      auto [parent, leaf] = split_parent(dir);
      Fd p = open_trusted_dir(parent, record.uid);
      if (geteuid() == 0) {
        // What a user mounted in the daemon's directory (FUSE on pipe/):
        // detached first, never looked into; what cannot be is not removed.
        const auto mounts = read_mountinfo();
        if (!mounts) {
          errors.push_back(fmt::format("not removing {}: /proc/self/mountinfo cannot be read, so a mount there cannot be "
                                       "ruled out; remove it by hand once the node's /proc is readable",
                                       dir));
          continue;
        }
        bool blocked = false;
        for (auto& line : detach_mounts_below(p.get(), leaf, dir, *mounts)) {
          if (line.rfind("detached ", 0) == 0) continue;
          errors.push_back(std::move(line));
          blocked = true;
        }
        if (blocked) continue;
        // A daemon directory with its own tmpfs: the unmount takes the whole
        // tree (what remains is the empty mount point).
        if (std::string e = unmount_private_fs(p.get(), leaf, dir); !e.empty()) {
          errors.push_back(e);
          continue;
        }
        // That mount point is root's (mount_private_dir): the user never
        // could write into it, so it is empty unless root put something
        // there, which is not this removal's to take.
        struct stat st {};
        if (record.uid != 0 && fstatat(p.get(), leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode) &&
            st.st_uid == 0) {
          if (unlinkat(p.get(), leaf.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
            errors.push_back(fmt::format("{}: root's mount point is not empty ({}); left in place", dir, std::strerror(errno)));
          }
          continue;
        }
      }
      // As root, what is below is removed by a child running as the
      // record's user (safefs.hpp): the tree is the user's to change.
      std::string e = remove_tree_as_owner(p.get(), leaf, record.uid, record.gid, kTreeRemovalTimeout);
      if (!e.empty()) errors.push_back(fmt::format("{}: {}", dir, e));
    } catch (const CudaMpsError& e) {
      if (access(dir.c_str(), F_OK) == 0) errors.push_back(fmt::format("{}: {}", dir, e.what()));
    }
  }
  return errors;
}

DaemonRecord start_daemon(Services& s, const Tools& tools, RecordStore& store, const StartRequest& req) {
  return start_daemon_until(s, tools, store, req, s.clock.now() + req.start_timeout);
}

DaemonRecord start_daemon_until(Services& s, const Tools& tools, RecordStore& store, const StartRequest& req,
                                std::chrono::steady_clock::time_point deadline) {
  validate_request(req);
  if (store.read(req.name)) {
    throw CudaMpsError(fmt::format("a daemon named '{}' is already recorded in {}; stop that daemon first", req.name, store.root()));
  }
  Starting st{s, tools, store, req, deadline, prepare_directories(req)};
  claim(st);
  launch(st);
  if (!await_answer(st)) {
    auto mounted = mount_at_or_below(st.layout.pipe);
    throw abandon(st,
                  mounted ? fmt::format("MPS daemon '{}': {} is mounted in its pipe directory, which root never looks into; a process of uid {} "
                                        "mounted it",
                                        req.name, *mounted, req.uid)
                          : fmt::format("MPS daemon '{}' did not answer within {} ms (start_timeout); check its log in {}", req.name,
                                        req.start_timeout.count(), st.layout.log),
                  std::nullopt);
  }
  ProcessIdentity id = verify_started(st);
  st.rec.pid = id.pid;
  st.rec.process_start_ticks = id.start_ticks;
  st.rec.state = RecordState::kRunning;
  try {
    apply_limits(st.mps, st.ep, req);
    store.write(st.rec);
  } catch (const CudaMpsError& e) {
    throw abandon(st, e.what(), id);
  }
  return st.rec;
}

void exec_foreground_daemon(const Tools& tools, const StartRequest& req) {
  validate_request(req);
  Layout layout = prepare_directories(req);
  SystemRunner runner;
  MpsControl mps(runner, tools.mps_control, tools.driver_dir);
  MpsEndpoint ep{layout.pipe, layout.log, req.uid, req.gid};
  if (mps.answers(ep)) {
    throw CudaMpsError(fmt::format("an MPS daemon already answers on {}; stop it or choose another pipe directory", layout.pipe));
  }
  std::string err = exec_replace(mps.foreground_command(ep, req.gpu_uuids));
  throw CudaMpsError(err);
}

StopReport stop_daemon(Services& s, const Tools& tools, RecordStore& store, const DaemonRecord& record,
                       milliseconds stop_timeout) {
  Stopping st{s, tools, store, record, stop_timeout, s.clock.now(), s.clock.now() + stop_timeout, {}, {}};
  st.rep.name = record.name;
  st.rep.pid = record.pid;
  ProcessIdentity id = record.identity();
  if (record.state == RecordState::kStarting) {
    auto found = recover_starting_identity(record, s.proc);
    if (!found) return finish_stop(st, StopOutcome::kNotStarted);
    id = *found;
    st.rep.pid = id.pid;
  }
  if (Liveness l = check_identity(id, s.proc); l != Liveness::kLive) clean_stale(st, l);
  st.tree = descendants_of(id, s.proc);
  return escalate_stop(st, id);
}

StopAllResult stop_all_daemons(Services& s, const Tools& tools, RecordStore& store, uid_t uid, const std::string& host,
                               milliseconds stop_timeout) {
  StopAllResult out;
  const auto records = store.list(uid, host).records;
  const auto attempts = stop_daemons(s, tools, store, records, stop_timeout);
  for (size_t i = 0; i < records.size(); ++i) {
    if (attempts[i].report) {
      out.stopped.push_back(*attempts[i].report);
    } else if (attempts[i].stale) {
      out.stopped.push_back({records[i].name, records[i].pid, StopOutcome::kStale, attempts[i].error});
    } else {
      out.errors.push_back(attempts[i].error);
    }
  }
  return out;
}

std::vector<DaemonRecord> start_daemons(Services& s, const Tools& tools, RecordStore& store,
                                        const std::vector<StartRequest>& requests, milliseconds stop_timeout) {
  milliseconds timeout{0};
  for (const auto& r : requests) timeout = std::max(timeout, r.start_timeout);
  const auto deadline = s.clock.now() + timeout;
  std::vector<std::optional<DaemonRecord>> started(requests.size());
  auto errors = run_each_concurrently(requests.size(), [&](size_t i) {
    started[i] = start_daemon_until(s, tools, store, requests[i], deadline);
  });
  const std::vector<std::string> failures = error_messages(errors);
  std::vector<DaemonRecord> out;
  for (auto& r : started) {
    if (r) out.push_back(std::move(*r));
  }
  if (failures.empty()) return out;
  stop_daemons(s, tools, store, out, stop_timeout);  // fail closed: nothing of a partial start stays
  throw CudaMpsError(join(failures, "; "));
}

std::vector<StopAttempt> stop_daemons(Services& s, const Tools& tools, RecordStore& store,
                                      const std::vector<DaemonRecord>& records, milliseconds stop_timeout) {
  std::vector<StopAttempt> out(records.size());
  const auto deadline = s.clock.now() + stop_timeout;  // one for all, however late a thread begins
  auto errors = run_each_concurrently(records.size(), [&](size_t i) {
    try {
      out[i].report = stop_daemon(s, tools, store, records[i], std::max(remaining(s.clock, deadline), milliseconds(1)));
    } catch (const StaleCudaMpsDaemonError& e) {
      out[i].stale = true;
      out[i].error = e.what();
    }
  });
  for (size_t i = 0; i < records.size(); ++i) {
    if (errors[i]) out[i].error = error_messages({errors[i]}).front();
  }
  return out;
}

bool daemon_process_is_live(const DaemonRecord& record, ProcReader& proc) {
  if (record.state == RecordState::kStarting) return false;
  return check_identity(record.identity(), proc) == Liveness::kLive;
}

nlohmann::json daemon_status(const DaemonRecord& record, ProcReader& proc) {
  nlohmann::json j = record.to_json();
  const bool starting = record.state == RecordState::kStarting;
  Liveness l = starting ? Liveness::kGone : check_identity(record.identity(), proc);
  j["live"] = l == Liveness::kLive;
  j["liveness"] = std::string(starting ? to_string(record.state) : to_string(l));
  auto st = record.pid > 0 ? proc.stat(record.pid) : std::nullopt;
  j["observed_start_ticks"] = st ? nlohmann::json(st->start_ticks) : nlohmann::json(nullptr);
  return j;
}

std::vector<std::pair<std::string, std::string>> environment_for_daemon(const DaemonRecord& record) {
  return {{"CUDA_VISIBLE_DEVICES", join(record.gpu_uuids, ",")},
          {"CUDA_MPS_PIPE_DIRECTORY", record.pipe_directory},
          {"CUDA_MPS_LOG_DIRECTORY", record.log_directory}};
}

const DaemonRecord& select_daemon_for_gpu(const std::string& gpu_uuid, const std::vector<DaemonRecord>& records,
                                          ProcReader& proc) {
  const std::string token = canonicalize_gpu_uuid(gpu_uuid);
  const DaemonRecord* hit = nullptr;
  for (const auto& r : records) {
    bool serves = std::any_of(r.gpu_uuids.begin(), r.gpu_uuids.end(),
                              [&](const auto& u) { return canonicalize_gpu_uuid(u) == token; });
    if (!serves || !daemon_process_is_live(r, proc)) continue;
    if (hit != nullptr) {
      throw CudaMpsError(fmt::format("GPU {} is served by more than one live daemon ('{}' and '{}'); name one", display_gpu_uuid(gpu_uuid),
                                     hit->name, r.name));
    }
    hit = &r;
  }
  if (hit == nullptr) {
    throw CudaMpsError(fmt::format("no live unilab-mps daemon serves GPU {}; start one with `unilab-mps start {}`",
                                   display_gpu_uuid(gpu_uuid), display_gpu_uuid(gpu_uuid)));
  }
  return *hit;
}

std::vector<std::pair<std::string, std::string>> select_environment_for_gpu(const std::string& gpu_uuid,
                                                                            const std::vector<DaemonRecord>& records,
                                                                            ProcReader& proc) {
  return environment_for_daemon(select_daemon_for_gpu(gpu_uuid, records, proc));
}

DaemonRecord read_daemon_record(RecordStore& store, const std::optional<std::string>& name, uid_t uid,
                                const std::string& host, ProcReader& proc) {
  if (name) {
    auto rec = store.read(*name);
    if (!rec) {
      throw CudaMpsError(fmt::format("no daemon record named '{}' in {}; `unilab-mps status` lists them", *name, store.root()));
    }
    if (rec->uid != uid || rec->host != host) {
      throw CudaMpsError(fmt::format("record '{}' belongs to uid {} on {}, not uid {} on {}; refusing to act on it", *name,
                                     rec->uid, rec->host, uid, host));
    }
    return *rec;
  }
  auto listing = store.list(uid, host);
  std::vector<const DaemonRecord*> live;
  for (const auto& r : listing.records) if (daemon_process_is_live(r, proc)) live.push_back(&r);
  if (live.size() == 1) return *live.front();
  if (live.empty() && listing.records.size() == 1) return listing.records.front();
  if (listing.records.empty()) {
    throw CudaMpsError(fmt::format("no unilab-mps daemon is recorded for uid {} on {}; start one with `unilab-mps start`", uid, host));
  }
  std::vector<std::string> names;
  for (const auto& r : listing.records) names.push_back(r.name);
  throw CudaMpsError(fmt::format("several daemons are recorded ({}); name one", join(names, ", ")));
}

}  // namespace unilab::mps
