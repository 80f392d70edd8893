#include "common/mps/nvidia_checks.hpp"

#include <gtest/gtest.h>

#include <cctype>
#include <functional>
#include <set>

#include "common/mps/errors.hpp"
#include "common/slurm/slurm_config.hpp"
#include "tests/unit/doubles.hpp"

namespace unilab::mps {
namespace {

using test::error_of;
using test::exited;
using test::RecordingRunner;

GpuIdentity gpu_with(int index, const std::string& uuid, const std::string& compute, const std::string& mig) {
  GpuIdentity g = test::make_gpu(index, uuid, index, "00000000:1" + std::to_string(index) + ":00.0");
  g.compute_mode = compute;
  g.mig_mode = mig;
  return g;
}

// --- driver_dir ----------------------------------------------------------------

TEST(DriverDir, PluginArgumentSetsTheToolsAndTheirEnvironment) {
  PluginConfig cfg = parse_plugin_args({"driver_dir=/usr/local/nvidia"});
  EXPECT_EQ(cfg.tools.driver_dir, "/usr/local/nvidia");
  EXPECT_EQ(cfg.tools.nvidia_smi, "/usr/local/nvidia/bin/nvidia-smi");
  EXPECT_EQ(cfg.tools.mps_control, "/usr/local/nvidia/bin/nvidia-cuda-mps-control");
}

TEST(DriverDir, AnExplicitToolPathWinsWhateverTheOrder) {
  for (const auto& args : {std::vector<std::string>{"nvidia_smi=/opt/x/nvidia-smi", "driver_dir=/usr/local/nvidia"},
                           std::vector<std::string>{"driver_dir=/usr/local/nvidia", "nvidia_smi=/opt/x/nvidia-smi"}}) {
    PluginConfig cfg = parse_plugin_args(args);
    EXPECT_EQ(cfg.tools.nvidia_smi, "/opt/x/nvidia-smi");
    EXPECT_EQ(cfg.tools.mps_control, "/usr/local/nvidia/bin/nvidia-cuda-mps-control");
    EXPECT_EQ(cfg.tools.driver_dir, "/usr/local/nvidia");
  }
}

TEST(DriverDir, DefaultIsUnchangedAndARelativeDirIsRefused) {
  PluginConfig cfg = parse_plugin_args({});
  EXPECT_FALSE(cfg.tools.driver_dir.has_value());
  EXPECT_EQ(cfg.tools.nvidia_smi, "/usr/bin/nvidia-smi");
  EXPECT_EQ(cfg.tools.mps_control, "/usr/bin/nvidia-cuda-mps-control");
  std::string e = error_of([] { parse_plugin_args({"driver_dir=usr/local/nvidia"}); });
  EXPECT_NE(e.find("driver_dir"), std::string::npos) << e;
  e = error_of([] { parse_plugin_args({"bogus=1"}); });
  EXPECT_NE(e.find("driver_dir"), std::string::npos) << "the known keys list it: " << e;
}

TEST(DriverDir, ToolEnvironmentIsExactlyBinAndLib64) {
  EXPECT_EQ(tool_environment("/usr/bin:/bin", std::nullopt), (std::vector<std::string>{"PATH=/usr/bin:/bin"}));
  EXPECT_EQ(tool_environment("/usr/bin:/bin", std::string("/opt/drv")),
            (std::vector<std::string>{"PATH=/opt/drv/bin:/usr/bin:/bin", "LD_LIBRARY_PATH=/opt/drv/lib64"}));
}

TEST(DriverDir, TheDaemonAndItsFrontEndRunWithTheDriverEnvironment) {
  RecordingRunner runner;
  MpsControl mps(runner, "/usr/local/nvidia/bin/nvidia-cuda-mps-control", std::string("/usr/local/nvidia"));
  MpsEndpoint ep{"/run/p", "/run/l", 0, 0};
  mps.launch(ep, {test::kUuid0}, std::chrono::seconds(1));
  mps.send(ep, "get_server_list");
  ASSERT_EQ(runner.commands.size(), 2u);
  for (const auto& c : runner.commands) {
    EXPECT_EQ(test::env_value(c, "PATH"), "/usr/local/nvidia/bin:/usr/sbin:/usr/bin:/sbin:/bin");
    EXPECT_EQ(test::env_value(c, "LD_LIBRARY_PATH"), "/usr/local/nvidia/lib64");
  }
  Command fg = mps.foreground_command(ep, {test::kUuid0});
  EXPECT_EQ(test::env_value(fg, "LD_LIBRARY_PATH"), "/usr/local/nvidia/lib64");
  // Without a driver dir: the old environment, no LD_LIBRARY_PATH.
  MpsControl plain(runner, "/usr/bin/nvidia-cuda-mps-control");
  Command c = plain.foreground_command(ep, {});
  EXPECT_EQ(test::env_value(c, "PATH"), "/usr/sbin:/usr/bin:/sbin:/bin");
  EXPECT_FALSE(test::env_value(c, "LD_LIBRARY_PATH").has_value());
}

// --- compute mode and MIG in the prolog ----------------------------------------

TEST(RequireGpusSuitMps, ProhibitedOrMigOnAJobGpuFailsNamingTheGpuAndTheReason) {
  std::vector<GpuIdentity> gpus = {gpu_with(0, test::kUuid0, "Default", "Disabled"),
                                   gpu_with(1, test::kUuid1, "Prohibited", "Disabled"),
                                   gpu_with(2, test::kUuid2, "Exclusive_Process", "Enabled")};
  std::string e = error_of([&] { require_gpus_suit_mps(gpus, {test::kUuid0, test::kUuid1}); });
  EXPECT_NE(e.find("GPU 1 (" + test::kUuid1), std::string::npos) << e;
  EXPECT_NE(e.find("Prohibited"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  e = error_of([&] { require_gpus_suit_mps(gpus, {test::kUuid2}); });
  EXPECT_NE(e.find("GPU 2 (" + test::kUuid2), std::string::npos) << e;
  EXPECT_NE(e.find("MIG enabled"), std::string::npos) << e;
  // Only the job's GPUs count; any UUID spelling selects them.
  EXPECT_NO_THROW(require_gpus_suit_mps(gpus, {test::kUuid0}));
  std::string upper = test::kUuid1;
  for (auto& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  EXPECT_THROW(require_gpus_suit_mps(gpus, {upper}), CudaMpsError);
}

TEST(RequireGpusSuitMps, NotAvailableOrNotSupportedModesDoNotRefuse) {
  for (const auto& mode : {"[N/A]", "[Not Supported]", "", "Default", "Exclusive_Process"}) {
    GpuIdentity g = gpu_with(0, test::kUuid0, mode, mode);
    EXPECT_FALSE(gpu_refuses_mps(g).has_value()) << mode;
  }
  EXPECT_TRUE(gpu_refuses_mps(gpu_with(0, test::kUuid0, "Default", "Enabled")).has_value());
  EXPECT_TRUE(gpu_refuses_mps(gpu_with(0, test::kUuid0, "Prohibited", "[N/A]")).has_value());
}

// --- doctor checks -------------------------------------------------------------

TEST(CheckComputeModes, ExclusiveProcessOkDefaultWarnsProhibitedFailsMigNotes) {
  auto ok = check_compute_modes({gpu_with(0, test::kUuid0, "Exclusive_Process", "Disabled"),
                                 gpu_with(1, test::kUuid1, "Exclusive_Process", "[N/A]")});
  EXPECT_EQ(ok.status, CheckStatus::kOk) << ok.detail;
  auto warn = check_compute_modes({gpu_with(0, test::kUuid0, "Exclusive_Process", "Disabled"),
                                   gpu_with(1, test::kUuid1, "Default", "Disabled")});
  EXPECT_EQ(warn.status, CheckStatus::kWarn);
  EXPECT_NE(warn.detail.find("GPU 1 is Default"), std::string::npos) << warn.detail;
  EXPECT_NE(warn.detail.find("Exclusive_Process"), std::string::npos) << warn.detail;
  auto fail = check_compute_modes({gpu_with(0, test::kUuid0, "Default", "Disabled"),
                                   gpu_with(1, test::kUuid1, "Prohibited", "Disabled")});
  EXPECT_EQ(fail.status, CheckStatus::kFail);
  EXPECT_NE(fail.detail.find("GPU 1 ("), std::string::npos) << fail.detail;
  // A MIG-enabled GPU serves its MIG devices, a daemon each: not a failure,
  // and no compute-mode advice for it (NVIDIA: Exclusive_Process is not
  // supported in MIG mode).
  auto mig = check_compute_modes(test::mig_gpus());
  EXPECT_EQ(mig.status, CheckStatus::kWarn) << mig.detail;  // GPUs 0, 2, 3 are Default
  EXPECT_NE(mig.detail.find("GPU 1 has MIG enabled (2 MIG devices: one daemon each)"), std::string::npos) << mig.detail;
  EXPECT_EQ(mig.detail.find("GPU 1 is"), std::string::npos) << mig.detail;
  auto only_migs = check_compute_modes({test::mig_gpus()[4]});
  EXPECT_EQ(only_migs.status, CheckStatus::kOk) << only_migs.detail;
  EXPECT_NE(only_migs.detail.find("do not apply to MIG devices"), std::string::npos) << only_migs.detail;
  for (const auto& r : {ok, warn, fail, mig}) EXPECT_EQ(r.detail.find('\n'), std::string::npos);
}

struct FakeFiles {
  std::set<std::string> executables;
  std::set<std::string> directories;
  std::function<bool(const std::string&)> exe() {
    return [this](const std::string& p) { return executables.count(p) > 0; };
  }
  std::function<bool(const std::string&)> dir() {
    return [this](const std::string& p) { return directories.count(p) > 0; };
  }
};

TEST(CheckNvidiaToolsRun, MissingToolPointsAtADriverFolderFoundElsewhere) {
  RecordingRunner runner;
  FakeFiles files;
  files.executables = {"/usr/local/nvidia/bin/nvidia-smi"};
  Tools tools;  // defaults: /usr/bin/nvidia-smi, which is not there
  auto facts = gather_nvidia_tool_facts(runner, tools, files.exe(), files.dir());
  EXPECT_EQ(facts.driver_dir_elsewhere, "/usr/local/nvidia");
  auto r = check_nvidia_tools_run(facts);
  EXPECT_EQ(r.status, CheckStatus::kFail);
  EXPECT_NE(r.detail.find("/usr/bin/nvidia-smi is missing"), std::string::npos) << r.detail;
  EXPECT_NE(r.detail.find("driver_dir=/usr/local/nvidia"), std::string::npos) << r.detail;
  EXPECT_TRUE(runner.commands.empty());
  // Nothing elsewhere either: the plain advice.
  files.executables.clear();
  r = check_nvidia_tools_run(gather_nvidia_tool_facts(runner, tools, files.exe(), files.dir()));
  EXPECT_EQ(r.status, CheckStatus::kFail);
  EXPECT_EQ(r.detail.find("exists"), std::string::npos) << r.detail;
}

TEST(CheckNvidiaToolsRun, RunsTheQueryWithTheDriverEnvironmentAndReportsIt) {
  RecordingRunner runner([](const Command&) { return exited(0, test::smi_csv(test::four_gpus())); });
  FakeFiles files;
  Tools tools;
  apply_driver_dir(tools, "/usr/local/nvidia", false, false);
  files.executables = {tools.nvidia_smi};
  files.directories = {"/usr/local/nvidia/lib64"};
  auto facts = gather_nvidia_tool_facts(runner, tools, files.exe(), files.dir());
  ASSERT_EQ(runner.commands.size(), 1u);
  EXPECT_EQ(runner.commands[0].argv[0], "/usr/local/nvidia/bin/nvidia-smi");
  EXPECT_EQ(test::env_value(runner.commands[0], "LD_LIBRARY_PATH"), "/usr/local/nvidia/lib64");
  auto r = check_nvidia_tools_run(facts);
  EXPECT_EQ(r.status, CheckStatus::kOk) << r.detail;
  EXPECT_NE(r.detail.find("reports 4 GPUs"), std::string::npos) << r.detail;
  // lib64 missing: the daemon may not find the driver's libraries.
  files.directories.clear();
  r = check_nvidia_tools_run(gather_nvidia_tool_facts(runner, tools, files.exe(), files.dir()));
  EXPECT_EQ(r.status, CheckStatus::kWarn);
  EXPECT_NE(r.detail.find("lib64 is not a directory"), std::string::npos) << r.detail;
}

TEST(CheckNvidiaToolsRun, InfoRomWarningWarnsAndAFailedRunFails) {
  FakeFiles files;
  Tools tools;
  files.executables = {tools.nvidia_smi};
  RecordingRunner inforom([](const Command&) {
    return exited(kNvidiaSmiInfoRomWarning, test::smi_csv(test::four_gpus()) + "WARNING: infoROM is corrupted at gpu 00000000:85:00.0\n");
  });
  auto r = check_nvidia_tools_run(gather_nvidia_tool_facts(inforom, tools, files.exe(), files.dir()));
  EXPECT_EQ(r.status, CheckStatus::kWarn);
  EXPECT_NE(r.detail.find("infoROM"), std::string::npos) << r.detail;
  RecordingRunner no_driver([](const Command&) { return exited(9, "NVIDIA-SMI has failed\n"); });
  auto facts = gather_nvidia_tool_facts(no_driver, tools, files.exe(), files.dir());
  r = check_nvidia_tools_run(facts);
  EXPECT_EQ(r.status, CheckStatus::kFail);
  EXPECT_NE(r.detail.find("NVIDIA-SMI has failed"), std::string::npos) << r.detail;
  EXPECT_FALSE(facts.discovery.has_value());
}

}  // namespace
}  // namespace unilab::mps
