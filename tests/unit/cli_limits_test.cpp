// `start --threads/--mem` go through the Slurm plugin's own parsers
// (parse_thread_percentage, parse_mem_limit): the same values are refused with
// the plugin's message, and what reaches MPS is the plugin's spelling.
#include <gtest/gtest.h>

#include "cli/commands.hpp"
#include "common/slurm/slurm_config.hpp"
#include "tests/unit/doubles.hpp"

namespace unilab::mps::cli {
namespace {

std::string cli_error(const std::string& option, const std::string& value) {
  return test::error_of<UsageError>([&] { parse_command_line({"start", option, value}); });
}

TEST(CliLimits, MemBadValuesAreRefusedWithThePluginsMessage) {
  for (const char* bad : {"12Q", "", "G", "8.5G", "-1G", "0", "0M", "8 G", "1234567890123456G", "8GiB", "99999999999999999T"}) {
    std::string plugin = test::error_of([&] { parse_mem_limit(bad, std::nullopt); });
    EXPECT_EQ(cli_error("--mem", bad), "--mem: " + plugin) << bad;
  }
}

TEST(CliLimits, MemGoodValuesAreNormalizedAsThePluginDoes) {
  for (const char* good : {"8G", "8g", "4096M", "1", "1048576", "1536K", "1T", "2049K"}) {
    ParsedArgs a = parse_command_line({"start", "--mem", good});
    EXPECT_EQ(a.value("--mem"), parse_mem_limit(good, std::nullopt)) << good;
  }
  // What MPS accepts for set_default_device_pinned_mem_limit: an integer with M.
  EXPECT_EQ(parse_command_line({"start", "--mem", "8G"}).value("--mem"), "8192M");
  EXPECT_EQ(parse_command_line({"start", "--mem=1"}).value("--mem"), "1M");        // rounded up to whole MiB
  EXPECT_EQ(parse_command_line({"start", "--mem", "2049K"}).value("--mem"), "3M");
}

TEST(CliLimits, ThreadsBadValuesAreRefusedWithThePluginsMessage) {
  for (const char* bad : {"0", "100.5", "-5", "abc", "", " 5", "5%", "inf", "nan"}) {
    std::string plugin = test::error_of([&] { parse_thread_percentage(bad, std::nullopt); });
    EXPECT_EQ(cli_error("--threads", bad), "--threads: " + plugin) << bad;
  }
  for (const char* good : {"100", "0.5", "25", "12.5"}) {
    EXPECT_EQ(parse_command_line({"start", "--threads", good}).value("--threads"), good);
  }
}

}  // namespace
}  // namespace unilab::mps::cli
