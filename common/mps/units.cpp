#include "common/mps/units.hpp"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "common/mps/errors.hpp"

namespace unilab::mps {

std::chrono::milliseconds parse_seconds(const std::string& value) {
  char* end = nullptr;
  double v = std::strtod(value.c_str(), &end);
  if (value.empty() || end == value.c_str() || *end != '\0' || !(v > 0) || v > 3600) {
    throw CudaMpsError(fmt::format("'{}' is not a number of seconds in (0, 3600]", value.substr(0, 40)));
  }
  return std::chrono::milliseconds(static_cast<long>(std::llround(v * 1000)));
}

unsigned long long parse_size_bytes(const std::string& value) {
  size_t i = 0;
  while (i < value.size() && std::isdigit(static_cast<unsigned char>(value[i]))) ++i;
  std::string digits = value.substr(0, i), unit = value.substr(i);
  unsigned long long mult = 1;
  if (unit.empty()) mult = 1;
  else if (unit == "K" || unit == "k") mult = 1ULL << 10;
  else if (unit == "M" || unit == "m") mult = 1ULL << 20;
  else if (unit == "G" || unit == "g") mult = 1ULL << 30;
  else if (unit == "T" || unit == "t") mult = 1ULL << 40;
  else digits.clear();
  if (digits.empty() || digits.size() > 15) {
    throw CudaMpsError(fmt::format("invalid memory size '{}': give an integer with an optional K, M, G or T suffix (e.g. 8G)",
                                   value.substr(0, 40)));
  }
  unsigned long long n = std::stoull(digits);
  if (n > ~0ULL / mult) throw CudaMpsError(fmt::format("invalid memory size '{}': too large", value.substr(0, 40)));
  if (n == 0) throw CudaMpsError("invalid memory size 0: give a positive size such as 8G");
  return n * mult;
}

}  // namespace unilab::mps
