#include "common/mps/gpu.hpp"

#include <gtest/gtest.h>

#include <cstdlib>

#include "common/mps/errors.hpp"
#include "tests/unit/doubles.hpp"

namespace unilab::mps {
namespace {

using test::error_of;
using test::exited;
using test::RecordingRunner;

const std::string kToken = "7fdaf0a5179bf636d15ddaf243e3ff16";

TEST(CanonicalizeGpuUuid, EverySpellingOfOneUuidGivesTheSameToken) {
  for (const char* s : {
           "GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16",  // nvidia-smi
           "GPU-7FDAF0A5-179B-F636-D15D-DAF243E3FF16",  // upper case
           "gpu-7fdaf0a5-179b-f636-d15d-daf243e3ff16",  // lower-case prefix
           "7fdaf0a5-179b-f636-d15d-daf243e3ff16",      // no prefix (torch)
           "7FDAF0A5179BF636D15DDAF243E3FF16",          // no dashes, upper
           "7fdaf0a5179bf636d15ddaf243e3ff16",          // the token itself
           "GPU-7fdaf0a5179bf636d15ddaf243e3ff16",      // prefix, no dashes
           "Gpu-7FdaF0a5-179b-F636-d15D-dAf243E3fF16",  // mixed
           "  GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16\t",  // surrounding blanks
       }) {
    EXPECT_EQ(canonicalize_gpu_uuid(s), kToken) << s;
    EXPECT_TRUE(looks_like_gpu_uuid(s)) << s;
  }
}

TEST(CanonicalizeGpuUuid, MigKeepsADistinctToken) {
  std::string mig = canonicalize_gpu_uuid("MIG-7fdaf0a5-179b-f636-d15d-daf243e3ff16");
  EXPECT_EQ(mig, "mig-" + kToken);
  EXPECT_NE(mig, canonicalize_gpu_uuid("GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16"));
  EXPECT_EQ(canonicalize_gpu_uuid("mig-7FDAF0A5179BF636D15DDAF243E3FF16"), mig);
}

TEST(CanonicalizeGpuUuid, NonUuidsThrow) {
  for (const char* s : {"", "0", "12", "-1", "GPU-", "GPU-7fdaf0a5", "nvidia0",
                        "GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff1g",    // non-hex
                        "GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff161",   // 33 hex digits
                        "GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff1",     // 31 hex digits
                        "GPU-7fdaf0a5 179b f636 d15d daf243e3ff16",    // blanks inside
                        "XPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16"}) {
    EXPECT_THROW(canonicalize_gpu_uuid(s), CudaMpsError) << s;
    EXPECT_FALSE(looks_like_gpu_uuid(s)) << s;
  }
  EXPECT_NE(error_of([] { canonicalize_gpu_uuid("nvidia0"); }).find("'nvidia0'"), std::string::npos);
}

TEST(DisplayGpuUuid, IsPrefixedLowercaseAndDashed) {
  const std::string want = "GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16";
  EXPECT_EQ(display_gpu_uuid("7FDAF0A5179BF636D15DDAF243E3FF16"), want);
  EXPECT_EQ(display_gpu_uuid("gpu-7fdaf0a5179bf636d15ddaf243e3ff16"), want);
  EXPECT_EQ(display_gpu_uuid(want), want);
  EXPECT_EQ(display_gpu_uuid("mig-7FDAF0A5179BF636D15DDAF243E3FF16"), "MIG-7fdaf0a5-179b-f636-d15d-daf243e3ff16");
  EXPECT_THROW(display_gpu_uuid("not-a-uuid"), CudaMpsError);
}

TEST(GpuIdentity, JsonRoundTripNormalizesTheUuid) {
  GpuIdentity g{3, "GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16", 5, "00000000:85:00.0", "NVIDIA H200", "", "", std::nullopt};
  EXPECT_EQ(GpuIdentity::from_json(g.to_json()), g);
  auto j = g.to_json();
  j["uuid"] = "7FDAF0A5179BF636D15DDAF243E3FF16";
  EXPECT_EQ(GpuIdentity::from_json(j).uuid, g.uuid);
}

// --- parse_nvidia_smi_query -------------------------------------------------

TEST(ParseNvidiaSmiQuery, ParsesRealFormatRows) {
  auto gpus = parse_nvidia_smi_query(
      "0, GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16, 00000000:85:00.0, Default, Disabled, NVIDIA H200\n"
      "1, GPU-1B2C3D4E-0000-1111-2222-333344445555, 00000000:05:00.0, Default, Disabled, NVIDIA H200\n");
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0], (GpuIdentity{0, "GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16", -1, "00000000:85:00.0", "NVIDIA H200", "", "", std::nullopt}));
  EXPECT_EQ(gpus[1].index, 1);
  EXPECT_EQ(gpus[1].uuid, "GPU-1b2c3d4e-0000-1111-2222-333344445555");  // display form
  EXPECT_EQ(gpus[1].minor_number, -1);  // not a query field: read_driver_minors
  EXPECT_EQ(gpus[1].pci_bus_id, "00000000:05:00.0");
}

TEST(ParseNvidiaSmiQuery, SortsByIndexAndSkipsBlankLinesAndCarriageReturns) {
  auto gpus = parse_nvidia_smi_query(
      "\r\n2, GPU-9a8b7c6d-aaaa-bbbb-cccc-ddddeeeeffff, 00000000:C5:00.0, Default, Disabled, NVIDIA A100\r\n"
      "\n0, GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16, 00000000:85:00.0, Default, Disabled, NVIDIA A100\r\n\n");
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0].index, 0);
  EXPECT_EQ(gpus[1].index, 2);
  EXPECT_EQ(gpus[1].name, "NVIDIA A100");
  EXPECT_TRUE(parse_nvidia_smi_query("").empty());
  EXPECT_TRUE(parse_nvidia_smi_query("\n\n").empty());
}

TEST(ParseNvidiaSmiQuery, TheQueryHasNoMinorNumber) {
  auto gpus = parse_nvidia_smi_query("0, GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16, 00000000:01:00.0, Default, Disabled, NVIDIA GeForce RTX 4090\n");
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_EQ(gpus[0].minor_number, -1);  // the driver's information file gives it (read_driver_minors)
  EXPECT_EQ(gpus[0].name, "NVIDIA GeForce RTX 4090");
  EXPECT_EQ(std::string(kNvidiaSmiQueryFields).find("minor_number"), std::string::npos);
}

TEST(ParseNvidiaSmiQuery, NameMayContainCommas) {
  auto gpus = parse_nvidia_smi_query("0, GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16, 00000000:85:00.0, Default, Disabled, NVIDIA Foo, Rev. 2, OEM\n");
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_EQ(gpus[0].name, "NVIDIA Foo, Rev. 2, OEM");
  EXPECT_EQ(gpus[0].pci_bus_id, "00000000:85:00.0");
}

TEST(ParseNvidiaSmiQuery, GarbageLinesThrowNamingTheLine) {
  std::string e = error_of([] { parse_nvidia_smi_query("No devices were found\n"); });
  EXPECT_NE(e.find("line 1"), std::string::npos) << e;
  EXPECT_NE(e.find("No devices were found"), std::string::npos) << e;

  e = error_of([] {
    parse_nvidia_smi_query("0, GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16, 00000000:85:00.0, Default, Disabled, NVIDIA H200\n"
                           "x, GPU-1b2c3d4e-0000-1111-2222-333344445555, 00000000:05:00.0, Default, Disabled, NVIDIA H200\n");
  });
  EXPECT_NE(e.find("line 2"), std::string::npos) << e;
  EXPECT_NE(e.find("index"), std::string::npos) << e;

  EXPECT_THROW(parse_nvidia_smi_query("0, not-a-uuid, 00000000:85:00.0, Default, Disabled, NVIDIA H200\n"), CudaMpsError);
  EXPECT_THROW(parse_nvidia_smi_query("0, MIG-7fdaf0a5-179b-f636-d15d-daf243e3ff16, 00000000:85:00.0, Default, Disabled, X\n"), CudaMpsError);
  EXPECT_THROW(parse_nvidia_smi_query("-1, GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16, 00000000:85:00.0, Default, Disabled, X\n"), CudaMpsError);
  EXPECT_THROW(parse_nvidia_smi_query("0, GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16, 0\n"), CudaMpsError);  // too few fields
  // The older query's rows (minor_number third): the bus column is not a bus id.
  e = error_of([] { parse_nvidia_smi_query("0, GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16, 2, 00000000:18:00.0, Default, Disabled, X\n"); });
  EXPECT_NE(e.find("pci.bus_id is not a PCI bus id"), std::string::npos) << e;
  // The csv header (someone forgot noheader).
  EXPECT_THROW(parse_nvidia_smi_query("index, uuid, minor_number, pci.bus_id, name\n"), CudaMpsError);
}

TEST(ParseNvidiaSmiQuery, DuplicateIndexOrUuidThrowsWithLineNumber) {
  std::string e = error_of([] {
    parse_nvidia_smi_query("\n0, GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16, 00000000:85:00.0, Default, Disabled, NVIDIA H200\n"
                           "0, GPU-1b2c3d4e-0000-1111-2222-333344445555, 00000000:05:00.0, Default, Disabled, NVIDIA H200\n");
  });
  EXPECT_NE(e.find("line 3"), std::string::npos) << e;
  EXPECT_NE(e.find("duplicate"), std::string::npos) << e;
  e = error_of([] {
    parse_nvidia_smi_query("0, GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16, 00000000:85:00.0, Default, Disabled, NVIDIA H200\n"
                           "1, 7FDAF0A5179BF636D15DDAF243E3FF16, 00000000:05:00.0, Default, Disabled, NVIDIA H200\n");
  });
  EXPECT_NE(e.find("line 2"), std::string::npos) << e;
}

// --- discover_gpus ------------------------------------------------------------

TEST(DiscoverGpus, RunsOneQueryByAbsolutePathWithAScratchEnvironment) {
  setenv("UNILAB_MPS_TEST_CANARY", "leaked", 1);
  RecordingRunner runner([](const Command&) {
    return exited(0, "0, GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16, 00000000:85:00.0, Default, Disabled, NVIDIA H200\n");
  });
  auto gpus = discover_gpus(runner, test::smi_tools("/opt/nv/bin/nvidia-smi"));
  unsetenv("UNILAB_MPS_TEST_CANARY");
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_EQ(gpus[0].uuid, "GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16");
  ASSERT_EQ(runner.commands.size(), 1u);
  const Command& c = runner.commands[0];
  EXPECT_EQ(c.argv, (std::vector<std::string>{"/opt/nv/bin/nvidia-smi",
                                              "--query-gpu=index,uuid,pci.bus_id,compute_mode,mig.mode.current,name",
                                              "--format=csv,noheader"}));
  EXPECT_EQ(c.argv, nvidia_smi_query_argv("/opt/nv/bin/nvidia-smi"));
  for (const auto& e : c.env) {
    EXPECT_EQ(e.rfind("PATH=", 0), 0u) << "inherited variable in the child env: " << e;
    EXPECT_EQ(e.find("leaked"), std::string::npos) << e;
  }
  EXPECT_LE(c.env.size(), 1u);
  EXPECT_FALSE(c.credentials.has_value());
  EXPECT_TRUE(c.stdin_data.empty());
}

TEST(DiscoverGpus, ExecErrorNamesThePath) {
  RecordingRunner runner([](const Command& c) { return test::exec_failed(c.argv[0]); });
  std::string e = error_of([&] { discover_gpus(runner, test::smi_tools("/nonexistent/nvidia-smi")); });
  EXPECT_NE(e.find("/nonexistent/nvidia-smi"), std::string::npos) << e;
  // The real runner too: exec by absolute path, no PATH lookup.
  SystemRunner real;
  e = error_of([&] { discover_gpus(real, test::smi_tools("/nonexistent/unilab-test/nvidia-smi")); });
  EXPECT_NE(e.find("/nonexistent/unilab-test/nvidia-smi"), std::string::npos) << e;
}

TEST(DiscoverGpus, NoDriverExitCarriesTheToolsMessage) {
  const std::string msg =
      "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA "
      "driver is installed and running.";
  RecordingRunner runner([&](const Command&) { return exited(9, msg + "\n\n"); });
  std::string e = error_of([&] { discover_gpus(runner, test::smi_tools("/usr/bin/nvidia-smi")); });
  EXPECT_NE(e.find(msg), std::string::npos) << e;
  EXPECT_NE(e.find("exit 9"), std::string::npos) << e;
  EXPECT_NE(e.find("/usr/bin/nvidia-smi"), std::string::npos) << e;

  RecordingRunner killed([](const Command&) {
    CommandResult r;
    r.term_signal = 9;
    return r;
  });
  EXPECT_THROW(discover_gpus(killed, test::smi_tools("/usr/bin/nvidia-smi")), CudaMpsError);
}

TEST(DiscoverGpus, EmptyOrBadOutputIsAnError) {
  RecordingRunner empty([](const Command&) { return exited(0, ""); });
  std::string e = error_of([&] { discover_gpus(empty, test::smi_tools("/usr/bin/nvidia-smi")); });
  EXPECT_NE(e.find("no GPU"), std::string::npos) << e;
  RecordingRunner bad([](const Command&) { return exited(0, "No devices were found\n"); });
  EXPECT_THROW(discover_gpus(bad, test::smi_tools("/usr/bin/nvidia-smi")), CudaMpsError);
}

TEST(ParseNvidiaSmiQuery, ReadsComputeAndMigModesAsPrinted) {
  auto gpus = parse_nvidia_smi_query(
      "0, GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16, 00000000:17:00.0, Exclusive_Process, Disabled, NVIDIA H200\n"
      "1, GPU-1b2c3d4e-0000-1111-2222-333344445555, 00000000:18:00.0, Prohibited, Enabled, NVIDIA H200\n"
      "2, GPU-9a8b7c6d-aaaa-bbbb-cccc-ddddeeeeffff, 00000000:19:00.0, [Not Supported], [N/A], NVIDIA T4\n");
  ASSERT_EQ(gpus.size(), 3u);
  EXPECT_EQ(gpus[0].compute_mode, "Exclusive_Process");
  EXPECT_EQ(gpus[0].mig_mode, "Disabled");
  EXPECT_EQ(gpus[1].compute_mode, "Prohibited");
  EXPECT_EQ(gpus[1].mig_mode, "Enabled");
  EXPECT_EQ(gpus[2].compute_mode, "[Not Supported]");
  EXPECT_EQ(gpus[2].mig_mode, "[N/A]");
  EXPECT_EQ(gpus[2].minor_number, -1);
  EXPECT_EQ(gpus[2].name, "NVIDIA T4");
  // The 8-hex-digit PCI domain is kept as printed.
  EXPECT_EQ(gpus[0].pci_bus_id, "00000000:17:00.0");
  // Modes are state, not identity: not in the JSON, not compared.
  EXPECT_FALSE(gpus[1].to_json().contains("compute_mode"));
  GpuIdentity same = gpus[1];
  same.compute_mode = "Default";
  EXPECT_EQ(same, gpus[1]);
}

TEST(ParseNvidiaSmiQuery, TheOldFiveFieldShapeIsRefusedNamingTheSix) {
  std::string e = error_of([] {
    parse_nvidia_smi_query("0, GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16, 00000000:85:00.0, NVIDIA H200\n");
  });
  EXPECT_NE(e.find("expected 6 fields"), std::string::npos) << e;
}

TEST(ParseNvidiaSmiQuery, UpperCaseUuidsAreNormalisedOnceAndMatchAnySpelling) {
  // nvidia-smi may print the hex in upper case; the display form is decided
  // here, once, and every comparison after it is case-free.
  auto gpus = parse_nvidia_smi_query(
      "0, GPU-7FDAF0A5-179B-F636-D15D-DAF243E3FF16, 00000000:17:00.0, Default, Disabled, NVIDIA H200\n");
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_EQ(gpus[0].uuid, "GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16");
  EXPECT_EQ(find_gpu("gpu-7fdaf0a5-179b-f636-d15d-daf243e3ff16", gpus).index, 0);
  EXPECT_EQ(find_gpu("GPU-7FDAF0A5-179B-F636-D15D-DAF243E3FF16", gpus).index, 0);
}

TEST(DiscoverGpus, DefaultEnvironmentIsExactlyTheOldPath) {
  RecordingRunner runner([](const Command&) { return exited(0, test::smi_csv(test::four_gpus())); });
  discover_gpus(runner, test::smi_tools("/usr/bin/nvidia-smi"));
  ASSERT_EQ(runner.commands.size(), 1u);
  EXPECT_EQ(runner.commands[0].env, (std::vector<std::string>{"PATH=/usr/bin:/bin"}));
}

TEST(DiscoverGpus, DriverDirPutsItsBinInPathAndItsLib64InTheLinkerPath) {
  RecordingRunner runner([](const Command&) { return exited(0, test::smi_csv(test::four_gpus())); });
  auto gpus = discover_gpus(runner, test::smi_tools("/usr/local/nvidia/bin/nvidia-smi", "/usr/local/nvidia"));
  EXPECT_EQ(gpus.size(), 4u);
  ASSERT_EQ(runner.commands.size(), 1u);
  EXPECT_EQ(runner.commands[0].env, (std::vector<std::string>{"PATH=/usr/local/nvidia/bin:/usr/bin:/bin",
                                                              "LD_LIBRARY_PATH=/usr/local/nvidia/lib64"}));
}

TEST(DiscoverGpus, InfoRomExit14WithValidRowsIsAWarningNotAFailure) {
  const std::string rows = test::smi_csv(test::four_gpus());
  RecordingRunner runner([&](const Command&) {
    return exited(kNvidiaSmiInfoRomWarning, rows + "WARNING: infoROM is corrupted at gpu 00000000:85:00.0\n");
  });
  test::DriverProc driver(test::four_gpus());
  Tools tools = test::smi_tools("/usr/bin/nvidia-smi");
  tools.driver_proc = driver.path();
  GpuDiscovery d = query_gpus(runner, tools);
  EXPECT_EQ(d.gpus, test::four_gpus());
  ASSERT_TRUE(d.warning.has_value());
  EXPECT_NE(d.warning->find("infoROM is corrupted at gpu 00000000:85:00.0"), std::string::npos) << *d.warning;
  EXPECT_NE(d.warning->find("exited 14"), std::string::npos) << *d.warning;
  EXPECT_EQ(d.warning->find('\n'), std::string::npos);
  // On stderr instead of among the rows: the same.
  RecordingRunner on_stderr([&](const Command&) {
    return exited(kNvidiaSmiInfoRomWarning, rows, "WARNING: infoROM is corrupted at gpu 00000000:85:00.0\n");
  });
  d = query_gpus(on_stderr, test::smi_tools("/usr/bin/nvidia-smi"));
  ASSERT_TRUE(d.warning.has_value());
  EXPECT_NE(d.warning->find("infoROM is corrupted"), std::string::npos) << *d.warning;
  // A clean run has no warning.
  RecordingRunner clean([&](const Command&) { return exited(0, rows); });
  EXPECT_FALSE(query_gpus(clean, test::smi_tools("/usr/bin/nvidia-smi")).warning.has_value());
}

TEST(DiscoverGpus, Exit14WithoutValidRowsAndOtherExitCodesStillFail) {
  RecordingRunner no_rows([](const Command&) { return exited(kNvidiaSmiInfoRomWarning, "WARNING: infoROM is corrupted\n"); });
  EXPECT_THROW(discover_gpus(no_rows, test::smi_tools("/usr/bin/nvidia-smi")), CudaMpsError);
  RecordingRunner garbage([](const Command&) { return exited(kNvidiaSmiInfoRomWarning, "something else\n"); });
  EXPECT_THROW(discover_gpus(garbage, test::smi_tools("/usr/bin/nvidia-smi")), CudaMpsError);
  const std::string rows = test::smi_csv(test::four_gpus());
  RecordingRunner exit15([&](const Command&) { return exited(15, rows); });
  std::string e = error_of([&] { discover_gpus(exit15, test::smi_tools("/usr/bin/nvidia-smi")); });
  EXPECT_NE(e.find("exit 15"), std::string::npos) << e;
}

// --- the minors, from the driver -------------------------------------------------

TEST(DriverMinors, ComeFromEachGpusInformationFileByBusId) {
  const auto gpus = test::four_gpus();  // minors 2, 0, 3, 1: neither index nor bus order
  test::DriverProc driver(gpus);
  RecordingRunner runner([&](const Command&) { return exited(0, test::smi_csv(gpus)); });
  Tools tools = test::smi_tools("/usr/bin/nvidia-smi");
  tools.driver_proc = driver.path();
  const auto found = discover_gpus(runner, tools);
  ASSERT_EQ(found.size(), 4u);
  for (size_t i = 0; i < gpus.size(); ++i) EXPECT_EQ(found[i].minor_number, gpus[i].minor_number) << found[i].uuid;
  // Still one process: the minors are files, not another nvidia-smi.
  EXPECT_EQ(runner.commands.size(), 1u);
  // No driver view: every minor unknown, nothing else changes.
  tools.driver_proc = driver.path() + "/missing";
  for (const auto& g : discover_gpus(runner, tools)) EXPECT_EQ(g.minor_number, -1);
}

TEST(DriverMinors, AFileNamingAnotherUuidIsNotBelieved) {
  auto gpus = test::four_gpus();
  test::DriverProc driver(gpus);
  // GPU 0's bus directory holds another GPU's information.
  test::write_text(driver.path() + "/nvidia/gpus/" + driver_bus_directory(gpus[0].pci_bus_id) + "/information",
             "GPU UUID: \t " + gpus[1].uuid + "\nDevice Minor: \t 7\n");
  read_driver_minors(gpus, driver.path());
  EXPECT_EQ(gpus[0].minor_number, 2);  // unchanged: -1 only when read fresh
  auto fresh = test::four_gpus();
  for (auto& g : fresh) g.minor_number = -1;
  read_driver_minors(fresh, driver.path());
  EXPECT_EQ(fresh[0].minor_number, -1);
  EXPECT_EQ(fresh[1].minor_number, 0);
}

TEST(DriverMinors, ParsesTheRealFileAndTheBusDirectoryName) {
  // /proc/driver/nvidia/gpus/0000:00:06.0/information on the H200 check machine (driver 580.159.04).
  const auto info = parse_driver_gpu_information(
      "Model: \t\t NVIDIA H200\nIRQ:   \t\t 41\nGPU UUID: \t GPU-49d58e66-7902-aa09-4f59-82488b57f071\nVideo BIOS: \t "
      "96.00.a5.00.1a\nBus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t "
      "0000:00:06.0\nDevice Minor: \t 0\nGPU Firmware: \t 580.159.04\nGPU Excluded:\t No\n");
  EXPECT_EQ(info.uuid, "GPU-49d58e66-7902-aa09-4f59-82488b57f071");
  EXPECT_EQ(info.minor, 0);
  EXPECT_FALSE(parse_driver_gpu_information("Device Minor: \t x\n").minor.has_value());
  EXPECT_EQ(driver_bus_directory("00000000:2A:00.0"), "0000:2a:00.0");
  EXPECT_EQ(driver_bus_directory("0000:2a:00.0"), "0000:2a:00.0");
  // A bus id that would walk elsewhere is never a path.
  std::vector<GpuIdentity> odd{test::make_gpu(0, test::kUuid0, -1, "../../etc")};
  read_driver_minors(odd, "/proc/driver");
  EXPECT_EQ(odd[0].minor_number, -1);
}

// --- visible_gpus -------------------------------------------------------------

std::vector<GpuIdentity> host() { return test::four_gpus(); }

std::vector<std::string> uuids(const std::vector<GpuIdentity>& gpus) {
  std::vector<std::string> out;
  for (const auto& g : gpus) out.push_back(g.uuid);
  return out;
}

TEST(VisibleGpus, UnsetMeansAllEmptyOrMinusOneMeansNone) {
  EXPECT_EQ(visible_gpus(std::nullopt, host()), host());
  EXPECT_TRUE(visible_gpus(std::string(""), host()).empty());
  EXPECT_TRUE(visible_gpus(std::string("-1"), host()).empty());
  // CUDA stops at the first invalid entry: nothing after -1 is reached.
  EXPECT_EQ(uuids(visible_gpus(std::string("2,-1,0"), host())), (std::vector<std::string>{test::kUuid2}));
}

TEST(VisibleGpus, IndicesKeepMaskOrder) {
  EXPECT_EQ(uuids(visible_gpus(std::string("3,1"), host())), (std::vector<std::string>{test::kUuid3, test::kUuid1}));
  EXPECT_EQ(uuids(visible_gpus(std::string(" 0 , 2 "), host())), (std::vector<std::string>{test::kUuid0, test::kUuid2}));
}

TEST(VisibleGpus, FullUuidsInAnySpelling) {
  EXPECT_EQ(uuids(visible_gpus(std::string("9A8B7C6DAAAABBBBCCCCDDDDEEEEFFFF,gpu-7fdaf0a5-179b-f636-d15d-daf243e3ff16"), host())),
            (std::vector<std::string>{test::kUuid2, test::kUuid0}));
  EXPECT_EQ(uuids(visible_gpus(std::string("1b2c3d4e-0000-1111-2222-333344445555"), host())),
            (std::vector<std::string>{test::kUuid1}));
}

TEST(VisibleGpus, UniquePrefixesResolve) {
  EXPECT_EQ(uuids(visible_gpus(std::string("GPU-9a8b"), host())), (std::vector<std::string>{test::kUuid2}));
  EXPECT_EQ(uuids(visible_gpus(std::string("0f0e0d0c"), host())), (std::vector<std::string>{test::kUuid3}));
}

TEST(VisibleGpus, AmbiguousPrefixIsAnErrorNamingIt) {
  auto gpus = host();
  gpus.push_back(test::make_gpu(4, "GPU-7fdaf0a5-0000-0000-0000-000000000000", 4, "00000000:E5:00.0"));
  std::string e = error_of([&] { visible_gpus(std::string("GPU-7fda"), gpus); });
  EXPECT_NE(e.find("GPU-7fda"), std::string::npos) << e;
  EXPECT_NE(e.find("ambiguous"), std::string::npos) << e;
  // The full UUID is still unambiguous.
  EXPECT_EQ(uuids(visible_gpus(test::kUuid0, gpus)), (std::vector<std::string>{test::kUuid0}));
}

TEST(VisibleGpus, UnknownEntriesAreErrorsNamingThem) {
  std::string e = error_of([] { visible_gpus(std::string("0,7"), host()); });
  EXPECT_NE(e.find("7"), std::string::npos) << e;
  EXPECT_NE(e.find("does not exist"), std::string::npos) << e;
  e = error_of([] { visible_gpus(std::string("GPU-deadbeef"), host()); });
  EXPECT_NE(e.find("GPU-deadbeef"), std::string::npos) << e;
  e = error_of([] { visible_gpus(std::string("fast-gpu"), host()); });
  EXPECT_NE(e.find("fast-gpu"), std::string::npos) << e;
}

TEST(VisibleGpus, DuplicatesAreErrors) {
  EXPECT_THROW(visible_gpus(std::string("0,0"), host()), CudaMpsError);
  // The same GPU by index and by UUID.
  std::string e = error_of([] { visible_gpus(std::string("0," + test::kUuid0), host()); });
  EXPECT_NE(e.find("twice"), std::string::npos) << e;
}

TEST(VisibleGpus, MigEntriesAreRejected) {
  std::string e = error_of([] { visible_gpus(std::string("MIG-7fdaf0a5-179b-f636-d15d-daf243e3ff16"), host()); });
  EXPECT_NE(e.find("MIG"), std::string::npos) << e;
}

TEST(FindGpu, ResolvesOneEntry) {
  auto gpus = host();
  EXPECT_EQ(find_gpu("2", gpus).uuid, test::kUuid2);
  EXPECT_EQ(find_gpu("GPU-1B2C", gpus).uuid, test::kUuid1);
  EXPECT_THROW(find_gpu("4", gpus), CudaMpsError);
  EXPECT_THROW(find_gpu("", gpus), CudaMpsError);
}

TEST(SplitMaskAndJoin, TrimAndSkipEmptyEntries) {
  EXPECT_EQ(split_mask(" 0, 1 ,,2 "), (std::vector<std::string>{"0", "1", "2"}));
  EXPECT_TRUE(split_mask("").empty());
  EXPECT_EQ(join({"a", "b", "c"}, ","), "a,b,c");
  EXPECT_EQ(join({}, ","), "");
}

// --- resolve_mps_visibility_entries -------------------------------------------

TEST(ResolveMpsVisibility, NumericEntriesBecomeUuids) {
  EXPECT_EQ(resolve_mps_visibility_entries({"2", " 0 "}, host()), (std::vector<std::string>{test::kUuid2, test::kUuid0}));
}

TEST(ResolveMpsVisibility, UuidMigAndMinusOnePassThroughUnchanged) {
  std::vector<std::string> in = {"gpu-7FDAF0A5-179b-f636-d15d-daf243e3ff16", "MIG-1b2c3d4e-0000-1111-2222-333344445555",
                                 "-1"};
  EXPECT_EQ(resolve_mps_visibility_entries(in, host()), in);
  EXPECT_EQ(resolve_mps_visibility_entries({"1", "-1"}, host()), (std::vector<std::string>{test::kUuid1, "-1"}));
}

TEST(ResolveMpsVisibility, UnknownIndexIsAnErrorNamingIt) {
  std::string e = error_of([] { resolve_mps_visibility_entries({"0", "12"}, host()); });
  EXPECT_NE(e.find("12"), std::string::npos) << e;
}

TEST(ResolveMpsVisibility, RunnerOverloadSkipsNvidiaSmiWithoutNumericEntries) {
  RecordingRunner runner([](const Command&) { return exited(9, "should not run"); });
  std::vector<std::string> in = {test::kUuid1, "MIG-1b2c3d4e-0000-1111-2222-333344445555", "-1"};
  EXPECT_EQ(resolve_mps_visibility_entries(in, runner, "/usr/bin/nvidia-smi"), in);
  EXPECT_TRUE(runner.commands.empty());
}

TEST(ResolveMpsVisibility, RunnerOverloadDiscoversOnceForNumericEntries) {
  RecordingRunner runner([](const Command&) { return exited(0, test::smi_csv(test::four_gpus())); });
  EXPECT_EQ(resolve_mps_visibility_entries({"3", test::kUuid0}, runner, "/usr/bin/nvidia-smi"),
            (std::vector<std::string>{test::kUuid3, test::kUuid0}));
  EXPECT_EQ(runner.commands.size(), 1u);
  RecordingRunner broken([](const Command&) { return exited(9, "NVIDIA-SMI has failed"); });
  EXPECT_THROW(resolve_mps_visibility_entries({"0"}, broken, "/usr/bin/nvidia-smi"), CudaMpsError);
}

}  // namespace
}  // namespace unilab::mps
