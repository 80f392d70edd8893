#include "common/mps/private_fs.hpp"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "common/mps/errors.hpp"

namespace unilab::mps {

void mount_private_fs(int parent_fd, const std::string& name, const std::string& path, uid_t uid, gid_t gid,
                      const PrivateFsLimits& limits) {
  int fd = openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) throw CudaMpsError(fmt::format("cannot open {}: {}", path, std::strerror(errno)));
  // Mount on the directory just opened (never a path a user could swap).
  const std::string target = fmt::format("/proc/self/fd/{}", fd);
  const std::string options =
      fmt::format("size={},nr_inodes={},mode=0700,uid={},gid={}", limits.bytes, limits.inodes, uid, gid);
  int rc = mount("tmpfs", target.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, options.c_str());
  int err = errno;
  close(fd);
  if (rc != 0) {
    throw CudaMpsError(fmt::format("cannot mount the daemon's private tmpfs on {}: {}; set dir_size=off in plugstack.conf to "
                                   "keep the directories on the run dir's file system",
                                   path, std::strerror(err)));
  }
  // Private propagation: what the user mounts below it (FUSE on pipe/ where
  // user_allow_other is set) stays in this mount namespace instead of
  // reaching every peer of a shared /run. Unmount propagation follows the
  // parent mount, so the epilog's unmount still reaches the same places.
  int top = openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  struct statfs fs {};
  if (top < 0 || fstatfs(top, &fs) != 0 || fs.f_type != TMPFS_MAGIC ||
      mount(nullptr, fmt::format("/proc/self/fd/{}", top).c_str(), nullptr, MS_PRIVATE, nullptr) != 0) {
    err = errno;
    if (top >= 0) close(top);
    umount2(path.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW);
    throw CudaMpsError(fmt::format("cannot make the daemon's private tmpfs on {} a private mount: {}", path, std::strerror(err)));
  }
  close(top);
}

std::string unmount_private_fs(int parent_fd, const std::string& name, const std::string& path) {
  struct stat parent {};
  struct stat st {};
  if (fstat(parent_fd, &parent) != 0) return fmt::format("cannot stat the parent of {}: {}", path, std::strerror(errno));
  if (fstatat(parent_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return errno == ENOENT ? "" : fmt::format("cannot stat {}: {}", path, std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode) || st.st_dev == parent.st_dev) return "";  // nothing mounted there
  int fd = openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return fmt::format("cannot open {}: {}", path, std::strerror(errno));
  struct statfs fs {};
  bool tmpfs = fstatfs(fd, &fs) == 0 && fs.f_type == TMPFS_MAGIC;
  close(fd);
  if (!tmpfs) return fmt::format("{} is a mount point but not a tmpfs; not unmounting what unilab-mps did not mount", path);
  // Detached: a process still holding a file there cannot block the epilog.
  if (umount2(path.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) != 0) {
    return fmt::format("cannot unmount {}: {}", path, std::strerror(errno));
  }
  return "";
}

}  // namespace unilab::mps
