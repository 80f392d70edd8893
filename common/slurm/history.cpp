#include "common/slurm/history.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>

#include <fmt/format.h>

#include "common/mps/errors.hpp"
#include "common/mps/safefs.hpp"
#include "common/mps/text.hpp"

namespace unilab::mps {
namespace {

std::string utc(double t) {
  if (t <= 0) return "-";
  const time_t s = static_cast<time_t>(t);
  tm u{};
  gmtime_r(&s, &u);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &u);
  return buf;
}

// Root's own regular, singly linked file, not writable by others: the only
// journal root appends to.
void require_root_file(int fd, const std::string& path) {
  struct stat st {};
  if (fstat(fd, &st) != 0) throw CudaMpsError(fmt::format("cannot stat {}: {}", path, std::strerror(errno)));
  if (!S_ISREG(st.st_mode) || st.st_uid != 0 || st.st_nlink != 1 || (st.st_mode & (S_IWGRP | S_IWOTH))) {
    throw CudaMpsError(fmt::format("{} is not root's own regular file (uid {}, mode {:o}, {} links); move it away", path,
                                   st.st_uid, st.st_mode & 07777, st.st_nlink));
  }
}

Fd open_journal(int dir, const std::string& name, const std::string& path) {
  Fd fd(openat(dir, name.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0644));
  if (!fd) throw CudaMpsError(fmt::format("cannot open {}: {}", path, std::strerror(errno)));
  require_root_file(fd.get(), path);
  return fd;
}

void write_all(int fd, const std::string& text, off_t restore_to, const std::string& path) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      // Never half a line: what this call wrote goes again.
      if (ftruncate(fd, restore_to) != 0) {
        throw CudaMpsError(fmt::format("cannot write {}: {}; and cannot cut the partial line off: {}", path, std::strerror(err),
                                       std::strerror(errno)));
      }
      throw CudaMpsError(fmt::format("cannot write {}: {}", path, std::strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
}

}  // namespace

nlohmann::json HistoryEntry::to_json() const {
  nlohmann::json f = nlohmann::json::array();
  for (const auto& x : faults) {
    f.push_back({{"kind", std::string(to_string(x.fault.kind))}, {"log", x.fault.log}, {"line", x.fault.line},
                 {"noted_by", x.noted_by}, {"noted_at", x.noted_at}});
  }
  return {{"version", kHistoryVersion},
          {"job", job_id},
          {"user", user},
          {"uid", uid},
          {"node", node},
          {"daemon", daemon},
          {"gpus", gpu_uuids},
          {"mig", mig},
          {"mode", mode},
          {"topology_mode", topology_mode},
          {"limits", limits},
          {"started_at", started_at},
          {"stopped_at", stopped_at},
          {"stop", {{"outcome", stop_outcome}, {"took_ms", stop_ms}, {"detail", stop_detail}, {"by", stopped_by}}},
          {"servers_started", servers_started},
          {"faults", f}};
}

HistoryEntry history_entry(const DaemonRecord& record, const std::optional<StopReport>& report, const std::string& error,
                           const std::string& user, const std::string& stopped_by, double stopped_at, long servers_started,
                           const std::vector<JobFault>& faults) {
  HistoryEntry e;
  e.job_id = record.job_id.value_or("");
  e.user = user;
  e.uid = record.uid;
  e.node = record.slurm ? record.slurm->node : record.host;
  e.daemon = record.name;
  e.gpu_uuids = record.gpu_uuids;
  if (record.slurm) {
    e.mode = std::string(to_string(record.slurm->mode));
    for (const auto& g : record.slurm->node_gpus) {
      if (g.mig && std::find(record.gpu_uuids.begin(), record.gpu_uuids.end(), g.uuid) != record.gpu_uuids.end()) {
        if (e.mig.is_null()) e.mig = nlohmann::json::object();
        e.mig[g.uuid] = g.mig->to_json();
      }
    }
  }
  e.topology_mode = std::string(to_string(record.topology_mode));
  e.limits = record.to_json().value("limits", nlohmann::json::object());
  e.started_at = record.created_at;
  e.stopped_at = stopped_at;
  if (report) {
    e.stop_outcome = std::string(to_string(report->outcome));
    e.stop_ms = report->took.count();
    e.stop_detail = report->detail;
  } else {
    e.stop_outcome = "error";
    e.stop_detail = error;
  }
  e.stopped_by = stopped_by;
  e.servers_started = servers_started;
  for (const auto& f : faults) {
    if (f.daemon == record.name) e.faults.push_back(f);
  }
  return e;
}

std::string append_history(const std::string& path, unsigned long long max_bytes, const std::vector<nlohmann::json>& lines) {
  if (lines.empty()) return "";
  try {
    auto [dir_path, name] = split_parent(path);
    Fd dir = ensure_trusted_dir(dir_path, 0, 0, 0, 0755);
    // Concurrent epilogs (jobs ending together): one writer at a time. The
    // lock is a file of its own, since the journal itself is renamed.
    const std::string lock_name = "." + name + ".lock";
    Fd lock(openat(dir.get(), lock_name.c_str(), O_RDONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0600));
    if (!lock) throw CudaMpsError(fmt::format("cannot open {}/{}: {}", dir_path, lock_name, std::strerror(errno)));
    while (flock(lock.get(), LOCK_EX) != 0) {
      if (errno != EINTR) throw CudaMpsError(fmt::format("cannot lock {}/{}: {}", dir_path, lock_name, std::strerror(errno)));
    }
    std::string text;
    for (const auto& l : lines) text += l.dump() + "\n";
    Fd fd = open_journal(dir.get(), name, path);
    struct stat st {};
    fstat(fd.get(), &st);
    if (st.st_size > 0 && static_cast<unsigned long long>(st.st_size) + text.size() > max_bytes) {
      // The current file becomes <path>.1 (the older one goes): at most
      // twice max_bytes in all.
      const std::string old = name + ".1";
      if (renameat(dir.get(), name.c_str(), dir.get(), old.c_str()) != 0) {
        throw CudaMpsError(fmt::format("cannot rotate {} to {}.1: {}", path, path, std::strerror(errno)));
      }
      fd = open_journal(dir.get(), name, path);
      st = {};
      fstat(fd.get(), &st);
    }
    write_all(fd.get(), text, st.st_size, path);
    return "";
  } catch (const CudaMpsError& e) {
    return e.what();
  }
}

namespace {

// The fields select_history and render_history read, with their types: a
// line with other types is counted bad, not taken.
bool well_formed(const nlohmann::json& j) {
  if (!j.is_object()) return false;
  for (const char* k : {"job", "user", "node", "daemon"}) {
    if (!j.contains(k) || !j[k].is_string()) return false;
  }
  for (const char* k : {"started_at", "stopped_at", "servers_started"}) {
    if (!j.contains(k) || !j[k].is_number()) return false;
  }
  if (!j.contains("gpus") || !j["gpus"].is_array()) return false;
  for (const auto& g : j["gpus"]) {
    if (!g.is_string()) return false;
  }
  if (!j.contains("stop") || !j["stop"].is_object()) return false;
  const auto& stop = j["stop"];
  if (!stop.contains("outcome") || !stop["outcome"].is_string() || !stop.contains("took_ms") || !stop["took_ms"].is_number()) {
    return false;
  }
  if (!j.contains("faults") || !j["faults"].is_array()) return false;
  for (const auto& f : j["faults"]) {
    if (!f.is_object()) return false;
    for (const char* k : {"kind", "log", "line"}) {
      if (!f.contains(k) || !f[k].is_string()) return false;
    }
  }
  return true;
}

}  // namespace

std::optional<double> parse_since(std::string_view text, double now) {
  std::string t(trim(text));
  if (t.empty() || t.size() > 40) return std::nullopt;
  const bool digits = std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (digits) {
    if (t.size() > 12) return std::nullopt;
    return std::stod(t);
  }
  // An age: digits and one unit.
  const char unit = t.back();
  const std::string count = t.substr(0, t.size() - 1);
  const bool count_digits = !count.empty() && count.size() <= 9 &&
                            std::all_of(count.begin(), count.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (count_digits) {
    const double n = std::stod(count);
    switch (unit) {
      case 's': return now - n;
      case 'm': return now - n * 60;
      case 'h': return now - n * 3600;
      case 'd': return now - n * 86400;
      default: return std::nullopt;
    }
  }
  if (t.back() == 'Z') t.pop_back();
  tm u{};
  const char* end = nullptr;
  for (const char* format : {"%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d"}) {
    u = tm{};
    end = strptime(t.c_str(), format, &u);
    if (end != nullptr && *end == '\0') break;
    end = nullptr;
  }
  if (end == nullptr) return std::nullopt;
  return static_cast<double>(timegm(&u));
}

HistoryRead read_history(const std::string& path) {
  HistoryRead out;
  for (const std::string& file : {path + ".1", path}) {
    auto [dir_path, name] = split_parent(file);
    Fd dir(open(dir_path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dir) {
      if (errno != ENOENT) out.problem = fmt::format("cannot open {}: {}", dir_path, std::strerror(errno));
      continue;
    }
    std::optional<std::string> text;
    try {
      text = read_owned_file_at(dir.get(), name, 0, 64ULL << 20);
    } catch (const CudaMpsError& e) {
      out.problem = e.what();
      continue;
    }
    if (!text) continue;
    out.files.push_back(file);
    for (std::string_view line : split_lines(*text)) {
      if (trim(line).empty()) continue;
      try {
        auto j = nlohmann::json::parse(line);
        if (!well_formed(j)) throw std::runtime_error("not a history entry");
        out.entries.push_back(std::move(j));
      } catch (const std::exception&) {
        ++out.bad_lines;
      }
    }
  }
  return out;
}

std::vector<nlohmann::json> select_history(const std::vector<nlohmann::json>& entries, const std::optional<std::string>& job,
                                           const std::optional<double>& since) {
  std::vector<nlohmann::json> out;
  for (const auto& e : entries) {
    if (job && e.value("job", "") != *job) continue;
    if (since && e.value("stopped_at", 0.0) < *since) continue;
    out.push_back(e);
  }
  return out;
}

std::string render_history(const std::vector<nlohmann::json>& entries) {
  std::string out = fmt::format("{:<8} {:<10} {:<6} {:<26} {:<20} {:<20} {:<11} {:>7} {:>7} {}\n", "JOB", "USER", "NODE",
                                "DAEMON", "STARTED", "STOPPED", "STOP", "STOP_MS", "SERVERS", "GPUS / FAULTS");
  for (const auto& e : entries) {
    const auto& stop = e.value("stop", nlohmann::json::object());
    std::vector<std::string> gpus = e.value("gpus", std::vector<std::string>{});
    out += fmt::format("{:<8} {:<10} {:<6} {:<26} {:<20} {:<20} {:<11} {:>7} {:>7} {}\n", e.value("job", ""), e.value("user", ""),
                       e.value("node", ""), e.value("daemon", ""), utc(e.value("started_at", 0.0)), utc(e.value("stopped_at", 0.0)),
                       stop.value("outcome", ""), stop.value("took_ms", 0LL), e.value("servers_started", -1L), join(gpus, ","));
    for (const auto& f : e.value("faults", nlohmann::json::array())) {
      out += fmt::format("{:>8} fault {} ({}): {}\n", "", f.value("kind", ""), f.value("log", ""), f.value("line", ""));
    }
  }
  return out;
}

}  // namespace unilab::mps
