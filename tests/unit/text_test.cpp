// common/mps/text.cpp: the one home of the small text helpers.
#include "common/mps/text.hpp"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

namespace unilab::mps {
namespace {

using Views = std::vector<std::string_view>;

TEST(TextTest, TrimAndLower) {
  EXPECT_EQ(trim(" \t a b \r\n"), "a b");
  EXPECT_EQ(trim("   "), "");
  EXPECT_EQ(lower("PrologFlags=Contain,X11"), "prologflags=contain,x11");
}

TEST(TextTest, HasPrefixCiComparesTheHeadInAnyCase) {
  EXPECT_TRUE(has_prefix_ci("GPU-1234", "gpu-"));
  EXPECT_TRUE(has_prefix_ci("mig-1234", "mig-"));
  EXPECT_TRUE(has_prefix_ci("WARNING: infoROM", "warning"));
  EXPECT_FALSE(has_prefix_ci("GP", "gpu-"));
  EXPECT_FALSE(has_prefix_ci("xgpu-", "gpu-"));
}

TEST(TextTest, SplitLinesKeepsEmptyLinesAndNoTrailingOne) {
  EXPECT_EQ(split_lines(""), Views{});
  EXPECT_EQ(split_lines("a"), Views{"a"});
  EXPECT_EQ(split_lines("a\n"), Views{"a"});
  EXPECT_EQ(split_lines("a\n\nb\n"), (Views{"a", "", "b"}));
  EXPECT_EQ(split_lines("\n"), Views{""});
  EXPECT_EQ(split_lines("a\r\nb"), (Views{"a\r", "b"}));
}

TEST(TextTest, SplitNonemptyDropsEmptyPieces) {
  EXPECT_EQ(split_nonempty("", ','), Views{});
  EXPECT_EQ(split_nonempty(",,a,,b,", ','), (Views{"a", "b"}));
  EXPECT_EQ(split_nonempty("/a//b/", '/'), (Views{"a", "b"}));
  EXPECT_EQ(split_nonempty("one", ' '), Views{"one"});
}

TEST(TextTest, ListHasMatchesWholeItemsOnly) {
  EXPECT_TRUE(list_has("contain,x11", "x11"));
  EXPECT_TRUE(list_has("contain,x11", "contain"));
  EXPECT_FALSE(list_has("contain,x11", "x1"));
  EXPECT_FALSE(list_has("runinjobs", "runinjob"));
  EXPECT_TRUE(list_has("freezer,devices", "devices"));
  EXPECT_TRUE(list_has("", ""));
  EXPECT_FALSE(list_has("", "x11"));
  EXPECT_TRUE(list_has("a:b", "b", ':'));
}

}  // namespace
}  // namespace unilab::mps
