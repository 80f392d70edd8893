#include "common/mps/daemon.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <set>

#include <fmt/format.h>

#include "common/mps/errors.hpp"
#include "common/mps/gpu.hpp"
#include "common/mps/safefs.hpp"

namespace unilab::mps {
namespace {

using std::chrono::milliseconds;

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

std::optional<pid_t> read_pid_file(const std::string& pipe_directory, uid_t uid) {
  try {
    Fd dir = open_trusted_dir(pipe_directory, uid);
    auto text = read_file_at(dir.get(), kPidFileName, 64);
    if (!text) return std::nullopt;
    std::string_view t = *text;
    while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.remove_suffix(1);
    pid_t pid = 0;
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), pid);
    if (ec != std::errc() || p != t.data() + t.size() || pid <= 0) return std::nullopt;
    return pid;
  } catch (const CudaMpsError&) {
    return std::nullopt;
  }
}

// The pid in the pid file, accepted only when /proc says that process runs
// as `uid` with exactly this pipe directory in its environment.
std::optional<ProcessIdentity> identify_daemon(const std::string& pipe_directory, uid_t uid, ProcReader& proc,
                                               std::string* why) {
  auto pid = read_pid_file(pipe_directory, uid);
  if (!pid) {
    if (why) *why = fmt::format("no readable {} in {}", kPidFileName, pipe_directory);
    return std::nullopt;
  }
  auto st = proc.stat(*pid);
  if (!st || st->state == 'Z' || st->state == 'X') {
    if (why) *why = fmt::format("pid {} from {} is not running", *pid, kPidFileName);
    return std::nullopt;
  }
  if (st->uid != uid) {
    if (why) *why = fmt::format("pid {} runs as uid {}, not {}", *pid, st->uid, uid);
    return std::nullopt;
  }
  auto env_pipe = proc.environ_value(*pid, "CUDA_MPS_PIPE_DIRECTORY");
  if (!env_pipe || *env_pipe != pipe_directory) {
    if (why) *why = fmt::format("pid {} does not serve pipe directory {}", *pid, pipe_directory);
    return std::nullopt;
  }
  return ProcessIdentity{*pid, st->start_ticks, proc.boot_id(), uid};
}

// Identities of every descendant of the daemon, now.
std::vector<ProcessIdentity> descendants_of(const ProcessIdentity& daemon, ProcReader& proc) {
  std::vector<ProcessIdentity> out;
  std::vector<pid_t> queue{daemon.pid};
  std::set<pid_t> seen{daemon.pid};
  for (size_t i = 0; i < queue.size() && queue.size() < 4096; ++i) {
    for (pid_t c : proc.children(queue[i])) {
      if (!seen.insert(c).second) continue;
      queue.push_back(c);
      if (auto st = proc.stat(c)) out.push_back({c, st->start_ticks, daemon.boot_id, st->uid});
    }
  }
  return out;
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
    auto st = s.proc.stat(pid);
    if (!st || st->uid != record.uid || st->state == 'Z' || st->state == 'X') continue;
    auto comm = s.proc.comm(pid);
    if (!comm || !comm->starts_with("nvidia-cuda-mps")) continue;
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

// Creates the daemon's directories, 0700 for the user, never through a
// symlink; refuses foreign or loose existing ones.
Layout prepare_directories(const StartRequest& req) {
  Layout l;
  bool need_base = !req.pipe_directory || !req.log_directory;
  if (need_base) {
    if (req.base_directory.empty()) throw CudaMpsError("no base directory for the daemon's pipe and log directories");
    // The base is created by whoever runs us (root for Slurm: 0755 so tasks
    // can traverse; a user: 0700), so only that identity may own its path.
    bool root = geteuid() == 0;
    Fd base = ensure_trusted_dir(req.base_directory, geteuid(), geteuid(), getegid(), root ? 0755 : 0700);
    bool created = false;
    Fd named = ensure_private_dir(base.get(), req.name, req.uid, req.gid, &created);
    l.owned.push_back(req.base_directory + "/" + req.name);
    if (created) l.created.push_back(req.base_directory + "/" + req.name);
    if (req.private_fs && root) {
      const std::string path = req.base_directory + "/" + req.name;
      if (std::string e = unmount_private_fs(base.get(), req.name, path); !e.empty()) throw CudaMpsError(e);
      try {
        mount_private_fs(base.get(), req.name, path, req.uid, req.gid, *req.private_fs);
      } catch (const CudaMpsError&) {
        if (created) unlinkat(base.get(), req.name.c_str(), AT_REMOVEDIR);
        throw;
      }
      named = ensure_private_dir(base.get(), req.name, req.uid, req.gid);  // the tmpfs root now
    }
    if (!req.pipe_directory) {
      ensure_private_dir(named.get(), "pipe", req.uid, req.gid);
      l.pipe = req.base_directory + "/" + req.name + "/pipe";
    }
    if (!req.log_directory) {
      ensure_private_dir(named.get(), "log", req.uid, req.gid);
      l.log = req.base_directory + "/" + req.name + "/log";
    }
  }
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
  if (req.gpu_uuids.empty()) throw CudaMpsError("no GPU selected for the daemon");
  if (req.topology_mode != "single_gpu" && req.topology_mode != "single_task_multi_gpu" &&
      req.topology_mode != "task_per_gpu") {
    throw CudaMpsError(fmt::format("unknown topology mode '{}'", req.topology_mode));
  }
  for (const auto* d : {&req.pipe_directory, &req.log_directory}) {
    if (*d && ((*d)->empty() || (**d)[0] != '/')) throw CudaMpsError(fmt::format("'{}' is not an absolute path", **d));
  }
  std::string pipe = req.pipe_directory ? *req.pipe_directory : req.base_directory + "/" + req.name + "/pipe";
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

}  // namespace

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
      // A daemon directory with its own tmpfs: the unmount takes the whole
      // tree (what remains is the empty mount point).
      if (geteuid() == 0) {
        if (std::string e = unmount_private_fs(p.get(), leaf, dir); !e.empty()) {
          errors.push_back(e);
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
  validate_request(req);
  if (store.read(req.name)) {
    throw CudaMpsError(fmt::format("a daemon named '{}' is already recorded; run `unilab-mps stop {}` first", req.name, req.name));
  }
  Layout layout = prepare_directories(req);
  MpsControl mps(s.runner, tools.mps_control, tools.driver_dir);
  MpsEndpoint ep{layout.pipe, layout.log, req.uid, req.gid};

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
  rec.state = "starting";
  rec.job_id = req.job_id;
  rec.slurm = req.slurm;
  rec.limits = req.limits;
  rec.owned_directories = layout.owned;
  rec.containment = req.containment;

  auto abandon = [&](const std::string& why, const std::optional<ProcessIdentity>& launched) -> CudaMpsError {
    std::string tail = tail_suffix(layout.log, req.uid);
    if (launched) {
      kill_launched(s, *launched);
    } else if (auto found = identify_daemon(layout.pipe, req.uid, s.proc, nullptr)) {
      kill_launched(s, *found);
    }
    remove_owned_directories(rec);
    try {
      store.remove(req.name);
    } catch (const CudaMpsError&) {
    }
    return CudaMpsError(why + tail);
  };

  if (mps.answers(ep)) {
    // Someone else's daemon lives there: remove only what this call made.
    DaemonRecord made = rec;
    made.owned_directories = layout.created;
    remove_owned_directories(made);
    throw CudaMpsError(fmt::format("an MPS daemon already answers on {}; stop it or choose another pipe directory", layout.pipe));
  }
  try {
    store.write(rec);  // "starting": from here on the daemon can always be found
  } catch (const CudaMpsError& e) {
    remove_owned_directories(rec);
    throw;
  }

  const auto deadline = s.clock.now() + req.start_timeout;
  CommandResult launched = mps.launch(ep, req.gpu_uuids, req.start_timeout);
  if (!launched.ok()) {
    std::string line = launched.first_output_line();
    throw abandon(fmt::format("{} -d failed for daemon '{}' ({}){}{}", tools.mps_control, req.name, launched.describe(),
                              line.empty() ? "" : ": ", line),
                  std::nullopt);
  }
  milliseconds step(10);
  bool up = false;
  while (true) {
    milliseconds left = remaining(s.clock, deadline);
    if (left.count() == 0) break;
    if (mps.answers(ep, left)) {
      up = true;
      break;
    }
    s.clock.sleep_for(std::min(step, remaining(s.clock, deadline)));
    // Capped low: a real daemon is up within a few hundred ms, and a later
    // look wastes up to a whole step of every job's prolog (bench: ~120 ms
    // per daemon with a 200 ms cap); each look costs one front-end run.
    step = std::min(step * 2, milliseconds(40));
  }
  if (!up) {
    throw abandon(fmt::format("MPS daemon '{}' did not answer within {} ms (start_timeout); check its log in {}", req.name,
                              req.start_timeout.count(), layout.log),
                  std::nullopt);
  }
  std::string why;
  auto id = identify_daemon(layout.pipe, req.uid, s.proc, &why);
  if (!id) throw abandon(fmt::format("cannot verify MPS daemon '{}': {}", req.name, why), std::nullopt);
  rec.pid = id->pid;
  rec.process_start_ticks = id->start_ticks;
  rec.state = "running";
  try {
    apply_limits(mps, ep, req);
    store.write(rec);
  } catch (const CudaMpsError& e) {
    throw abandon(e.what(), id);
  }
  return rec;
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
  StopReport rep;
  rep.name = record.name;
  rep.pid = record.pid;
  const auto start = s.clock.now();
  const auto deadline = start + stop_timeout;
  std::vector<ProcessIdentity> tree;  // the daemon's descendants before any signal (its MPS servers)
  // Nothing of the daemon's tree may outlive it (a control daemon may die
  // and leave its servers, holding the GPU, behind): kill the rest first.
  auto sweep = [&]() -> std::string {
    auto left = sweep_mps_processes(s, record, tree, std::max(deadline, s.clock.now()) + milliseconds(1000));
    if (left.alive.empty()) {
      return left.killed == 0 ? "" : fmt::format("killed {} leftover MPS process(es)", left.killed);
    }
    std::vector<std::string> pids;
    for (pid_t p : left.alive) pids.push_back(std::to_string(p));
    throw CudaMpsError(fmt::format(
        "MPS process(es) {} of daemon '{}' survive SIGKILL; its record is kept in {}; the node needs attention",
        join(pids, ","), record.name, store.root()));
  };
  auto finish = [&](std::string outcome) {
    std::string swept = sweep();
    auto errors = remove_owned_directories(record);
    store.remove(record.name);
    rep.outcome = std::move(outcome);
    std::vector<std::string> details;
    if (!rep.detail.empty()) details.push_back(rep.detail);
    if (!swept.empty()) details.push_back(swept);
    if (!errors.empty()) details.push_back("could not remove " + join(errors, "; "));
    rep.detail = join(details, "; ");
    return rep;
  };

  ProcessIdentity id = record.identity();
  if (record.state == "starting") {
    auto found = recover_starting_identity(record, s.proc);
    if (!found) return finish("not-started");
    id = *found;
    rep.pid = id.pid;
  }
  Liveness l = check_identity(id, s.proc);
  if (l != Liveness::kLive) {
    std::string swept = sweep();
    auto errors = remove_owned_directories(record);
    store.remove(record.name);
    throw StaleCudaMpsDaemonError(fmt::format(
        "daemon '{}' (pid {}) is no longer running ({}); its record{} removed and nothing was signalled{}", record.name,
        record.pid, to_string(l), errors.empty() ? " and directories were" : " was", swept.empty() ? "" : " but " + swept));
  }
  tree = descendants_of(id, s.proc);

  const auto quit_until = start + stop_timeout * 6 / 10;
  const auto term_until = start + stop_timeout * 9 / 10;
  MpsControl mps(s.runner, tools.mps_control, tools.driver_dir);
  MpsEndpoint ep{record.pipe_directory, record.log_directory, record.uid, record.gid};
  // A plain `quit` waits for every client; `quit -t` ends them after that
  // many seconds, inside the time the quit phase has.
  const long quit_seconds = std::max<long>(1, std::chrono::duration_cast<std::chrono::seconds>(stop_timeout / 2).count());
  CommandResult q = mps.send(ep, fmt::format("quit -t {}", quit_seconds), std::max(remaining(s.clock, quit_until), milliseconds(100)));
  if (wait_gone(s, id, quit_until)) return finish("quit");
  std::string quit_note = q.ok() ? "ignored quit" : "quit failed: " + q.describe();

  if (s.signaller.send_verified(id, SIGTERM, s.proc) != Liveness::kLive || wait_gone(s, id, term_until)) {
    rep.detail = quit_note;
    return finish("terminated");
  }
  if (s.signaller.send_verified(id, SIGKILL, s.proc) != Liveness::kLive ||
      wait_gone(s, id, std::max(deadline, s.clock.now() + milliseconds(1000)))) {
    rep.detail = quit_note + ", ignored SIGTERM";
    return finish("killed");
  }
  throw CudaMpsError(fmt::format(
      "daemon '{}' (pid {}) is still alive after quit, SIGTERM and SIGKILL; its record is kept in {}; the node needs attention",
      record.name, id.pid, store.root()));
}

StopAllResult stop_all_daemons(Services& s, const Tools& tools, RecordStore& store, uid_t uid, const std::string& host,
                               milliseconds stop_timeout) {
  StopAllResult out;
  for (const auto& rec : store.list(uid, host).records) {
    try {
      out.stopped.push_back(stop_daemon(s, tools, store, rec, stop_timeout));
    } catch (const StaleCudaMpsDaemonError& e) {
      out.stopped.push_back({rec.name, rec.pid, "stale", e.what()});
    } catch (const CudaMpsError& e) {
      out.errors.push_back(e.what());
    }
  }
  return out;
}

bool daemon_process_is_live(const DaemonRecord& record, ProcReader& proc) {
  if (record.state == "starting") return false;
  return check_identity(record.identity(), proc) == Liveness::kLive;
}

nlohmann::json daemon_status(const DaemonRecord& record, ProcReader& proc) {
  nlohmann::json j = record.to_json();
  Liveness l = record.state == "starting" ? Liveness::kGone : check_identity(record.identity(), proc);
  j["live"] = l == Liveness::kLive;
  j["liveness"] = record.state == "starting" ? "starting" : std::string(to_string(l));
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
