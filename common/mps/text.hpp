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

// Whether `s` starts with `lower_prefix` (written in lower case), in any
// ASCII case: "GPU-..." and "gpu-..." alike.
bool has_prefix_ci(std::string_view s, std::string_view lower_prefix);

// The lines of `text` without their '\n', empty ones included; a final
// '\n' ends the last line and starts no empty one. The views point into
// `text`, which must outlive them.
std::vector<std::string_view> split_lines(std::string_view text);

// The non-empty pieces of `text` between `sep`s (fields, option lists,
// path components). The views point into `text`.
std::vector<std::string_view> split_nonempty(std::string_view text, char sep);

// Whether the `sep`-separated `list` holds `item` exactly (Slurm's flag
// lists: compare lower(list) with a lower-case item).
bool list_has(std::string_view list, std::string_view item, char sep = ',');

// "12 s", or "2.5 s" for a part of a second.
std::string seconds_text(std::chrono::milliseconds d);

}  // namespace unilab::mps
