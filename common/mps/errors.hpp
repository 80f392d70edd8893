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

}  // namespace unilab::mps
