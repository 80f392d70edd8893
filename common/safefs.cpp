#include "common/safefs.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include <fmt/format.h>

#include "common/errors.hpp"

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

void check_trust(int fd, const std::string& shown, uid_t trusted_owner) {
  struct stat st {};
  if (fstat(fd, &st) != 0) throw CudaMpsError(fmt::format("cannot stat {}: {}", shown, std::strerror(errno)));
  if (!S_ISDIR(st.st_mode)) throw CudaMpsError(fmt::format("{} is not a directory", shown));
  if (st.st_uid != 0 && st.st_uid != trusted_owner) {
    throw CudaMpsError(fmt::format("refusing {}: owned by uid {}, expected root or uid {}; remove it or choose another directory",
                                   shown, st.st_uid, trusted_owner));
  }
  bool sticky_root = (st.st_mode & S_ISVTX) && st.st_uid == 0;
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !sticky_root) {
    throw CudaMpsError(fmt::format("refusing {}: writable by group or others (mode {:o}); chmod go-w it or choose another directory",
                                   shown, st.st_mode & 07777));
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

Fd walk(const std::string& path, uid_t trusted_owner, const std::optional<std::tuple<uid_t, gid_t, mode_t>>& create) {
  auto comps = components(path);
  Fd cur(open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!cur) throw CudaMpsError(fmt::format("cannot open /: {}", std::strerror(errno)));
  check_trust(cur.get(), "/", trusted_owner);
  std::string shown;
  for (const auto& c : comps) {
    shown += "/" + c;
    Fd next = open_component(cur.get(), c, shown);
    if (!next && errno == ENOENT && create) {
      auto [uid, gid, mode] = *create;
      if (mkdirat(cur.get(), c.c_str(), mode) != 0 && errno != EEXIST) {
        throw CudaMpsError(fmt::format("cannot create {}: {}", shown, std::strerror(errno)));
      }
      next = open_component(cur.get(), c, shown);
      if (next) {
        struct stat st {};
        fstat(next.get(), &st);
        if (geteuid() == 0 && (st.st_uid != uid || st.st_gid != gid) && fchown(next.get(), uid, gid) != 0) {
          throw CudaMpsError(fmt::format("cannot chown {}: {}", shown, std::strerror(errno)));
        }
        if ((st.st_mode & 07777) != mode && st.st_uid == geteuid()) fchmod(next.get(), mode);
      }
    }
    if (!next) throw CudaMpsError(fmt::format("cannot open directory {}: {}", shown, std::strerror(errno)));
    check_trust(next.get(), shown, trusted_owner);
    cur = std::move(next);
  }
  return cur;
}

}  // namespace

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

Fd open_trusted_dir(const std::string& path, uid_t trusted_owner) { return walk(path, trusted_owner, std::nullopt); }

Fd ensure_trusted_dir(const std::string& path, uid_t trusted_owner, uid_t uid, gid_t gid, mode_t mode) {
  return walk(path, trusted_owner, std::make_tuple(uid, gid, mode));
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

std::optional<std::string> read_file_at(int dir_fd, const std::string& name, size_t max_bytes) {
  int fd = openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    if (errno == ELOOP) throw CudaMpsError(fmt::format("refusing {}: it is a symlink", name));
    throw CudaMpsError(fmt::format("cannot open {}: {}", name, std::strerror(errno)));
  }
  Fd guard(fd);
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) throw CudaMpsError(fmt::format("refusing {}: not a regular file", name));
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

std::optional<uid_t> entry_owner(int dir_fd, const std::string& name) {
  struct stat st {};
  if (fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return std::nullopt;
  return st.st_uid;
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

std::string remove_tree_at(int dir_fd, const std::string& name) {
  struct stat st {};
  if (fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return errno == ENOENT ? "" : fmt::format("cannot stat {}: {}", name, std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) {
    if (unlinkat(dir_fd, name.c_str(), 0) != 0 && errno != ENOENT) {
      return fmt::format("cannot remove {}: {}", name, std::strerror(errno));
    }
    return "";
  }
  int fd = openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return fmt::format("cannot open {}: {}", name, std::strerror(errno));
  Fd sub(fd);
  std::string first_error;
  for (const auto& child : list_dir(sub.get())) {
    std::string e = remove_tree_at(sub.get(), child);
    if (!e.empty() && first_error.empty()) first_error = name + "/" + e;
  }
  if (unlinkat(dir_fd, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT && first_error.empty()) {
    first_error = fmt::format("cannot remove {}: {}", name, std::strerror(errno));
  }
  return first_error;
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
