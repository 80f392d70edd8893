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

TEST(ParseGresConf, NodeNameFiltersLines) {
  const std::string conf =
      "# GPUs of the two test nodes\n"
      "NodeName=n[1-2] Name=gpu File=/dev/nvidia[0-1]\n"
      "NodeName=n3 Name=gpu File=/dev/nvidia[4-5]\n";
  EXPECT_EQ(parse_gres_conf(conf, "n1").gpu_files, (Strings{"/dev/nvidia0", "/dev/nvidia1"}));
  EXPECT_EQ(parse_gres_conf(conf, "n2").gpu_files, (Strings{"/dev/nvidia0", "/dev/nvidia1"}));
  EXPECT_EQ(parse_gres_conf(conf, "n3").gpu_files, (Strings{"/dev/nvidia4", "/dev/nvidia5"}));
  EXPECT_TRUE(parse_gres_conf(conf, "n4").gpu_files.empty());
  EXPECT_FALSE(parse_gres_conf(conf, "n1").autodetect);
}

TEST(ParseGresConf, LinesWithoutNodeNameApplyEverywhereInOrder) {
  const std::string conf =
      "Name=gpu File=/dev/nvidia3\n"
      "NodeName=other Name=gpu File=/dev/nvidia9\n"
      "Name=gpu File=/dev/nvidia1\n";
  EXPECT_EQ(parse_gres_conf(conf, "n1").gpu_files, (Strings{"/dev/nvidia3", "/dev/nvidia1"}));
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
  EXPECT_EQ(g.gpu_files, (Strings{"/dev/nvidia2", "/dev/nvidia3", "/dev/nvidia7"}));
  EXPECT_FALSE(g.autodetect);
}

TEST(ParseGresConf, KeysAreCaseInsensitive) {
  GresConf g = parse_gres_conf("nodename=n1 name=gpu file=/dev/nvidia1\nAUTODETECT=nvml\n", "n1");
  EXPECT_EQ(g.gpu_files, (Strings{"/dev/nvidia1"}));
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
  EXPECT_EQ(parse_gres_conf(conf, "n2").gpu_files, (Strings{"/dev/nvidia0"}));
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
  conf.gpu_files = {"/dev/gpuA", "/dev/gpuB", "/dev/gpuC", "/dev/gpuD"};  // GRES order: minors 3,1,0,2
  auto node = map_node_gpus(conf, test::four_gpus(), fake_minor_of);
  ASSERT_EQ(node.size(), 4u);
  // GRES 0 -> minor 3 -> nvidia-smi index 2.
  EXPECT_EQ(node[0], (NodeGpu{0, "/dev/gpuA", 3, test::kUuid2}));
  // GRES 1 -> minor 1 -> index 3.
  EXPECT_EQ(node[1], (NodeGpu{1, "/dev/gpuB", 1, test::kUuid3}));
  // GRES 2 -> minor 0 -> index 1.
  EXPECT_EQ(node[2], (NodeGpu{2, "/dev/gpuC", 0, test::kUuid1}));
  // GRES 3 -> minor 2 -> index 0.
  EXPECT_EQ(node[3], (NodeGpu{3, "/dev/gpuD", 2, test::kUuid0}));
}

TEST(MapNodeGpus, ASubsetOfTheGpusInGresOrder) {
  // Seen live: File=/dev/nvidia[1,3] gives GRES indices 0,1.
  fake_minors() = {{"/dev/nvidia1", 1}, {"/dev/nvidia3", 3}};
  GresConf conf;
  conf.gpu_files = {"/dev/nvidia1", "/dev/nvidia3"};
  auto node = map_node_gpus(conf, test::four_gpus(), fake_minor_of);
  ASSERT_EQ(node.size(), 2u);
  EXPECT_EQ(node[0].uuid, test::kUuid3);  // minor 1 is nvidia-smi index 3
  EXPECT_EQ(node[1].uuid, test::kUuid2);  // minor 3 is nvidia-smi index 2
}

TEST(MapNodeGpus, AFileMatchingNoGpuIsAnErrorNamingTheGresIndexAndDevice) {
  fake_minors() = {{"/dev/nvidia0", 0}, {"/dev/nvidia9", 9}};
  GresConf conf;
  conf.gpu_files = {"/dev/nvidia0", "/dev/nvidia9"};
  std::string e = error_of([&] { map_node_gpus(conf, test::four_gpus(), fake_minor_of); });
  EXPECT_NE(e.find("GRES gpu index 1"), std::string::npos) << e;
  EXPECT_NE(e.find("/dev/nvidia9"), std::string::npos) << e;
  EXPECT_NE(e.find("minor 9"), std::string::npos) << e;
}

TEST(MapNodeGpus, ANonDeviceFileIsAnError) {
  fake_minors() = {};
  GresConf conf;
  conf.gpu_files = {"/dev/missing0"};
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
  EXPECT_EQ(node[0], (NodeGpu{0, "/dev/nvidia0", 0, test::kUuid1}));
  EXPECT_EQ(node[1], (NodeGpu{1, "/dev/nvidia1", 1, test::kUuid3}));
  EXPECT_EQ(node[2], (NodeGpu{2, "/dev/nvidia2", 2, test::kUuid0}));
  EXPECT_EQ(node[3], (NodeGpu{3, "/dev/nvidia3", 3, test::kUuid2}));
}

TEST(MapNodeGpus, NoFilesAndNoAutoDetectIsAnError) {
  std::string e = error_of([] { map_node_gpus(GresConf{}, test::four_gpus(), fake_minor_of); });
  EXPECT_NE(e.find("AutoDetect"), std::string::npos) << e;
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
