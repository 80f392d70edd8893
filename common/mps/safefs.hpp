// Filesystem primitives that never follow a symlink a user could plant:
// every path is walked component by component with openat(O_NOFOLLOW), trust
// is checked with fstat on the opened descriptors, and writes are atomic.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
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

// How the last component of a trusted path is judged.
enum class Leaf {
  // Like every ancestor: a root-owned sticky directory (such as /tmp) passes.
  kLikeAncestors,
  // Not writable by group or others at all, sticky or not: a directory whose
  // entries we trust (a record store, a run dir). In a sticky world-writable
  // directory any user can plant an entry of its own under a free name.
  kPrivate,
};

// Why a directory owned by `uid` with permission bits `mode` cannot be a
// component of a trusted path (the rule open_trusted_dir applies); empty
// when it can. `sticky_ok`: a root-owned sticky directory (such as /tmp)
// passes. `shown` names the component in the message.
std::string dir_trust_problem(const std::string& shown, uid_t uid, mode_t mode, uid_t trusted_owner, bool sticky_ok);

// Opens an existing absolute directory path without following symlinks in
// any component. Each component must be owned by root or `trusted_owner` and
// not writable by group/other (a root-owned sticky dir such as /tmp is
// accepted, for the last component only with Leaf::kLikeAncestors). Throws
// CudaMpsError naming the offending component.
Fd open_trusted_dir(const std::string& path, uid_t trusted_owner, Leaf leaf = Leaf::kLikeAncestors);

// Like open_trusted_dir, but an empty Fd when a component does not exist.
// Decided on the errno of the open itself, never by a later look at the
// path: a directory another process creates meanwhile is not misreported.
Fd open_trusted_dir_if_exists(const std::string& path, uid_t trusted_owner, Leaf leaf = Leaf::kLikeAncestors);

// Like open_trusted_dir(path, trusted_owner, Leaf::kPrivate), creating
// missing components with `mode`, owned by `uid`:`gid` (chown only when
// running as root). Existing components keep their owner and mode but must
// pass the same trust check. A concurrent creator of the same path is fine.
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

// Like read_file_at, for files we wrote and trust: the file must also be
// owned by `owner` and not writable by group or others (a record store's
// rule: anyone else's file, or one anyone else could have written, is
// refused however it got there).
std::optional<std::string> read_owned_file_at(int dir_fd, const std::string& name, uid_t owner, size_t max_bytes = 1 << 20);

// The one way root reads a file a user controls (a daemon's control.log):
// never through a symlink, only a regular file owned by `owner` with a single
// link, at most the last `max_bytes` (a partial first line is dropped), the
// last `max_lines` non-empty lines, each cut at `max_line_bytes` with control
// characters escaped (\xNN) so nothing the user wrote can forge or garble a
// root log. Empty when missing or refused; `problem` (optional) says why.
std::vector<std::string> read_user_file_tail(int dir_fd, const std::string& name, uid_t owner, size_t max_bytes,
                                             size_t max_lines, size_t max_line_bytes = 400, std::string* problem = nullptr);

// The same for `name` in the absolute directory `dir_path`, which must be a
// real directory (last component not a symlink) owned by `owner` too.
std::vector<std::string> read_user_file_tail(const std::string& dir_path, const std::string& name, uid_t owner,
                                             size_t max_bytes, size_t max_lines, size_t max_line_bytes = 400,
                                             std::string* problem = nullptr);

// `text` with every byte that is not printable ASCII written as \xNN.
std::string escape_control(std::string_view text);

// Names in a directory, sorted, without "." and "..".
std::vector<std::string> list_dir(int dir_fd);

// Removes `name` in `dir_fd` and everything below it, never following
// symlinks (a symlink is unlinked, not traversed). Iterative: at most three
// descriptors and a fixed amount of memory whatever the depth or width of the
// tree (see safefs.cpp). Missing is success. Returns an error text, empty on
// success. Run it only as the tree's owner (or on a tree no one else can
// change): as root on a user's tree, use remove_tree_as_owner.
std::string remove_tree_at(int dir_fd, const std::string& name);

// Removes a tree that belongs to `uid` (a daemon's pipe/log directories).
// As root for another uid, root opens `name` (no symlink, owned by `uid`) and
// a child that has dropped to uid:gid removes everything inside it, so
// whatever the user moves, links or renames meanwhile, nothing is removed
// that the user could not remove itself; root then removes only the empty
// top directory. The child gets `timeout`, then SIGKILL, then a bounded
// wait. Otherwise (not root, or `uid` is root) remove_tree_at. Missing is
// success. Returns an error text, empty on success.
std::string remove_tree_as_owner(int dir_fd, const std::string& name, uid_t uid, gid_t gid,
                                 std::chrono::milliseconds timeout);

// Splits an absolute path into its parent and last component ("/a/b" -> "/a", "b").
std::pair<std::string, std::string> split_parent(const std::string& abs_path);

// A file name we are willing to create: [A-Za-z0-9._-], 1..128 chars, not starting with '.'.
bool is_safe_name(const std::string& name);

}  // namespace unilab::mps
