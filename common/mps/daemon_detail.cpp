#include "common/mps/daemon_detail.hpp"

#include <signal.h>

#include <algorithm>
#include <set>
#include <system_error>
#include <thread>

#include <fmt/format.h>

#include "common/mps/errors.hpp"
#include "common/mps/mps_pid_file.hpp"

namespace unilab::mps::detail {
namespace {

using std::chrono::milliseconds;

// `pid` accepted as the daemon only when /proc says that process runs as
// `uid` with exactly this pipe directory in its environment.
std::optional<ProcessIdentity> identify_pid(pid_t pid, const std::string& pipe_directory, uid_t uid, ProcReader& proc,
                                            std::string* why) {
  auto st = running_stat(proc, pid);
  if (!st) {
    if (why) *why = fmt::format("pid {} from {} is not running", pid, kPidFileName);
    return std::nullopt;
  }
  if (st->uid != uid) {
    if (why) *why = fmt::format("pid {} runs as uid {}, not {}", pid, st->uid, uid);
    return std::nullopt;
  }
  auto env_pipe = proc.environ_value(pid, "CUDA_MPS_PIPE_DIRECTORY");
  if (!env_pipe || *env_pipe != pipe_directory) {
    if (why) *why = fmt::format("pid {} does not serve pipe directory {}", pid, pipe_directory);
    return std::nullopt;
  }
  return ProcessIdentity{pid, st->start_ticks, proc.boot_id(), uid};
}

}  // namespace

milliseconds remaining(Clock& clock, std::chrono::steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<milliseconds>(deadline - clock.now());
  return std::max(left, milliseconds(0));
}

bool wait_gone(Services& s, const ProcessIdentity& id, std::chrono::steady_clock::time_point deadline) {
  milliseconds step(10);
  for (;;) {
    if (check_identity(id, s.proc) != Liveness::kLive) return true;
    if (s.clock.now() >= deadline) return false;
    s.clock.sleep_for(std::min(step, std::max(remaining(s.clock, deadline), milliseconds(1))));
    step = std::min(step * 2, milliseconds(100));
  }
}

std::optional<ProcessIdentity> identify_daemon(const std::string& pipe_directory, uid_t uid, ProcReader& proc,
                                               std::string* why) {
  auto pid = read_mps_pid_file(pipe_directory, uid, why);
  if (!pid) return std::nullopt;
  return identify_pid(*pid, pipe_directory, uid, proc, why);
}

SweepResult sweep_mps_processes(Services& s, const DaemonRecord& record, const std::vector<ProcessIdentity>& tree,
                                std::chrono::steady_clock::time_point deadline) {
  std::vector<ProcessIdentity> targets;
  std::set<pid_t> seen;
  for (const auto& t : tree) {
    if (check_identity(t, s.proc) == Liveness::kLive && seen.insert(t.pid).second) targets.push_back(t);
  }
  const std::string boot = s.proc.boot_id();
  for (pid_t pid : s.proc.pids()) {
    if (seen.count(pid)) continue;
    // The name first: one small read, and almost no process on a node is an
    // MPS one (stat and status are two larger reads per process, per daemon).
    auto comm = s.proc.comm(pid);
    if (!comm || !comm->starts_with("nvidia-cuda-mps")) continue;
    auto st = running_stat(s.proc, pid);
    if (!st || st->uid != record.uid) continue;
    if (s.proc.environ_value(pid, "CUDA_MPS_PIPE_DIRECTORY") != record.pipe_directory) continue;
    seen.insert(pid);
    targets.push_back({pid, st->start_ticks, boot, st->uid});
  }
  SweepResult out;
  for (const auto& t : targets) {
    if (s.signaller.send_verified(t, SIGKILL, s.proc) == Liveness::kLive) ++out.killed;
  }
  for (const auto& t : targets) {
    if (!wait_gone(s, t, deadline)) out.alive.push_back(t.pid);
  }
  return out;
}

std::vector<std::exception_ptr> run_each_concurrently(size_t n, const std::function<void(size_t)>& job) {
  std::vector<std::exception_ptr> errors(n);
  auto guarded = [&](size_t i) {
    try {
      job(i);
    } catch (...) {
      errors[i] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  for (size_t i = 1; i < n; ++i) {
    try {
      threads.emplace_back(guarded, i);
    } catch (const std::system_error&) {
      guarded(i);  // no thread to be had: in turn, then
    }
  }
  if (n > 0) guarded(0);
  for (auto& t : threads) t.join();
  return errors;
}

std::vector<std::string> error_messages(const std::vector<std::exception_ptr>& errors) {
  std::vector<std::string> out;
  for (const auto& e : errors) {
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const CudaMpsError& x) {
      out.push_back(x.what());
    }
  }
  return out;
}

}  // namespace unilab::mps::detail
