// The node's MPS history: one JSON line per daemon a job had, appended by
// the epilog (and by the prolog that cleans what a requeued job's earlier
// run left) to a root-owned journal, size-bounded by rotation:
//   <history>      the current file, at most history_max= bytes
//   <history>.1    the one before it (the oldest lines)
// so the journal holds at most twice history_max=. `unilab-mps history`
// reads both. Writing never fails a hook: a full disk, a missing directory
// or a refused file is one warning in the slurmd log and no line.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/mps/daemon.hpp"
#include "common/slurm/job_faults.hpp"

namespace unilab::mps {

inline constexpr int kHistoryVersion = 1;

// One line: what the daemon was for, its limits, when it started and
// stopped, how it stopped and how long that took, the MPS servers it
// started and the faults seen.
struct HistoryEntry {
  std::string job_id;
  std::string user;
  uid_t uid = 0;
  std::string node;
  std::string daemon;
  std::vector<std::string> gpu_uuids;
  nlohmann::json mig = nullptr;    // MIG slices: uuid -> {parent_uuid, profile, ...}
  std::string mode;                // auto | multi
  std::string topology_mode;
  nlohmann::json limits;           // as in the record
  double started_at = 0;           // the record's created_at
  double stopped_at = 0;
  std::string stop_outcome;        // quit | terminated | killed | stale | not-started | error
  long long stop_ms = 0;
  std::string stop_detail;
  std::string stopped_by;          // epilog | prolog (requeued job)
  long servers_started = 0;        // "Starting new server" lines in the window read (-1: unknown)
  std::vector<JobFault> faults;
  nlohmann::json to_json() const;
};

// The entry of one daemon the epilog stopped (or failed to stop: `error`).
HistoryEntry history_entry(const DaemonRecord& record, const std::optional<StopReport>& report, const std::string& error,
                           const std::string& user, const std::string& stopped_by, double stopped_at, long servers_started,
                           const std::vector<JobFault>& faults);

// Appends `lines` (one JSON object each) as one write, under an flock of
// <dir>/.<name>.lock (concurrent epilogs), rotating to <path>.1 first when
// the file would grow past `max_bytes`. The directory is made root's 0755
// when missing and must be trusted (root's, not group/other-writable); the
// file must be root's regular, singly linked file. A short write (full
// disk) is cut back off, so the journal never ends in half a line. Returns
// "" or why nothing was written; never throws.
std::string append_history(const std::string& path, unsigned long long max_bytes, const std::vector<nlohmann::json>& lines);

struct HistoryRead {
  std::vector<nlohmann::json> entries;  // oldest first: <path>.1, then <path>
  size_t bad_lines = 0;                  // not JSON objects: skipped
  std::vector<std::string> files;        // the files read
  std::string problem;                   // why a file could not be read ("" when none)
};
HistoryRead read_history(const std::string& path);

// What `unilab-mps history` prints: entries of job `job` (any when
// nullopt) stopped at or after `since` (epoch seconds).
std::vector<nlohmann::json> select_history(const std::vector<nlohmann::json>& entries, const std::optional<std::string>& job,
                                           const std::optional<double>& since);
std::string render_history(const std::vector<nlohmann::json>& entries);

// `history --since`: seconds since the epoch ("1733300000"), a UTC date or
// time ("2026-12-04", "2026-12-04T18:30", "2026-12-04T18:30:15", a
// trailing Z allowed) or an age before `now` ("90m", "12h", "7d", "30s").
// nullopt when it is none of these.
std::optional<double> parse_since(std::string_view text, double now);

}  // namespace unilab::mps
