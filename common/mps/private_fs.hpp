// A daemon's own file system: the prolog (root) mounts a size-limited tmpfs
// on each daemon's directory `<run_dir>/<name>`, so a job that fills its
// pipe/log directories fills only its own tmpfs, never the run dir's file
// system (by default /run, a small tmpfs that munged and slurmd need too),
// and its whole tree, however deep or wide, goes with one unmount.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace unilab::mps {

struct PrivateFsLimits {
  uint64_t bytes = 64ULL << 20;  // tmpfs size=
  uint64_t inodes = 4096;        // tmpfs nr_inodes= (MPS needs a handful of files)
};

// Mounts a tmpfs (nosuid, nodev, noexec, mode 0700, owned by uid:gid) on the
// directory `name` in `parent_fd`, which `path` names. Root only. Throws
// CudaMpsError.
void mount_private_fs(int parent_fd, const std::string& name, const std::string& path, uid_t uid, gid_t gid,
                      const PrivateFsLimits& limits);

// When `name` in `parent_fd` is the root of a tmpfs mounted on it (its
// device differs from the parent's), detaches that mount. Returns an error
// line, empty when unmounted or nothing was mounted there.
std::string unmount_private_fs(int parent_fd, const std::string& name, const std::string& path);

// A line of /proc/self/mountinfo: the mount's id and where it is mounted
// (octal escapes undone), and its file system type.
struct MountEntry {
  int id = 0;
  std::string point;
  std::string fstype;
  // A FUSE mount's user_id= (who mounted it: fusermount runs for a user).
  std::optional<uid_t> fuse_user;
};
// Lines that do not parse are skipped.
std::vector<MountEntry> parse_mountinfo(std::string_view text);
// This process's mounts now; nullopt when /proc/self/mountinfo cannot be
// read whole (the callers then refuse, as if a mount were there).
std::optional<std::vector<MountEntry>> read_mountinfo();

// A file system mounted at `path` or below it ("fuse.sshfs on /run/x/pipe"),
// or a FUSE mount of a user other than root on a directory above it (on the
// daemon's directory, over its tmpfs), from `mounts`; nullopt when there is
// none. A user's FUSE mount on its
// pipe/ or log/ directory (nodes with user_allow_other in /etc/fuse.conf)
// answers root's every open and stat, and can hang them: root looks into
// such a directory only when nothing is mounted there (mountinfo is read,
// the directory is not touched).
std::optional<std::string> mount_at_or_below(const std::vector<MountEntry>& mounts, const std::string& path);
std::optional<std::string> mount_at_or_below(const std::string& path);

// Detaches (MNT_DETACH) what is mounted at or below `path` (the entry
// `name` of `parent_fd`), except a tmpfs at `path` itself (the daemon's
// own, unmount_private_fs's to remove). Only the topmost such mounts: a
// detach takes what is mounted below. None of the mounted file systems is
// looked into: each mount point is reached from `parent_fd` through
// directories of the tree's own file system (O_NOFOLLOW, so a user's
// symlink in a stale path leads nowhere), opened O_PATH, and detached only
// when that is the mount `mounts` names (its mnt_id in /proc/self/fdinfo).
// One line per mount: "detached ..." or why not.
std::vector<std::string> detach_mounts_below(int parent_fd, const std::string& name, const std::string& path,
                                             const std::vector<MountEntry>& mounts);

}  // namespace unilab::mps
