// An MPS server's faults, as the daemon's own logs tell them.
//
// NVIDIA's MPS documentation ("Error containment"): a fatal GPU fault of a
// client is reported to every client of the server on the affected GPUs,
// and the server refuses new clients (CUDA_ERROR_MPS_SERVER_NOT_READY) until
// they have all exited; before Volta the server shuts down. What the logs
// say of it (driver 580.159.04, MPS binary 13000, seen on an H200 with a
// client's illegal memory access: tests/unit/fixtures/mps-fault-h200):
//   server.log   "[... Server 530] Client {PID: 511, Context: 1} encountered a fatal GPU error."
//                "[... Server 530] Server is handling a fatal GPU error."
//                then every client on that GPU is torn down (the other
//                client got the same "illegal memory access" error), the
//                server stays ACTIVE and takes new clients
//   control.log  "Server <pid> exited with status <n>"   (n is 0 after a
//                SIGKILL too, and at a quit; a server does not exit while
//                its daemon runs otherwise: it stays when its clients leave)
//                "Server encountered a fatal exception. Shutting down"
//                (pre-Volta, from the binary's strings and NVIDIA's
//                documentation; not seen)
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/mps/string_table.hpp"

namespace unilab::mps {

// kDaemonGone is not a log line: the control daemon itself no longer runs
// (its identity in /proc), seen by job_faults.hpp while the job runs.
enum class MpsFaultKind { kServerExited, kFatalException, kFatalGpuError, kDaemonGone };
inline constexpr StringTable<MpsFaultKind, 4> kMpsFaultKindNames{
    {"server-exited", "fatal-exception", "fatal-gpu-error", "daemon-gone"}};
inline std::string_view to_string(MpsFaultKind k) { return kMpsFaultKindNames.name(k); }

// What each kind means, for a message to the job.
std::string_view describe(MpsFaultKind k);

struct MpsFault {
  MpsFaultKind kind = MpsFaultKind::kServerExited;
  std::string log;                 // "control.log" or "server.log" ("" for daemon-gone)
  std::string line;                // the log line, printable
  std::optional<pid_t> server;     // the server it names
  std::optional<int> exit_status;  // server-exited: the status the daemon logged
  std::optional<pid_t> client;     // fatal-gpu-error: the client process that hit it
  // Stable for one occurrence: the same line read twice is the same fault
  // (its timestamp and pids are part of it).
  std::string key() const;
  nlohmann::json to_json() const;
  static MpsFault from_json(const nlohmann::json& j);  // throws CudaMpsError
  bool operator==(const MpsFault&) const = default;
};

inline constexpr const char* kControlLog = "control.log";
inline constexpr const char* kServerLog = "server.log";

// The faults among `lines` of the log named `log` (kControlLog or
// kServerLog), in order.
std::vector<MpsFault> scan_mps_log(std::string_view log, const std::vector<std::string>& lines);

// The faults in a daemon's log directory: the last `max_bytes` of its
// control.log and server.log, read as root reads a user's file (the user's
// own, regular, singly linked, not through a symlink or a mount the user
// made; read_user_file_tail).
inline constexpr size_t kFaultScanBytes = 1 << 20;
struct DaemonLogScan {
  std::vector<MpsFault> faults;
  long servers_started = -1;  // "Starting new server" lines of control.log's window; -1 when unreadable
};
DaemonLogScan scan_daemon_logs(const std::string& log_directory, uid_t uid, size_t max_bytes = kFaultScanBytes);

}  // namespace unilab::mps
