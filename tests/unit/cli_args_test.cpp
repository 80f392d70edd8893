// The CLI's command line, parsed against the real command table
// (cli/command_table.cpp): every command's options with good values, bad
// values (a one-line usage error naming the option and the fix), unknown
// options, --json, missing values and missing required options.
#include "cli/args.hpp"

#include <gtest/gtest.h>

#include "cli/commands.hpp"
#include "tests/unit/doubles.hpp"

namespace unilab::mps::cli {
namespace {

ParsedArgs parse(const std::vector<std::string>& argv) { return parse_command_line(argv); }

// The usage error of `argv`; fails the test when there is none.
std::string usage_error(const std::vector<std::string>& argv) {
  return test::error_of<UsageError>([&] { parse(argv); });
}

// One line, names the option, and says what to give instead.
void expect_option_error(const std::vector<std::string>& argv, const std::string& option, const std::string& fix) {
  std::string e = usage_error(argv);
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  EXPECT_EQ(e.rfind(option + ": ", 0), 0u) << e;
  EXPECT_NE(e.find(fix), std::string::npos) << e;
}

TEST(CliArgs, EveryCommandOfTheTableParsesWithJsonBeforeOrAfterIt) {
  for (const auto& c : command_table()) {
    if (c.name == "probe") continue;  // has required options: below
    ParsedArgs a = parse({"--json", c.name});
    EXPECT_EQ(a.command, c.name);
    EXPECT_EQ(a.spec, &c);
    EXPECT_TRUE(a.has("--json")) << c.name;
    EXPECT_TRUE(parse({c.name, "--json"}).has("--json")) << c.name;
    EXPECT_FALSE(parse({c.name}).has("--json")) << c.name;
  }
}

TEST(CliArgs, UnknownCommandListsTheCommands) {
  std::string e = usage_error({"nosuch"});
  EXPECT_NE(e.find("unknown command 'nosuch'"), std::string::npos) << e;
  EXPECT_NE(e.find("start, env, status"), std::string::npos) << e;
}

TEST(CliArgs, UnknownOptionNamesItAndTheCommand) {
  for (const auto& c : command_table()) {
    try {
      parse({c.name, "--bogus"});
      ADD_FAILURE() << c.name << " accepted --bogus";
    } catch (const UsageError& e) {
      EXPECT_EQ(std::string(e.what()), "unknown option --bogus for '" + c.name + "'");
      EXPECT_EQ(e.command(), c.name);
    }
  }
  EXPECT_EQ(usage_error({"--bogus"}), "unknown option --bogus");
  // An option of another command is unknown here.
  EXPECT_EQ(usage_error({"stop", "--threads", "5"}), "unknown option --threads for 'stop'");
}

TEST(CliArgs, ValuesInlineOrSeparateFlagsWithoutValue) {
  ParsedArgs a = parse({"stop", "--timeout=2.5", "gpu-1"});
  EXPECT_EQ(a.value("--timeout"), "2.5");
  EXPECT_EQ(a.positional, std::vector<std::string>{"gpu-1"});
  EXPECT_EQ(parse({"stop", "--timeout", "3"}).value("--timeout"), "3");
  EXPECT_TRUE(parse({"stop", "--all"}).has("--all"));
  EXPECT_EQ(usage_error({"stop", "--all=yes"}), "--all takes no value");
  EXPECT_EQ(usage_error({"stop", "--timeout"}), "--timeout needs a value (SEC)");
  EXPECT_TRUE(parse({"-h"}).has("--help"));
}

TEST(CliArgs, TooManyOperandsAreRefused) {
  EXPECT_EQ(usage_error({"stop", "a", "b"}), "unexpected argument 'b' for 'stop'");
  EXPECT_EQ(usage_error({"status", "x"}), "unexpected argument 'x' for 'status'");
}

TEST(CliArgs, GlobalPathsMustBeAbsolute) {
  for (const char* opt : {"--state-dir", "--run-dir", "--nvidia-smi", "--mps-control"}) {
    EXPECT_EQ(parse({"status", opt, "/abs/x"}).value(opt), "/abs/x");
    expect_option_error({"status", opt, "rel/x"}, opt, "must be an absolute path");
    expect_option_error({"status", std::string(opt) + "="}, opt, "must be an absolute path");
  }
}

TEST(CliArgs, StartOptions) {
  ParsedArgs a = parse({"start", "per-gpu:0,1", "--name", "train.a", "--pipe-dir", "/p", "--log-dir", "/l", "--timeout", "7",
                        "--threads", "25", "--mem", "8G", "--foreground"});
  EXPECT_EQ(a.positional, std::vector<std::string>{"per-gpu:0,1"});
  EXPECT_EQ(a.value("--name"), "train.a");
  EXPECT_EQ(a.value("--pipe-dir"), "/p");
  EXPECT_EQ(a.value("--log-dir"), "/l");
  EXPECT_EQ(a.value("--timeout"), "7");
  EXPECT_EQ(a.value("--threads"), "25");
  EXPECT_EQ(a.value("--mem"), "8192M");
  EXPECT_TRUE(a.has("--foreground"));
  expect_option_error({"start", "--name", ".hidden"}, "--name", "not starting with '.'");
  expect_option_error({"start", "--name", "a/b"}, "--name", "letters, digits");
  expect_option_error({"start", "--pipe-dir", "p"}, "--pipe-dir", "absolute path");
  expect_option_error({"start", "--log-dir", "l"}, "--log-dir", "absolute path");
  for (const char* bad : {"0", "-1", "3601", "abc", "", "1e999", "nan"}) {
    expect_option_error({"start", "--timeout", bad}, "--timeout", "give one in (0, 3600]");
  }
}

TEST(CliArgs, StopEnvVisibleDevicesOptions) {
  EXPECT_EQ(parse({"env", "--gpu", "GPU-7fda"}).value("--gpu"), "GPU-7fda");
  EXPECT_EQ(parse({"visible-devices", "0,3"}).positional, std::vector<std::string>{"0,3"});
  expect_option_error({"stop", "--timeout", "0"}, "--timeout", "(0, 3600]");
  EXPECT_EQ(usage_error({"env", "--gpu"}), "--gpu needs a value (UUID)");
}

TEST(CliArgs, StatusJobOptions) {
  ParsedArgs a = parse({"status", "--job", "1234", "--node", "n1", "--slurm-conf", "/etc/slurm/slurm.conf"});
  EXPECT_EQ(a.value("--job"), "1234");
  EXPECT_EQ(a.value("--node"), "n1");
  EXPECT_EQ(a.value("--slurm-conf"), "/etc/slurm/slurm.conf");
  for (const char* bad : {"12x", "", "-1", "1 2", "123456789012345678901"}) {
    expect_option_error({"status", "--job", bad}, "--job", "give the number squeue shows");
  }
  expect_option_error({"status", "--job", "1", "--node", "../n1"}, "--node", "give the name sinfo shows");
  expect_option_error({"status", "--job", "1", "--slurm-conf", "slurm.conf"}, "--slurm-conf", "absolute path");
}

TEST(CliArgs, DoctorOptions) {
  ParsedArgs a = parse({"doctor", "--node", "--node-name", "gpu02", "--slurm-conf", "/s.conf"});
  EXPECT_TRUE(a.has("--node"));  // a flag here, a value for status
  EXPECT_EQ(a.value("--node-name"), "gpu02");
  EXPECT_EQ(parse({"doctor", "0"}).positional, std::vector<std::string>{"0"});
  expect_option_error({"doctor", "--node", "--node-name", "a b"}, "--node-name", "sinfo");
  EXPECT_EQ(usage_error({"doctor", "--node=n1"}), "--node takes no value");
}

TEST(CliArgs, ProbeRequiredAndCheckedOptions) {
  const std::vector<std::string> ok = {"probe", "--requested", "mps", "--learner-device", "cuda:0", "--backend", "b"};
  ParsedArgs a = parse(ok);
  EXPECT_EQ(a.value("--requested"), "mps");
  std::vector<std::string> more = ok;
  more.insert(more.end(), {"--rank", "1", "--world-size", "2", "--collector-device", "cuda:1", "--manifest", "m.json"});
  EXPECT_EQ(parse(more).value("--world-size"), "2");
  EXPECT_EQ(usage_error({"probe", "--learner-device", "cuda:0", "--backend", "b"}), "'probe' needs --requested MODE");
  EXPECT_EQ(usage_error({"probe", "--requested", "none", "--backend", "b"}), "'probe' needs --learner-device DEVICE");
  EXPECT_EQ(usage_error({"probe", "--requested", "none", "--learner-device", "cuda:0", "--backend="}),
            "'probe' needs --backend NAME");
  expect_option_error({"probe", "--requested", "maybe"}, "--requested", "neither none nor mps");
  for (const char* bad : {"x", "1.5", ""}) expect_option_error({"probe", "--rank", bad}, "--rank", "not an integer");
  expect_option_error({"probe", "--world-size", "2x"}, "--world-size", "not an integer");
  // --help needs no required option.
  EXPECT_TRUE(parse({"probe", "--help"}).has("--help"));
}

}  // namespace
}  // namespace unilab::mps::cli
