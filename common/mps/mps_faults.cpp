#include "common/mps/mps_faults.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>

#include <fmt/format.h>

#include "common/mps/errors.hpp"
#include "common/mps/safefs.hpp"

namespace unilab::mps {
namespace {

// The number right after `marker` in `line`, when there is one.
template <typename T>
std::optional<T> number_after(std::string_view line, std::string_view marker) {
  const size_t at = line.find(marker);
  if (at == std::string_view::npos) return std::nullopt;
  const char* begin = line.data() + at + marker.size();
  const char* end = line.data() + line.size();
  T value{};
  auto [p, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || p == begin) return std::nullopt;
  return value;
}

}  // namespace

std::string_view describe(MpsFaultKind k) {
  switch (k) {
    case MpsFaultKind::kServerExited:
      return "its MPS server ended while the job ran (its clients lost the GPU with CUDA errors; the daemon starts a new "
             "server for new clients)";
    case MpsFaultKind::kFatalException:
      return "its MPS server met a fatal exception and shut down (every client of it failed)";
    case MpsFaultKind::kFatalGpuError:
      return "its MPS server met a fatal GPU error (every client on that GPU, of every process, is torn down with "
             "that error, e.g. 'an illegal memory access was encountered'; the server takes new clients again once "
             "they are gone)";
    case MpsFaultKind::kDaemonGone:
      return "its MPS control daemon is gone (new CUDA processes of the job find no daemon: they run without MPS, or "
             "fail on a GPU in Exclusive_Process mode)";
  }
  return "";
}

std::string MpsFault::key() const {
  // FNV-1a over the log's name and the line: short, stable, a file name.
  uint64_t h = 1469598103934665603ULL;
  for (const std::string* part : {&log, &line}) {
    for (unsigned char c : *part) {
      h ^= c;
      h *= 1099511628211ULL;
    }
    h ^= 0xff;
    h *= 1099511628211ULL;
  }
  return fmt::format("{:016x}", h);
}

nlohmann::json MpsFault::to_json() const {
  nlohmann::json j = {{"kind", std::string(to_string(kind))}, {"log", log}, {"line", line}};
  j["server"] = server ? nlohmann::json(*server) : nlohmann::json(nullptr);
  j["exit_status"] = exit_status ? nlohmann::json(*exit_status) : nlohmann::json(nullptr);
  j["client"] = client ? nlohmann::json(*client) : nlohmann::json(nullptr);
  return j;
}

MpsFault MpsFault::from_json(const nlohmann::json& j) {
  try {
    MpsFault f;
    const std::string kind = j.at("kind").get<std::string>();
    auto k = kMpsFaultKindNames.lookup(kind);
    if (!k) throw CudaMpsError(fmt::format("unknown fault kind '{}'", kind));
    f.kind = *k;
    f.log = j.at("log").get<std::string>();
    f.line = j.at("line").get<std::string>();
    if (j.contains("server") && !j.at("server").is_null()) f.server = j.at("server").get<pid_t>();
    if (j.contains("exit_status") && !j.at("exit_status").is_null()) f.exit_status = j.at("exit_status").get<int>();
    if (j.contains("client") && !j.at("client").is_null()) f.client = j.at("client").get<pid_t>();
    return f;
  } catch (const nlohmann::json::exception& e) {
    throw CudaMpsError(fmt::format("bad fault entry: {}", e.what()));
  }
}

std::vector<MpsFault> scan_mps_log(std::string_view log, const std::vector<std::string>& lines) {
  std::vector<MpsFault> out;
  const bool control = log == kControlLog;
  std::optional<pid_t> culprit;  // server.log: the client that hit the last fatal GPU error
  for (const auto& line : lines) {
    MpsFault f;  // its log and line are copied only for a fault (most lines are none)
    if (control && line.find("Server encountered a fatal exception") != std::string::npos) {
      f.kind = MpsFaultKind::kFatalException;
    } else if (control && line.find("] Server ") != std::string::npos && line.find(" exited with status ") != std::string::npos) {
      f.kind = MpsFaultKind::kServerExited;
      f.server = number_after<pid_t>(line, "] Server ");
      f.exit_status = number_after<int>(line, " exited with status ");
      if (!f.server) continue;
      // The exit that follows a fatal exception is that fault's end, not
      // another fault: the exception (which names no server) gets its pid.
      if (!out.empty() && out.back().kind == MpsFaultKind::kFatalException && !out.back().server) {
        out.back().server = f.server;
        out.back().exit_status = f.exit_status;
        continue;
      }
    } else if (!control && line.find("} encountered a fatal GPU error") != std::string::npos) {
      // "Client {PID: 511, Context: 1} encountered a fatal GPU error.": the
      // process that hit it, told with the fault that follows.
      culprit = number_after<pid_t>(line, "{PID: ");
      continue;
    } else if (!control && line.find("Server is handling a fatal GPU error") != std::string::npos) {
      f.kind = MpsFaultKind::kFatalGpuError;
      f.client = culprit;
      // "[... Server <pid>] Volta MPS: ..." names the server in its prefix.
      const size_t close = line.find(']');
      const size_t space = line.rfind(' ', close);
      if (close != std::string::npos && space != std::string::npos && space < close) {
        pid_t pid = 0;
        auto [p, ec] = std::from_chars(line.data() + space + 1, line.data() + close, pid);
        if (ec == std::errc() && p == line.data() + close) f.server = pid;
      }
    } else {
      continue;
    }
    f.log = std::string(log);
    f.line = line;
    out.push_back(std::move(f));
  }
  return out;
}

DaemonLogScan scan_daemon_logs(const std::string& log_directory, uid_t uid, size_t max_bytes) {
  DaemonLogScan out;
  for (const char* log : {kControlLog, kServerLog}) {
    // Lines are bounded by bytes; every line of the window is looked at.
    std::string problem;
    auto lines = read_user_file_tail(log_directory, log, uid, max_bytes, max_bytes, 400, &problem);
    if (log == std::string_view(kControlLog) && problem.empty()) {
      out.servers_started = static_cast<long>(std::count_if(lines.begin(), lines.end(), [](const std::string& l) {
        return l.find("] Starting new server ") != std::string::npos;
      }));
    }
    for (auto& f : scan_mps_log(log, lines)) out.faults.push_back(std::move(f));
  }
  return out;
}

}  // namespace unilab::mps
