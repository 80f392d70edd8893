#include "common/slurm/containment.hpp"

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <functional>
#include <map>
#include <set>

#include "common/mps/errors.hpp"
#include "tests/unit/doubles.hpp"

namespace unilab::mps {
namespace {

using namespace std::chrono_literals;
using test::error_of;
using test::TempDir;
using test::write_text;

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The cgroup file system as a set of directories; every write is recorded
// and may be answered with an injected errno (per written pid text).
class FakeCgroupFs final : public CgroupFs {
 public:
  bool is_dir(const std::string& path) override { return dirs.count(path) != 0; }
  int write(const std::string& path, const std::string& text) override {
    if (auto it = errors.find(text); it != errors.end()) return it->second;
    writes.emplace_back(path, text);
    if (on_write) on_write(path, text);
    return 0;
  }
  std::optional<std::string> read(const std::string& path) override {
    auto it = files.find(path);
    if (it == files.end()) return std::nullopt;
    return it->second;
  }
  int make_dir(const std::string& path) override {
    if (auto it = mkdir_errors.find(path); it != mkdir_errors.end()) return it->second;
    made.push_back(path);
    dirs.insert(path);
    return 0;
  }
  int remove_dir(const std::string& path) override {
    removed.push_back(path);
    dirs.erase(path);
    return 0;
  }
  std::set<std::string> dirs;
  std::map<std::string, int> errors;  // written text -> errno
  std::vector<std::pair<std::string, std::string>> writes;
  std::map<std::string, std::string> files;  // path -> what read() answers
  std::map<std::string, int> mkdir_errors;
  std::vector<std::string> made, removed;
  std::function<void(const std::string&, const std::string&)> on_write;
};

// --- cgroup_site_from / read_cgroup_site ---------------------------------------------

class CgroupSiteTest : public ::testing::Test {
 protected:
  TempDir tmp;
  std::string slurm_conf = tmp / "slurm.conf";
  CgroupSite site(const std::string& slurm, const std::optional<std::string>& cgroup = std::nullopt) {
    write_text(slurm_conf, "ClusterName=c\n" + slurm);
    if (cgroup) write_text(tmp / "cgroup.conf", *cgroup);
    return read_cgroup_site(slurm_conf);
  }
};

TEST_F(CgroupSiteTest, PrologFlagsAreACaseInsensitiveCommaSeparatedList) {
  CgroupSite s = site("PrologFlags=Alloc,Contain\n");
  EXPECT_TRUE(s.prolog_contain);
  EXPECT_FALSE(s.prolog_run_in_job);
  s = site("prologflags=runinjob\n");
  EXPECT_FALSE(s.prolog_contain);
  EXPECT_TRUE(s.prolog_run_in_job);
  s = site("PrologFlags=X11,CONTAIN,RunInJob,Serial\n");
  EXPECT_TRUE(s.prolog_contain);
  EXPECT_TRUE(s.prolog_run_in_job);
  // Whole flags only: neither a longer name nor a prefix counts.
  s = site("PrologFlags=NoContain,RunInJobs,Alloc\n");
  EXPECT_FALSE(s.prolog_contain);
  EXPECT_FALSE(s.prolog_run_in_job);
  s = site("PrologFlags=Alloc\n");
  EXPECT_FALSE(s.prolog_contain);
  EXPECT_FALSE(s.prolog_run_in_job);
}

TEST_F(CgroupSiteTest, ProctrackTypeCgroupOnly) {
  EXPECT_TRUE(site("ProctrackType=proctrack/cgroup\n").proctrack_cgroup);
  EXPECT_TRUE(site("proctracktype=Proctrack/Cgroup\n").proctrack_cgroup);
  EXPECT_FALSE(site("ProctrackType=proctrack/linuxproc\n").proctrack_cgroup);
  EXPECT_FALSE(site("").proctrack_cgroup);
}

TEST_F(CgroupSiteTest, CgroupConfKeys) {
  CgroupSite s = site("ProctrackType=proctrack/cgroup\n",
                      "CgroupPlugin=cgroup/v1\nCgroupMountpoint=/cg\nConstrainDevices=yes\nConstrainRAMSpace=yes\n"
                      "ConstrainCores=yes\n");
  EXPECT_EQ(s.cgroup_plugin, "cgroup/v1");
  EXPECT_EQ(s.mountpoint, "/cg");
  EXPECT_TRUE(s.constrain_devices);
  EXPECT_TRUE(s.constrain_ram);
  EXPECT_TRUE(s.constrain_cores);

  s = site("", "cgroupplugin=Cgroup/V2\nConstrainDevices=YES\nConstrainSwapSpace=yes\nConstrainCores=no\n");
  EXPECT_EQ(s.cgroup_plugin, "cgroup/v2");
  EXPECT_EQ(s.mountpoint, "/sys/fs/cgroup");
  EXPECT_TRUE(s.constrain_devices);
  EXPECT_TRUE(s.constrain_ram);  // swap alone constrains memory too
  EXPECT_FALSE(s.constrain_cores);

  s = site("", "ConstrainDevices=no\nConstrainRAMSpace=no\n");
  EXPECT_EQ(s.cgroup_plugin, "autodetect");
  EXPECT_FALSE(s.constrain_devices);
  EXPECT_FALSE(s.constrain_ram);
  EXPECT_FALSE(s.constrain_cores);
}

TEST_F(CgroupSiteTest, BooleansAreSlurmsYesUpOrOne) {
  // Slurm's parser (s_p_handle_boolean) takes yes, up and 1 in any case as true.
  for (const char* v : {"yes", "YES", "Up", "1", "true"}) {
    CgroupSite s = site("", std::string("ConstrainDevices=") + v + "\nConstrainRAMSpace=" + v + "\nConstrainCores=" + v + "\n");
    EXPECT_TRUE(s.constrain_devices) << v;
    EXPECT_TRUE(s.constrain_ram) << v;
    EXPECT_TRUE(s.constrain_cores) << v;
  }
  for (const char* v : {"no", "0", "down", "NO"}) {
    EXPECT_FALSE(site("", std::string("ConstrainDevices=") + v + "\n").constrain_devices) << v;
  }
}

TEST_F(CgroupSiteTest, MissingCgroupConfMeansSlurmsDefaults) {
  CgroupSite s = site("PrologFlags=Contain\nProctrackType=proctrack/cgroup\n");
  EXPECT_TRUE(s.prolog_contain);
  EXPECT_TRUE(s.proctrack_cgroup);
  EXPECT_EQ(s.cgroup_plugin, "autodetect");
  EXPECT_EQ(s.mountpoint, "/sys/fs/cgroup");
  EXPECT_FALSE(s.constrain_devices);
  EXPECT_FALSE(s.constrain_ram);
  EXPECT_FALSE(s.constrain_cores);
}

TEST_F(CgroupSiteTest, UnreadableSlurmConfIsAnError) {
  EXPECT_THROW(read_cgroup_site(tmp / "none.conf"), CudaMpsError);
}

TEST(CgroupSiteFrom, WorksOnParsedValues) {
  SlurmConf slurm;
  slurm.values["prologflags"] = "contain";
  SlurmConf cgroup;
  cgroup.values["cgroupmountpoint"] = "";  // empty: keep the default
  cgroup.values["constraindevices"] = "true";
  CgroupSite s = cgroup_site_from(slurm, cgroup);
  EXPECT_TRUE(s.prolog_contain);
  EXPECT_EQ(s.mountpoint, "/sys/fs/cgroup");
  EXPECT_TRUE(s.constrain_devices);
  EXPECT_FALSE(cgroup_site_from(slurm, std::nullopt).constrain_devices);
}

// --- plan_containment ------------------------------------------------------------------

const std::string kOwnV2 = "0::/system.slice/n1_slurmstepd.scope/job_7/step_extern/slurm\n";

CgroupSite v1_site() {
  CgroupSite s;
  s.prolog_contain = true;
  s.proctrack_cgroup = true;
  s.constrain_devices = true;
  s.cgroup_plugin = "cgroup/v1";
  return s;
}

CgroupSite v2_site() {
  CgroupSite s = v1_site();
  s.prolog_contain = false;
  s.prolog_run_in_job = true;
  s.cgroup_plugin = "cgroup/v2";
  return s;
}

TEST(PlanContainment, OffPlansNothing) {
  FakeCgroupFs fs;
  EXPECT_FALSE(plan_containment(v1_site(), "off", 1000, "7", "", fs));
  EXPECT_FALSE(plan_containment(v2_site(), "off", 1000, "7", kOwnV2, fs));
  CgroupSite bad = v1_site();
  bad.prolog_contain = false;  // would be refused under auto
  EXPECT_FALSE(plan_containment(bad, "off", 1000, "7", "", fs));
}

TEST(PlanContainment, NoConstraintAndNoCgroupTrackingPlansNothing) {
  FakeCgroupFs fs;
  CgroupSite s = v1_site();
  s.proctrack_cgroup = false;
  s.constrain_devices = false;
  s.constrain_ram = true;  // memory alone: the daemon reaches no foreign GPU
  EXPECT_FALSE(plan_containment(s, "auto", 1000, "7", "", fs));
  // Tracking without device constraint and without flags: nothing to protect.
  s = v1_site();
  s.constrain_devices = false;
  s.prolog_contain = false;
  EXPECT_FALSE(plan_containment(s, "auto", 1000, "7", "", fs));
}

TEST(PlanContainment, ConstrainedDevicesWithoutContainOrRunInJobAreRefused) {
  FakeCgroupFs fs;
  CgroupSite s = v1_site();
  s.prolog_contain = false;
  std::string e = error_of([&] { plan_containment(s, "auto", 1000, "7", "", fs); });
  EXPECT_TRUE(has(e, "PrologFlags=Contain")) << e;
  EXPECT_TRUE(has(e, "ConstrainDevices")) << e;
  s.proctrack_cgroup = false;
  EXPECT_THROW(plan_containment(s, "auto", 1000, "7", "", fs), CudaMpsError);
}

TEST(PlanContainment, V1ContainMovesIntoTheExternStepOfEachConstrainedController) {
  FakeCgroupFs fs;
  auto plan = plan_containment(v1_site(), "auto", 1000, "7", "", fs);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->cgroup_version, 1);
  EXPECT_EQ(plan->mountpoint, "/sys/fs/cgroup");
  EXPECT_EQ(plan->controllers, (std::vector<std::string>{"freezer", "devices"}));
  EXPECT_EQ(plan->job_cgroup, "uid_1000/job_7/step_extern");

  CgroupSite s = v1_site();
  s.constrain_ram = true;
  s.constrain_cores = true;
  s.mountpoint = "/cg";
  plan = plan_containment(s, "auto", 1001, "42", "", fs);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->mountpoint, "/cg");
  EXPECT_EQ(plan->controllers, (std::vector<std::string>{"freezer", "devices", "memory", "cpuset"}));
  EXPECT_EQ(plan->job_cgroup, "uid_1001/job_42/step_extern");

  // Devices only (no proctrack/cgroup): no freezer to move into.
  s = v1_site();
  s.proctrack_cgroup = false;
  plan = plan_containment(s, "auto", 1000, "7", "", fs);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->controllers, (std::vector<std::string>{"devices"}));
}

TEST(PlanContainment, AutodetectPicksV1WhereTheFreezerHierarchyIsMounted) {
  CgroupSite s = v1_site();
  s.cgroup_plugin = "autodetect";
  s.prolog_run_in_job = true;
  s.mountpoint = "/cg";
  FakeCgroupFs fs;
  fs.dirs = {"/cg/freezer"};
  auto plan = plan_containment(s, "auto", 1000, "7", kOwnV2, fs);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->cgroup_version, 1);
  // A freezer elsewhere than the configured mountpoint does not count.
  fs.dirs = {"/sys/fs/cgroup/freezer"};
  plan = plan_containment(s, "auto", 1000, "7", kOwnV2, fs);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->cgroup_version, 2);
  EXPECT_EQ(plan->job_cgroup, "job_7/step_extern");
  EXPECT_TRUE(plan->controllers.empty());
}

TEST(PlanContainment, V2WithRunInJobAndThePrologInsideTheJob) {
  FakeCgroupFs fs;
  auto plan = plan_containment(v2_site(), "auto", 1000, "7", kOwnV2, fs);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->cgroup_version, 2);
  EXPECT_EQ(plan->mountpoint, "/sys/fs/cgroup");
  EXPECT_EQ(plan->job_cgroup, "job_7/step_extern");
  EXPECT_TRUE(plan->controllers.empty());
  // The step_extern cgroup itself (no child) is inside the job too.
  EXPECT_TRUE(plan_containment(v2_site(), "auto", 1000, "7", "0::/system.slice/n1_slurmstepd.scope/job_7/step_extern\n", fs));
  // Explicit cgroup/v2 does not look for a freezer.
  fs.dirs = {"/sys/fs/cgroup/freezer"};
  EXPECT_EQ(plan_containment(v2_site(), "auto", 1000, "7", kOwnV2, fs)->cgroup_version, 2);
}

TEST(PlanContainment, V2WithoutRunInJobOrOutsideTheJobIsRefusedNamingRunInJob) {
  FakeCgroupFs fs;
  CgroupSite contain_only = v2_site();
  contain_only.prolog_run_in_job = false;
  contain_only.prolog_contain = true;
  std::string e = error_of([&] { plan_containment(contain_only, "auto", 1000, "7", kOwnV2, fs); });
  EXPECT_TRUE(has(e, "RunInJob")) << e;

  e = error_of([&] { plan_containment(v2_site(), "auto", 1000, "7", "0::/system.slice/slurmd.service\n", fs); });
  EXPECT_TRUE(has(e, "RunInJob")) << e;
  EXPECT_TRUE(has(e, "/system.slice/slurmd.service")) << e;
  // Another job's cgroup whose id starts with ours.
  e = error_of([&] { plan_containment(v2_site(), "auto", 1000, "7", "0::/system.slice/n1_slurmstepd.scope/job_77/step_extern/slurm\n", fs); });
  EXPECT_TRUE(has(e, "RunInJob")) << e;
  // The job, but not its extern step (a batch step).
  EXPECT_THROW(plan_containment(v2_site(), "auto", 1000, "7", "0::/system.slice/n1_slurmstepd.scope/job_7/step_batch\n", fs),
               CudaMpsError);
  // No v2 line at all.
  EXPECT_THROW(plan_containment(v2_site(), "auto", 1000, "7", "4:freezer:/slurm/uid_1000/job_7/step_extern\n", fs),
               CudaMpsError);
  EXPECT_THROW(plan_containment(v2_site(), "auto", 1000, "7", "", fs), CudaMpsError);
}

TEST(PlanContainment, V2FindsTheJobCgroupNamedAfterItsSluid) {
  // Slurm 26.05 names the job's directory after its SLUID (CgroupJobIdPaths=no).
  FakeCgroupFs fs;
  const std::string own = "0::/system.slice/n1_slurmstepd.scope/sCZHM8TRA95200/step_extern/slurm\n";
  auto plan = plan_containment(v2_site(), "auto", 1000, "7", own, fs, std::string("sCZHM8TRA95200"));
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->job_cgroup, "sCZHM8TRA95200/step_extern");
  EXPECT_TRUE(cgroup_matches(*plan, own));
  EXPECT_FALSE(cgroup_matches(*plan, "0::/system.slice/n1_slurmstepd.scope/sOTHERJOB00000/step_extern/slurm\n"));
  // CgroupJobIdPaths=yes: job_<id> again, with a SLUID in the environment.
  plan = plan_containment(v2_site(), "auto", 1000, "7", kOwnV2, fs, std::string("sCZHM8TRA95200"));
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->job_cgroup, "job_7/step_extern");
}

TEST(PlanContainment, V2WithRunInJobOutsideTheJobsStepNamesWhereThePrologRunsNotTheFlag) {
  FakeCgroupFs fs;
  const std::string own = "0::/system.slice/n1_slurmstepd.scope/sCZHM8TRA95200/step_extern/slurm\n";
  // No SLUID given (before 25.11 there is none): that directory is no job of ours.
  std::string e = error_of([&] { plan_containment(v2_site(), "auto", 1000, "7", own, fs); });
  EXPECT_TRUE(has(e, "PrologFlags=RunInJob is set")) << e;
  EXPECT_TRUE(has(e, "/sCZHM8TRA95200/step_extern/slurm")) << e;
  EXPECT_FALSE(has(e, "set PrologFlags=RunInJob")) << e;
  // Another job's SLUID.
  e = error_of([&] { plan_containment(v2_site(), "auto", 1000, "7", own, fs, std::string("sOTHERJOB00000")); });
  EXPECT_TRUE(has(e, "sOTHERJOB00000")) << e;
}

TEST(PlanContainment, V2WithoutRunInJobButWithoutDeviceConstraintPlansNothing) {
  // As on v1 without the flags: the daemon could reach no GPU beyond the job,
  // so a site that merely tracks processes with cgroups is not refused.
  FakeCgroupFs fs;
  CgroupSite s = v2_site();
  s.prolog_run_in_job = false;
  s.prolog_contain = true;
  s.constrain_devices = false;
  EXPECT_FALSE(plan_containment(s, "auto", 1000, "7", "0::/system.slice/slurmd.service\n", fs));
  s.prolog_contain = false;
  EXPECT_FALSE(plan_containment(s, "auto", 1000, "7", "0::/system.slice/slurmd.service\n", fs));
  // With RunInJob it is contained all the same.
  s.prolog_run_in_job = true;
  EXPECT_TRUE(plan_containment(s, "auto", 1000, "7", kOwnV2, fs));
}

// --- extern_step_procs_files ----------------------------------------------------------

ContainmentPlan v1_plan() {
  ContainmentPlan p;
  p.cgroup_version = 1;
  p.mountpoint = "/cg";
  p.controllers = {"freezer", "devices"};
  p.job_cgroup = "uid_1000/job_7/step_extern";
  return p;
}

ContainmentPlan v2_plan() {
  ContainmentPlan p;
  p.cgroup_version = 2;
  p.mountpoint = "/sys/fs/cgroup";
  p.job_cgroup = "job_7/step_extern";
  return p;
}

TEST(ExternStepProcsFiles, PrefersTheNodesOwnSlurmRoot) {
  FakeCgroupFs fs;
  fs.dirs = {"/cg/freezer/slurm_n1/uid_1000/job_7/step_extern", "/cg/devices/slurm_n1/uid_1000/job_7/step_extern",
             "/cg/freezer/slurm/uid_1000/job_7/step_extern", "/cg/devices/slurm/uid_1000/job_7/step_extern"};
  auto files = extern_step_procs_files(v1_plan(), "n1", fs);
  ASSERT_TRUE(files);
  EXPECT_EQ(*files, (std::vector<std::string>{"/cg/freezer/slurm_n1/uid_1000/job_7/step_extern/cgroup.procs",
                                              "/cg/devices/slurm_n1/uid_1000/job_7/step_extern/cgroup.procs"}));
}

TEST(ExternStepProcsFiles, FallsBackToThePlainSlurmRoot) {
  FakeCgroupFs fs;
  fs.dirs = {"/cg/freezer/slurm/uid_1000/job_7/step_extern", "/cg/devices/slurm/uid_1000/job_7/step_extern",
             "/cg/freezer/slurm_n2/uid_1000/job_7/step_extern", "/cg/devices/slurm_n2/uid_1000/job_7/step_extern"};
  auto files = extern_step_procs_files(v1_plan(), "n1", fs);
  ASSERT_TRUE(files);
  EXPECT_EQ(*files, (std::vector<std::string>{"/cg/freezer/slurm/uid_1000/job_7/step_extern/cgroup.procs",
                                              "/cg/devices/slurm/uid_1000/job_7/step_extern/cgroup.procs"}));
}

TEST(ExternStepProcsFiles, NothingWhileOneControllersStepIsMissing) {
  FakeCgroupFs fs;
  fs.dirs = {"/cg/freezer/slurm_n1/uid_1000/job_7/step_extern", "/cg/devices/slurm_n1/uid_1000/job_7"};
  EXPECT_FALSE(extern_step_procs_files(v1_plan(), "n1", fs));
  fs.dirs = {"/cg/devices/slurm/uid_1000/job_7/step_extern"};
  EXPECT_FALSE(extern_step_procs_files(v1_plan(), "n1", fs));
  fs.dirs.clear();
  EXPECT_FALSE(extern_step_procs_files(v1_plan(), "n1", fs));
  // Once both exist, they are found.
  fs.dirs = {"/cg/freezer/slurm_n1/uid_1000/job_7/step_extern", "/cg/devices/slurm_n1/uid_1000/job_7/step_extern"};
  EXPECT_TRUE(extern_step_procs_files(v1_plan(), "n1", fs));
}

TEST(ExternStepProcsFiles, V2HasNothingToMove) {
  FakeCgroupFs fs;
  auto files = extern_step_procs_files(v2_plan(), "n1", fs);
  ASSERT_TRUE(files);
  EXPECT_TRUE(files->empty());
}

// --- move_daemon_tree -----------------------------------------------------------------

class MoveDaemonTreeTest : public ::testing::Test {
 protected:
  test::FakeProcReader proc;
  FakeCgroupFs fs;
  ProcessIdentity daemon{500, 9000, proc.boot, 1000};
  std::vector<std::string> files{"/cg/freezer/x/cgroup.procs", "/cg/devices/x/cgroup.procs"};
  void SetUp() override {
    proc.add(500, 1000, 9000);  // the control daemon
    proc.add(501, 1000, 9001);  // its server
    proc.add(502, 1000, 9002);  // the server's child
    proc.adopt(500, 501);
    proc.adopt(501, 502);
  }
  std::vector<std::pair<std::string, std::string>> writes_of(std::vector<std::string> pids) {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& p : pids) for (const auto& f : files) out.emplace_back(f, p);
    return out;
  }
};

TEST_F(MoveDaemonTreeTest, WritesTheDaemonThenItsDescendantsIntoEveryFile) {
  EXPECT_EQ(move_daemon_tree(daemon, files, proc, fs), "");
  EXPECT_EQ(fs.writes, writes_of({"500", "501", "502"}));
}

TEST_F(MoveDaemonTreeTest, RefusesADaemonThatIsNotLiveAndWritesNothing) {
  proc.procs[500].start_ticks = 9999;  // the pid now names another process
  std::string e = move_daemon_tree(daemon, files, proc, fs);
  EXPECT_TRUE(has(e, "pid-reused")) << e;
  EXPECT_TRUE(fs.writes.empty());

  proc.procs[500].start_ticks = 9000;
  proc.procs[500].uid = 1001;  // same start, other user: not ours either
  e = move_daemon_tree(daemon, files, proc, fs);
  EXPECT_FALSE(e.empty());
  EXPECT_TRUE(fs.writes.empty());

  proc.kill(500);
  e = move_daemon_tree(daemon, files, proc, fs);
  EXPECT_TRUE(has(e, "gone")) << e;
  EXPECT_TRUE(fs.writes.empty());
}

TEST_F(MoveDaemonTreeTest, AListedChildWhoseStatNamesAnotherParentOrUserIsLeftAlone) {
  // /proc/500/task/*/children still lists 501 after it exited and its pid
  // went to a process of someone else: that one is not the daemon's.
  proc.procs[501].ppid = 1;
  EXPECT_EQ(move_daemon_tree(daemon, files, proc, fs), "");
  EXPECT_EQ(fs.writes, writes_of({"500"}));
  fs.writes.clear();
  proc.procs[501].ppid = 500;
  proc.procs[501].uid = 0;  // became root (a setuid helper's real uid stays the user's)
  EXPECT_EQ(move_daemon_tree(daemon, files, proc, fs), "");
  EXPECT_EQ(fs.writes, writes_of({"500"}));
}

TEST_F(MoveDaemonTreeTest, ADescendantThatExitedMeanwhileIsTolerated) {
  fs.errors["501"] = ESRCH;
  EXPECT_EQ(move_daemon_tree(daemon, files, proc, fs), "");
  EXPECT_EQ(fs.writes, writes_of({"500", "502"}));
}

TEST_F(MoveDaemonTreeTest, TheDaemonItselfMustMove) {
  fs.errors["500"] = ESRCH;
  std::string e = move_daemon_tree(daemon, files, proc, fs);
  EXPECT_TRUE(has(e, "cannot move pid 500")) << e;
  EXPECT_TRUE(fs.writes.empty());
}

TEST_F(MoveDaemonTreeTest, OtherErrorsForADescendantAreErrors) {
  fs.errors["502"] = EACCES;
  std::string e = move_daemon_tree(daemon, files, proc, fs);
  EXPECT_TRUE(has(e, "cannot move pid 502")) << e;
  EXPECT_TRUE(has(e, files[0])) << e;
}

// --- launch and holding cgroups (born contained) --------------------------------------

TEST(LaunchCgroups, V1WithTheExternStepThereAlreadyIsBornInIt) {
  FakeCgroupFs fs;
  fs.dirs = {"/cg/freezer/slurm/uid_1000/job_7/step_extern", "/cg/devices/slurm/uid_1000/job_7/step_extern"};
  LaunchCgroups born = prepare_launch_cgroups(v1_plan(), "n1", "7", "", fs);
  EXPECT_FALSE(born.holding);
  EXPECT_EQ(born.procs_files, (std::vector<std::string>{"/cg/freezer/slurm/uid_1000/job_7/step_extern/cgroup.procs",
                                                        "/cg/devices/slurm/uid_1000/job_7/step_extern/cgroup.procs"}));
  EXPECT_TRUE(fs.made.empty());
}

TEST(LaunchCgroups, V1BeforeTheStepExistsIsBornInARootOwnedHoldingCgroup) {
  FakeCgroupFs fs;
  LaunchCgroups born = prepare_launch_cgroups(v1_plan(), "n1", "7", "", fs);
  EXPECT_TRUE(born.holding);
  EXPECT_EQ(born.procs_files, (std::vector<std::string>{"/cg/freezer/unilab_mps/job_7/cgroup.procs",
                                                        "/cg/devices/unilab_mps/job_7/cgroup.procs"}));
  EXPECT_EQ(fs.made, (std::vector<std::string>{"/cg/freezer/unilab_mps", "/cg/freezer/unilab_mps/job_7", "/cg/devices/unilab_mps",
                                               "/cg/devices/unilab_mps/job_7"}));
}

TEST(LaunchCgroups, AHoldingCpusetGetsItsParentsCpusAndMems) {
  FakeCgroupFs fs;
  ContainmentPlan plan = v1_plan();
  plan.controllers = {"cpuset"};
  fs.files["/cg/cpuset/cpuset.cpus"] = "0-3\n";
  fs.files["/cg/cpuset/cpuset.mems"] = "0\n";
  fs.files["/cg/cpuset/unilab_mps/cpuset.cpus"] = "0-3\n";
  fs.files["/cg/cpuset/unilab_mps/cpuset.mems"] = "0\n";
  prepare_launch_cgroups(plan, "n1", "7", "", fs);
  EXPECT_EQ(fs.writes, (std::vector<std::pair<std::string, std::string>>{{"/cg/cpuset/unilab_mps/cpuset.cpus", "0-3\n"},
                                                                          {"/cg/cpuset/unilab_mps/cpuset.mems", "0\n"},
                                                                          {"/cg/cpuset/unilab_mps/job_7/cpuset.cpus", "0-3\n"},
                                                                          {"/cg/cpuset/unilab_mps/job_7/cpuset.mems", "0\n"}}));
  // A parent that cannot be read: refused, not a cpuset nothing can join.
  FakeCgroupFs bare;
  std::string e = error_of([&] { prepare_launch_cgroups(plan, "n1", "7", "", bare); });
  EXPECT_TRUE(has(e, "cpuset.cpus")) << e;
}

TEST(LaunchCgroups, AHoldingCgroupThatCannotBeMadeRefusesTheStart) {
  FakeCgroupFs fs;
  fs.mkdir_errors["/cg/devices/unilab_mps/job_7"] = EACCES;
  std::string e = error_of([&] { prepare_launch_cgroups(v1_plan(), "n1", "7", "", fs); });
  EXPECT_TRUE(has(e, "/cg/devices/unilab_mps/job_7")) << e;
  EXPECT_TRUE(has(e, "Permission denied")) << e;
}

TEST(LaunchCgroups, V2IsBornBesideTheExternStepsTasksWhereSlurmsTeardownKills) {
  // Slurm 25.05+ kills step_extern/user (cgroup.kill), not step_extern/slurm
  // where the prolog runs: the daemon goes to a leaf of its own under user.
  FakeCgroupFs fs;
  const std::string own = "0::/system.slice/n1_slurmstepd.scope/sCZHM8TRA95200/step_extern/slurm\n";
  ContainmentPlan plan = v2_plan();
  plan.job_cgroup = "sCZHM8TRA95200/step_extern";
  const std::string step = "/sys/fs/cgroup/system.slice/n1_slurmstepd.scope/sCZHM8TRA95200/step_extern";
  fs.dirs = {step + "/user"};
  LaunchCgroups born = prepare_launch_cgroups(plan, "n1", "7", own, fs);
  EXPECT_FALSE(born.holding);
  EXPECT_EQ(born.procs_files, (std::vector<std::string>{step + "/user/unilab_mps/cgroup.procs"}));
  EXPECT_EQ(fs.made, (std::vector<std::string>{step + "/user/unilab_mps"}));
  // The task path accepts it as the job's extern step.
  EXPECT_TRUE(cgroup_matches(plan, "0::/system.slice/n1_slurmstepd.scope/sCZHM8TRA95200/step_extern/user/unilab_mps\n"));
  // The epilog removes it.
  EXPECT_EQ(remove_v2_daemon_cgroup(plan, own, fs), "");
  EXPECT_EQ(fs.removed, (std::vector<std::string>{step + "/user/unilab_mps"}));
}

TEST(LaunchCgroups, V2WithoutAUserCgroupInTheStepIsBornWhereThePrologRuns) {
  FakeCgroupFs fs;
  LaunchCgroups born = prepare_launch_cgroups(v2_plan(), "n1", "7", kOwnV2, fs);
  EXPECT_FALSE(born.holding);
  EXPECT_TRUE(born.procs_files.empty());
  EXPECT_TRUE(fs.made.empty());
  // A prolog outside any extern step: nothing to find.
  EXPECT_FALSE(v2_daemon_cgroup_dir(v2_plan(), "0::/system.slice/slurmd.service\n"));
}

// What a user injected into the daemon before the step existed (a double
// fork: no descendant of the daemon) is in the holding cgroup, so it moves
// with the daemon; a pid /proc no longer shows there is not written.
class HoldingTest : public ::testing::Test {
 protected:
  test::FakeProcReader proc;
  test::RecordingSignaller signaller;
  FakeCgroupFs fs;
  ContainmentPlan plan = v1_plan();
  std::vector<std::string> step{"/cg/freezer/slurm/uid_1000/job_7/step_extern/cgroup.procs",
                                "/cg/devices/slurm/uid_1000/job_7/step_extern/cgroup.procs"};
  void SetUp() override {
    fs.dirs = {"/cg/freezer/unilab_mps/job_7", "/cg/devices/unilab_mps/job_7"};
    for (pid_t p : {500, 777}) {
      proc.add(p, 1000, 9000 + static_cast<uint64_t>(p));
      proc.cgroups[p] = "5:devices:/unilab_mps/job_7\n4:freezer:/unilab_mps/job_7\n";
    }
    fs.files["/cg/freezer/unilab_mps/job_7/cgroup.procs"] = "500\n777\n";
    fs.files["/cg/devices/unilab_mps/job_7/cgroup.procs"] = "500\n777\n";
    fs.files["/cg/freezer/unilab_mps/job_7/freezer.state"] = "FROZEN\n";
    // A moved pid leaves the holding cgroup.
    fs.on_write = [this](const std::string& path, const std::string& text) {
      for (size_t i = 0; i < step.size(); ++i) {
        if (path != step[i]) continue;
        const std::string ctrl = plan.controllers[i];
        auto& listed = fs.files["/cg/" + ctrl + "/unilab_mps/job_7/cgroup.procs"];
        listed.erase(listed.find(text + "\n"), text.size() + 1);
      }
    };
  }
};

TEST_F(HoldingTest, AdoptionFreezesMovesEveryHeldProcessAndRemovesTheHoldingCgroups) {
  EXPECT_EQ(adopt_holding_cgroups(plan, "7", step, proc, fs), "");
  ASSERT_FALSE(fs.writes.empty());
  EXPECT_EQ(fs.writes[0], (std::pair<std::string, std::string>{"/cg/freezer/unilab_mps/job_7/freezer.state", "FROZEN"}));
  std::vector<std::pair<std::string, std::string>> moves(fs.writes.begin() + 1, fs.writes.end());
  EXPECT_EQ(moves, (std::vector<std::pair<std::string, std::string>>{
                       {step[0], "500"}, {step[0], "777"}, {step[1], "500"}, {step[1], "777"}}));
  EXPECT_EQ(fs.removed, (std::vector<std::string>{"/cg/freezer/unilab_mps/job_7", "/cg/devices/unilab_mps/job_7"}));
}

TEST_F(HoldingTest, APidThatLeftTheHoldingCgroupIsNotMoved) {
  proc.cgroups[777] = "5:devices:/system.slice\n4:freezer:/\n";  // exited, the pid reused elsewhere
  EXPECT_EQ(adopt_holding_cgroups(plan, "7", step, proc, fs), "");
  for (const auto& [file, pid] : fs.writes) EXPECT_NE(pid, "777") << file;
}

TEST_F(HoldingTest, AHoldingCgroupThatCannotBeFrozenIsAnErrorAndNothingMoves) {
  fs.files["/cg/freezer/unilab_mps/job_7/freezer.state"] = "FREEZING\n";
  std::string e = adopt_holding_cgroups(plan, "7", step, proc, fs);
  EXPECT_TRUE(has(e, "cannot freeze")) << e;
  for (const auto& [file, text] : fs.writes) EXPECT_EQ(file, "/cg/freezer/unilab_mps/job_7/freezer.state");
}

TEST_F(HoldingTest, ReleaseKillsEveryHeldProcessAndRemovesTheHoldingCgroups) {
  fs.files["/cg/freezer/unilab_mps/job_7/cgroup.procs"] = "500\n777\n";
  proc.cgroups[777] = "5:devices:/unilab_mps/job_7\n4:freezer:/unilab_mps/job_7\n";
  // Killed processes leave the cgroup.
  signaller.lethal = {SIGKILL};
  EXPECT_EQ(release_holding_cgroups(plan, "7", proc, signaller, fs, 0ms), "");
  EXPECT_FALSE(proc.alive(500));
  EXPECT_FALSE(proc.alive(777));
  EXPECT_EQ(fs.removed, (std::vector<std::string>{"/cg/freezer/unilab_mps/job_7", "/cg/devices/unilab_mps/job_7"}));
}

// --- cgroup_matches -------------------------------------------------------------------

std::string v1_text(const std::string& freezer, const std::string& devices) {
  return "12:memory:/user.slice\n11:freezer:" + freezer + "\n7:devices:" + devices + "\n1:name=systemd:/user.slice\n0::/user.slice\n";
}

TEST(CgroupMatches, V1WantsTheExactLeafInEveryController) {
  const ContainmentPlan p = v1_plan();
  const std::string leaf = "/slurm/uid_1000/job_7/step_extern";
  EXPECT_TRUE(cgroup_matches(p, v1_text(leaf, leaf)));
  EXPECT_TRUE(cgroup_matches(p, v1_text("/slurm_n1/uid_1000/job_7/step_extern", "/slurm_n1/uid_1000/job_7/step_extern")));
  // Below the leaf (a task cgroup), the job alone, or another job/user.
  EXPECT_FALSE(cgroup_matches(p, v1_text(leaf + "/task_0", leaf)));
  EXPECT_FALSE(cgroup_matches(p, v1_text("/slurm/uid_1000/job_7", leaf)));
  EXPECT_FALSE(cgroup_matches(p, v1_text("/slurm/uid_1000/job_70/step_extern", leaf)));
  EXPECT_FALSE(cgroup_matches(p, v1_text("/slurm/uid_1001/job_7/step_extern", "/slurm/uid_1001/job_7/step_extern")));
  EXPECT_FALSE(cgroup_matches(p, v1_text("/slurm/uid_1000/job_7/step_extern_x", leaf)));
  // Every controller: the freezer right is not enough.
  EXPECT_FALSE(cgroup_matches(p, v1_text(leaf, "/slurm/uid_1000/job_7")));
  EXPECT_FALSE(cgroup_matches(p, v1_text(leaf, "/")));
  // A controller missing from the text.
  EXPECT_FALSE(cgroup_matches(p, "11:freezer:" + leaf + "\n"));
  EXPECT_FALSE(cgroup_matches(p, ""));
}

TEST(CgroupMatches, V1FindsAControllerInACombinedHierarchy) {
  ContainmentPlan p = v1_plan();
  p.controllers = {"cpuset", "memory"};
  const std::string leaf = "/slurm/uid_1000/job_7/step_extern";
  EXPECT_TRUE(cgroup_matches(p, "4:cpuset,cpu:" + leaf + "\n5:blkio,memory:" + leaf + "\n"));
  EXPECT_FALSE(cgroup_matches(p, "4:cpusetx:" + leaf + "\n5:memory:" + leaf + "\n"));
}

TEST(CgroupMatches, V1WithoutControllersNeverMatches) {
  ContainmentPlan p = v1_plan();
  p.controllers.clear();
  EXPECT_FALSE(cgroup_matches(p, v1_text("/slurm/uid_1000/job_7/step_extern", "/slurm/uid_1000/job_7/step_extern")));
}

TEST(CgroupMatches, V2AtOrBelowTheJobsExternStep) {
  const ContainmentPlan p = v2_plan();
  const std::string job = "0::/system.slice/n1_slurmstepd.scope/job_7";
  EXPECT_TRUE(cgroup_matches(p, job + "/step_extern/slurm\n"));
  EXPECT_TRUE(cgroup_matches(p, job + "/step_extern\n"));
  EXPECT_TRUE(cgroup_matches(p, job + "/step_extern/user/task_0\n"));
  EXPECT_FALSE(cgroup_matches(p, "0::/system.slice/n1_slurmstepd.scope/job_77/step_extern/slurm\n"));
  EXPECT_FALSE(cgroup_matches(p, "0::/system.slice/n1_slurmstepd.scope/job_17/step_extern/slurm\n"));
  EXPECT_FALSE(cgroup_matches(p, job + "/step_extern_x\n"));
  EXPECT_FALSE(cgroup_matches(p, job + "/step_0\n"));
  EXPECT_FALSE(cgroup_matches(p, job + "\n"));
  EXPECT_FALSE(cgroup_matches(p, "0::/system.slice/slurmd.service\n"));
  // Only the unified ("0::") line counts.
  EXPECT_FALSE(cgroup_matches(p, "1:name=systemd:/system.slice/n1_slurmstepd.scope/job_7/step_extern\n0::/user.slice\n"));
}

// --- wait_daemon_contained ------------------------------------------------------------

class WaitContainedTest : public ::testing::Test {
 protected:
  test::FakeProcReader proc;
  test::FakeClock clock;
  const ContainmentPlan plan = v2_plan();
  const std::string inside = "0::/system.slice/n1_slurmstepd.scope/job_7/step_extern/slurm\n";
  const std::string outside = "0::/system.slice/slurmd.service\n";
  void SetUp() override { proc.add(600, 1000, 1); }
};

TEST_F(WaitContainedTest, ReturnsAtOnceWhenInside) {
  proc.cgroups[600] = inside;
  EXPECT_NO_THROW(wait_daemon_contained(plan, 600, proc, clock, 2000ms, "job7.n1.gpu0"));
  EXPECT_EQ(clock.sleeps, 0);
  EXPECT_EQ(clock.elapsed(), 0ms);
}

TEST_F(WaitContainedTest, ThrowsAfterTheTimeoutNamingTheDaemonAndTheCgroup) {
  proc.cgroups[600] = outside;
  std::string e = error_of([&] { wait_daemon_contained(plan, 600, proc, clock, 2000ms, "job7.n1.gpu0"); });
  EXPECT_TRUE(has(e, "job7.n1.gpu0")) << e;
  EXPECT_TRUE(has(e, "pid 600")) << e;
  EXPECT_TRUE(has(e, "job_7/step_extern")) << e;
  EXPECT_TRUE(has(e, "/system.slice/slurmd.service")) << e;
  EXPECT_GE(clock.elapsed(), 2000ms);
  EXPECT_LE(clock.elapsed(), 2000ms + 50ms);  // one poll step at most past the timeout
  EXPECT_GT(proc.cgroup_calls, 3);             // it kept looking
}

TEST_F(WaitContainedTest, AGoneDaemonIsReportedAsGone) {
  std::string e = error_of([&] { wait_daemon_contained(plan, 601, proc, clock, 300ms, "d1"); });
  EXPECT_TRUE(has(e, "'gone'")) << e;
}

TEST_F(WaitContainedTest, V1ReportsWhereTheDaemonIs) {
  proc.cgroups[600] = v1_text("/slurm/uid_1000/job_7/step_extern", "/slurm/uid_1000/job_7");
  std::string e = error_of([&] { wait_daemon_contained(v1_plan(), 600, proc, clock, 300ms, "d1"); });
  EXPECT_TRUE(has(e, "uid_1000/job_7/step_extern")) << e;
  EXPECT_TRUE(has(e, "'/slurm/uid_1000/job_7'")) << e;
}

TEST_F(WaitContainedTest, ReturnsOnceTheMoverHasMovedIt) {
  proc.cgroups[600] = outside;
  proc.on_cgroup = [&](pid_t pid) {
    if (proc.cgroup_calls == 4) proc.cgroups[pid] = inside;  // the detached mover got there
  };
  EXPECT_NO_THROW(wait_daemon_contained(plan, 600, proc, clock, 2000ms, "d1"));
  EXPECT_EQ(proc.cgroup_calls, 4);
  EXPECT_EQ(clock.sleeps, 3);
  EXPECT_LT(clock.elapsed(), 2000ms);
}

}  // namespace
}  // namespace unilab::mps
