#include "common/slurm/slurm_config.hpp"

#include <gtest/gtest.h>

#include "common/mps/errors.hpp"
#include "tests/unit/doubles.hpp"

namespace unilab::mps {
namespace {

using namespace std::chrono_literals;
using test::error_of;

bool has_control_chars(const std::string& s) {
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) return true;
  }
  return false;
}

TEST(ParsePluginArgs, DefaultsLiveInOnePlace) {
  PluginConfig c = parse_plugin_args({});
  EXPECT_EQ(c.state_dir, "/run/unilab-mps");
  EXPECT_EQ(c.run_dir, "/run/unilab-mps/run");
  EXPECT_EQ(c.tools.nvidia_smi, "/usr/bin/nvidia-smi");
  EXPECT_EQ(c.tools.mps_control, "/usr/bin/nvidia-cuda-mps-control");
  EXPECT_FALSE(c.gres_conf);
  EXPECT_EQ(c.start_timeout, 15000ms);
  EXPECT_EQ(c.stop_timeout, 10000ms);
  EXPECT_FALSE(c.max_threads);
  EXPECT_FALSE(c.max_mem_bytes);
  EXPECT_FALSE(c.default_threads);
}

TEST(ParsePluginArgs, EveryKey) {
  PluginConfig c = parse_plugin_args({"state_dir=/var/lib/umps", "run_dir=/run/umps", "nvidia_smi=/opt/nv/nvidia-smi",
                                      "mps_control=/opt/nv/nvidia-cuda-mps-control", "gres_conf=/etc/slurm/gres-gpu.conf",
                                      "start_timeout=2.5", "stop_timeout=30", "max_threads=80", "max_mem=16G",
                                      "default_threads=25"});
  EXPECT_EQ(c.state_dir, "/var/lib/umps");
  EXPECT_EQ(c.run_dir, "/run/umps");
  EXPECT_EQ(c.tools.nvidia_smi, "/opt/nv/nvidia-smi");
  EXPECT_EQ(c.tools.mps_control, "/opt/nv/nvidia-cuda-mps-control");
  EXPECT_EQ(c.gres_conf, "/etc/slurm/gres-gpu.conf");
  EXPECT_EQ(c.start_timeout, 2500ms);
  EXPECT_EQ(c.stop_timeout, 30000ms);
  EXPECT_EQ(c.max_threads, 80.0);
  EXPECT_EQ(c.max_mem_bytes, 16ULL << 30);
  EXPECT_EQ(c.default_threads, 25.0);
  // Later arguments win.
  EXPECT_EQ(parse_plugin_args({"stop_timeout=1", "stop_timeout=2"}).stop_timeout, 2000ms);
}

TEST(ParsePluginArgs, ContainIsAutoOrOff) {
  EXPECT_EQ(parse_plugin_args({}).contain, "auto");
  EXPECT_EQ(parse_plugin_args({"contain=off"}).contain, "off");
  EXPECT_EQ(parse_plugin_args({"contain=off", "contain=auto"}).contain, "auto");
  for (const char* bad : {"contain=yes", "contain=", "contain=OFF", "contain=no"}) {
    std::string e = error_of([&] { parse_plugin_args({bad}); });
    EXPECT_NE(e.find("contain="), std::string::npos) << bad << ": " << e;
    EXPECT_NE(e.find("auto"), std::string::npos) << bad << ": " << e;
    EXPECT_NE(e.find("off"), std::string::npos) << bad << ": " << e;
  }
}

TEST(PluginArgsTable, ListsEveryKeyTheParserKnowsWithTheParsersDefaults) {
  const std::string unknown = error_of([] { parse_plugin_args({"nosuchkey=1"}); });
  for (auto words : {PluginArgWords::kBrief, PluginArgWords::kFull}) {
    const std::string table = plugin_args_table(words);
    size_t rows = 0;
    for (size_t at = table.find("\n| `"); at != std::string::npos; at = table.find("\n| `", at + 1)) {
      const size_t key_end = table.find("=`", at);
      ASSERT_NE(key_end, std::string::npos) << table;
      const std::string key = table.substr(at + 4, key_end - at - 4);
      EXPECT_NE(unknown.find(key), std::string::npos) << key << " is in the table but not in: " << unknown;
      ++rows;
    }
    EXPECT_EQ(rows, 16u) << table;
    EXPECT_NE(table.find("| `start_timeout=` | `15` |"), std::string::npos) << table;
    EXPECT_NE(table.find("| `dir_size=` | `64M` |"), std::string::npos) << table;
    EXPECT_NE(table.find("| `state_dir=` | `/run/unilab-mps` |"), std::string::npos) << table;
    EXPECT_NE(table.find("| `max_threads=` | none |"), std::string::npos) << table;
    EXPECT_NE(table.find("| `history=` | `/var/log/unilab-mps/history.jsonl` |"), std::string::npos) << table;
    EXPECT_NE(table.find("| `history_max=` | `4M` |"), std::string::npos) << table;
  }
  EXPECT_NE(plugin_args_table(PluginArgWords::kBrief), plugin_args_table(PluginArgWords::kFull));
}

TEST(ParsePluginArgs, History) {
  EXPECT_EQ(parse_plugin_args({}).history, "/var/log/unilab-mps/history.jsonl");
  EXPECT_FALSE(parse_plugin_args({"history=off"}).history);
  EXPECT_EQ(parse_plugin_args({"history=/srv/h.jsonl"}).history, "/srv/h.jsonl");
  EXPECT_EQ(parse_plugin_args({"history_max=64K"}).history_max, 64ULL << 10);
  EXPECT_EQ(parse_plugin_args({"history_max=1G"}).history_max, 1ULL << 30);
  EXPECT_NE(error_of([] { parse_plugin_args({"history=relative.jsonl"}); }).find("history"), std::string::npos);
  EXPECT_NE(error_of([] { parse_plugin_args({"history_max=1K"}); }).find("at least 64K"), std::string::npos);
  EXPECT_THROW(parse_plugin_args({"history_max=lots"}), CudaMpsError);
}

TEST(ParsePluginArgs, UnknownKeyIsAnErrorNamingIt) {
  std::string e = error_of([] { parse_plugin_args({"state_dir=/x", "statedir=/y"}); });
  EXPECT_NE(e.find("'statedir'"), std::string::npos) << e;
  EXPECT_NE(e.find("state_dir"), std::string::npos) << e;  // lists the known keys
  e = error_of([] { parse_plugin_args({"verbose"}); });
  EXPECT_NE(e.find("'verbose'"), std::string::npos) << e;
  EXPECT_NE(e.find("key=value"), std::string::npos) << e;
  EXPECT_THROW(parse_plugin_args({"=x"}), CudaMpsError);
  EXPECT_THROW(parse_plugin_args({"STATE_DIR=/x"}), CudaMpsError);  // keys are case-sensitive
}

TEST(ParsePluginArgs, PathsMustBeNormalizedAbsolute) {
  for (const char* key : {"state_dir", "run_dir", "nvidia_smi", "mps_control", "gres_conf"}) {
    for (const char* value : {"relative/dir", "", "/a/../b", "/a/..", "./x"}) {
      std::string arg = std::string(key) + "=" + value;
      std::string e = error_of([&] { parse_plugin_args({arg}); });
      EXPECT_NE(e.find(key), std::string::npos) << arg << ": " << e;
      EXPECT_NE(e.find("absolute"), std::string::npos) << arg << ": " << e;
    }
  }
}

TEST(ParsePluginArgs, BadTimeouts) {
  for (const char* key : {"start_timeout", "stop_timeout"}) {
    for (const char* value : {"", "0", "-1", "abc", "5s", "3601", "nan", "inf", "1e9"}) {
      std::string arg = std::string(key) + "=" + value;
      std::string e = error_of([&] { parse_plugin_args({arg}); });
      EXPECT_NE(e.find(key), std::string::npos) << arg << ": " << e;
    }
  }
  EXPECT_EQ(parse_plugin_args({"start_timeout=3600"}).start_timeout, 3600000ms);
  EXPECT_EQ(parse_plugin_args({"start_timeout=0.1"}).start_timeout, 100ms);
}

TEST(ParsePluginArgs, DefaultThreadsMayNotExceedTheMaximum) {
  EXPECT_THROW(parse_plugin_args({"max_threads=50", "default_threads=60"}), CudaMpsError);
  EXPECT_NO_THROW(parse_plugin_args({"max_threads=50", "default_threads=50"}));
  EXPECT_THROW(parse_plugin_args({"max_threads=0"}), CudaMpsError);
  EXPECT_THROW(parse_plugin_args({"max_mem=lots"}), CudaMpsError);
}

// Any run_dir of up to 64 characters, the refusal naming that bound.
TEST(ParsePluginArgs, RunDirSoLongThatTheSocketWouldNotFitIsAnError) {
  const std::string longest = "/" + std::string(63, 'r');
  EXPECT_NO_THROW(parse_plugin_args({"run_dir=" + longest}));
  std::string e = error_of([&] { parse_plugin_args({"run_dir=" + longest + "r"}); });
  EXPECT_NE(e.find("run_dir=" + longest + "r is too long (65 characters)"), std::string::npos) << e;
  EXPECT_NE(e.find("give a run_dir of at most 64 characters"), std::string::npos) << e;
  EXPECT_NO_THROW(parse_plugin_args({"run_dir=/run/unilab-mps/run"}));
  EXPECT_NO_THROW(parse_plugin_args({"run_dir=/var/spool/slurm/node-local/unilab-mps/run"}));
}

// --- mode -------------------------------------------------------------------------

TEST(ParseMode, AutoSpellings) {
  EXPECT_EQ(parse_mode(nullptr), JobMode::kAuto);
  EXPECT_EQ(parse_mode(""), JobMode::kAuto);
  EXPECT_EQ(parse_mode("(null)"), JobMode::kAuto);  // re-imported in a batch step's srun
  EXPECT_EQ(parse_mode("auto"), JobMode::kAuto);
  EXPECT_EQ(parse_mode("multi"), JobMode::kMulti);
}

TEST(ParseMode, BadValuesAreErrorsWithSanitizedMessages) {
  for (const char* bad : {"MULTI", "multi ", "per-gpu", "1", "null"}) {
    std::string e = error_of([&] { parse_mode(bad); });
    EXPECT_NE(e.find("--unilab-mps=multi"), std::string::npos) << bad << ": " << e;
  }
  std::string e = error_of([] { parse_mode(";rm -rf /"); });
  EXPECT_NE(e.find(";rm -rf /"), std::string::npos) << e;  // shown, quoted, never executed
  e = error_of([] { parse_mode("\x1b[31m;rm -rf /\n\r\a"); });
  EXPECT_FALSE(has_control_chars(e)) << e;
  EXPECT_NE(e.find("invalid --unilab-mps value"), std::string::npos) << e;
  e = error_of([] { parse_mode(std::string(5000, 'x').c_str()); });
  EXPECT_LT(e.size(), 600u) << "very long value must be truncated";
  EXPECT_EQ(e.find(std::string(41, 'x')), std::string::npos) << e;
  EXPECT_NE(e.find("..."), std::string::npos) << e;
}

// --- thread percentage --------------------------------------------------------------

TEST(ParseThreadPercentage, BoundsAndSiteMaximum) {
  EXPECT_EQ(parse_thread_percentage("100", std::nullopt), 100.0);
  EXPECT_EQ(parse_thread_percentage("0.5", std::nullopt), 0.5);
  EXPECT_EQ(parse_thread_percentage("25", 50.0), 25.0);
  EXPECT_EQ(parse_thread_percentage("50", 50.0), 50.0);
  for (const char* bad : {"0", "-5", "100.01", "101", "", "abc", "50%", "nan", "inf", "1e3", "50 "}) {
    std::string e = error_of([&] { parse_thread_percentage(bad, std::nullopt); });
    EXPECT_NE(e.find("(0, 100]"), std::string::npos) << bad << ": " << e;
  }
  std::string e = error_of([] { parse_thread_percentage("60", 50.0); });
  EXPECT_NE(e.find("maximum"), std::string::npos) << e;
  EXPECT_NE(e.find("50"), std::string::npos) << e;
}

// --- memory sizes ----------------------------------------------------------------------

TEST(ParseMemLimit, NormalizesToWholeMebibytes) {
  EXPECT_EQ(parse_mem_limit("8G", std::nullopt), "8192M");
  EXPECT_EQ(parse_mem_limit("8g", std::nullopt), "8192M");
  EXPECT_EQ(parse_mem_limit("512M", std::nullopt), "512M");
  EXPECT_EQ(parse_mem_limit("1024K", std::nullopt), "1M");
  EXPECT_EQ(parse_mem_limit("1025K", std::nullopt), "2M");  // rounds up
  EXPECT_EQ(parse_mem_limit("1", std::nullopt), "1M");      // bytes round up too
  EXPECT_EQ(parse_mem_limit("1T", std::nullopt), "1048576M");
  EXPECT_EQ(parse_size_bytes("3K"), 3072u);
  EXPECT_EQ(parse_size_bytes("2M"), 2u << 20);
  EXPECT_EQ(parse_size_bytes("123"), 123u);
}

TEST(ParseMemLimit, BadSizes) {
  for (const char* bad : {"0", "0G", "8X", "G", "", "-8G", "8 G", "8GB", "1.5G", "1234567890123456", "99999999999999999999G"}) {
    EXPECT_THROW(parse_mem_limit(bad, std::nullopt), CudaMpsError) << bad;
  }
  std::string e = error_of([] { parse_size_bytes("8X"); });
  EXPECT_NE(e.find("'8X'"), std::string::npos) << e;
  // 15 digits is the longest accepted (no overflow at T scale either).
  EXPECT_EQ(parse_size_bytes("999999999999999"), 999999999999999ULL);
}

TEST(ParseMemLimit, HugeValuesDoNotWrapAround) {
  // 2^34 G is 2^64 bytes: it must be refused, not wrap to 0 (or to 1 GiB
  // for 2^34+1, slipping under any site maximum).
  EXPECT_THROW(parse_size_bytes("17179869184G"), CudaMpsError);
  EXPECT_THROW(parse_mem_limit("17179869185G", 8ULL << 30), CudaMpsError);
  EXPECT_THROW(parse_size_bytes("16777216T"), CudaMpsError);
  EXPECT_EQ(parse_size_bytes("16777215T"), 16777215ULL << 40);  // the largest T value that fits
}

TEST(ParseMemLimit, SiteMaximum) {
  EXPECT_EQ(parse_mem_limit("8G", 8ULL << 30), "8192M");
  std::string e = error_of([] { parse_mem_limit("9G", 8ULL << 30); });
  EXPECT_NE(e.find("maximum"), std::string::npos) << e;
  EXPECT_NE(e.find("8192 MiB"), std::string::npos) << e;
  EXPECT_THROW(parse_mem_limit("8193M", 8ULL << 30), CudaMpsError);
}

// --- gres.conf location ---------------------------------------------------------------

TEST(ParseClientPriority, ZeroOneAndTheirNamesOnly) {
  for (const char* v : {"0", "normal", "NORMAL"}) EXPECT_EQ(parse_client_priority(v), ClientPriority::kNormal) << v;
  for (const char* v : {"1", "below-normal", "BELOW_NORMAL"}) EXPECT_EQ(parse_client_priority(v), ClientPriority::kBelowNormal) << v;
  for (const char* v : {"2", "-1", "", "high", "01", " 1"}) {
    std::string e = error_of([&] { parse_client_priority(v); });
    EXPECT_NE(e.find("invalid MPS client priority"), std::string::npos) << v << ": " << e;
    EXPECT_NE(e.find("CUDA_MPS_CLIENT_PRIORITY"), std::string::npos) << e;
  }
}

TEST(GresConfPath, ConfiguredThenNextToSlurmConfThenDefault) {
  PluginConfig c;
  EXPECT_EQ(gres_conf_path(c, std::nullopt), "/etc/slurm/gres.conf");
  EXPECT_EQ(gres_conf_path(c, std::string("/opt/slurm/etc/slurm.conf")), "/opt/slurm/etc/gres.conf");
  EXPECT_EQ(gres_conf_path(c, std::string("relative/slurm.conf")), "/etc/slurm/gres.conf");
  EXPECT_EQ(gres_conf_path(c, std::string("")), "/etc/slurm/gres.conf");
  c.gres_conf = "/site/gres.conf";
  EXPECT_EQ(gres_conf_path(c, std::string("/opt/slurm/etc/slurm.conf")), "/site/gres.conf");
}

// --- the helpers' --config file ------------------------------------------------------

TEST(PluginArgsFromConfig, OneOrMoreKeyValuesPerLineCommentsContinuationsQuotes) {
  const std::string text =
      "# unilab-mps helper arguments\n"
      "state_dir=/var/lib/umps   run_dir=/run/\\\n"
      "umps  # two on a line, the second continued\n"
      "\n"
      "nvidia_smi = /opt/nv/nvidia-smi \\\n"
      "   start_timeout=2.5\n"
      "gres_conf=\"/etc/slurm/gres.conf\"\n";
  EXPECT_EQ(plugin_args_from_config(text, "/etc/umps.conf"),
            (std::vector<std::string>{"state_dir=/var/lib/umps", "run_dir=/run/umps", "nvidia_smi=/opt/nv/nvidia-smi",
                                      "start_timeout=2.5", "gres_conf=/etc/slurm/gres.conf"}));
  PluginConfig c = parse_plugin_args(plugin_args_from_config(text, "/etc/umps.conf"));
  EXPECT_EQ(c.start_timeout, 2500ms);
  EXPECT_EQ(c.tools.nvidia_smi, "/opt/nv/nvidia-smi");
}

TEST(PluginArgsFromConfig, BareWordsIncludesAndBadQuotesNameFileAndLine) {
  EXPECT_EQ(error_of([] { plugin_args_from_config("state_dir=/x\ncontain off\n", "/etc/umps.conf"); }),
            "/etc/umps.conf:2: 'contain' is not key=value");
  EXPECT_EQ(error_of([] { plugin_args_from_config("\n\nInclude other.conf\n", "/etc/umps.conf"); }).substr(0, 17),
            "/etc/umps.conf:3:");
  EXPECT_EQ(error_of([] { plugin_args_from_config("run_dir=\"/x\n", "/etc/umps.conf"); }),
            "/etc/umps.conf:1: unterminated quote in the value of run_dir");
  EXPECT_TRUE(plugin_args_from_config("# nothing\n\n", "/etc/umps.conf").empty());
}

// --- Slurm's "(null)" -------------------------------------------------------------------

TEST(SpankOptionValue, NullPointerAndTheStringNullAreNoValue) {
  EXPECT_FALSE(spank_option_value(nullptr));
  EXPECT_FALSE(spank_option_value("(null)"));
  EXPECT_EQ(spank_option_value(""), "");
  EXPECT_EQ(spank_option_value("8G"), "8G");
  EXPECT_EQ(spank_option_value("(null)x"), "(null)x");
}

}  // namespace
}  // namespace unilab::mps
