#include "common/mps/topology.hpp"

#include <gtest/gtest.h>

#include "common/mps/errors.hpp"
#include "tests/unit/doubles.hpp"

namespace unilab::mps {
namespace {

using test::error_of;
using test::four_gpus;

std::vector<std::string> uuids(const TopologyPlan& p) {
  std::vector<std::string> out;
  for (const auto& g : p.gpus) out.push_back(g.uuid);
  return out;
}

TEST(ResolveTopology, NoSelectorWithOneVisibleGpuIsSingleGpu) {
  auto plan = resolve_topology(std::nullopt, std::string("2"), four_gpus());
  EXPECT_EQ(plan.topology_mode, TopologyMode::kSingle);
  EXPECT_EQ(uuids(plan), (std::vector<std::string>{test::kUuid2}));
  EXPECT_EQ(plan.selector, "");
  // An empty selector is the same as none; a one-GPU host needs no mask.
  auto one = resolve_topology(std::string(""), std::nullopt, {four_gpus()[1]});
  EXPECT_EQ(one.topology_mode, TopologyMode::kSingle);
  EXPECT_EQ(uuids(one), (std::vector<std::string>{test::kUuid1}));
}

TEST(ResolveTopology, NoSelectorWithSeveralVisibleGpusListsThem) {
  std::string e = error_of([] { resolve_topology(std::nullopt, std::nullopt, four_gpus()); });
  EXPECT_NE(e.find("4 GPUs"), std::string::npos) << e;
  for (const auto& g : four_gpus()) EXPECT_NE(e.find(g.uuid), std::string::npos) << e;
  EXPECT_NE(e.find("per-gpu:"), std::string::npos) << e;
  e = error_of([] { resolve_topology(std::nullopt, std::string("0,3"), four_gpus()); });
  EXPECT_NE(e.find("2 GPUs"), std::string::npos) << e;
  EXPECT_EQ(e.find(test::kUuid1), std::string::npos) << e;  // hidden GPUs are not offered
  e = error_of([] { resolve_topology(std::nullopt, std::string("-1"), four_gpus()); });
  EXPECT_NE(e.find("no GPU is visible"), std::string::npos) << e;
}

TEST(ResolveTopology, IndexUuidOrPrefixSelectsOneGpu) {
  for (const std::string& sel : std::vector<std::string>{"3", test::kUuid3, "0F0E0D0C-1234-5678-9abc-def012345678", "GPU-0f0e", "0f0e0d0c"}) {
    auto plan = resolve_topology(sel, std::nullopt, four_gpus());
    EXPECT_EQ(plan.topology_mode, TopologyMode::kSingle) << sel;
    EXPECT_EQ(uuids(plan), (std::vector<std::string>{test::kUuid3})) << sel;
    EXPECT_EQ(plan.selector, sel);
  }
}

TEST(ResolveTopology, SeveralGpusAreOneMultiGpuDaemon) {
  auto plan = resolve_topology(std::string("2,0"), std::nullopt, four_gpus());
  EXPECT_EQ(plan.topology_mode, TopologyMode::kSingleTaskMulti);
  EXPECT_EQ(uuids(plan), (std::vector<std::string>{test::kUuid2, test::kUuid0}));
  plan = resolve_topology(std::string("1," + test::kUuid3), std::nullopt, four_gpus());
  EXPECT_EQ(plan.topology_mode, TopologyMode::kSingleTaskMulti);
  EXPECT_EQ(uuids(plan), (std::vector<std::string>{test::kUuid1, test::kUuid3}));
}

TEST(ResolveTopology, PerGpuIsTaskPerGpuEvenForOneGpu) {
  auto plan = resolve_topology(std::string("per-gpu:0,1"), std::nullopt, four_gpus());
  EXPECT_EQ(plan.topology_mode, TopologyMode::kPerGpu);
  EXPECT_EQ(uuids(plan), (std::vector<std::string>{test::kUuid0, test::kUuid1}));
  plan = resolve_topology(std::string("per-gpu:2"), std::nullopt, four_gpus());
  EXPECT_EQ(plan.topology_mode, TopologyMode::kPerGpu);
  EXPECT_EQ(uuids(plan), (std::vector<std::string>{test::kUuid2}));
  EXPECT_THROW(resolve_topology(std::string("per-gpu:"), std::nullopt, four_gpus()), CudaMpsError);
}

TEST(ResolveTopology, GpuHiddenByTheMaskIsAnError) {
  std::string e = error_of([] { resolve_topology(std::string("1"), std::string("0,2"), four_gpus()); });
  EXPECT_NE(e.find(test::kUuid1), std::string::npos) << e;
  EXPECT_NE(e.find("not visible"), std::string::npos) << e;
  EXPECT_NE(e.find("0,2"), std::string::npos) << e;
  // Indices are host indices even under a mask: "2" is GPU 2, visible here.
  auto plan = resolve_topology(std::string("2"), std::string("0,2"), four_gpus());
  EXPECT_EQ(uuids(plan), (std::vector<std::string>{test::kUuid2}));
}

TEST(ResolveTopology, DuplicatesAndUnknownsAreErrors) {
  std::string e = error_of([] { resolve_topology(std::string("0,0"), std::nullopt, four_gpus()); });
  EXPECT_NE(e.find("twice"), std::string::npos) << e;
  EXPECT_THROW(resolve_topology(std::string("per-gpu:1," + test::kUuid1), std::nullopt, four_gpus()), CudaMpsError);
  e = error_of([] { resolve_topology(std::string("9"), std::nullopt, four_gpus()); });
  EXPECT_NE(e.find("9"), std::string::npos) << e;
  EXPECT_THROW(resolve_topology(std::string(","), std::nullopt, four_gpus()), CudaMpsError);
}

TEST(ResolveTopology, PlanJsonCarriesModeAndGpus) {
  auto j = resolve_topology(std::string("per-gpu:0,1"), std::nullopt, four_gpus()).to_json();
  EXPECT_EQ(j["topology_mode"], "task_per_gpu");
  EXPECT_EQ(j["selector"], "per-gpu:0,1");
  ASSERT_EQ(j["gpus"].size(), 2u);
  EXPECT_EQ(j["gpus"][1]["uuid"], test::kUuid1);
}

TEST(ResolveTopology, MigDevicesAreGpusOneDaemonEach) {
  const auto gpus = test::mig_gpus();
  auto one = resolve_topology(test::kMig1, std::nullopt, gpus);
  EXPECT_EQ(one.topology_mode, TopologyMode::kSingle);
  EXPECT_EQ(one.gpus[0].uuid, test::kMig1);
  EXPECT_EQ(default_daemon_name(one.gpus), "mig-2b3c4d5e");
  auto per = resolve_topology("per-gpu:" + test::kMig0 + "," + test::kMig1, std::nullopt, gpus);
  EXPECT_EQ(per.topology_mode, TopologyMode::kPerGpu);
  EXPECT_EQ(per.gpus.size(), 2u);
  std::string e = error_of([&] { resolve_topology(test::kMig0 + "," + test::kMig1, std::nullopt, gpus); });
  EXPECT_NE(e.find("one daemon per MIG device; use per-gpu:"), std::string::npos) << e;
  e = error_of([&] { resolve_topology(std::string("0,") + test::kMig1, std::nullopt, gpus); });
  EXPECT_NE(e.find("one daemon per MIG device"), std::string::npos) << e;
  // The MIG-enabled GPU itself: why it cannot serve, not "not visible".
  e = error_of([&] { resolve_topology(std::string("1"), std::nullopt, gpus); });
  EXPECT_NE(e.find("has MIG enabled: MPS runs on its MIG devices"), std::string::npos) << e;
  // A mask of MIG UUIDs (a Slurm MIG task's) makes them the visible GPUs.
  auto masked = resolve_topology(std::nullopt, test::kMig0, gpus);
  EXPECT_EQ(masked.gpus[0].uuid, test::kMig0);
}

TEST(DefaultDaemonName, UsesTheFirstEightHexDigits) {
  auto gpus = four_gpus();
  EXPECT_EQ(default_daemon_name({gpus[0]}), "gpu-7fdaf0a5");
  EXPECT_EQ(default_daemon_name({gpus[2], gpus[0]}), "multi-9a8b7c6d-7fdaf0a5");
  EXPECT_EQ(topology_mode_words(), (std::vector<std::string>{"single_gpu", "single_task_multi_gpu", "task_per_gpu"}));
}

}  // namespace
}  // namespace unilab::mps
