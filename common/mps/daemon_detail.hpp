// What the daemon's start, stop and lookup share: deadlines, the wait for
// a process to go, the pid-file identity, the sweep of an MPS tree, and the
// one-thread-per-daemon runner. Internal to common/mps (daemon.hpp is the API).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/mps/daemon.hpp"

namespace unilab::mps::detail {

// The time left until `deadline`, never negative.
std::chrono::milliseconds remaining(Clock& clock, std::chrono::steady_clock::time_point deadline);

// Polls until the identity is no longer live or the deadline passes.
bool wait_gone(Services& s, const ProcessIdentity& id, std::chrono::steady_clock::time_point deadline);

// The daemon the pid file in `pipe_directory` names, accepted only when /proc
// says that process runs as `uid` with exactly this pipe directory in its
// environment; nullopt (and why) otherwise.
std::optional<ProcessIdentity> identify_daemon(const std::string& pipe_directory, uid_t uid, ProcReader& proc,
                                               std::string* why);

struct SweepResult {
  int killed = 0;
  std::vector<pid_t> alive;
};

// What of a daemon may outlive it: the descendants seen before it was
// signalled, and any process of its user running an MPS binary (comm
// "nvidia-cuda-mps", the name the kernel keeps of nvidia-cuda-mps-control
// and -server) whose CUDA_MPS_PIPE_DIRECTORY is the daemon's. A user's own
// clients carry that variable too, but not that name: they are left alone.
SweepResult sweep_mps_processes(Services& s, const DaemonRecord& record, const std::vector<ProcessIdentity>& tree,
                                std::chrono::steady_clock::time_point deadline);

// Runs job(i) for every i < n at once, one thread each (this thread takes
// the first), and waits for all of them; what each threw is kept, not thrown.
std::vector<std::exception_ptr> run_each_concurrently(size_t n, const std::function<void(size_t)>& job);

// The CudaMpsError messages of `errors`, in order. Anything else one threw
// (no CudaMpsError: a bug or no memory) is rethrown as it is, after all
// threads ended, as it would have been without threads.
std::vector<std::string> error_messages(const std::vector<std::exception_ptr>& errors);

}  // namespace unilab::mps::detail
