#include "common/slurm/config_text.hpp"

#include <gtest/gtest.h>

#include <map>

#include "common/mps/errors.hpp"
#include "tests/unit/doubles.hpp"

namespace unilab::mps {
namespace {

using test::error_of;
using Strings = std::vector<std::string>;

std::vector<Strings> words_of(const std::string& text, ConfigSyntax syntax = ConfigSyntax::kSlurm) {
  std::vector<Strings> out;
  for (const auto& l : tokenize_config(text, "f.conf", syntax)) out.push_back(l.words);
  return out;
}

TEST(TokenizeConfig, CommentsAndBlankLines) {
  auto lines = tokenize_config("\n   # only a comment\nA=1 B=2   # trailing\n\t\nC=3", "f.conf", ConfigSyntax::kSlurm);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].words, (Strings{"A=1", "B=2"}));
  EXPECT_EQ(lines[0].where(), "f.conf:3");
  EXPECT_EQ(lines[1].words, (Strings{"C=3"}));
  EXPECT_EQ(lines[1].line, 5);
}

TEST(TokenizeConfig, EscapedHashIsNotAComment) {
  // parse_config.c: `\#` is a literal '#', `\\#` is a backslash then a comment.
  EXPECT_EQ(words_of("A=x\\#y B=2\n"), (std::vector<Strings>{{"A=x#y", "B=2"}}));
  EXPECT_EQ(words_of("A=x\\\\#y B=2\n"), (std::vector<Strings>{{"A=x\\"}}));
}

TEST(TokenizeConfig, ContinuationsJoinLinesAndKeepTheFirstLineNumber) {
  auto lines = tokenize_config("X=0\nName=gpu \\\n   File=/dev/nvidia0 \\   \n   Cores=1\nY=1\n", "f.conf", ConfigSyntax::kSlurm);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[1].words, (Strings{"Name=gpu", "File=/dev/nvidia0", "Cores=1"}));
  EXPECT_EQ(lines[1].line, 2);
  EXPECT_EQ(lines[2].line, 5);
  // Slurm joins without adding a space.
  EXPECT_EQ(words_of("A=ab\\\ncd\n"), (std::vector<Strings>{{"A=abcd"}}));
  // A comment ends the line before the continuation is looked at.
  EXPECT_EQ(words_of("A=1 \\ # note\nB=2\n"), (std::vector<Strings>{{"A=1", "B=2"}}));
  // An even run of backslashes is an escaped backslash, not a continuation.
  EXPECT_EQ(words_of("A=x\\\\\nB=2\n"), (std::vector<Strings>{{"A=x\\"}, {"B=2"}}));
  // A continuation on the last line just ends the entry.
  EXPECT_EQ(words_of("A=1 \\"), (std::vector<Strings>{{"A=1"}}));
}

TEST(TokenizeConfig, QuotesAndSpacesAroundEquals) {
  EXPECT_EQ(words_of("Name=\"a b\"  Key = value Op+=2 Empty=\"\"\n"),
            (std::vector<Strings>{{"Name=a b", "Key=value", "Op+=2", "Empty="}}));
}

TEST(TokenizeConfig, ErrorsNameFileAndLine) {
  EXPECT_EQ(error_of([] { tokenize_config("A=1\nB=\"open\n", "/etc/x.conf", ConfigSyntax::kSlurm); }),
            "/etc/x.conf:2: unterminated quote in the value of B");
  EXPECT_EQ(error_of([] { tokenize_config("\nA=1 B=\n", "/etc/x.conf", ConfigSyntax::kSlurm); }), "/etc/x.conf:2: 'B=' has no value");
  EXPECT_EQ(error_of([] { tokenize_config("Include\t\n", "/etc/x.conf", ConfigSyntax::kSlurm); }).find("/etc/x.conf:1"), 0u);
}

TEST(TokenizeConfig, IncludeLines) {
  auto lines = tokenize_config("include a.conf\nINCLUDE /etc/b.conf\nIncludeX=1\n", "f.conf", ConfigSyntax::kSlurm);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].include, "a.conf");
  EXPECT_EQ(lines[1].include, "/etc/b.conf");
  EXPECT_FALSE(lines[2].include);  // a key that starts with "include" is a key
  EXPECT_EQ(lines[2].words, (Strings{"IncludeX=1"}));
}

TEST(TokenizeConfig, PlugstackSyntaxIsSpankCs) {
  // spank.c: the first '#' ends the line whatever precedes it; no
  // continuations; words split on blanks; only lowercase `include`.
  auto lines = tokenize_config("optional /x.so a=1 \\\n# c\nrequired y.so b\\#c\ninclude /etc/p.d/*.conf\nInclude z\n", "p.conf",
                               ConfigSyntax::kPlugstack);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0].words, (Strings{"optional", "/x.so", "a=1", "\\"}));
  EXPECT_EQ(lines[1].words, (Strings{"required", "y.so", "b\\"}));
  EXPECT_EQ(lines[2].include, "/etc/p.d/*.conf");
  EXPECT_EQ(lines[3].words, (Strings{"Include", "z"}));
}

struct Files {
  std::map<std::string, std::string> text;
  ConfigSource source(ConfigSyntax syntax = ConfigSyntax::kSlurm) {
    ConfigSource s;
    s.read = [this](const std::string& p) -> std::optional<std::string> {
      auto it = text.find(p);
      return it == text.end() ? std::nullopt : std::optional<std::string>(it->second);
    };
    s.syntax = syntax;
    return s;
  }
};

TEST(ReadConfigTree, FollowsIncludesRelativeToTheTopFilesDirectory) {
  Files f;
  f.text["/etc/slurm/slurm.conf"] = "A=1\nInclude sub/b.conf\nC=3\n";
  f.text["/etc/slurm/sub/b.conf"] = "B=2\ninclude c.conf\n";  // Slurm: relative to slurm.conf's dir, not sub/
  f.text["/etc/slurm/c.conf"] = "D=4\n";
  ConfigTree t = read_config_tree("/etc/slurm/slurm.conf", f.source());
  Strings words;
  for (const auto& l : t.lines) words.insert(words.end(), l.words.begin(), l.words.end());
  EXPECT_EQ(words, (Strings{"A=1", "B=2", "D=4", "C=3"}));
  EXPECT_EQ(t.files, (Strings{"/etc/slurm/slurm.conf", "/etc/slurm/sub/b.conf", "/etc/slurm/c.conf"}));
  EXPECT_EQ(t.lines[1].where(), "/etc/slurm/sub/b.conf:1");
  EXPECT_TRUE(t.problems.empty());
}

TEST(ReadConfigTree, UnreadableIncludeAndLoopsAreProblemsTheTopFileThrows) {
  Files f;
  f.text["/e/s.conf"] = "Include /e/missing.conf\nInclude /e/s.conf\n";
  ConfigSource src = f.source();
  src.max_depth = 2;
  ConfigTree t = read_config_tree("/e/s.conf", src);
  ASSERT_FALSE(t.problems.empty());
  EXPECT_NE(t.problems[0].find("/e/missing.conf: cannot read"), std::string::npos) << t.problems[0];
  EXPECT_NE(t.problems.back().find("nested deeper than 2"), std::string::npos) << t.problems.back();
  EXPECT_EQ(error_of([&] { read_config_tree("/e/none.conf", src); }), "cannot read /e/none.conf");
}

TEST(ReadConfigTree, PlugstackIncludesAreGlobsRelativeToTheIncludingFile) {
  Files f;
  f.text["/etc/slurm/plugstack.conf"] = "include plugstack.conf.d/*.conf\n";
  f.text["/etc/slurm/plugstack.conf.d/a.conf"] = "optional a.so\n";
  ConfigSource src = f.source(ConfigSyntax::kPlugstack);
  Strings patterns;
  src.expand = [&](const std::string& p) {
    patterns.push_back(p);
    return Strings{"/etc/slurm/plugstack.conf.d/a.conf"};
  };
  ConfigTree t = read_config_tree("/etc/slurm/plugstack.conf", src);
  EXPECT_EQ(patterns, (Strings{"/etc/slurm/plugstack.conf.d/*.conf"}));
  ASSERT_EQ(t.lines.size(), 1u);
  EXPECT_EQ(t.lines[0].words, (Strings{"optional", "a.so"}));
  EXPECT_EQ(t.includes, (Strings{"/etc/slurm/plugstack.conf:1: include /etc/slurm/plugstack.conf.d/*.conf (1 file)"}));
}

}  // namespace
}  // namespace unilab::mps
