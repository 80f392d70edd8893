// Small text helpers shared by every part of the core.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

namespace unilab::mps {

// parts[0] + sep + parts[1] + ...; "" for none.
std::string join(const std::vector<std::string>& parts, std::string_view sep);

// `text` without leading and trailing white space (isspace).
std::string_view trim(std::string_view text);

// `text` in ASCII lower case (Slurm's keys and flags are case-insensitive).
std::string lower(std::string_view text);

// "12 s", or "2.5 s" for a part of a second.
std::string seconds_text(std::chrono::milliseconds d);

}  // namespace unilab::mps
