// A daemon's own file system: the prolog (root) mounts a size-limited tmpfs
// on each daemon's directory `<run_dir>/<name>`, so a job that fills its
// pipe/log directories fills only its own tmpfs, never the run dir's file
// system (by default /run, a small tmpfs that munged and slurmd need too),
// and its whole tree, however deep or wide, goes with one unmount.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

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

}  // namespace unilab::mps
