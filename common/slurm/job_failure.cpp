#include "common/slurm/job_failure.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "common/mps/errors.hpp"
#include "common/mps/safefs.hpp"

namespace unilab::mps {
namespace {

constexpr size_t kMaxReason = 400;
constexpr const char* kSubdir = "prolog-failures";

std::string failure_dir(const std::string& state_dir) { return state_dir + "/" + kSubdir; }

std::string checked_file(const std::string& job_id, const std::string& node) {
  std::string file = prolog_failure_file(job_id, node);
  if (!is_safe_name(file)) throw CudaMpsError(fmt::format("'{}' is not a safe file name", file));
  return file;
}

}  // namespace

std::string prolog_failure_file(const std::string& job_id, const std::string& node) {
  return fmt::format("job{}.{}.prolog-failure", job_id, node);
}

std::string prolog_failure_line(const std::string& reason) {
  std::string line = escape_control(reason);
  if (line.size() > kMaxReason) line = line.substr(0, kMaxReason - 3) + "...";
  return line;
}

void keep_prolog_failure(const std::string& state_dir, uid_t owner, const std::string& job_id, const std::string& node,
                         const std::string& reason) {
  const std::string file = checked_file(job_id, node);
  ensure_trusted_dir(state_dir, owner, owner, owner, 0755);  // the records' mode: tasks read those
  Fd dir = ensure_trusted_dir(failure_dir(state_dir), owner, owner, owner, 0700);
  write_file_atomic(dir.get(), file, prolog_failure_line(reason) + "\n", 0600);
}

std::optional<std::string> read_prolog_failure(const std::string& state_dir, uid_t owner, const std::string& job_id,
                                               const std::string& node) {
  const std::string file = checked_file(job_id, node);
  Fd dir = open_trusted_dir_if_exists(failure_dir(state_dir), owner, Leaf::kPrivate);
  if (!dir) return std::nullopt;
  auto text = read_owned_file_at(dir.get(), file, owner, 4096);
  if (!text) return std::nullopt;
  std::string line = text->substr(0, text->find('\n'));
  return prolog_failure_line(line);
}

std::map<std::string, std::string> read_job_prolog_failures(const std::string& state_dir, uid_t owner, const std::string& job_id) {
  std::map<std::string, std::string> out;
  Fd dir = open_trusted_dir_if_exists(failure_dir(state_dir), owner, Leaf::kPrivate);
  if (!dir) return out;
  const std::string prefix = fmt::format("job{}.", job_id), suffix = ".prolog-failure";
  for (const auto& file : list_dir(dir.get())) {
    if (file.size() <= prefix.size() + suffix.size() || !file.starts_with(prefix) || !file.ends_with(suffix)) continue;
    auto text = read_owned_file_at(dir.get(), file, owner, 4096);
    if (!text) continue;
    out[file.substr(prefix.size(), file.size() - prefix.size() - suffix.size())] = prolog_failure_line(text->substr(0, text->find('\n')));
  }
  return out;
}

void clear_prolog_failure(const std::string& state_dir, uid_t owner, const std::string& job_id, const std::string& node) {
  const std::string file = checked_file(job_id, node);
  Fd dir = open_trusted_dir_if_exists(failure_dir(state_dir), owner, Leaf::kPrivate);
  if (!dir) return;
  if (unlinkat(dir.get(), file.c_str(), 0) != 0 && errno != ENOENT) {
    throw CudaMpsError(fmt::format("cannot remove {}/{}: {}", failure_dir(state_dir), file, std::strerror(errno)));
  }
}

std::string prolog_failure_message(const std::string& job_id, const std::string& node, const std::string& reason) {
  return fmt::format("no MPS daemon was started for job {} on node {}: the job prolog failed there: {}", job_id, node, reason);
}

}  // namespace unilab::mps
