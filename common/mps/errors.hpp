// User-actionable error types shared by every front end (CLI, plugin, helpers).
#pragma once

#include <stdexcept>
#include <string>

namespace unilab::mps {

// A user-actionable, fail-closed error: the message says what is wrong and
// what to do about it, on one line.
class CudaMpsError : public std::runtime_error {
 public:
  explicit CudaMpsError(const std::string& message) : std::runtime_error(message) {}
};

// A recorded daemon identity is no longer live; its record was cleaned and
// its PID was not signalled.
class StaleCudaMpsDaemonError : public CudaMpsError {
 public:
  explicit StaleCudaMpsDaemonError(const std::string& message) : CudaMpsError(message) {}
};

}  // namespace unilab::mps
