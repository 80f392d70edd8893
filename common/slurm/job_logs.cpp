#include "common/slurm/job_logs.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>

#include <fmt/format.h>

#include "common/mps/mps_control.hpp"
#include "common/mps/safefs.hpp"

namespace unilab::mps {
namespace {

constexpr size_t kMaxLineBytes = 400;

std::optional<long> number(const std::optional<std::string>& v) {
  if (!v || v->empty()) return std::nullopt;
  long out = 0;
  auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
  if (ec != std::errc() || p != v->data() + v->size()) return std::nullopt;
  return out;
}

}  // namespace

JobEnd job_end_from_env(const Getenv& env) {
  JobEnd end;
  auto status = number(env("SLURM_JOB_EXIT_CODE"));
  auto derived = number(env("SLURM_JOB_DERIVED_EC"));
  if (!status) return end;
  end.known = true;
  const long st = *status;
  if ((st & 0x7f) != 0) {
    end.failed = true;
    end.description = fmt::format("killed by signal {}", st & 0x7f);
  } else if (((st >> 8) & 0xff) != 0) {
    end.failed = true;
    end.description = fmt::format("exit code {}", (st >> 8) & 0xff);
  } else if (derived && *derived != 0) {
    end.failed = true;
    end.description = fmt::format("a step ended with {}", ((*derived >> 8) & 0xff) ? ((*derived >> 8) & 0xff) : (*derived & 0x7f));
  } else {
    end.description = "success";
  }
  return end;
}

std::vector<std::string> read_daemon_log_tail(const std::string& log_directory, uid_t uid, size_t lines) {
  return read_user_file_tail(log_directory, "control.log", uid, kLogTailBytes, lines, kMaxLineBytes);
}

bool log_line_shows_error(const std::string& line) {
  std::string l = line;
  std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const char* word : {"error", "fail", "fatal", "abort", "segfault"}) {
    if (l.find(word) != std::string::npos) return true;
  }
  const std::string marker = "exited with status ";
  auto at = l.find(marker);
  if (at == std::string::npos) return false;
  size_t digits = at + marker.size();
  size_t end = digits;
  while (end < l.size() && std::isdigit(static_cast<unsigned char>(l[end]))) ++end;
  return end > digits && l.find_first_not_of('0', digits) < end;
}

std::vector<DaemonLogTail> job_log_tails_to_keep(const std::vector<DaemonRecord>& records, const JobEnd& end, size_t lines) {
  std::vector<DaemonLogTail> out;
  for (const auto& r : records) {
    auto tail = read_daemon_log_tail(r.log_directory, r.uid, lines);
    if (tail.empty()) continue;
    std::string reason;
    if (end.failed) {
      reason = fmt::format("the job failed: {}", end.description);
    } else if (std::any_of(tail.begin(), tail.end(), log_line_shows_error)) {
      reason = "its control.log reports a problem";
    } else {
      continue;
    }
    out.push_back({r.name, r.log_directory + "/control.log", reason, std::move(tail)});
  }
  return out;
}

std::vector<std::string> epilog_log_report(const PluginConfig& cfg, const JobContext& job, const JobEnd& end, size_t lines) {
  std::vector<std::string> out;
  try {
    RecordStore store = slurm_record_store(cfg);
    for (const auto& t : job_log_tails_to_keep(job_records(store, job.job_id, job.node, job.uid, nullptr, cfg.run_dir), end, lines)) {
      out.push_back(fmt::format("job {}: MPS daemon {}: last {} line{} of {} ({}):", job.job_id, t.daemon, t.lines.size(),
                                t.lines.size() == 1 ? "" : "s", t.log_file, t.reason));
      for (const auto& l : t.lines) out.push_back(fmt::format("job {}: {}| {}", job.job_id, t.daemon, l));
    }
  } catch (const std::exception&) {
    // The epilog itself reports an unusable state dir; the log copy is best effort.
  }
  return out;
}

}  // namespace unilab::mps
