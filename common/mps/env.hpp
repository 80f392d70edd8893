// Environment access, in one place. The core never calls getenv itself: it
// takes a Getenv (a job's environment in the SPANK task context comes from
// spank_getenv, everything else from this process), so each reader is
// testable with a map.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace unilab::mps {

// nullopt: the variable is not set (an empty value is a value).
using Getenv = std::function<std::optional<std::string>(const char*)>;

// This process's environment.
std::optional<std::string> process_env(const char* key);
Getenv process_getenv();

}  // namespace unilab::mps
