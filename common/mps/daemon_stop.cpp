// The daemon's stop: identity re-verified before every step, quit, SIGTERM,
// SIGKILL, the sweep of what the daemon leaves, its directories and record
// removed (daemon.hpp).
#include "common/mps/daemon.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "common/mps/daemon_detail.hpp"
#include "common/mps/errors.hpp"
#include "common/mps/safefs.hpp"
#include "common/mps/text.hpp"

namespace unilab::mps {
namespace {

using std::chrono::milliseconds;
using detail::remaining;
using detail::wait_gone;

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
  auto left = detail::sweep_mps_processes(st.s, st.record, st.tree, std::max(st.deadline, st.s.clock.now()) + milliseconds(1000));
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
  st.rep.took = std::chrono::duration_cast<milliseconds>(st.s.clock.now() - st.start);
  return st.rep;
}

// The recorded process is gone (or the pid names another): clean up, signal
// nothing but leftovers of its tree, and say so (outcome "stale").
StopReport clean_stale(Stopping& st, Liveness l) {
  std::string swept = sweep_leftovers(st);
  auto errors = remove_owned_directories(st.record);
  st.store.remove(st.record.name);
  st.rep.outcome = StopOutcome::kStale;
  st.rep.detail = fmt::format("daemon '{}' (pid {}) is no longer running ({}); its record{} removed and nothing was signalled{}",
                              st.record.name, st.record.pid, to_string(l), errors.empty() ? " and directories were" : " was",
                              swept.empty() ? "" : " but " + swept);
  st.rep.took = std::chrono::duration_cast<milliseconds>(st.s.clock.now() - st.start);
  return st.rep;
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
  if (Liveness l = check_identity(id, s.proc); l != Liveness::kLive) return clean_stale(st, l);
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
    } else {
      out.errors.push_back(attempts[i].error);
    }
  }
  return out;
}

std::vector<StopAttempt> stop_daemons(Services& s, const Tools& tools, RecordStore& store,
                                      const std::vector<DaemonRecord>& records, milliseconds stop_timeout) {
  std::vector<StopAttempt> out(records.size());
  const auto deadline = s.clock.now() + stop_timeout;  // one for all, however late a thread begins
  auto errors = detail::run_each_concurrently(records.size(), [&](size_t i) {
    out[i].report = stop_daemon(s, tools, store, records[i], std::max(remaining(s.clock, deadline), milliseconds(1)));
  });
  for (size_t i = 0; i < records.size(); ++i) {
    if (errors[i]) out[i].error = detail::error_messages({errors[i]}).front();
  }
  return out;
}

}  // namespace unilab::mps
