#include "common/mps/safefs.hpp"
#include "common/mps/private_fs.hpp"

#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <grp.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <variant>
#include <string_view>

#include <fmt/format.h>

#include "common/mps/errors.hpp"
#include "common/mps/runner.hpp"
#include "common/mps/text.hpp"

namespace unilab::mps {
namespace {

std::vector<std::string> components(const std::string& path) {
  if (path.empty() || path[0] != '/') {
    throw CudaMpsError(fmt::format("'{}' is not an absolute path; give an absolute directory", path));
  }
  std::vector<std::string> out;
  size_t pos = 1;
  while (pos <= path.size()) {
    size_t slash = path.find('/', pos);
    if (slash == std::string::npos) slash = path.size();
    std::string c = path.substr(pos, slash - pos);
    if (c == "..") throw CudaMpsError(fmt::format("'{}' contains '..'; give a normalized absolute path", path));
    if (!c.empty() && c != ".") out.push_back(c);
    pos = slash + 1;
  }
  return out;
}

void check_trust(int fd, const std::string& shown, uid_t trusted_owner, bool sticky_ok = true) {
  struct stat st {};
  if (fstat(fd, &st) != 0) throw CudaMpsError(fmt::format("cannot stat {}: {}", shown, std::strerror(errno)));
  if (!S_ISDIR(st.st_mode)) throw CudaMpsError(fmt::format("{} is not a directory", shown));
  if (auto problem = dir_trust_problem(shown, st.st_uid, st.st_mode, trusted_owner, sticky_ok); !problem.empty()) {
    throw CudaMpsError(problem);
  }
}

Fd open_component(int parent, const std::string& name, const std::string& shown) {
  int fd = openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    if (e == ELOOP || e == ENOTDIR) {
      struct stat st {};
      if (fstatat(parent, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
        throw CudaMpsError(fmt::format("refusing {}: it is a symlink; remove it (unilab-mps never follows symlinks there)", shown));
      }
      throw CudaMpsError(fmt::format("refusing {}: not a directory", shown));
    }
    errno = e;
  }
  return Fd(fd);
}

// Opens `path` component by component. `missing_ok`: an empty Fd when a
// component does not exist (ENOENT of that very open).
Fd walk(const std::string& path, uid_t trusted_owner, const std::optional<std::tuple<uid_t, gid_t, mode_t>>& create,
        Leaf leaf, bool missing_ok = false) {
  auto comps = components(path);
  Fd cur(open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!cur) throw CudaMpsError(fmt::format("cannot open /: {}", std::strerror(errno)));
  check_trust(cur.get(), "/", trusted_owner, !comps.empty() || leaf == Leaf::kLikeAncestors);
  std::string shown;
  for (size_t i = 0; i < comps.size(); ++i) {
    const std::string& c = comps[i];
    const bool last = i + 1 == comps.size();
    shown += "/" + c;
    Fd next = open_component(cur.get(), c, shown);
    if (!next && errno == ENOENT && missing_ok && !create) return Fd();
    if (!next && errno == ENOENT && create) {
      auto [uid, gid, mode] = *create;
      // EEXIST: another process (a prolog started together with us) made it
      // meanwhile; it is then an existing component, judged like any other.
      const bool made = mkdirat(cur.get(), c.c_str(), mode) == 0;
      if (!made && errno != EEXIST) {
        throw CudaMpsError(fmt::format("cannot create {}: {}", shown, std::strerror(errno)));
      }
      next = open_component(cur.get(), c, shown);
      if (next && made) {
        struct stat st {};
        fstat(next.get(), &st);
        if (geteuid() == 0 && (st.st_uid != uid || st.st_gid != gid) && fchown(next.get(), uid, gid) != 0) {
          throw CudaMpsError(fmt::format("cannot chown {}: {}", shown, std::strerror(errno)));
        }
        if ((st.st_mode & 07777) != mode && st.st_uid == geteuid()) fchmod(next.get(), mode);
      }
    }
    if (!next) throw CudaMpsError(fmt::format("cannot open directory {}: {}", shown, std::strerror(errno)));
    check_trust(next.get(), shown, trusted_owner, !last || leaf == Leaf::kLikeAncestors);
    cur = std::move(next);
  }
  return cur;
}

}  // namespace

std::string dir_trust_problem(const std::string& shown, uid_t uid, mode_t mode, uid_t trusted_owner, bool sticky_ok) {
  if (uid != 0 && uid != trusted_owner) {
    return fmt::format("refusing {}: owned by uid {}, expected root{}; remove it or choose another directory", shown, uid,
                       trusted_owner == 0 ? std::string() : fmt::format(" or uid {}", trusted_owner));
  }
  bool sticky_root = (mode & S_ISVTX) && uid == 0;
  if ((mode & (S_IWGRP | S_IWOTH)) && !(sticky_root && sticky_ok)) {
    return fmt::format("refusing {}: writable by group or others (mode {:o}{}); chmod go-w it or choose another directory", shown,
                       mode & 07777, sticky_root ? ", and sticky is not enough: any user can plant entries there" : "");
  }
  return "";
}

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = o.release();
  }
  return *this;
}

Fd::~Fd() {
  if (fd_ >= 0) close(fd_);
}

Fd open_trusted_dir(const std::string& path, uid_t trusted_owner, Leaf leaf) {
  return walk(path, trusted_owner, std::nullopt, leaf);
}

Fd open_trusted_dir_if_exists(const std::string& path, uid_t trusted_owner, Leaf leaf) {
  return walk(path, trusted_owner, std::nullopt, leaf, true);
}

Fd ensure_trusted_dir(const std::string& path, uid_t trusted_owner, uid_t uid, gid_t gid, mode_t mode) {
  return walk(path, trusted_owner, std::make_tuple(uid, gid, mode), Leaf::kPrivate);
}

Fd ensure_private_dir(int parent_fd, const std::string& name, uid_t uid, gid_t gid, bool* created) {
  if (!is_safe_name(name)) throw CudaMpsError(fmt::format("'{}' is not a safe directory name", name));
  bool made = false;
  if (mkdirat(parent_fd, name.c_str(), 0700) == 0) {
    made = true;
  } else if (errno != EEXIST) {
    throw CudaMpsError(fmt::format("cannot create directory {}: {}", name, std::strerror(errno)));
  }
  Fd fd = open_component(parent_fd, name, name);
  if (!fd) throw CudaMpsError(fmt::format("cannot open directory {}: {}", name, std::strerror(errno)));
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) throw CudaMpsError(fmt::format("cannot stat {}: {}", name, std::strerror(errno)));
  if (made) {
    if (geteuid() == 0 && fchown(fd.get(), uid, gid) != 0) {
      std::string e = std::strerror(errno);
      unlinkat(parent_fd, name.c_str(), AT_REMOVEDIR);
      throw CudaMpsError(fmt::format("cannot chown {}: {}", name, e));
    }
    fchmod(fd.get(), 0700);
  } else {
    if (st.st_uid != uid) {
      throw CudaMpsError(fmt::format("refusing existing directory {}: owned by uid {}, not {}; remove it", name, st.st_uid, uid));
    }
    if (st.st_mode & 077) {
      throw CudaMpsError(fmt::format("refusing existing directory {}: mode {:o} gives group/other access; it must be 0700",
                                     name, st.st_mode & 07777));
    }
  }
  if (created) *created = made;
  return fd;
}

void write_file_atomic(int dir_fd, const std::string& name, const std::string& content, mode_t mode) {
  std::random_device rd;
  std::string tmp = fmt::format(".{}.tmp.{:x}", name, rd());
  int fd = openat(dir_fd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) throw CudaMpsError(fmt::format("cannot create {}: {}", tmp, std::strerror(errno)));
  auto fail = [&](const char* what) {
    std::string e = std::strerror(errno);
    close(fd);
    unlinkat(dir_fd, tmp.c_str(), 0);
    throw CudaMpsError(fmt::format("cannot {} {}: {}", what, name, e));
  };
  size_t off = 0;
  while (off < content.size()) {
    ssize_t n = write(fd, content.data() + off, content.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write");
    }
    off += static_cast<size_t>(n);
  }
  if (fchmod(fd, mode) != 0) fail("chmod");
  if (fsync(fd) != 0) fail("fsync");
  if (close(fd) != 0) {
    fd = -1;
    std::string e = std::strerror(errno);
    unlinkat(dir_fd, tmp.c_str(), 0);
    throw CudaMpsError(fmt::format("cannot close {}: {}", name, e));
  }
  if (renameat(dir_fd, tmp.c_str(), dir_fd, name.c_str()) != 0) {
    std::string e = std::strerror(errno);
    unlinkat(dir_fd, tmp.c_str(), 0);
    throw CudaMpsError(fmt::format("cannot rename into {}: {}", name, e));
  }
  fsync(dir_fd);
}

namespace {

// read_file_at with an extra look at the opened file's stat (throws to refuse).
template <typename Check>
std::optional<std::string> read_checked(int dir_fd, const std::string& name, size_t max_bytes, Check check) {
  int fd = openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    if (errno == ELOOP) throw CudaMpsError(fmt::format("refusing {}: it is a symlink", name));
    throw CudaMpsError(fmt::format("cannot open {}: {}", name, std::strerror(errno)));
  }
  Fd guard(fd);
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) throw CudaMpsError(fmt::format("refusing {}: not a regular file", name));
  check(st);
  if (static_cast<size_t>(st.st_size) > max_bytes) {
    throw CudaMpsError(fmt::format("refusing {}: {} bytes is larger than {}", name, st.st_size, max_bytes));
  }
  std::string data;
  char buf[8192];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw CudaMpsError(fmt::format("cannot read {}: {}", name, std::strerror(errno)));
    }
    if (n == 0) break;
    data.append(buf, static_cast<size_t>(n));
    if (data.size() > max_bytes) throw CudaMpsError(fmt::format("refusing {}: grew past {} bytes", name, max_bytes));
  }
  return data;
}

}  // namespace

std::optional<std::string> read_file_at(int dir_fd, const std::string& name, size_t max_bytes) {
  return read_checked(dir_fd, name, max_bytes, [](const struct stat&) {});
}

std::optional<std::string> read_owned_file_at(int dir_fd, const std::string& name, uid_t owner, size_t max_bytes) {
  return read_checked(dir_fd, name, max_bytes, [&](const struct stat& st) {
    if (st.st_uid != owner) {
      throw CudaMpsError(fmt::format("refusing {}: owned by uid {}, not uid {} (the store's owner); remove it", name, st.st_uid,
                                     owner));
    }
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
      throw CudaMpsError(fmt::format("refusing {}: writable by group or others (mode {:o}); remove it", name, st.st_mode & 07777));
    }
  });
}

std::string escape_control(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  return out;
}

std::vector<std::string> read_user_file_tail(int dir_fd, const std::string& name, uid_t owner, size_t max_bytes,
                                             size_t max_lines, size_t max_line_bytes, std::string* problem) {
  std::vector<std::string> out;
  auto refuse = [&](std::string why) {
    if (problem != nullptr) *problem = std::move(why);
    return std::vector<std::string>{};
  };
  if (max_lines == 0 || max_bytes == 0) return out;
  // O_NONBLOCK: a FIFO planted under that name must not hang root's open.
  Fd f(openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
  if (!f) {
    if (errno == ENOENT) return out;
    return refuse(fmt::format("cannot open {}: {}", name, std::strerror(errno)));
  }
  struct stat st {};
  if (fstat(f.get(), &st) != 0) return refuse(fmt::format("cannot stat {}: {}", name, std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) return refuse(fmt::format("refusing {}: not a regular file", name));
  if (st.st_uid != owner) return refuse(fmt::format("refusing {}: owned by uid {}, not uid {}", name, st.st_uid, owner));
  // A hard link could name a file the user may not read (another user's, a
  // root-only one) and have root copy it into a log.
  if (st.st_nlink != 1) return refuse(fmt::format("refusing {}: it has {} links", name, st.st_nlink));
  const off_t cap = static_cast<off_t>(std::min<size_t>(max_bytes, static_cast<size_t>(std::numeric_limits<off_t>::max())));
  const off_t start = st.st_size > cap ? st.st_size - cap : 0;
  std::string text(static_cast<size_t>(st.st_size - start), '\0');
  size_t got = 0;
  while (got < text.size()) {
    ssize_t n = pread(f.get(), text.data() + got, text.size() - got, start + static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return refuse(fmt::format("cannot read {}: {}", name, std::strerror(errno)));
    if (n == 0) break;  // truncated meanwhile
    got += static_cast<size_t>(n);
  }
  text.resize(got);
  std::vector<std::string_view> all;
  for (std::string_view line : split_lines(text)) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!line.empty()) all.push_back(line);
  }
  if (start > 0 && !all.empty() && text.find('\n') != std::string::npos) all.erase(all.begin());  // a partial first line
  size_t first = all.size() > max_lines ? all.size() - max_lines : 0;
  for (size_t i = first; i < all.size(); ++i) {
    std::string_view l = all[i];
    bool cut = l.size() > max_line_bytes;
    if (cut) l = l.substr(0, max_line_bytes);
    out.push_back(escape_control(l) + (cut ? "..." : ""));
  }
  return out;
}

std::vector<std::string> read_user_file_tail(const std::string& dir_path, const std::string& name, uid_t owner,
                                             size_t max_bytes, size_t max_lines, size_t max_line_bytes, std::string* problem) {
  auto refuse = [&](std::string why) {
    if (problem != nullptr) *problem = std::move(why);
    return std::vector<std::string>{};
  };
  if (dir_path.empty() || dir_path[0] != '/') return refuse(fmt::format("'{}' is not an absolute path", dir_path));
  if (auto m = mount_at_or_below(dir_path)) return refuse(fmt::format("{} is mounted there; not reading it", *m));
  Fd dir(open(dir_path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir) return errno == ENOENT ? std::vector<std::string>{} : refuse(fmt::format("cannot open {}: {}", dir_path, std::strerror(errno)));
  struct stat st {};
  if (fstat(dir.get(), &st) != 0) return refuse(fmt::format("cannot stat {}: {}", dir_path, std::strerror(errno)));
  if (st.st_uid != owner) return refuse(fmt::format("refusing {}: owned by uid {}, not uid {}", dir_path, st.st_uid, owner));
  return read_user_file_tail(dir.get(), name, owner, max_bytes, max_lines, max_line_bytes, problem);
}

std::vector<std::string> list_dir(int dir_fd) {
  std::vector<std::string> out;
  int dup_fd = fcntl(dir_fd, F_DUPFD_CLOEXEC, 3);
  if (dup_fd < 0) return out;
  DIR* d = fdopendir(dup_fd);
  if (d == nullptr) {
    close(dup_fd);
    return out;
  }
  rewinddir(d);
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// --- Iterative tree removal ---------------------------------------------------
//
// A user owns the trees we remove (a daemon's pipe and log directories) and
// can make them as deep and wide as it likes, and change them while we work.
// So: no recursion (one frame per level crashes on a deep chain) and no
// descriptor per level (EMFILE, or worse under slurmd's large fd limit).
// The walk holds one descriptor for the directory it works in (plus the
// top's, and briefly a child's or "..") and remembers, for the last
// kRingLevels levels above it, the (device, inode) of each parent and where
// to resume reading it: a fixed 1.5 MiB however deep the tree is.
//  - Down: a subdirectory that rmdir finds non-empty is opened with
//    O_NOFOLLOW|O_DIRECTORY from the current one (a symlink is unlinked, never
//    followed).
//  - Up: "..", accepted only if it is the very directory we came from; if the
//    user moved things around, or the level fell off the ring (a chain deeper
//    than kRingLevels), the walk restarts from the top, which is always
//    right, only slower.
//  - A directory is finished when a pass over it from its start found nothing
//    left; its parent then removes it (and descends again if someone refilled it).
// Only system calls (openat, getdents64, unlinkat, fstat, lseek, close) and
// memory prepared by the caller: it also runs in a child forked from a
// multi-threaded process (remove_tree_as_owner), where malloc is not allowed.

constexpr size_t kRingLevels = 1 << 16;
constexpr size_t kDentsBytes = 64 * 1024;

struct Level {
  dev_t dev;
  ino_t ino;
  off_t resume;  // getdents position just after the entry we descended into
};

struct RemoveScratch {
  Level* ring = nullptr;
  char* dents = nullptr;
  bool chmod_on_eacces = false;  // as the tree's (non-root) owner: make own dirs writable again
  int err = 0;
  int step = 0;  // index into kSteps
};

constexpr const char* kSteps[] = {"",          "duplicate a descriptor", "seek in a directory", "read a directory",
                                  "stat an entry", "remove a directory",  "remove an entry",      "open a directory",
                                  "switch to the tree's owner", "drop root for good"};
enum Step { kNoStep, kDup, kSeek, kReadDir, kStat, kRmdir, kUnlink, kOpenDir, kSwitchUser, kDropRoot };

struct Dirent64 {
  ino64_t d_ino;
  off64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[1];
};

bool is_dot(const char* n) { return n[0] == '.' && (n[1] == '\0' || (n[1] == '.' && n[2] == '\0')); }

int fail(RemoveScratch& s, Step step, int err) {
  s.step = step;
  s.err = err;
  return -1;
}

// unlinkat; as the owner, once more after making `dir` writable (a user may
// have chmod'ed its own directory read-only). Returns 0 or the errno.
int unlink_entry(int dir, const char* name, int flags, RemoveScratch& s) {
  if (unlinkat(dir, name, flags) == 0) return 0;
  int e = errno;
  if ((e == EACCES || e == EPERM) && s.chmod_on_eacces && fchmod(dir, 0700) == 0) {
    if (unlinkat(dir, name, flags) == 0) return 0;
    e = errno;
  }
  return e;
}

int open_subdir(int dir, const char* name, RemoveScratch& s) {
  int fd = openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0 && errno == EACCES && s.chmod_on_eacces) {
    // As the tree's owner only (never root): a race may make `name` a
    // symlink, and fchmodat follows it; the owner may chmod that anyway.
    if (fchmodat(dir, name, 0700, 0) == 0) fd = openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  }
  return fd;
}

// What one directory entry came to.
enum class Entry { kGone, kRemoved, kDescend, kFailed };

// Removes the entry `d` of the directory open as `cur`, or opens it as
// `down` when it is a directory that is not empty yet. kGone: someone else
// removed or replaced it meanwhile. kFailed leaves s.err/s.step set.
Entry remove_entry(int cur, const Dirent64* d, RemoveScratch& s, int& down) {
  unsigned char type = d->d_type;
  if (type == DT_UNKNOWN) {
    struct stat st {};
    if (fstatat(cur, d->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) return Entry::kGone;
      fail(s, kStat, errno);
      return Entry::kFailed;
    }
    type = S_ISDIR(st.st_mode) ? DT_DIR : DT_REG;
  }
  int e = unlink_entry(cur, d->d_name, type == DT_DIR ? AT_REMOVEDIR : 0, s);
  if (e == 0 || e == ENOENT) return Entry::kRemoved;
  if (type == DT_DIR && e == ENOTDIR) e = unlink_entry(cur, d->d_name, 0, s);  // replaced by a file meanwhile
  if (type != DT_DIR && e == EISDIR) e = ENOTEMPTY;                           // replaced by a directory meanwhile
  if (e == 0 || e == ENOENT) return Entry::kGone;
  if (e != ENOTEMPTY && e != EEXIST) {
    fail(s, type == DT_DIR ? kRmdir : kUnlink, e);
    return Entry::kFailed;
  }
  int fd = open_subdir(cur, d->d_name, s);
  if (fd < 0) {
    e = errno;
    if (e == ENOENT) return Entry::kGone;
    if (e == ELOOP || e == ENOTDIR) {  // now a symlink or a file: unlink the name, never follow it
      e = unlink_entry(cur, d->d_name, 0, s);
      if (e == 0 || e == ENOENT) return Entry::kGone;
    }
    fail(s, kOpenDir, e);
    return Entry::kFailed;
  }
  down = fd;
  return Entry::kDescend;
}

// One pass over a directory, from where its descriptor stands.
struct Pass {
  int down = -1;           // the first subdirectory that was not empty, opened
  off_t down_resume = 0;   // getdents position just after it
  bool removed_any = false;
};

// Removes what it can in the directory open as `cur` and stops at the first
// subdirectory that is not empty (p.down). 0, or -1 with s.err/s.step set.
int scan_pass(int cur, RemoveScratch& s, Pass& p) {
  for (;;) {
    long n = syscall(SYS_getdents64, cur, s.dents, kDentsBytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(s, kReadDir, errno);
    if (n == 0) return 0;
    for (long off = 0; off < n;) {
      const auto* d = reinterpret_cast<const Dirent64*>(s.dents + off);
      off += d->d_reclen;
      if (is_dot(d->d_name)) continue;
      switch (remove_entry(cur, d, s, p.down)) {
        case Entry::kFailed: return -1;
        case Entry::kRemoved: p.removed_any = true; break;
        case Entry::kGone: break;
        case Entry::kDescend: p.down_resume = d->d_off; return 0;
      }
    }
  }
}

// Where remove_contents stands: `cur` is open at `depth` levels below the
// top, and the ring holds the last `known` levels above it.
struct Walk {
  int cur = -1;
  size_t depth = 0;
  size_t known = 0;     // ring entries valid for levels depth-known .. depth-1
  off_t resume = 0;     // where the next pass over `cur` starts
  bool reopen = false;  // the next pass from the start reads through a fresh descriptor
};

// Positions w.cur for the next pass. 0, or -1 with s.err/s.step set.
int position(Walk& w, RemoveScratch& s) {
  if (w.reopen) {
    // Not lseek(cur, 0): ext4 ignores it on a descriptor whose first read
    // was at the end of the directory (seen: getdents then returns
    // nothing, and a non-empty directory looks empty). "." is the same
    // directory, so this cannot lead anywhere else.
    int fresh = openat(w.cur, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NONBLOCK);
    int e = errno;
    close(w.cur);
    w.cur = fresh;
    w.reopen = false;
    if (fresh < 0) return fail(s, kOpenDir, e);
  }
  if (lseek(w.cur, w.resume, SEEK_SET) < 0) return fail(s, kSeek, errno);
  return 0;
}

// Into the subdirectory p.down, its parent remembered in the ring.
int descend(Walk& w, const Pass& p, RemoveScratch& s) {
  struct stat st {};
  if (fstat(w.cur, &st) != 0) {
    int e = errno;
    close(p.down);
    return fail(s, kStat, e);
  }
  s.ring[w.depth % kRingLevels] = Level{st.st_dev, st.st_ino, p.down_resume};
  if (w.known < kRingLevels) ++w.known;
  close(w.cur);
  w.cur = p.down;
  ++w.depth;
  w.resume = 0;
  return 0;
}

// Back to the parent of the emptied w.cur, checked against the ring; from
// the top again when the directory moved away from where we came from or is
// deeper than the ring (whatever was moved out of the tree is no longer ours).
int ascend(Walk& w, int top, RemoveScratch& s) {
  int up = openat(w.cur, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NONBLOCK);
  close(w.cur);
  w.cur = -1;
  struct stat st {};
  const Level* parent = w.known > 0 ? &s.ring[(w.depth - 1) % kRingLevels] : nullptr;
  if (up >= 0 && parent != nullptr && fstat(up, &st) == 0 && st.st_dev == parent->dev && st.st_ino == parent->ino) {
    w.cur = up;
    w.resume = parent->resume;
    --w.depth;
    --w.known;
    return 0;
  }
  if (up >= 0) close(up);
  w.cur = fcntl(top, F_DUPFD_CLOEXEC, 0);
  if (w.cur < 0) return fail(s, kDup, errno);
  w.depth = 0;
  w.known = 0;
  w.resume = 0;
  return 0;
}

// Removes everything below the directory open as `top` (not `top` itself),
// depth first with one descriptor open at a time. Returns 0, or -1 with
// s.err/s.step set.
int remove_contents(int top, RemoveScratch& s) {
  Walk w;
  w.cur = fcntl(top, F_DUPFD_CLOEXEC, 0);
  if (w.cur < 0) return fail(s, kDup, errno);
  for (;;) {
    if (position(w, s) != 0) break;
    const bool from_start = w.resume == 0;
    Pass p;
    if (scan_pass(w.cur, s, p) != 0) break;
    if (p.down >= 0) {
      if (descend(w, p, s) != 0) break;
      continue;
    }
    // End of the directory. Started mid-way (back from a subdirectory), or
    // removed something: look again from the start, it may not be empty yet.
    if (!from_start || p.removed_any) {
      w.reopen = !from_start;
      w.resume = 0;
      continue;
    }
    if (w.depth == 0) {
      close(w.cur);
      return 0;
    }
    if (ascend(w, top, s) != 0) return -1;
  }
  if (w.cur >= 0) close(w.cur);
  return -1;
}

struct Scratch {
  std::vector<Level> ring = std::vector<Level>(kRingLevels);
  std::vector<char> dents = std::vector<char>(kDentsBytes);
  RemoveScratch raw{ring.data(), dents.data()};
};

std::string describe_failure(const std::string& name, const RemoveScratch& s) {
  return fmt::format("cannot {} below {}: {}", kSteps[s.step], name, std::strerror(s.err));
}

// Removes the top directory `name` once its contents are gone; a few passes
// when someone refills it meanwhile.
template <typename EmptyIt>
std::string remove_emptied(int dir_fd, const std::string& name, EmptyIt empty_it) {
  for (int attempt = 0;; ++attempt) {
    if (std::string e = empty_it(); !e.empty()) return e;
    if (unlinkat(dir_fd, name.c_str(), AT_REMOVEDIR) == 0 || errno == ENOENT) return "";
    if (errno != ENOTEMPTY && errno != EEXIST) return fmt::format("cannot remove {}: {}", name, std::strerror(errno));
    if (attempt == 2) return fmt::format("cannot remove {}: something keeps adding entries to it", name);
  }
}

// The first step of both removals: a name that is gone is done, one that is
// not a directory is unlinked (a single name in a directory root trusts:
// unlinking it follows nothing), a directory is opened without following a
// link. Returns the opened top directory, or the outcome ("" = done).
std::variant<Fd, std::string> open_tree_top(int dir_fd, const std::string& name) {
  struct stat st {};
  if (fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return errno == ENOENT ? std::string() : fmt::format("cannot stat {}: {}", name, std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) {
    if (unlinkat(dir_fd, name.c_str(), 0) != 0 && errno != ENOENT) {
      return fmt::format("cannot remove {}: {}", name, std::strerror(errno));
    }
    return std::string();
  }
  Fd top(openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
  if (!top) return errno == ENOENT ? std::string() : fmt::format("cannot open {}: {}", name, std::strerror(errno));
  return top;
}

}  // namespace

std::string remove_tree_at(int dir_fd, const std::string& name) {
  auto opened = open_tree_top(dir_fd, name);
  if (auto* outcome = std::get_if<std::string>(&opened)) return *outcome;
  Fd top = std::move(std::get<Fd>(opened));
  auto scratch = std::make_unique<Scratch>();
  scratch->raw.chmod_on_eacces = geteuid() != 0;
  return remove_emptied(dir_fd, name, [&]() -> std::string {
    if (remove_contents(top.get(), scratch->raw) != 0) return describe_failure(name, scratch->raw);
    return "";
  });
}

namespace {

// The child of remove_tree_as_owner: drops to uid:gid for good, removes what
// is below `top`, reports through `report` and exits. Async-signal-safe calls
// only (it is forked from a possibly multi-threaded process).
[[noreturn]] void removal_child(int top, int report, uid_t uid, gid_t gid, pid_t parent, RemoveScratch& s) {
  // Nothing of root's but the tree and the report pipe: move both to 3 and 4, close the rest.
  int t = fcntl(top, F_DUPFD, 10);
  int r = fcntl(report, F_DUPFD, 10);
  if (t < 0 || r < 0 || dup2(t, 3) < 0 || dup2(r, 4) < 0) _exit(120);
  if (syscall(SYS_close_range, 5U, ~0U, 0U) != 0) {
    for (int fd = 5; fd < 65536; ++fd) close(fd);
  }
  top = 3;
  report = 4;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(121);  // the parent is already gone
  // The user's primary group only: its supplementary groups are no help
  // removing its own files, and root's must not survive.
  if (setgroups(1, &gid) != 0 || setgid(gid) != 0 || setuid(uid) != 0) {
    fail(s, kSwitchUser, errno);
  } else if (uid != 0 && setuid(0) == 0) {
    fail(s, kDropRoot, EPERM);
  } else {
    prctl(PR_SET_DUMPABLE, 0);  // the user must not ptrace us
    remove_contents(top, s);
  }
  int msg[2] = {s.err, s.step};
  ssize_t ignored = write(report, msg, sizeof msg);
  (void)ignored;
  _exit(s.err == 0 ? 0 : 1);
}

}  // namespace

std::string remove_tree_as_owner(int dir_fd, const std::string& name, uid_t uid, gid_t gid, std::chrono::milliseconds timeout) {
  if (geteuid() != 0 || uid == 0) return remove_tree_at(dir_fd, name);
  auto opened = open_tree_top(dir_fd, name);
  if (auto* outcome = std::get_if<std::string>(&opened)) return *outcome;
  Fd top = std::move(std::get<Fd>(opened));
  struct stat st {};
  if (fstat(top.get(), &st) != 0) return fmt::format("cannot stat {}: {}", name, std::strerror(errno));
  if (st.st_uid != uid) {
    return fmt::format("refusing to remove {}: owned by uid {}, not the daemon's uid {}; left in place", name, st.st_uid, uid);
  }
  // An empty directory (the usual case: the daemon's tmpfs was just
  // unmounted from it) needs no child: removing the empty top directory is
  // all root does after the child in any case. Anything below it, and every
  // failure, goes the child's way.
  if (unlinkat(dir_fd, name.c_str(), AT_REMOVEDIR) == 0 || errno == ENOENT) return "";
  auto scratch = std::make_unique<Scratch>();  // prepared before fork: the child may not allocate
  scratch->raw.chmod_on_eacces = true;
  return remove_emptied(dir_fd, name, [&]() -> std::string {
    int report[2];
    if (pipe2(report, O_CLOEXEC) != 0) return fmt::format("cannot remove {}: pipe: {}", name, std::strerror(errno));
    Fd report_r(report[0]);
    Fd report_w(report[1]);
    scratch->raw.err = 0;
    scratch->raw.step = kNoStep;
    const pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) return fmt::format("cannot remove {}: fork: {}", name, std::strerror(errno));
    if (pid == 0) removal_child(top.get(), report_w.get(), uid, gid, parent, scratch->raw);
    report_w = Fd();
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    ChildWait w = wait_child_until(pid, deadline);
    if (!w.reaped) {
      kill(pid, SIGKILL);
      w = wait_child_until(pid, std::chrono::steady_clock::now() + kKillGrace);
      if (!w.reaped) {
        return fmt::format("removing {} as uid {} did not end within {} ms, nor within {} ms of SIGKILL: pid {} abandoned, the "
                           "tree is left",
                           name, uid, timeout.count(), kKillGrace.count(), pid);
      }
      return fmt::format("removing {} as uid {} did not end within {} ms: stopped, the tree is left", name, uid, timeout.count());
    }
    int msg[2] = {0, 0};
    ssize_t got = read(report_r.get(), msg, sizeof msg);
    if (got == static_cast<ssize_t>(sizeof msg) && msg[0] != 0) {
      const int step = msg[1] >= 0 && msg[1] < static_cast<int>(std::size(kSteps)) ? msg[1] : kNoStep;
      return fmt::format("cannot {} below {} as uid {}: {}", kSteps[step], name, uid, std::strerror(msg[0]));
    }
    if (got != static_cast<ssize_t>(sizeof msg) || !WIFEXITED(w.status) || WEXITSTATUS(w.status) != 0) {
      return fmt::format("removing {} as uid {} failed (child status {})", name, uid, w.status);
    }
    return "";
  });
}

std::pair<std::string, std::string> split_parent(const std::string& abs_path) {
  std::string p = abs_path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  size_t slash = p.rfind('/');
  if (slash == std::string::npos) return {".", p};
  return {slash == 0 ? "/" : p.substr(0, slash), p.substr(slash + 1)};
}

bool is_safe_name(const std::string& name) {
  if (name.empty() || name.size() > 128 || name[0] == '.') return false;
  return std::all_of(name.begin(), name.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '.' || c == '_' || c == '-';
  });
}

}  // namespace unilab::mps
