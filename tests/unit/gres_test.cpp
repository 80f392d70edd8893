#include "common/slurm/gres.hpp"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <map>

#include "common/mps/errors.hpp"
#include "tests/unit/doubles.hpp"

namespace unilab::mps {
namespace {

using test::error_of;
using Strings = std::vector<std::string>;

// --- expand_hostlist ---------------------------------------------------------------

TEST(ExpandHostlist, RangesAndLists) {
  EXPECT_EQ(expand_hostlist("n[1-3,7]"), (Strings{"n1", "n2", "n3", "n7"}));
  EXPECT_EQ(expand_hostlist("n1,n2,gpu-a"), (Strings{"n1", "n2", "gpu-a"}));
  EXPECT_EQ(expand_hostlist("n[1-2],gpu-a,m[5]"), (Strings{"n1", "n2", "gpu-a", "m5"}));
  EXPECT_EQ(expand_hostlist("node7"), (Strings{"node7"}));
  EXPECT_EQ(expand_hostlist(" n[1-2] "), (Strings{"n1", "n2"}));
  EXPECT_TRUE(expand_hostlist("").empty());
}

TEST(ExpandHostlist, ZeroPaddingIsKept) {
  EXPECT_EQ(expand_hostlist("n[01-03]"), (Strings{"n01", "n02", "n03"}));
  EXPECT_EQ(expand_hostlist("n[008-011]"), (Strings{"n008", "n009", "n010", "n011"}));
  EXPECT_EQ(expand_hostlist("n[9-10]"), (Strings{"n9", "n10"}));
}

TEST(ExpandHostlist, DeviceFileRanges) {
  EXPECT_EQ(expand_hostlist("/dev/nvidia[0-3]"), (Strings{"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2", "/dev/nvidia3"}));
  EXPECT_EQ(expand_hostlist("/dev/nvidia[1,3,5,7]"), (Strings{"/dev/nvidia1", "/dev/nvidia3", "/dev/nvidia5", "/dev/nvidia7"}));
  EXPECT_EQ(expand_hostlist("/dev/nvidia0,/dev/nvidia2"), (Strings{"/dev/nvidia0", "/dev/nvidia2"}));
}

TEST(ExpandHostlist, SuffixAfterTheBracket) {
  EXPECT_EQ(expand_hostlist("rack[1-2]-gpu"), (Strings{"rack1-gpu", "rack2-gpu"}));
  EXPECT_EQ(expand_hostlist("r[1-2]n[1-2]"), (Strings{"r1n1", "r1n2", "r2n1", "r2n2"}));
}

TEST(ExpandHostlist, MalformedThrows) {
  for (const char* bad : {"n[1-3", "n[3-1]", "n[a-b]", "n[1-]", "n[-1]", "n[]", "n[1-2-3]", "n[0-999999]"}) {
    EXPECT_THROW(expand_hostlist(bad), CudaMpsError) << bad;
  }
  std::string e = error_of([] { expand_hostlist("n[x]"); });
  EXPECT_NE(e.find("n[x]"), std::string::npos) << e;
}

// --- parse_gres_conf -------------------------------------------------------------------

// The files of single-file (File=) entries, in GRES order.
Strings files_of(const GresConf& g) {
  Strings out;
  for (const auto& e : g.gpus) out.insert(out.end(), e.files.begin(), e.files.end());
  return out;
}
// One File= entry per file.
std::vector<GresGpuEntry> entries(const Strings& files) {
  std::vector<GresGpuEntry> out;
  for (const auto& f : files) out.push_back({{f}, ""});
  return out;
}

TEST(ParseGresConf, NodeNameFiltersLines) {
  const std::string conf =
      "# GPUs of the two test nodes\n"
      "NodeName=n[1-2] Name=gpu File=/dev/nvidia[0-1]\n"
      "NodeName=n3 Name=gpu File=/dev/nvidia[4-5]\n";
  EXPECT_EQ(files_of(parse_gres_conf(conf, "n1")), (Strings{"/dev/nvidia0", "/dev/nvidia1"}));
  EXPECT_EQ(files_of(parse_gres_conf(conf, "n2")), (Strings{"/dev/nvidia0", "/dev/nvidia1"}));
  EXPECT_EQ(files_of(parse_gres_conf(conf, "n3")), (Strings{"/dev/nvidia4", "/dev/nvidia5"}));
  EXPECT_TRUE(files_of(parse_gres_conf(conf, "n4")).empty());
  EXPECT_FALSE(parse_gres_conf(conf, "n1").autodetect);
}

TEST(ParseGresConf, LinesWithoutNodeNameApplyEverywhereInOrder) {
  const std::string conf =
      "Name=gpu File=/dev/nvidia3\n"
      "NodeName=other Name=gpu File=/dev/nvidia9\n"
      "Name=gpu File=/dev/nvidia1\n";
  EXPECT_EQ(files_of(parse_gres_conf(conf, "n1")), (Strings{"/dev/nvidia3", "/dev/nvidia1"}));
}

TEST(ParseGresConf, CommentsBlankLinesContinuationsAndIgnoredKeys) {
  const std::string conf =
      "\n"
      "   # indented comment\n"
      "Name=gpu Type=h200 File=/dev/nvidia[2-3] Cores=0-15   # trailing comment\n"
      "Name=gpu \\\n"
      "   Type=a100 \\\n"
      "   File=/dev/nvidia7 Cores=16,17 Flags=nvidia_gpu_env\n"
      "Name=mps Count=400\n"
      "Name=shard Count=8 File=/dev/nvidia0\n"
      "\n";
  GresConf g = parse_gres_conf(conf, "n1");
  EXPECT_EQ(files_of(g), (Strings{"/dev/nvidia2", "/dev/nvidia3", "/dev/nvidia7"}));
  EXPECT_FALSE(g.autodetect);
}

TEST(ParseGresConf, KeysAreCaseInsensitive) {
  GresConf g = parse_gres_conf("nodename=n1 name=gpu file=/dev/nvidia1\nAUTODETECT=nvml\n", "n1");
  EXPECT_EQ(files_of(g), (Strings{"/dev/nvidia1"}));
  EXPECT_TRUE(g.autodetect);
}

TEST(ParseGresConf, AutoDetect) {
  EXPECT_TRUE(parse_gres_conf("AutoDetect=nvml\n", "n1").autodetect);
  EXPECT_TRUE(parse_gres_conf("AutoDetect=nvidia", "n1").autodetect);  // no final newline
  EXPECT_FALSE(parse_gres_conf("AutoDetect=off\n", "n1").autodetect);
  EXPECT_FALSE(parse_gres_conf("AutoDetect=nvml\nAutoDetect=off\n", "n1").autodetect);
  // Per node.
  const std::string conf = "NodeName=n1 AutoDetect=nvml\nNodeName=n2 AutoDetect=off Name=gpu File=/dev/nvidia0\n";
  EXPECT_TRUE(parse_gres_conf(conf, "n1").autodetect);
  EXPECT_FALSE(parse_gres_conf(conf, "n2").autodetect);
  EXPECT_EQ(files_of(parse_gres_conf(conf, "n2")), (Strings{"/dev/nvidia0"}));
}

TEST(ParseGresConf, BadLinesNameTheLine) {
  std::string e = error_of([] { parse_gres_conf("Name=gpu File=/dev/nvidia0\nName=gpu junk\n", "n1"); });
  EXPECT_NE(e.find("line 2"), std::string::npos) << e;
  EXPECT_NE(e.find("junk"), std::string::npos) << e;
  EXPECT_THROW(parse_gres_conf("Name=gpu File=/dev/nvidia[0-\n", "n1"), CudaMpsError);
}

// --- map_node_gpus ------------------------------------------------------------------------

// Device file -> minor, injected (no real /dev needed). The names say nothing
// about the minors on purpose.
std::map<std::string, int>& fake_minors() {
  static std::map<std::string, int> m;
  return m;
}
int fake_minor_of(const std::string& path) {
  auto it = fake_minors().find(path);
  return it == fake_minors().end() ? -1 : it->second;
}

// nvidia-smi index -> minor: 0->2, 1->0, 2->3, 3->1 (test::four_gpus()).
TEST(MapNodeGpus, GresIndexGoesThroughTheDeviceMinorToTheUuid) {
  fake_minors() = {{"/dev/gpuA", 3}, {"/dev/gpuB", 1}, {"/dev/gpuC", 0}, {"/dev/gpuD", 2}};
  GresConf conf;
  conf.gpus = entries({"/dev/gpuA", "/dev/gpuB", "/dev/gpuC", "/dev/gpuD"});  // GRES order: minors 3,1,0,2
  auto node = map_node_gpus(conf, test::four_gpus(), fake_minor_of);
  ASSERT_EQ(node.size(), 4u);
  // GRES 0 -> minor 3 -> nvidia-smi index 2.
  EXPECT_EQ(node[0], (NodeGpu{0, "/dev/gpuA", 3, test::kUuid2, std::nullopt}));
  // GRES 1 -> minor 1 -> index 3.
  EXPECT_EQ(node[1], (NodeGpu{1, "/dev/gpuB", 1, test::kUuid3, std::nullopt}));
  // GRES 2 -> minor 0 -> index 1.
  EXPECT_EQ(node[2], (NodeGpu{2, "/dev/gpuC", 0, test::kUuid1, std::nullopt}));
  // GRES 3 -> minor 2 -> index 0.
  EXPECT_EQ(node[3], (NodeGpu{3, "/dev/gpuD", 2, test::kUuid0, std::nullopt}));
}

TEST(MapNodeGpus, ASubsetOfTheGpusInGresOrder) {
  // Seen live: File=/dev/nvidia[1,3] gives GRES indices 0,1.
  fake_minors() = {{"/dev/nvidia1", 1}, {"/dev/nvidia3", 3}};
  GresConf conf;
  conf.gpus = entries({"/dev/nvidia1", "/dev/nvidia3"});
  auto node = map_node_gpus(conf, test::four_gpus(), fake_minor_of);
  ASSERT_EQ(node.size(), 2u);
  EXPECT_EQ(node[0].uuid, test::kUuid3);  // minor 1 is nvidia-smi index 3
  EXPECT_EQ(node[1].uuid, test::kUuid2);  // minor 3 is nvidia-smi index 2
}

TEST(MapNodeGpus, AFileMatchingNoGpuIsAnErrorNamingTheGresIndexAndDevice) {
  fake_minors() = {{"/dev/nvidia0", 0}, {"/dev/nvidia9", 9}};
  GresConf conf;
  conf.gpus = entries({"/dev/nvidia0", "/dev/nvidia9"});
  std::string e = error_of([&] { map_node_gpus(conf, test::four_gpus(), fake_minor_of); });
  EXPECT_NE(e.find("GRES gpu index 1"), std::string::npos) << e;
  EXPECT_NE(e.find("/dev/nvidia9"), std::string::npos) << e;
  EXPECT_NE(e.find("minor 9"), std::string::npos) << e;
}

TEST(MapNodeGpus, ANonDeviceFileIsAnError) {
  fake_minors() = {};
  GresConf conf;
  conf.gpus = entries({"/dev/missing0"});
  std::string e = error_of([&] { map_node_gpus(conf, test::four_gpus(), fake_minor_of); });
  EXPECT_NE(e.find("GRES gpu index 0"), std::string::npos) << e;
  EXPECT_NE(e.find("/dev/missing0"), std::string::npos) << e;
}

TEST(MapNodeGpus, AutoDetectSortsByPciBusId) {
  GresConf conf;
  conf.autodetect = true;
  auto node = map_node_gpus(conf, test::four_gpus(), fake_minor_of);
  // Bus ids: idx0 85, idx1 05, idx2 C5, idx3 45 -> order 1, 3, 0, 2.
  ASSERT_EQ(node.size(), 4u);
  EXPECT_EQ(node[0], (NodeGpu{0, "/dev/nvidia0", 0, test::kUuid1, std::nullopt}));
  EXPECT_EQ(node[1], (NodeGpu{1, "/dev/nvidia1", 1, test::kUuid3, std::nullopt}));
  EXPECT_EQ(node[2], (NodeGpu{2, "/dev/nvidia2", 2, test::kUuid0, std::nullopt}));
  EXPECT_EQ(node[3], (NodeGpu{3, "/dev/nvidia3", 3, test::kUuid2, std::nullopt}));
}

TEST(MapNodeGpus, NoFilesAndNoAutoDetectIsAnError) {
  std::string e = error_of([] { map_node_gpus(GresConf{}, test::four_gpus(), fake_minor_of); });
  EXPECT_NE(e.find("AutoDetect"), std::string::npos) << e;
}

// --- MIG slices -----------------------------------------------------------------------

// mig_gpus(): GPU 1 (minor 0) has MIG enabled, MIG device 0 = GI 1 CI 0,
// device 1 = GI 5 CI 0. The driver's minors: gpu0/gi1 12, its ci0 13;
// gpu0/gi5 48, its ci0 49.
MigCaps mig_caps() {
  MigCaps c;
  c.minors = MigMinors::parse("config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\n"
                              "gpu0/gi5/access 48\ngpu0/gi5/ci0/access 49\n");
  return c;
}

TEST(ParseGresConf, MultipleFilesIsOneGresOverSeveralFiles) {
  const std::string conf =
      "NodeName=n1 Name=gpu Type=h200 File=/dev/nvidia2\n"
      "NodeName=n1 Name=gpu Type=1g.18gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap[48-49]\n"
      "NodeName=n1 Name=gpu Type=3g.71gb MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap12,/dev/nvidia-caps/nvidia-cap13\n";
  GresConf g = parse_gres_conf(conf, "n1");
  ASSERT_EQ(g.gpus.size(), 3u);
  EXPECT_EQ(g.gpus[0], (GresGpuEntry{{"/dev/nvidia2"}, "h200"}));
  EXPECT_EQ(g.gpus[1], (GresGpuEntry{{"/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap48", "/dev/nvidia-caps/nvidia-cap49"}, "1g.18gb"}));
  EXPECT_EQ(g.gpus[2].files.size(), 3u);
  // As Slurm refuses them: both keys on a line, or one file for MultipleFiles=.
  EXPECT_THROW(parse_gres_conf("Name=gpu File=/dev/nvidia0 MultipleFiles=/dev/nvidia0,/dev/x\n", "n1"), CudaMpsError);
  std::string e = error_of([] { parse_gres_conf("Name=gpu MultipleFiles=/dev/nvidia0\n", "n1"); });
  EXPECT_NE(e.find("line 1"), std::string::npos) << e;
  EXPECT_NE(e.find("use File="), std::string::npos) << e;
}

TEST(OrderGresAsSlurm, SlurmConfsTypesDecideTheIndices) {
  // gres.conf in the driver's order; slurm.conf types in another. Seen with
  // `slurmd -G` on 22.05.8: the 1g.18gb lines come before the 3g.71gb ones.
  GresConf conf;
  conf.gpus = {{{"/dev/nvidia2"}, "h200"},  {{"/dev/nvidia0", "c12", "c13"}, "3g.71gb"},
               {{"/dev/nvidia0", "c48", "c49"}, "1g.18gb"}, {{"/dev/nvidia1", "c147", "c148"}, "3g.71gb"},
               {{"/dev/nvidia1", "c183", "c184"}, "1G.18GB"}, {{"/dev/nvidia3"}, "h200"}};
  GresConf typed = conf;
  order_gres_as_slurm(typed, {{"h200", 2}, {"1g.18gb", 2}, {"3g.71gb", 2}});
  std::vector<std::string> order;
  for (const auto& e : typed.gpus) order.push_back(e.files.back());
  EXPECT_EQ(order, (Strings{"/dev/nvidia2", "/dev/nvidia3", "c49", "c184", "c13", "c148"}));
  // Untyped: file order. Beyond the counts: no index (Slurm discards the line).
  GresConf untyped = conf;
  order_gres_as_slurm(untyped, {{"", 4}});
  ASSERT_EQ(untyped.gpus.size(), 4u);
  EXPECT_EQ(untyped.gpus[1].files.back(), "c13");
  GresConf fewer = conf;
  order_gres_as_slurm(fewer, {{"h200", 1}, {"1g.18gb", 1}});
  ASSERT_EQ(fewer.gpus.size(), 2u);
  EXPECT_EQ(fewer.gpus[1].files.back(), "c49");
  // No Gres= known: as written.
  GresConf same = conf;
  order_gres_as_slurm(same, {});
  EXPECT_EQ(same.gpus, conf.gpus);
}

TEST(MapNodeGpus, AMigGresGoesThroughItsCapabilityMinorsToTheMigUuid) {
  fake_minors() = {{"/dev/nvidia0", 0}, {"/dev/nvidia2", 2}, {"/dev/nvidia-caps/nvidia-cap12", 12},
                   {"/dev/nvidia-caps/nvidia-cap13", 13}, {"/dev/nvidia-caps/nvidia-cap48", 48},
                   {"/dev/nvidia-caps/nvidia-cap49", 49}};
  GresConf conf;
  conf.gpus = {{{"/dev/nvidia2"}, ""},
               {{"/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap48", "/dev/nvidia-caps/nvidia-cap49"}, "1g.18gb"},
               {{"/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia-caps/nvidia-cap13"}, "3g.71gb"}};
  auto node = map_node_gpus(conf, test::mig_gpus(), fake_minor_of, mig_caps());
  ASSERT_EQ(node.size(), 3u);
  EXPECT_EQ(node[0].uuid, test::kUuid0);  // minor 2: a whole GPU
  EXPECT_FALSE(node[0].mig.has_value());
  // GRES 1: gpu0 gi5 ci0 -> MIG device 1; its own file is the CI capability.
  EXPECT_EQ(node[1].uuid, test::kMig1);
  EXPECT_EQ(node[1].device, "/dev/nvidia-caps/nvidia-cap49");
  EXPECT_EQ(node[1].minor, 49);
  ASSERT_TRUE(node[1].mig.has_value());
  EXPECT_EQ(node[1].mig->parent_uuid, test::kUuid1);
  EXPECT_EQ(node[1].mig->gpu_instance, 5);
  EXPECT_EQ(node[2].uuid, test::kMig0);
  EXPECT_EQ(node[2].device, "/dev/nvidia-caps/nvidia-cap13");
}

TEST(MapNodeGpus, AMigGresThatNamesNoSliceSaysWhichLink) {
  fake_minors() = {{"/dev/nvidia0", 0}, {"/dev/nvidia2", 2}, {"/dev/c12", 12}, {"/dev/c13", 13}, {"/dev/c49", 49}};
  auto error_for = [&](const std::vector<std::string>& files, const MigCaps& caps) {
    GresConf conf;
    conf.gpus = {{files, ""}};
    return error_of([&] { map_node_gpus(conf, test::mig_gpus(), fake_minor_of, caps); });
  };
  // GI 1's capability with GI 5's compute instance: no such instance.
  std::string e = error_for({"/dev/nvidia0", "/dev/c12", "/dev/c49"}, mig_caps());
  EXPECT_NE(e.find("GRES gpu index 0"), std::string::npos) << e;
  EXPECT_NE(e.find("capability minors 12 and 49 are no GPU instance and compute instance of gpu0"), std::string::npos) << e;
  // Two files: a MIG slice is three.
  e = error_for({"/dev/nvidia0", "/dev/c12"}, mig_caps());
  EXPECT_NE(e.find("three files"), std::string::npos) << e;
  // A parent without MIG.
  e = error_for({"/dev/nvidia2", "/dev/c12", "/dev/c13"}, mig_caps());
  EXPECT_NE(e.find("has MIG disabled"), std::string::npos) << e;
  // No mig-minors: the reason comes through.
  MigCaps none;
  none.error = "cannot read /proc/driver/nvidia-caps/mig-minors (it does not exist)";
  e = error_for({"/dev/nvidia0", "/dev/c12", "/dev/c13"}, none);
  EXPECT_NE(e.find("mig-minors (it does not exist)"), std::string::npos) << e;
  // nvidia-smi does not list the instance (MIG reconfigured since gres.conf was written).
  auto caps = mig_caps();
  caps.minors = MigMinors::parse("gpu0/gi2/access 21\ngpu0/gi2/ci0/access 22\n");
  fake_minors()["/dev/c21"] = 21;
  fake_minors()["/dev/c22"] = 22;
  e = error_for({"/dev/nvidia0", "/dev/c21", "/dev/c22"}, caps);
  EXPECT_NE(e.find("no MIG device with GPU instance 2 and compute instance 0"), std::string::npos) << e;
}

TEST(MapNodeGpus, AutoDetectPutsWholeGpusFirstThenMigDevicesAsSlurmDoes) {
  GresConf conf;
  conf.autodetect = true;
  auto node = map_node_gpus(conf, test::mig_gpus(), fake_minor_of, mig_caps());
  // Whole GPUs without MIG in bus order (idx3 45, idx0 85, idx2 C5); the
  // MIG-enabled GPU 1 is no GRES; its devices follow by GI capability minor.
  ASSERT_EQ(node.size(), 5u);
  EXPECT_EQ(node[0].uuid, test::kUuid3);
  EXPECT_EQ(node[2].uuid, test::kUuid2);
  EXPECT_EQ(node[3].uuid, test::kMig0);  // gi1: cap 12
  EXPECT_EQ(node[3].device, "/dev/nvidia-caps/nvidia-cap13");
  EXPECT_EQ(node[4].uuid, test::kMig1);  // gi5: cap 48
  EXPECT_EQ(node[4].gres_index, 4);
  // Without the driver's minors the MIG GRES cannot be told apart: refused.
  std::string e = error_of([&] { map_node_gpus(conf, test::mig_gpus(), fake_minor_of, MigCaps{std::nullopt, "no file"}); });
  EXPECT_NE(e.find("capability files are unknown (no file)"), std::string::npos) << e;
}

TEST(ApplySlurmUuids, SlurmsPairingWinsAndTheTableStaysAPermutation) {
  GresConf conf;
  conf.autodetect = true;
  const auto gpus = test::mig_gpus();
  auto table = map_node_gpus(conf, gpus, fake_minor_of, mig_caps());
  // Slurm 22.05 may order MIG GRES otherwise: its prolog says GRES 3 is MIG device 1.
  auto notes = apply_slurm_uuids(table, {3}, test::kMig1, gpus, mig_caps());
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("GRES index 3 is " + test::kMig1), std::string::npos) << notes[0];
  EXPECT_EQ(table[3].uuid, test::kMig1);
  EXPECT_EQ(table[3].device, "/dev/nvidia-caps/nvidia-cap49");
  EXPECT_EQ(table[3].gres_index, 3);
  EXPECT_EQ(table[4].uuid, test::kMig0);  // swapped, not duplicated
  EXPECT_EQ(table[4].gres_index, 4);
  // Agreeing, or indices (no UUID in the mask): nothing changes.
  auto before = table;
  EXPECT_TRUE(apply_slurm_uuids(table, {3, 4}, "  " + test::kMig1 + "," + test::kMig0, gpus, mig_caps()).empty());
  EXPECT_TRUE(apply_slurm_uuids(table, {0, 1}, std::string("0,1"), gpus, mig_caps()).empty());
  EXPECT_TRUE(apply_slurm_uuids(table, {0, 1}, std::nullopt, gpus, mig_caps()).empty());
  EXPECT_EQ(table, before);
  // Slurm names a device this node does not have, or the lists differ.
  std::string e = error_of([&] { apply_slurm_uuids(table, {3}, std::string("MIG-99999999-6f70-5b8c-9d0e-1f2a3b4c5d6e"), gpus, mig_caps()); });
  EXPECT_NE(e.find("which nvidia-smi does not list"), std::string::npos) << e;
  e = error_of([&] { apply_slurm_uuids(table, {3, 4}, test::kMig1, gpus, mig_caps()); });
  EXPECT_NE(e.find("do not pair up"), std::string::npos) << e;
}

TEST(DeviceMinor, ReadsCharacterDevicesOnly) {
  EXPECT_EQ(device_minor("/dev/null"), static_cast<int>(minor(makedev(1, 3))));
  EXPECT_EQ(device_minor("/etc/hostname"), -1);
  EXPECT_EQ(device_minor("/nonexistent/dev"), -1);
  if (test::is_root()) {
    test::TempDir tmp;
    ASSERT_EQ(mknod((tmp / "nvidia5").c_str(), S_IFCHR | 0666, makedev(195, 5)), 0);
    EXPECT_EQ(device_minor(tmp / "nvidia5"), 5);
  }
}

// --- parse_gpu_index_list ------------------------------------------------------------------

TEST(ParseGpuIndexList, ListsAndRanges) {
  EXPECT_EQ(parse_gpu_index_list("0,2"), (std::vector<int>{0, 2}));
  EXPECT_EQ(parse_gpu_index_list("0-3"), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(parse_gpu_index_list("0-1,5"), (std::vector<int>{0, 1, 5}));
  EXPECT_EQ(parse_gpu_index_list("3"), (std::vector<int>{3}));
  EXPECT_TRUE(parse_gpu_index_list("").empty());
  EXPECT_TRUE(parse_gpu_index_list("  ").empty());
}

TEST(ParseGpuIndexList, GarbageThrows) {
  for (const char* bad : {"a", "0,x", "1-", "-1", "gpu0", "0;1", "5000", "0-99999999"}) {
    EXPECT_THROW(parse_gpu_index_list(bad), CudaMpsError) << bad;
  }
}

}  // namespace
}  // namespace unilab::mps
