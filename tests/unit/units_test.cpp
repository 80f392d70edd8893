#include "common/mps/units.hpp"

#include <gtest/gtest.h>

#include "common/mps/errors.hpp"

namespace unilab::mps {
namespace {

using namespace std::chrono_literals;

TEST(ParseSeconds, AcceptsFractionsWithinAnHour) {
  EXPECT_EQ(parse_seconds("2"), 2000ms);
  EXPECT_EQ(parse_seconds("0.5"), 500ms);
  EXPECT_EQ(parse_seconds("3600"), 3600000ms);
  EXPECT_EQ(parse_seconds("0.0015"), 2ms);  // rounded, not truncated
}

TEST(ParseSeconds, RefusesTheRest) {
  for (const char* bad : {"", "0", "-1", "3601", "2s", "abc", "nan", "inf", "1e9"}) {
    EXPECT_THROW(parse_seconds(bad), CudaMpsError) << bad;
  }
}

TEST(ParseSizeBytes, SuffixesArePowersOf1024) {
  EXPECT_EQ(parse_size_bytes("512"), 512u);
  EXPECT_EQ(parse_size_bytes("4k"), 4096u);
  EXPECT_EQ(parse_size_bytes("64M"), 64ull << 20);
  EXPECT_EQ(parse_size_bytes("8G"), 8ull << 30);
  EXPECT_EQ(parse_size_bytes("1T"), 1ull << 40);
}

TEST(ParseSizeBytes, RefusesTheRest) {
  for (const char* bad : {"", "0", "G", "8GB", "1.5G", "-1", "8 G", "99999999999999999T"}) {
    EXPECT_THROW(parse_size_bytes(bad), CudaMpsError) << bad;
  }
}

}  // namespace
}  // namespace unilab::mps
