// An enum and its one string table, after systemd's
// DEFINE_STRING_TABLE_LOOKUP: the strings a record, JSON or a message holds
// for the enum come from the table and nowhere else. The enum's values are
// 0 .. N-1, in table order.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

namespace unilab::mps {

template <typename E, std::size_t N>
struct StringTable {
  std::array<std::string_view, N> names;

  constexpr std::string_view name(E e) const { return names.at(static_cast<std::size_t>(e)); }
  // nullopt for a string the table does not hold (exact match).
  constexpr std::optional<E> lookup(std::string_view s) const {
    for (std::size_t i = 0; i < N; ++i) {
      if (names[i] == s) return static_cast<E>(i);
    }
    return std::nullopt;
  }
};

}  // namespace unilab::mps
