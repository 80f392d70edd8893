// Process identity from /proc: PID + start ticks + boot id + uid. The only
// proof that a PID still names the process we started. Abstract so it can be
// mocked out for tests (the /proc root is injectable too).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/mps/string_table.hpp"

namespace unilab::mps {

// A file's identity (device and inode), as stat(2) gives it.
struct FileId {
  dev_t dev = 0;
  ino_t ino = 0;
  bool operator==(const FileId&) const = default;
};

struct ProcStat {
  char state = '?';           // field 3; see process_state_gone
  pid_t ppid = 0;             // field 4: the parent (after reparenting)
  uint64_t start_ticks = 0;   // field 22, clock ticks since boot
  uid_t uid = static_cast<uid_t>(-1);  // real uid (status "Uid:")
};

// Whether a process in this /proc state (stat field 3) is gone: 'Z' (a
// zombie: exited, not yet reaped), 'X' or, before Linux 2.6.33, 'x' (dead).
// The one answer to "has this process ended" for every caller.
bool process_state_gone(char state);

// Parses the content of /proc/PID/stat. The comm field may contain spaces and
// ')' characters, so fields are counted after the LAST ')'. nullopt when the
// text is malformed.
std::optional<ProcStat> parse_proc_stat(std::string_view text);

// The contents of a /proc (or /sys) file, opened with O_NOFOLLOW and read
// until EOF or until more than `max` bytes are in (the rest is cut off, so
// a result longer than `max` says it was); nullopt when it cannot be
// opened or read. The one reader of /proc files in the core.
std::optional<std::string> read_proc_file(const std::string& path, size_t max = 1 << 20);

// The real uid from the content of /proc/PID/status ("Uid:\treal\teff...").
std::optional<uid_t> parse_proc_status_uid(std::string_view text);
// All four of that line: real, effective, saved, filesystem.
std::optional<std::array<uid_t, 4>> parse_proc_status_uids(std::string_view text);

class ProcReader {
 public:
  virtual ~ProcReader() = default;
  // nullopt when the process does not exist (or /proc cannot tell).
  virtual std::optional<ProcStat> stat(pid_t pid) = 0;
  virtual std::string boot_id() = 0;
  // One variable of the process environment (root, or the same user, only).
  virtual std::optional<std::string> environ_value(pid_t pid, std::string_view key) = 0;
  // Every pid in /proc (a snapshot).
  virtual std::vector<pid_t> pids() { return {}; }
  // Direct children of every thread of `pid` (/proc/PID/task/*/children).
  virtual std::vector<pid_t> children(pid_t) { return {}; }
  // /proc/PID/comm without the newline (15 characters at most).
  virtual std::optional<std::string> comm(pid_t) { return std::nullopt; }
  // /proc/PID/cgroup as text.
  virtual std::optional<std::string> cgroup(pid_t) { return std::nullopt; }
  // The file /proc/PID/exe names (stat through the link: the binary the
  // process runs, whatever path it was started by); nullopt when unknown.
  virtual std::optional<FileId> exe(pid_t) { return std::nullopt; }
  // The file at `path` (symlinks followed), to compare with exe().
  virtual std::optional<FileId> file(const std::string&) { return std::nullopt; }
  // This process (the parent that adopts what a start launched).
  virtual pid_t self() { return 0; }
  // Now, in the clock ticks of ProcStat::start_ticks (since boot).
  virtual uint64_t ticks_now() { return 0; }
};

class SystemProcReader final : public ProcReader {
 public:
  explicit SystemProcReader(std::string root = "/proc") : root_(std::move(root)) {}
  std::optional<ProcStat> stat(pid_t pid) override;
  std::string boot_id() override;
  std::optional<std::string> environ_value(pid_t pid, std::string_view key) override;
  std::vector<pid_t> pids() override;
  std::vector<pid_t> children(pid_t pid) override;
  std::optional<std::string> comm(pid_t pid) override;
  std::optional<std::string> cgroup(pid_t pid) override;
  std::optional<FileId> exe(pid_t pid) override;
  std::optional<FileId> file(const std::string& path) override;
  pid_t self() override;
  uint64_t ticks_now() override;

 private:
  std::string root_;
};

// The stat of `pid` when that process exists and has not ended
// (process_state_gone); nullopt otherwise.
std::optional<ProcStat> running_stat(ProcReader& proc, pid_t pid);

// Who a process is, as recorded when we started it.
struct ProcessIdentity {
  pid_t pid = 0;
  uint64_t start_ticks = 0;
  std::string boot_id;
  uid_t uid = static_cast<uid_t>(-1);
};

// Every descendant of `root` now (not `root` itself), walked through
// /proc/PID/task/*/children: each one only when its own stat names the
// parent it was listed under (a listed pid that exited and was reused names
// another parent) and it runs as root's uid (a descendant that became
// another user is not the daemon's to act on). At most 4096.
std::vector<ProcessIdentity> descendants_of(const ProcessIdentity& root, ProcReader& proc);

enum class Liveness {
  kLive,        // same pid, start ticks, uid and boot: the very process
  kGone,        // no such process (or a zombie)
  kReused,      // the PID now names another process (other start time or uid)
  kOtherBoot,   // the record is from an earlier boot
};
inline constexpr StringTable<Liveness, 4> kLivenessNames{{"live", "gone", "pid-reused", "other-boot"}};
inline std::string_view to_string(Liveness l) { return kLivenessNames.name(l); }

Liveness check_identity(const ProcessIdentity& id, ProcReader& proc);

// Sends `sig` only to the process `id` names, proven race-free: open a pidfd
// first, then re-verify the identity through /proc, then signal through the
// pidfd (a PID reused after the pidfd_open cannot be hit). Abstract so it can
// be mocked out for tests.
class Signaller {
 public:
  virtual ~Signaller() = default;
  // Returns the liveness found at the moment of signalling; the signal was
  // sent only when it is kLive.
  virtual Liveness send_verified(const ProcessIdentity& id, int sig, ProcReader& proc) = 0;
};

class SystemSignaller final : public Signaller {
 public:
  Liveness send_verified(const ProcessIdentity& id, int sig, ProcReader& proc) override;
};

}  // namespace unilab::mps
