// Daemon lifecycle: start a user-owned MPS control daemon and record its
// identity; stop only what a record proves is ours.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/mps/mps_control.hpp"
#include "common/mps/private_fs.hpp"
#include "common/mps/proc.hpp"
#include "common/mps/record.hpp"
#include "common/mps/runner.hpp"
#include "common/mps/tools.hpp"

namespace unilab::mps {

// The seams every lifecycle operation goes through.
struct Services {
  CommandRunner& runner;
  ProcReader& proc;
  Signaller& signaller;
  Clock& clock;
};

// The real implementations of every seam, owned together (front ends build
// one of these; tests build Services from doubles).
struct SystemServices {
  SystemRunner runner;
  SystemProcReader proc;
  SystemSignaller signaller;
  SystemClock clock;
  Services services{runner, proc, signaller, clock};
  SystemServices() = default;
  SystemServices(const SystemServices&) = delete;
  SystemServices& operator=(const SystemServices&) = delete;
};

// A daemon's default directories: `<base>/<name>` (made for the daemon,
// removed on stop) holding `pipe` and `log`. The one place that layout is
// spelled; the Slurm side checks records against it.
inline constexpr const char* kPipeLeaf = "pipe";
inline constexpr const char* kLogLeaf = "log";
struct DaemonDirectories {
  std::string root;
  std::string pipe;
  std::string log;
};
DaemonDirectories daemon_directories(const std::string& base, const std::string& name);

// A start: the daemon's spec (recorded as it is) and how to make it.
struct StartRequest : DaemonSpec {
  // Default layout: daemon_directories(base_directory, entry()), that entry
  // created 0700 for the user and removed on stop. Explicit pipe/log
  // directories replace it.
  std::string base_directory;
  // The entry's name under base_directory when it is not `name` (the Slurm
  // side names records in full and keeps the entry short: the daemon's
  // socket path must fit sun_path).
  std::string directory_name;
  const std::string& entry() const { return directory_name.empty() ? name : directory_name; }
  std::optional<std::string> pipe_directory;
  std::optional<std::string> log_directory;
  // cgroup.procs files the daemon is born in (root only; Command::cgroups):
  // the job's own cgroups where they exist at launch, else a root-owned
  // holding cgroup the job's cgroups later take over.
  std::vector<std::string> launch_cgroups;
  // Root only: a size-limited tmpfs on `<base_directory>/<name>` (private_fs.hpp).
  std::optional<PrivateFsLimits> private_fs;
  std::chrono::milliseconds start_timeout{10000};
};

// Starts the daemon: refuses an existing record of that name, an over-long
// socket path, unsafe directories, or a daemon already answering on the pipe
// dir; creates the dirs 0700 for the user; writes a starting record first
// (crash safety), runs `mps_control -d` as the user with an environment built
// from scratch, waits until it answers, verifies the pid file against /proc
// (uid and pipe directory), applies limits, writes the final record. On any
// failure it stops what it started, removes dirs and record, and throws
// CudaMpsError with the daemon's own message and log tail.
DaemonRecord start_daemon(Services& s, const Tools& tools, RecordStore& store, const StartRequest& req);
// start_daemon with an absolute deadline in place of req.start_timeout (which
// still names the limit in messages).
DaemonRecord start_daemon_until(Services& s, const Tools& tools, RecordStore& store, const StartRequest& req,
                                std::chrono::steady_clock::time_point deadline);

// Starts every request at once (a thread each: a node's daemons start in
// the time of one), all within one deadline, the requests' start_timeout
// counted once from this call; the records in request order. When any start
// fails (each undoes itself), every daemon that did start is stopped again,
// concurrently, within `stop_timeout`, and CudaMpsError names each failure.
// The one "start all or nothing" of the job prolog and the CLI. The
// Services must be safe to use from several threads (the System* ones are).
std::vector<DaemonRecord> start_daemons(Services& s, const Tools& tools, RecordStore& store,
                                        const std::vector<StartRequest>& requests, std::chrono::milliseconds stop_timeout);

// Runs the daemon in the foreground (`-f`) in place of this process, after
// the same checks and directory setup; no record is written (nothing to stop
// later: Ctrl-C ends it). Returns only on failure.
[[noreturn]] void exec_foreground_daemon(const Tools& tools, const StartRequest& req);

// How a stop ended: the daemon quit when asked, needed SIGTERM or SIGKILL,
// was already gone (stale), or a "starting" record had no daemon.
enum class StopOutcome { kQuit, kTerminated, kKilled, kStale, kNotStarted };
inline constexpr StringTable<StopOutcome, 5> kStopOutcomeNames{{"quit", "terminated", "killed", "stale", "not-started"}};
inline std::string_view to_string(StopOutcome o) { return kStopOutcomeNames.name(o); }

struct StopReport {
  std::string name;
  pid_t pid = 0;
  StopOutcome outcome = StopOutcome::kQuit;
  std::string detail;
  std::chrono::milliseconds took{0};  // from the stop's start to its end (the history journal's stop_ms)
  nlohmann::json to_json() const {
    return {{"name", name}, {"pid", pid}, {"outcome", std::string(to_string(outcome))}, {"detail", detail}};
  }
};

// Stops only the daemon `record` proves: identity verified (uid, boot, pid,
// start ticks), `quit` through its own pipe as its user, then - re-verified
// before each signal - SIGTERM and SIGKILL, all within `stop_timeout`; then
// removes its dirs and record. A record whose process is gone or whose PID
// now names another process is cleaned, nothing is signalled, and the
// outcome is kStale (the detail says so in one line). A daemon still alive
// after SIGKILL is a CudaMpsError and its record is kept.
StopReport stop_daemon(Services& s, const Tools& tools, RecordStore& store, const DaemonRecord& record,
                       std::chrono::milliseconds stop_timeout);

// One stop of stop_daemons: a report (a stale record's too), or the error.
struct StopAttempt {
  std::optional<StopReport> report;
  std::string error;
};
// How far past its stop_timeout a stop can run: the last wait after SIGKILL
// (1 s) and the leftover sweep (1 s).
inline constexpr std::chrono::milliseconds kStopOverrun{2000};
// stop_daemon for every record at once (a thread each), so all of them end
// within one `stop_timeout`; the attempts in record order.
std::vector<StopAttempt> stop_daemons(Services& s, const Tools& tools, RecordStore& store,
                                      const std::vector<DaemonRecord>& records, std::chrono::milliseconds stop_timeout);

struct StopAllResult {
  std::vector<StopReport> stopped;
  std::vector<std::string> errors;  // one line each
  bool ok() const { return errors.empty(); }
};
// stop_daemons for every in-scope record (stale ones among the stopped, as "stale").
StopAllResult stop_all_daemons(Services& s, const Tools& tools, RecordStore& store, uid_t uid,
                               const std::string& host, std::chrono::milliseconds stop_timeout);

// The daemon is live: same PID, /proc start time, uid and boot id as recorded.
bool daemon_process_is_live(const DaemonRecord& record, ProcReader& proc);

// Record identity plus liveness evidence.
nlohmann::json daemon_status(const DaemonRecord& record, ProcReader& proc);

// The launcher-facing environment (CUDA_VISIBLE_DEVICES as UUIDs, pipe and
// log directories), never applied to this process.
std::vector<std::pair<std::string, std::string>> environment_for_daemon(const DaemonRecord& record);

// The sole live daemon record serving `gpu_uuid` (any spelling) among
// `records`; CudaMpsError when none or several.
const DaemonRecord& select_daemon_for_gpu(const std::string& gpu_uuid, const std::vector<DaemonRecord>& records,
                                          ProcReader& proc);
std::vector<std::pair<std::string, std::string>> select_environment_for_gpu(const std::string& gpu_uuid,
                                                                            const std::vector<DaemonRecord>& records,
                                                                            ProcReader& proc);

// Reads a record scoped to uid and host. `name` nullopt selects the sole live
// record (error listing them when several, or none).
DaemonRecord read_daemon_record(RecordStore& store, const std::optional<std::string>& name, uid_t uid,
                                const std::string& host, ProcReader& proc);

// Finds the daemon a starting record (pid 0) launched, from the pid file in
// its pipe directory, verified by uid and CUDA_MPS_PIPE_DIRECTORY in its
// environment. nullopt when no such process exists.
std::optional<ProcessIdentity> recover_starting_identity(const DaemonRecord& record, ProcReader& proc);

// How long removing one owned directory may take (as the user, see
// remove_tree_as_owner). Measured: a 100,000-level chain plus a million
// files took the whole epilog 35 s on 2 busy cores, tmpfs
// (docs/bench-hostile-tree.txt); past the deadline the tree is left and
// reported, the epilog goes on.
inline constexpr std::chrono::milliseconds kTreeRemovalTimeout{60000};

// Removes the record's owned directories; returns error lines.
std::vector<std::string> remove_owned_directories(const DaemonRecord& record);

// This machine's host name (records of the CLI are scoped by it).
std::string current_host();

}  // namespace unilab::mps
