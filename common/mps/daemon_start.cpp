// The daemon's start: directories, the "starting" record, the launch as the
// user, readiness, proof by ancestry, limits, the final record; and undoing
// all of it when any step fails (daemon.hpp).
#include "common/mps/daemon.hpp"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

#include "common/mps/daemon_detail.hpp"
#include "common/mps/errors.hpp"
#include "common/mps/gpu.hpp"
#include "common/mps/mps_pid_file.hpp"
#include "common/mps/safefs.hpp"

namespace unilab::mps {
namespace {

using std::chrono::milliseconds;
using detail::remaining;
using detail::wait_gone;

// The longest pause between two readiness looks (see await_answer).
constexpr milliseconds kReadinessStepCap{32};
// The longest pause between two looks for the control socket (await_socket).
constexpr milliseconds kSocketStepCap{4};

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
  static_cast<DaemonSpec&>(rec) = req;
  rec.pipe_directory = layout.pipe;
  rec.log_directory = layout.log;
  rec.created_at = s.clock.wall_seconds();
  rec.boot_id = s.proc.boot_id();
  rec.state = RecordState::kStarting;
  rec.owned_directories = layout.owned;
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
  detail::sweep_mps_processes(st.s, swept, {}, st.s.clock.now() + milliseconds(1000));
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

}  // namespace

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

std::vector<DaemonRecord> start_daemons(Services& s, const Tools& tools, RecordStore& store,
                                        const std::vector<StartRequest>& requests, milliseconds stop_timeout) {
  milliseconds timeout{0};
  for (const auto& r : requests) timeout = std::max(timeout, r.start_timeout);
  const auto deadline = s.clock.now() + timeout;
  std::vector<std::optional<DaemonRecord>> started(requests.size());
  auto errors = detail::run_each_concurrently(requests.size(), [&](size_t i) {
    started[i] = start_daemon_until(s, tools, store, requests[i], deadline);
  });
  const std::vector<std::string> failures = detail::error_messages(errors);
  std::vector<DaemonRecord> out;
  for (auto& r : started) {
    if (r) out.push_back(std::move(*r));
  }
  if (failures.empty()) return out;
  stop_daemons(s, tools, store, out, stop_timeout);  // fail closed: nothing of a partial start stays
  throw CudaMpsError(join(failures, "; "));
}

}  // namespace unilab::mps
