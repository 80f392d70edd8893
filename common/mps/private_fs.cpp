#include "common/mps/private_fs.hpp"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

#include <fmt/format.h>

#include "common/mps/errors.hpp"
#include "common/mps/proc.hpp"
#include "common/mps/safefs.hpp"
#include "common/mps/text.hpp"

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

namespace {

// mountinfo writes space, tab, newline and backslash as \ooo.
std::string unescape_mount_field(std::string_view f) {
  std::string out;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] == '\\' && i + 3 < f.size()) {
      const std::string_view o = f.substr(i + 1, 3);
      if (o.size() == 3 && std::all_of(o.begin(), o.end(), [](char c) { return c >= '0' && c <= '7'; })) {
        out.push_back(static_cast<char>(((o[0] - '0') << 6) | ((o[1] - '0') << 3) | (o[2] - '0')));
        i += 3;
        continue;
      }
    }
    out.push_back(f[i]);
  }
  return out;
}

bool at_or_below(const std::string& point, const std::string& path) {
  if (path == "/") return true;
  return point == path || (point.size() > path.size() && point.compare(0, path.size(), path) == 0 && point[path.size()] == '/');
}

std::string describe(const MountEntry& m) {
  return m.fuse_user && *m.fuse_user != 0 ? fmt::format("{} on {} (mounted by uid {})", m.fstype, m.point, *m.fuse_user)
                                          : fmt::format("{} on {}", m.fstype, m.point);
}

// The mount id /proc/self/fdinfo gives for `fd` (-1 when unknown).
int mount_id_of(int fd) {
  // The text outlives the views split_lines returns into it.
  const std::string text = read_proc_file(fmt::format("/proc/self/fdinfo/{}", fd), 64 << 10).value_or("");
  int id = -1;
  for (std::string_view line : split_lines(text)) {
    if (!line.starts_with("mnt_id:")) continue;
    std::string_view v = trim(line.substr(7));
    std::from_chars(v.data(), v.data() + v.size(), id);
  }
  return id;
}

// mountinfo larger than this is refused, never read in part: a cut-off list
// could leave out the very mount that is looked for (about 200,000 mounts).
constexpr size_t kMaxMountinfo = 32u << 20;

}  // namespace

std::vector<MountEntry> parse_mountinfo(std::string_view text) {
  std::vector<MountEntry> out;
  for (std::string_view line : split_nonempty(text, '\n')) {
    // id parent major:minor root point options [optional...] - fstype source superoptions
    const std::vector<std::string_view> f = split_nonempty(line, ' ');
    auto dash = std::find(f.begin(), f.end(), std::string_view("-"));
    if (f.size() < 6 || dash == f.end() || dash - f.begin() < 6 || f.end() - dash < 2) continue;
    MountEntry m;
    auto [p, ec] = std::from_chars(f[0].data(), f[0].data() + f[0].size(), m.id);
    if (ec != std::errc() || p != f[0].data() + f[0].size()) continue;
    m.point = unescape_mount_field(f[4]);
    m.fstype = unescape_mount_field(*(dash + 1));
    if (m.point.empty() || m.point[0] != '/') continue;
    if ((m.fstype == "fuse" || m.fstype.rfind("fuse.", 0) == 0 || m.fstype == "fuseblk") && dash + 3 < f.end()) {
      for (std::string_view o : split_nonempty(*(dash + 3), ',')) {
        if (o.rfind("user_id=", 0) != 0) continue;
        uid_t uid = 0;
        auto [q, e] = std::from_chars(o.data() + 8, o.data() + o.size(), uid);
        if (e == std::errc() && q == o.data() + o.size()) m.fuse_user = uid;
      }
    }
    out.push_back(std::move(m));
  }
  return out;
}

std::optional<std::vector<MountEntry>> read_mountinfo() {
  const auto text = read_proc_file("/proc/self/mountinfo", kMaxMountinfo);
  if (!text || text->size() > kMaxMountinfo) return std::nullopt;
  return parse_mountinfo(*text);
}

std::optional<std::string> mount_at_or_below(const std::vector<MountEntry>& mounts, const std::string& path) {
  for (const auto& m : mounts) {
    if (at_or_below(m.point, path)) return describe(m);
    // Above it: only a user's FUSE (root's own mounts, /run among them, are
    // what every path lies on).
    if (m.fuse_user && *m.fuse_user != 0 && at_or_below(path, m.point)) return describe(m);
  }
  return std::nullopt;
}

std::optional<std::string> mount_at_or_below(const std::string& path) {
  const auto mounts = read_mountinfo();
  // Fail closed: without the list, any mount may be there.
  if (!mounts) return std::string("a mount that cannot be ruled out (/proc/self/mountinfo cannot be read)");
  return mount_at_or_below(*mounts, path);
}

std::vector<std::string> detach_mounts_below(int parent_fd, const std::string& name, const std::string& path,
                                             const std::vector<MountEntry>& mounts) {
  std::vector<const MountEntry*> found;
  for (const auto& m : mounts) {
    if (!at_or_below(m.point, path) || (m.point == path && m.fstype == "tmpfs")) continue;
    found.push_back(&m);
  }
  // Topmost only: one below another goes with it.
  std::vector<const MountEntry*> top;
  for (const auto* m : found) {
    bool under = std::any_of(found.begin(), found.end(), [&](const MountEntry* o) { return o != m && o->point != m->point && at_or_below(m->point, o->point); });
    bool twin = std::any_of(top.begin(), top.end(), [&](const MountEntry* o) { return o->point == m->point; });
    if (!under && !twin) top.push_back(m);
  }
  std::vector<std::string> lines;
  for (const auto* m : top) {
    // The components from `path` down to the mount point.
    const auto parts = split_nonempty(std::string_view(m->point).substr(path.size()), '/');
    Fd dir(fcntl(parent_fd, F_DUPFD_CLOEXEC, 0));
    std::string leaf = name;
    bool ok = static_cast<bool>(dir);
    for (const auto& part : parts) {
      if (!ok) break;
      Fd next(openat(dir.get(), leaf.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      ok = static_cast<bool>(next);
      dir = std::move(next);
      leaf = std::string(part);
    }
    Fd at(ok ? openat(dir.get(), leaf.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC) : -1);
    if (!at) {
      lines.push_back(fmt::format("{} mounted below {}: cannot reach its mount point ({}); left mounted", describe(*m), path,
                                  std::strerror(errno)));
      continue;
    }
    if (mount_id_of(at.get()) != m->id) {
      lines.push_back(fmt::format("{} mounted below {}: the path no longer leads to that mount; left mounted", describe(*m), path));
      continue;
    }
    // The magic link is the opened mount root itself: no path is walked.
    if (umount2(fmt::format("/proc/self/fd/{}", at.get()).c_str(), MNT_DETACH) != 0) {
      lines.push_back(fmt::format("cannot detach {}: {}", describe(*m), std::strerror(errno)));
      continue;
    }
    lines.push_back(fmt::format("detached {} (a file system mounted in the daemon's directory; root never looks into it)", describe(*m)));
  }
  return lines;
}

}  // namespace unilab::mps
