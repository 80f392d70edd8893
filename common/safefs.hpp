// Filesystem primitives that never follow a symlink a user could plant:
// every path is walked component by component with openat(O_NOFOLLOW), trust
// is checked with fstat on the opened descriptors, and writes are atomic.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace unilab::mps {

// Owning file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd();
  int get() const { return fd_; }
  int release() { int f = fd_; fd_ = -1; return f; }
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// Opens an existing absolute directory path without following symlinks in
// any component. Each component must be owned by root or `trusted_owner` and
// not writable by group/other (a root-owned sticky dir such as /tmp is
// accepted). Throws CudaMpsError naming the offending component.
Fd open_trusted_dir(const std::string& path, uid_t trusted_owner);

// Like open_trusted_dir, creating missing components with `mode`, owned by
// `uid`:`gid` (chown only when running as root). Existing components keep
// their owner and mode but must pass the same trust check.
Fd ensure_trusted_dir(const std::string& path, uid_t trusted_owner, uid_t uid, gid_t gid, mode_t mode);

// Creates directory `name` in `parent` 0700 owned by uid:gid, or accepts an
// existing one only if it is a real directory (not a symlink) owned by `uid`
// with no group/other permission bits. Returns the opened directory and
// whether it was created now. Throws CudaMpsError otherwise.
Fd ensure_private_dir(int parent_fd, const std::string& name, uid_t uid, gid_t gid, bool* created = nullptr);

// Atomic replace: temp file in the same directory (O_EXCL|O_NOFOLLOW), write,
// fsync, rename over `name`, fsync the directory; the temp file is unlinked on
// failure. Throws CudaMpsError.
void write_file_atomic(int dir_fd, const std::string& name, const std::string& content, mode_t mode);

// Reads a regular file without following a symlink. nullopt when it does not
// exist; throws CudaMpsError when it is a symlink, not a regular file, or
// larger than `max_bytes`.
std::optional<std::string> read_file_at(int dir_fd, const std::string& name, size_t max_bytes = 1 << 20);

// Owner uid of an entry (lstat semantics); nullopt when missing.
std::optional<uid_t> entry_owner(int dir_fd, const std::string& name);

// Names in a directory, sorted, without "." and "..".
std::vector<std::string> list_dir(int dir_fd);

// Removes `name` in `dir_fd` recursively, never following symlinks (a symlink
// is unlinked, not traversed). Missing is success. Returns an error text, empty on success.
std::string remove_tree_at(int dir_fd, const std::string& name);

// Splits an absolute path into its parent and last component ("/a/b" -> "/a", "b").
std::pair<std::string, std::string> split_parent(const std::string& abs_path);

// A file name we are willing to create: [A-Za-z0-9._-], 1..128 chars, not starting with '.'.
bool is_safe_name(const std::string& name);

}  // namespace unilab::mps
