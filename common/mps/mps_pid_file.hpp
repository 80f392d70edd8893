// The MPS control daemon's pid file, `nvidia-cuda-mps-control.pid` in its
// pipe directory: the one place it is read and parsed.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "common/mps/runner.hpp"

namespace unilab::mps {

// The pid in a pid file's text (MPS's, slurmd's): decimal digits, trailing
// white space allowed; nullopt for anything else (empty, signs, zero, junk).
std::optional<pid_t> parse_pid_file_text(std::string_view text);

// The pid in `<pipe_directory>/nvidia-cuda-mps-control.pid`, read only from a
// directory owned by root or `uid` that nobody else can write (a pid planted
// by another user proves nothing). nullopt with the reason in `why`.
std::optional<pid_t> read_mps_pid_file(const std::string& pipe_directory, uid_t uid, std::string* why = nullptr);

// read_mps_pid_file, retried until it yields a pid or `deadline` passes:
// after `-d` returns, the daemon's socket and its pid file appear in either
// order, so one look can come too early. Looks at once, then after 1, 2, 4 ..
// ms (capped at 20 ms); the last reason in `why`.
std::optional<pid_t> await_mps_pid_file(const std::string& pipe_directory, uid_t uid, Clock& clock,
                                        std::chrono::steady_clock::time_point deadline, std::string* why = nullptr);

}  // namespace unilab::mps
