// --help, COMMAND --help and the man page come from the command table: a row
// or an option added there shows up in all of them and in the parser.
#include <gtest/gtest.h>

#include "cli/commands.hpp"
#include "tests/unit/doubles.hpp"

namespace unilab::mps::cli {
namespace {

int fake_handler(Context&, const ParsedArgs&) { return 0; }

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

std::string roff_dashes(std::string s) {
  std::string out;
  for (char c : s) out += c == '-' ? std::string("\\-") : std::string(1, c);
  return out;
}

TEST(CliHelp, TopLevelListsEveryCommandWithItsSummaryAndEveryGlobalOption) {
  std::string help = usage_text("");
  for (const auto& c : command_table()) {
    EXPECT_TRUE(contains(help, "\n  " + c.name + " ")) << c.name;
    EXPECT_TRUE(contains(help, c.summary.substr(0, 30))) << c.name;
  }
  for (const auto& o : global_options()) EXPECT_TRUE(contains(help, "\n  " + o.name)) << o.name;
}

TEST(CliHelp, CommandHelpStartsWithItsSynopsisAndListsEveryOption) {
  for (const auto& c : command_table()) {
    std::string help = usage_text(c.name);
    EXPECT_EQ(help.rfind("usage: unilab-mps " + synopsis(c) + "\n", 0), 0u) << help;
    for (const auto& o : c.options) {
      EXPECT_TRUE(contains(synopsis(c), o.name)) << c.name << " " << o.name;
      EXPECT_TRUE(contains(help, "\n  " + o.name)) << c.name << " " << o.name;
    }
  }
}

TEST(CliHelp, ManPageHasASectionSynopsisAndOptionsPerCommand) {
  std::string man = man_page();
  for (const auto& c : command_table()) {
    EXPECT_TRUE(contains(man, ".SS " + roff_dashes(c.name) + "\n.B unilab\\-mps " + roff_dashes(synopsis(c)) + "\n")) << c.name;
    for (const auto& o : c.options) EXPECT_TRUE(contains(man, ".TP\n.B " + roff_dashes(o.name))) << c.name << " " << o.name;
  }
  for (const auto& o : global_options()) EXPECT_TRUE(contains(man, ".B " + roff_dashes(o.name))) << o.name;
  EXPECT_TRUE(contains(man, ".TP\n.B 4\n"));
}

TEST(CliHelp, SynopsisAppendsOnlyTheOptionsTheOperandsDoNotName) {
  CommandSpec c{"demo", "[X] | demo --all", "Demo", "", {{"--all", "", "all"}, {"--al", "N", "n"}, {"--req", "V", "r", nullptr, true}},
                1, fake_handler};
  // --al is a prefix of --all, not named by the operands.
  EXPECT_EQ(synopsis(c), "demo [X] | demo --all [--al N] --req V [--json]");
}

TEST(CliHelp, AnOptionAddedToARowIsParsedCheckedAndDocumented) {
  std::vector<CommandSpec> table = command_table();
  auto check_dir = [](const std::string& option, const std::string& value) -> std::string {
    if (value.empty() || value[0] != '/') throw UsageError(option + ": give an absolute directory");
    return value;
  };
  table[0].options.push_back({"--driver-dir", "DIR", "where the NVIDIA driver lives", +check_dir});
  ParsedArgs a = parse_args({table[0].name, "--driver-dir", "/opt/nv"}, table, global_options());
  EXPECT_EQ(a.value("--driver-dir"), "/opt/nv");
  EXPECT_EQ(test::error_of<UsageError>([&] { parse_args({table[0].name, "--driver-dir", "x"}, table, global_options()); }),
            "--driver-dir: give an absolute directory");
  EXPECT_TRUE(contains(synopsis(table[0]), "[--driver-dir DIR]"));
  EXPECT_TRUE(contains(usage_text(table, global_options(), table[0].name), "  --driver-dir DIR      where the NVIDIA driver lives"));
  EXPECT_TRUE(contains(man_page(table, global_options()), ".B \\-\\-driver\\-dir DIR\nwhere the NVIDIA driver lives\n"));
}

TEST(CliHelp, ACommandAddedAsARowIsDispatchedListedAndDocumented) {
  std::vector<CommandSpec> table = command_table();
  table.push_back({"hello", "[WHO]", "Say hello", "Prints a greeting.", {{"--loud", "", "shout"}}, 1, fake_handler});
  ParsedArgs a = parse_args({"hello", "world", "--loud"}, table, global_options());
  EXPECT_EQ(a.spec->handler, &fake_handler);
  EXPECT_TRUE(a.has("--loud"));
  EXPECT_TRUE(contains(usage_text(table, global_options(), ""), "\n  hello           Say hello\n"));
  EXPECT_EQ(usage_text(table, global_options(), "hello").rfind("usage: unilab-mps hello [WHO] [--loud] [--json]\n\nSay hello. "
                                                                "Prints a greeting.\n", 0), 0u);
  EXPECT_TRUE(contains(man_page(table, global_options()), ".SS hello\n"));
}

}  // namespace
}  // namespace unilab::mps::cli
