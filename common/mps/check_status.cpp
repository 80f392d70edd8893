#include "common/mps/check_status.hpp"

#include <array>
#include <utility>

namespace unilab::mps {
namespace {

constexpr std::array<std::pair<CheckStatus, std::string_view>, 4> kTable = {{
    {CheckStatus::kOk, "ok"},
    {CheckStatus::kWarn, "warn"},
    {CheckStatus::kFail, "fail"},
    {CheckStatus::kSkip, "skip"},
}};

}  // namespace

std::string_view to_string(CheckStatus status) {
  for (const auto& [s, word] : kTable) {
    if (s == status) return word;
  }
  return "?";
}

std::optional<CheckStatus> check_status_from_string(std::string_view word) {
  for (const auto& [s, w] : kTable) {
    if (w == word) return s;
  }
  return std::nullopt;
}

}  // namespace unilab::mps
