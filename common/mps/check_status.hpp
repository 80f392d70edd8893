// The status of one doctor check and its one string table: the words in the
// human table and in the JSON `status` field come from here and nowhere else.
#pragma once

#include <optional>
#include <ostream>
#include <string_view>

namespace unilab::mps {

enum class CheckStatus {
  kOk,    // "ok"
  kWarn,  // "warn": works, but not as well as it could
  kFail,  // "fail": --unilab-mps jobs fail here; the node is not ready
  kSkip,  // "skip": not checked, because a check it needs did not pass
};

std::string_view to_string(CheckStatus status);
// nullopt for a word that is not in the table.
std::optional<CheckStatus> check_status_from_string(std::string_view word);

// For test failure messages.
inline std::ostream& operator<<(std::ostream& os, CheckStatus status) { return os << to_string(status); }

}  // namespace unilab::mps
