#include "common/mps/env.hpp"

#include <cstdlib>

namespace unilab::mps {

std::optional<std::string> process_env(const char* key) {
  const char* v = std::getenv(key);
  return v == nullptr ? std::nullopt : std::optional<std::string>(v);
}

Getenv process_getenv() { return process_env; }

}  // namespace unilab::mps
