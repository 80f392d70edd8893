// `doctor --node`'s containment check: one line per site setup, naming what
// is missing.
#include <gtest/gtest.h>

#include "common/slurm/containment.hpp"

namespace unilab::mps {
namespace {

CgroupSite v1_site() {
  CgroupSite s;
  s.cgroup_plugin = "cgroup/v1";
  s.constrain_devices = true;
  s.proctrack_cgroup = true;
  s.prolog_contain = true;
  return s;
}

TEST(ContainmentAdvice, ContainOnV1IsReadyAndNamesTheControllers) {
  auto a = containment_advice(v1_site(), "auto", true);
  EXPECT_EQ(a.status, "ok");
  EXPECT_NE(a.detail.find("cgroup v1 (freezer,devices)"), std::string::npos) << a.detail;
  EXPECT_NE(a.detail.find("Contain"), std::string::npos) << a.detail;
}

TEST(ContainmentAdvice, ConstrainedDevicesWithoutPrologFlagsFailNamingContain) {
  CgroupSite s = v1_site();
  s.prolog_contain = false;
  auto a = containment_advice(s, "auto", true);
  EXPECT_EQ(a.status, "fail");
  EXPECT_NE(a.detail.find("PrologFlags=Contain"), std::string::npos) << a.detail;
}

TEST(ContainmentAdvice, V2NeedsRunInJob) {
  CgroupSite s = v1_site();
  s.cgroup_plugin = "cgroup/v2";
  auto a = containment_advice(s, "auto", false);
  EXPECT_EQ(a.status, "fail");
  EXPECT_NE(a.detail.find("RunInJob"), std::string::npos) << a.detail;
  s.prolog_run_in_job = true;
  EXPECT_EQ(containment_advice(s, "auto", false).status, "ok");
}

TEST(ContainmentAdvice, AutodetectFollowsTheMountedHierarchy) {
  CgroupSite s = v1_site();
  s.cgroup_plugin = "autodetect";
  EXPECT_EQ(containment_advice(s, "auto", true).status, "ok");     // v1 mounted: Contain suffices
  EXPECT_EQ(containment_advice(s, "auto", false).status, "fail");  // v2: RunInJob needed
}

TEST(ContainmentAdvice, NoCgroupsIsFineAndSaysWhatTheDaemonReaches) {
  CgroupSite s;
  auto a = containment_advice(s, "auto", true);
  EXPECT_EQ(a.status, "ok");
  EXPECT_NE(a.detail.find("what any process of the job's user can"), std::string::npos) << a.detail;
}

TEST(ContainmentAdvice, ContainOffOnACgroupNodeWarns) {
  auto a = containment_advice(v1_site(), "off", true);
  EXPECT_EQ(a.status, "warn");
  EXPECT_NE(a.detail.find("contain=off"), std::string::npos) << a.detail;
}

TEST(ContainmentAdvice, DevicesWithoutProctrackCgroupWarnsThatSlurmWillNotKillIt) {
  CgroupSite s = v1_site();
  s.proctrack_cgroup = false;
  auto a = containment_advice(s, "auto", true);
  EXPECT_EQ(a.status, "warn");
  EXPECT_NE(a.detail.find("proctrack/cgroup"), std::string::npos) << a.detail;
}

}  // namespace
}  // namespace unilab::mps
