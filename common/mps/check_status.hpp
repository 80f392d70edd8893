// The status of one doctor check and its one string table: the words in the
// human table and in the JSON `status` field come from here and nowhere else.
#pragma once

#include <optional>
#include <ostream>
#include <string_view>

#include "common/mps/string_table.hpp"

namespace unilab::mps {

enum class CheckStatus {
  kOk,    // "ok"
  kWarn,  // "warn": works, but not as well as it could
  kFail,  // "fail": --unilab-mps jobs fail here; the node is not ready
  kSkip,  // "skip": not checked, because a check it needs did not pass
};

inline constexpr StringTable<CheckStatus, 4> kCheckStatusNames{{"ok", "warn", "fail", "skip"}};
inline std::string_view to_string(CheckStatus status) { return kCheckStatusNames.name(status); }
// nullopt for a word that is not in the table.
inline std::optional<CheckStatus> check_status_from_string(std::string_view word) { return kCheckStatusNames.lookup(word); }

// For test failure messages.
inline std::ostream& operator<<(std::ostream& os, CheckStatus status) { return os << to_string(status); }

}  // namespace unilab::mps
