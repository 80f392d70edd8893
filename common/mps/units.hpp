// Durations and sizes as admins and users write them, parsed in one place:
// plugin arguments (start_timeout=, max_mem=, dir_size=), the job's options
// (--unilab-mps-mem) and the CLI's own flags all go through these.
#pragma once

#include <chrono>
#include <string>

namespace unilab::mps {

// Seconds, possibly fractional ("2", "0.5"), in (0, 3600]. Returns
// milliseconds (rounded). Throws CudaMpsError; the caller names the setting.
std::chrono::milliseconds parse_seconds(const std::string& value);

// A size like 4096M, 8G: a positive integer with an optional K, M, G or T
// suffix (powers of 1024; lower case accepted), or plain bytes. Throws
// CudaMpsError naming the value.
unsigned long long parse_size_bytes(const std::string& value);

}  // namespace unilab::mps
