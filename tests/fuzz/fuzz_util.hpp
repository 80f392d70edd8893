// Helpers shared by the fuzz targets: split the input the way the real
// callers receive it, and treat every documented error as a clean outcome.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace unilab::mps::fuzz {

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Splits on any of `seps`, keeping empty pieces (argv can hold "").
inline std::vector<std::string> split_any(std::string_view text, std::string_view seps) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || seps.find(text[i]) != std::string_view::npos) {
      out.emplace_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

// A crash here is an invariant violation the fuzzer must report.
[[noreturn]] inline void invariant_failed() { __builtin_trap(); }

}  // namespace unilab::mps::fuzz
