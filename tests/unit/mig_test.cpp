#include "common/mps/mig.hpp"

#include <gtest/gtest.h>

#include "common/mps/errors.hpp"
#include "common/mps/gpu.hpp"
#include "tests/unit/doubles.hpp"

namespace unilab::mps {
namespace {

using test::error_of;

// --- nvidia-smi -L ------------------------------------------------------------------------

// A real GH200 capture (NVIDIA/k8s-dra-driver-gpu demo/specs/extended-resources/mig-1g-12gb.yaml).
constexpr const char* kGh200List =
    "GPU 0: NVIDIA GH200 96GB HBM3 (UUID: GPU-a4f34abc-7715-3560-dcea-7238b9611a45)\n"
    "  MIG 1g.12gb     Device  0: (UUID: MIG-4d806f22-346a-5a1d-ac01-86b505cdf485)\n"
    "  MIG 1g.12gb     Device  1: (UUID: MIG-8949ea7d-9166-53ce-9bac-6c58262addf9)\n";

TEST(ParseNvidiaSmiList, ReadsGpusAndTheMigDevicesUnderThem) {
  const auto gpus = parse_nvidia_smi_list(std::string(kGh200List) + "GPU 1: NVIDIA H200 (UUID: GPU-49D58E66-7902-AA09-4F59-82488B57F071)\n");
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0].index, 0);
  EXPECT_EQ(gpus[0].name, "NVIDIA GH200 96GB HBM3");
  EXPECT_EQ(gpus[0].uuid, "GPU-a4f34abc-7715-3560-dcea-7238b9611a45");
  ASSERT_EQ(gpus[0].migs.size(), 2u);
  EXPECT_EQ(gpus[0].migs[1].profile, "1g.12gb");
  EXPECT_EQ(gpus[0].migs[1].device, 1);
  EXPECT_EQ(gpus[0].migs[1].uuid, "MIG-8949ea7d-9166-53ce-9bac-6c58262addf9");
  EXPECT_EQ(gpus[1].uuid, "GPU-49d58e66-7902-aa09-4f59-82488b57f071");  // display form
  EXPECT_TRUE(gpus[1].migs.empty());
  // The real H200 check machine (driver 580.159.04), MIG off.
  EXPECT_EQ(parse_nvidia_smi_list("GPU 0: NVIDIA H200 (UUID: GPU-49d58e66-7902-aa09-4f59-82488b57f071)\n").size(), 1u);
}

TEST(ParseNvidiaSmiList, RefusesWhatItCannotBelieveNamingTheLine) {
  // Drivers before R470 name a MIG device after its GPU and instances: no UUID of its own.
  std::string e = error_of([] {
    parse_nvidia_smi_list("GPU 0: A100 (UUID: GPU-a4f34abc-7715-3560-dcea-7238b9611a45)\n"
                          "  MIG 3g.20gb Device 0: (UUID: MIG-GPU-a4f34abc-7715-3560-dcea-7238b9611a45/1/0)\n");
  });
  EXPECT_NE(e.find("line 2"), std::string::npos) << e;
  EXPECT_NE(e.find("470.42.01"), std::string::npos) << e;
  e = error_of([] { parse_nvidia_smi_list("  MIG 1g.12gb     Device  0: (UUID: MIG-4d806f22-346a-5a1d-ac01-86b505cdf485)\n"); });
  EXPECT_NE(e.find("before any GPU"), std::string::npos) << e;
  e = error_of([] { parse_nvidia_smi_list("No devices were found\n"); });
  EXPECT_NE(e.find("neither a GPU nor a MIG device"), std::string::npos) << e;
  EXPECT_THROW(parse_nvidia_smi_list("GPU x: A (UUID: GPU-a4f34abc-7715-3560-dcea-7238b9611a45)\n"), CudaMpsError);
  EXPECT_THROW(parse_nvidia_smi_list("GPU 0: A (UUID: MIG-a4f34abc-7715-3560-dcea-7238b9611a45)\n"), CudaMpsError);
  EXPECT_TRUE(parse_nvidia_smi_list("\n").empty());
}

// --- the human table's MIG block -----------------------------------------------------------

TEST(ParseMigDeviceTable, TakesTheFirstLineOfEachDeviceInTheMigBlockOnly) {
  const auto rows = parse_mig_device_table(test::smi_table(test::mig_gpus()));
  ASSERT_EQ(rows.size(), 2u);  // the process row (GPU GI CI PID ...) is not a MIG device
  EXPECT_EQ(rows[0], (MigTableRow{1, 1, 0, 0}));
  EXPECT_EQ(rows[1], (MigTableRow{1, 5, 0, 1}));
  // The MIG User Guide's A100 sample (its spacing).
  const auto guide = parse_mig_device_table(
      "| MIG devices:                                                                |\n"
      "+------------------+----------------------+-----------+-----------------------+\n"
      "| GPU  GI  CI  MIG |         Memory-Usage |        Vol|         Shared        |\n"
      "|      ID  ID  Dev |           BAR1-Usage | SM     Unc| CE  ENC  DEC  OFA  JPG|\n"
      "|==================+======================+===========+=======================|\n"
      "|  0    7   0   0  |      6MiB /  4864MiB |     14      0 |  1   0    0    0    0 |\n"
      "|                  |      0MiB /  8191MiB |           |                       |\n"
      "|  0   13   2   5  |      6MiB /  4864MiB |     14      0 |  1   0    0    0    0 |\n");
  ASSERT_EQ(guide.size(), 2u);
  EXPECT_EQ(guide[1], (MigTableRow{0, 13, 2, 5}));
  EXPECT_TRUE(parse_mig_device_table("| Processes: |\n|  0  1  0  3805  M+C  x  326MiB |\n").empty());
}

// --- mig-minors --------------------------------------------------------------------------

TEST(MigMinors, ParsesTheDriversNumbering) {
  // The head of the real file (H200 check machine), then the guide's numbering.
  auto m = MigMinors::parse("config 1\nmonitor 2\ngpu0/gi0/access 3\ngpu0/gi0/ci0/access 4\ngpu0/gi0/ci1/access 5\n"
                            "gpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\ngpu3/gi14/access 534\ngpu3/gi14/ci7/access 542\n");
  EXPECT_EQ(m.gi_minor(0, 0), 3);
  EXPECT_EQ(m.ci_minor(0, 0, 1), 5);
  EXPECT_EQ(m.gi_minor(0, 1), 12);
  EXPECT_EQ(m.ci_minor(0, 1, 0), 13);
  EXPECT_EQ(m.instance_of(0, 12, 13), (std::pair{1, 0}));
  EXPECT_EQ(m.instance_of(3, 534, 542), (std::pair{14, 7}));
  // A compute instance's minor with another instance's GI minor is nothing.
  EXPECT_FALSE(m.instance_of(0, 3, 13).has_value());
  EXPECT_FALSE(m.instance_of(1, 12, 13).has_value());  // another GPU
  EXPECT_FALSE(m.gi_minor(9, 0).has_value());
  std::string e = error_of([] { MigMinors::parse("config 1\ngpu0/gi0/access x\n"); });
  EXPECT_NE(e.find("line 2"), std::string::npos) << e;
  EXPECT_TRUE(MigMinors::parse("").empty());
}

TEST(MigMinors, DeviceFilesAreSlurmsOrder) {
  auto m = MigMinors::parse("gpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\n");
  MigSlice s{"GPU-a4f34abc-7715-3560-dcea-7238b9611a45", 0, 0, 0, "1g.12gb", 1, 0};
  EXPECT_EQ(mig_device_files(s, m),
            (std::vector<std::string>{"/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia-caps/nvidia-cap13"}));
  s.compute_instance = 1;  // not in the file
  EXPECT_TRUE(mig_device_files(s, m).empty());
}

// --- the two outputs joined ------------------------------------------------------------

TEST(MigDevicesFrom, JoinsTheListAndTheTableByGpuAndDevice) {
  const auto all = test::mig_gpus();
  const std::vector<GpuIdentity> gpus(all.begin(), all.begin() + 4);
  const auto migs = mig_devices_from(gpus, test::smi_list(all), test::smi_table(all));
  ASSERT_EQ(migs.size(), 2u);
  EXPECT_EQ(migs[0], all[4]);
  EXPECT_EQ(migs[1], all[5]);
  EXPECT_EQ(migs[1].mig->parent_uuid, test::kUuid1);
  EXPECT_EQ(migs[1].mig->parent_minor, 0);
  EXPECT_EQ(migs[1].index, -1);  // no numeric index names a MIG device
  // A table without the device's row: instances unknown, never guessed.
  const auto bare = mig_devices_from(gpus, test::smi_list(all), "");
  EXPECT_EQ(bare[0].mig->gpu_instance, -1);
  EXPECT_EQ(bare[0].mig->compute_instance, -1);
  // A GPU of -L that the query did not report: the driver is inconsistent.
  EXPECT_THROW(mig_devices_from({gpus[0]}, test::smi_list(all), ""), CudaMpsError);
}

TEST(QueryGpus, RunsListAndTableOnlyWhereMigIsEnabled) {
  test::RecordingRunner runner;
  const auto all = test::mig_gpus();
  runner.handler = [&](const Command& c) {
    if (c.argv.size() == 2 && c.argv[1] == "-L") return test::exited(0, test::smi_list(all));
    if (c.argv.size() == 1) return test::exited(0, test::smi_table(all));
    return test::exited(0, test::smi_csv(all));
  };
  const auto found = discover_gpus(runner, test::smi_tools("/usr/bin/nvidia-smi"));
  ASSERT_EQ(found.size(), 6u);
  EXPECT_EQ(found[4].uuid, test::kMig0);
  EXPECT_EQ(found[5].mig->profile, "1g.18gb");
  ASSERT_EQ(runner.commands.size(), 3u);
  EXPECT_EQ(runner.commands[1].argv, (std::vector<std::string>{"/usr/bin/nvidia-smi", "-L"}));
  EXPECT_EQ(runner.commands[2].argv, (std::vector<std::string>{"/usr/bin/nvidia-smi"}));
  // MIG off: the one query.
  test::RecordingRunner plain([](const Command&) { return test::exited(0, test::smi_csv(test::four_gpus())); });
  EXPECT_EQ(discover_gpus(plain, test::smi_tools("/usr/bin/nvidia-smi")).size(), 4u);
  EXPECT_EQ(plain.commands.size(), 1u);
  // -L failing fails the discovery with its words.
  test::RecordingRunner broken([&](const Command& c) {
    if (c.argv.size() == 2) return test::exited(9, "NVIDIA-SMI has failed\n");
    return test::exited(0, test::smi_csv(all));
  });
  std::string e = error_of([&] { discover_gpus(broken, test::smi_tools("/usr/bin/nvidia-smi")); });
  EXPECT_NE(e.find("-L failed"), std::string::npos) << e;
}

TEST(FindGpu, AMigUuidNamesItsMigDeviceAndNoPrefixOrIndexDoes) {
  const auto all = test::mig_gpus();
  EXPECT_EQ(find_gpu(test::kMig1, all).uuid, test::kMig1);
  EXPECT_EQ(find_gpu("mig-2B3C4D5E6F705B8C9D0E1F2A3B4C5D6E", all).uuid, test::kMig1);
  EXPECT_THROW(find_gpu("MIG-2b3c4d5e", all), CudaMpsError);  // no prefixes for MIG
  EXPECT_THROW(find_gpu("MIG-3b3c4d5e-6f70-5b8c-9d0e-1f2a3b4c5d6e", all), CudaMpsError);
  // Index 1 is still the whole GPU 1; CUDA would not list it while MIG is on.
  EXPECT_EQ(find_gpu("1", all).uuid, test::kUuid1);
  const auto visible = visible_gpus(std::nullopt, all);
  EXPECT_EQ(visible.size(), 5u);
  EXPECT_TRUE(std::none_of(visible.begin(), visible.end(), [](const auto& g) { return g.uuid == test::kUuid1; }));
  // A GPU-prefix never lands on a MIG device.
  EXPECT_EQ(find_gpu("GPU-1b2c3d4e", all).uuid, test::kUuid1);
}

TEST(GpuIdentity, AMigDeviceRoundTripsThroughJson) {
  const auto g = test::mig_gpus()[5];
  EXPECT_EQ(GpuIdentity::from_json(g.to_json()), g);
  EXPECT_FALSE(test::four_gpus()[0].to_json().contains("mig"));
}

}  // namespace
}  // namespace unilab::mps
