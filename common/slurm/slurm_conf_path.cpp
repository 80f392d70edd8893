#include "common/slurm/slurm_conf_path.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "common/mps/env.hpp"
#include "common/mps/errors.hpp"
#include "common/mps/safefs.hpp"

namespace unilab::mps {

std::string SlurmConfLocation::dir() const {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string SlurmConfLocation::describe() const {
  std::string out = fmt::format("{} ({})", path, source);
  if (configless()) out = fmt::format("{} (configless cache: {} -> {})", path, kConfiglessLink, cache_target);
  if (!cache_problem.empty()) out += fmt::format("; the configless cache {} is not used: {}", kConfiglessLink, cache_problem);
  return out;
}

SlurmConfLocation locate_slurm_conf(const std::optional<std::string>& slurm_conf_env,
                                    const std::function<bool(const std::string&)>& exists, const ConfiglessCacheProbe& cache,
                                    const std::string& default_path) {
  if (slurm_conf_env && !slurm_conf_env->empty()) return {*slurm_conf_env, "SLURM_CONF", "", ""};
  if (exists(default_path)) return {default_path, "default", "", ""};
  std::optional<ConfiglessCache> c = cache();
  if (!c) return {default_path, "default", "", ""};
  if (!c->problem.empty()) return {default_path, "default", "", c->problem};
  return {kConfiglessSlurmConf, kConfiglessSource, c->target, ""};
}

namespace {

std::string link_problem(int run_slurm_fd, std::string* target) {
  struct stat st {};
  if (fstatat(run_slurm_fd, "conf", &st, AT_SYMLINK_NOFOLLOW) != 0) return fmt::format("{}: {}", kConfiglessLink, std::strerror(errno));
  if (!S_ISLNK(st.st_mode)) return fmt::format("{} is not the symlink slurmd makes", kConfiglessLink);
  if (st.st_uid != 0) return fmt::format("the symlink {} belongs to uid {}, not root", kConfiglessLink, st.st_uid);
  char buf[4096];
  ssize_t n = readlinkat(run_slurm_fd, "conf", buf, sizeof buf - 1);
  if (n <= 0) return fmt::format("cannot read the symlink {}: {}", kConfiglessLink, std::strerror(errno));
  *target = std::string(buf, static_cast<size_t>(n));
  if (target->front() != '/') return fmt::format("{} points at '{}', not an absolute path", kConfiglessLink, *target);
  return "";
}

std::string cached_conf_problem(int cache_fd, const std::string& target) {
  struct stat st {};
  if (fstatat(cache_fd, "slurm.conf", &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return fmt::format("{}/slurm.conf: {}", target, std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return fmt::format("{}/slurm.conf is not a regular file", target);
  if (st.st_uid != 0 || (st.st_mode & (S_IWGRP | S_IWOTH))) {
    return fmt::format("{}/slurm.conf is not root's own (uid {}, mode {:o})", target, st.st_uid, st.st_mode & 07777);
  }
  return "";
}

}  // namespace

std::optional<ConfiglessCache> probe_configless_cache() {
  struct stat st {};
  if (::lstat(kConfiglessLink, &st) != 0) return std::nullopt;  // not a configless node
  ConfiglessCache out;
  try {
    Fd run_slurm = open_trusted_dir("/run/slurm", 0, Leaf::kPrivate);
    out.problem = link_problem(run_slurm.get(), &out.target);
    if (!out.problem.empty()) return out;
    Fd cache = open_trusted_dir(out.target, 0, Leaf::kPrivate);
    out.problem = cached_conf_problem(cache.get(), out.target);
  } catch (const CudaMpsError& e) {
    out.problem = e.what();
  }
  return out;
}

SlurmConfLocation locate_slurm_conf() {
  return locate_slurm_conf(
      process_env("SLURM_CONF"),
      [](const std::string& p) {
        struct stat st {};
        return ::stat(p.c_str(), &st) == 0;
      },
      probe_configless_cache);
}

}  // namespace unilab::mps
