#include "common/slurm/node_doctor.hpp"

#include <sys/stat.h>

#include <gtest/gtest.h>

#include "common/mps/errors.hpp"
#include "tests/unit/doubles.hpp"
#include "tests/unit/fake_node_probe.hpp"

namespace unilab::mps {
namespace {


const char* kPlugstackD = "/etc/slurm/plugstack.conf.d/unilab-mps.conf";
const char* kArgs = "state_dir=/run/unilab-mps run_dir=/run/unilab-mps/run nvidia_smi=/opt/nv/nvidia-smi "
                    "mps_control=/opt/nv/nvidia-cuda-mps-control";

// A node that is ready: Debian layout, the plugin named relatively through an
// include of plugstack.conf.d, two nodes in slurm.conf of which this host is
// the second, four GPUs whose GRES order, minors and nvidia-smi indices all differ.
class NodeDoctorTest : public ::testing::Test {
 protected:
  FakeNodeProbe probe;
  test::RecordingRunner runner;
  NodeDoctorOptions opt;

  void SetUp() override {
    opt.slurm_conf = "/etc/slurm/slurm.conf";
    opt.default_plugin_dir = "/usr/lib/x86_64-linux-gnu/slurm-wlm";
    probe.files[opt.slurm_conf] =
        "# cluster\nClusterName=c\nSlurmdPidFile=/run/slurmd-%n.pid\nGresTypes=gpu\n"
        "NodeName=gpu[01-02] NodeHostname=host[1-2] Gres=gpu:4 CPUs=8\n"
        "PartitionName=p Nodes=ALL Default=YES\n";
    probe.files["/etc/slurm/plugstack.conf"] = "include /etc/slurm/plugstack.conf.d/*.conf\n";
    probe.globs["/etc/slurm/plugstack.conf.d/*.conf"] = {kPlugstackD};
    set_plugin_line(std::string("optional unilab_mps.so ") + kArgs + "  # per-job MPS\n");
    probe.facts["/usr/lib/x86_64-linux-gnu/slurm-wlm/unilab_mps.so"] = FakeNodeProbe::file(0, 0644, 800);
    probe.files["/run/slurmd-gpu02.pid"] = "4242\n";
    probe.procs[4242] = {"slurmd", 1000.0};
    probe.exes[4242] = "/usr/sbin/slurmd";
    probe.facts["/usr"] = FakeNodeProbe::dir(0, 0755);
    probe.facts["/usr/sbin"] = FakeNodeProbe::dir(0, 0755);
    probe.facts["/usr/sbin/slurmd"] = FakeNodeProbe::file(0, 0755);
    probe.facts["/"] = FakeNodeProbe::dir(0, 0755);
    probe.facts["/run"] = FakeNodeProbe::dir(0, 0755);
    probe.facts["/run/unilab-mps"] = FakeNodeProbe::dir(0, 0755);
    probe.executables = {"/opt/nv/nvidia-smi", "/opt/nv/nvidia-cuda-mps-control"};
    probe.files["/etc/slurm/gres.conf"] = "AutoDetect=off\nNodeName=gpu02 Name=gpu File=/dev/nvidia[2,0,3,1]\n";
    probe.minors = {{"/dev/nvidia0", 0}, {"/dev/nvidia1", 1}, {"/dev/nvidia2", 2}, {"/dev/nvidia3", 3}};
    // The driver's minors (nvidia-smi 580 has no minor_number field).
    for (const auto& g : test::four_gpus()) probe.files["/proc/driver/" + test::driver_information_path(g)] = test::driver_information(g);
    runner.handler = [](const Command& c) {
      if (c.argv[0] == "/opt/nv/nvidia-smi") return test::exited(0, test::smi_csv(exclusive_gpus()));
      if (c.argv == std::vector<std::string>{"/usr/sbin/slurmd", "-V"}) return test::exited(0, "slurm 22.05.8\n");
      return test::exec_failed(c.argv[0]);
    };
  }

  // A ready node as NVIDIA recommends it for MPS: every GPU in Exclusive_Process.
  static std::vector<GpuIdentity> exclusive_gpus() {
    auto gpus = test::four_gpus();
    for (auto& g : gpus) g.compute_mode = "Exclusive_Process";
    return gpus;
  }

  void set_plugin_line(const std::string& line) { probe.files[kPlugstackD] = line; }

  NodeDoctorReport run() { return node_doctor(probe, runner, opt); }

  static const DoctorCheck& check(const NodeDoctorReport& rep, const std::string& name) {
    for (const auto& c : rep.checks) if (c.name == name) return c;
    static const DoctorCheck missing{"<missing>", CheckStatus::kSkip, "<missing>"};
    ADD_FAILURE() << "no check named " << name;
    return missing;
  }
};

TEST_F(NodeDoctorTest, ReadyNodeMapsEveryGpuAndPassesEveryCheck) {
  NodeDoctorReport rep = run();
  EXPECT_TRUE(rep.ok()) << rep.to_text();
  for (const auto& c : rep.checks) EXPECT_EQ(c.status, CheckStatus::kOk) << c.name << ": " << c.detail;
  EXPECT_EQ(rep.node, "gpu02");
  EXPECT_NE(check(rep, "plugin-listed").detail.find(std::string(kPlugstackD) + ":1: optional unilab_mps.so"), std::string::npos);
  EXPECT_NE(check(rep, "plugstack").detail.find("include /etc/slurm/plugstack.conf.d/*.conf (1 file)"), std::string::npos);
  EXPECT_NE(check(rep, "plugin-file").detail.find("/usr/lib/x86_64-linux-gnu/slurm-wlm/unilab_mps.so"), std::string::npos);
  EXPECT_NE(check(rep, "slurmd").detail.find("pid 4242"), std::string::npos);
  EXPECT_NE(check(rep, "run-dir").detail.find("does not exist yet"), std::string::npos);
  // GRES index -> device -> minor -> nvidia-smi index -> UUID (four_gpus: smi 0 has minor 2, 1 has 0, 2 has 3, 3 has 1).
  ASSERT_EQ(rep.gpus.size(), 4u);
  const std::vector<std::tuple<std::string, int, int, std::string>> want = {
      {"/dev/nvidia2", 2, 0, test::kUuid0}, {"/dev/nvidia0", 0, 1, test::kUuid1},
      {"/dev/nvidia3", 3, 2, test::kUuid2}, {"/dev/nvidia1", 1, 3, test::kUuid3}};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(rep.gpus[i].gres_index, static_cast<int>(i));
    EXPECT_EQ(rep.gpus[i].device, std::get<0>(want[i]));
    EXPECT_EQ(rep.gpus[i].minor, std::get<1>(want[i]));
    EXPECT_EQ(rep.gpus[i].nvidia_smi_index, std::get<2>(want[i]));
    EXPECT_EQ(rep.gpus[i].uuid, std::get<3>(want[i]));
    EXPECT_TRUE(rep.gpus[i].problem.empty());
  }
  // nvidia-smi is the one the plugin arguments name, run once.
  EXPECT_EQ(runner.count_program("/opt/nv/nvidia-smi"), 1u);
  std::string text = rep.to_text();
  EXPECT_NE(text.find("GRES"), std::string::npos);
  EXPECT_NE(text.find(test::kUuid3), std::string::npos);
  EXPECT_NE(text.find("\nready\n"), std::string::npos);
}

TEST_F(NodeDoctorTest, ComputeModesAndDriverFolderAreChecked) {
  runner.handler = [](const Command& c) {
    auto gpus = test::four_gpus();  // Default mode
    gpus[2].compute_mode = "Prohibited";
    if (c.argv[0] == "/opt/nv/nvidia-smi") return test::exited(0, test::smi_csv(gpus));
    return test::exec_failed(c.argv[0]);
  };
  NodeDoctorReport rep = run();
  EXPECT_EQ(check(rep, "compute-mode").status, CheckStatus::kFail);
  EXPECT_NE(check(rep, "compute-mode").detail.find("GPU 2 (" + test::kUuid2), std::string::npos) << check(rep, "compute-mode").detail;
  EXPECT_FALSE(rep.ok());
  // nvidia-smi not where the arguments say, but in a container's driver folder.
  probe.executables = {"/usr/local/nvidia/bin/nvidia-smi", "/opt/nv/nvidia-cuda-mps-control"};
  rep = run();
  EXPECT_EQ(check(rep, "nvidia-smi").status, CheckStatus::kFail);
  EXPECT_NE(check(rep, "nvidia-smi").detail.find("driver_dir=/usr/local/nvidia"), std::string::npos) << check(rep, "nvidia-smi").detail;
}

TEST_F(NodeDoctorTest, JsonCarriesChecksAndTheGpuTable) {
  nlohmann::json j = run().to_json();
  EXPECT_EQ(j["ok"], true);
  EXPECT_EQ(j["node"], "gpu02");
  EXPECT_EQ(j["slurm_conf"], "/etc/slurm/slurm.conf");
  ASSERT_EQ(j["gpus"].size(), 4u);
  EXPECT_EQ(j["gpus"][0]["gres_index"], 0);
  EXPECT_EQ(j["gpus"][0]["minor"], 2);
  EXPECT_EQ(j["gpus"][0]["nvidia_smi_index"], 0);
  EXPECT_EQ(j["gpus"][0]["uuid"], test::kUuid0);
  EXPECT_TRUE(j["gpus"][0]["problem"].is_null());
  ASSERT_TRUE(j["checks"].is_array());
  EXPECT_EQ(j["checks"][0]["name"], "slurm.conf");
}

TEST_F(NodeDoctorTest, PluginNotListedFails) {
  set_plugin_line("# optional unilab_mps.so\noptional /usr/lib/x86_64-linux-gnu/slurm-wlm/other.so\n");
  NodeDoctorReport rep = run();
  EXPECT_FALSE(rep.ok());
  EXPECT_EQ(check(rep, "plugin-listed").status, CheckStatus::kFail);
  EXPECT_NE(check(rep, "plugin-listed").detail.find("no `optional .../unilab_mps.so` line"), std::string::npos);
  EXPECT_NE(rep.to_text().find("not ready"), std::string::npos);
}

TEST_F(NodeDoctorTest, PluginListedTwiceFails) {
  probe.files["/etc/slurm/plugstack.conf"] =
      "optional /usr/lib/x86_64-linux-gnu/slurm-wlm/unilab_mps.so\ninclude plugstack.conf.d/*.conf\n";
  probe.globs["/etc/slurm/plugstack.conf.d/*.conf"] = {kPlugstackD};
  NodeDoctorReport rep = run();
  EXPECT_EQ(check(rep, "plugin-listed").status, CheckStatus::kFail);
  EXPECT_NE(check(rep, "plugin-listed").detail.find("listed 2 times"), std::string::npos);
}

TEST_F(NodeDoctorTest, RelativePluginNotInPluginDirFails) {
  probe.files[opt.slurm_conf] += "PluginDir=/opt/slurm/lib:/opt/slurm/lib64\n";
  NodeDoctorReport rep = run();
  EXPECT_EQ(check(rep, "plugin-file").status, CheckStatus::kFail);
  EXPECT_NE(check(rep, "plugin-file").detail.find("/opt/slurm/lib:/opt/slurm/lib64"), std::string::npos);
  probe.facts["/opt/slurm/lib64/unilab_mps.so"] = FakeNodeProbe::file(0, 0755, 800);
  EXPECT_EQ(check(run(), "plugin-file").status, CheckStatus::kOk);
}

TEST_F(NodeDoctorTest, PluginFileWritableByOthersOrMissingFails) {
  probe.facts["/usr/lib/x86_64-linux-gnu/slurm-wlm/unilab_mps.so"] = FakeNodeProbe::file(1000, 0644, 800);
  EXPECT_NE(check(run(), "plugin-file").detail.find("owned by uid 1000"), std::string::npos);
  probe.facts["/usr/lib/x86_64-linux-gnu/slurm-wlm/unilab_mps.so"] = FakeNodeProbe::file(0, 0666, 800);
  EXPECT_EQ(check(run(), "plugin-file").status, CheckStatus::kFail);
  set_plugin_line("optional /nowhere/unilab_mps.so\n");
  NodeDoctorReport rep = run();
  EXPECT_EQ(check(rep, "plugin-file").status, CheckStatus::kFail);
  EXPECT_NE(check(rep, "plugin-file").detail.find("/nowhere/unilab_mps.so does not exist"), std::string::npos);
}

TEST_F(NodeDoctorTest, BadPluginArgumentsFail) {
  set_plugin_line("optional unilab_mps.so state_dir=relative\n");
  NodeDoctorReport rep = run();
  EXPECT_EQ(check(rep, "plugin-args").status, CheckStatus::kFail);
  EXPECT_NE(check(rep, "plugin-args").detail.find("state_dir=relative"), std::string::npos);
  set_plugin_line("optional unilab_mps.so colour=blue\n");
  EXPECT_NE(check(run(), "plugin-args").detail.find("unknown plugin argument 'colour'"), std::string::npos);
}

TEST_F(NodeDoctorTest, SlurmdStartedBeforeTheLastChangeMustBeRestarted) {
  probe.facts[kPlugstackD] = FakeNodeProbe::file(0, 0644, 1100);
  NodeDoctorReport rep = run();
  EXPECT_FALSE(rep.ok());
  EXPECT_EQ(check(rep, "slurmd").status, CheckStatus::kFail);
  EXPECT_NE(check(rep, "slurmd").detail.find("restart slurmd"), std::string::npos);
  EXPECT_NE(check(rep, "slurmd").detail.find(kPlugstackD), std::string::npos);
  // A newer plugin file counts the same; a change within the clock-tick slack does not.
  probe.facts[kPlugstackD] = FakeNodeProbe::file(0, 0644, 1000.05);
  EXPECT_EQ(check(run(), "slurmd").status, CheckStatus::kOk);
  probe.facts["/usr/lib/x86_64-linux-gnu/slurm-wlm/unilab_mps.so"] = FakeNodeProbe::file(0, 0644, 2000);
  EXPECT_NE(check(run(), "slurmd").detail.find("unilab_mps.so"), std::string::npos);
}

TEST_F(NodeDoctorTest, SlurmdNotRunningFails) {
  probe.procs.clear();
  EXPECT_NE(check(run(), "slurmd").detail.find("pid 4242 (gone)"), std::string::npos);
  probe.procs[4242] = {"bash", 1000.0};  // the pid was reused
  EXPECT_EQ(check(run(), "slurmd").status, CheckStatus::kFail);
  probe.procs[4242] = {"slurmstepd", 1000.0};
  EXPECT_EQ(check(run(), "slurmd").status, CheckStatus::kFail);
  probe.files.erase("/run/slurmd-gpu02.pid");
  EXPECT_NE(check(run(), "slurmd").detail.find("no pid file /run/slurmd-gpu02.pid"), std::string::npos);
}

TEST_F(NodeDoctorTest, UnsafeStateOrRunDirFails) {
  probe.facts["/run/unilab-mps"] = FakeNodeProbe::dir(1000, 0755);
  EXPECT_NE(check(run(), "state-dir").detail.find("owned by uid 1000"), std::string::npos);
  probe.facts["/run/unilab-mps"] = FakeNodeProbe::dir(0, 0775);
  EXPECT_NE(check(run(), "state-dir").detail.find("writable by group or others"), std::string::npos);
  probe.facts["/run/unilab-mps"] = FakeNodeProbe::dir(0, 0700);
  EXPECT_NE(check(run(), "state-dir").detail.find("must traverse it"), std::string::npos);
  probe.facts["/run/unilab-mps"] = FakeNodeProbe::dir(0, 0755);
  probe.facts["/run/unilab-mps"].is_symlink = true;
  EXPECT_NE(check(run(), "state-dir").detail.find("symlink"), std::string::npos);
  // A root-owned sticky ancestor (/tmp) is fine; the run dir under it too.
  set_plugin_line("optional unilab_mps.so state_dir=/tmp/s run_dir=/tmp/r nvidia_smi=/opt/nv/nvidia-smi "
                  "mps_control=/opt/nv/nvidia-cuda-mps-control\n");
  probe.facts["/tmp"] = FakeNodeProbe::dir(0, 01777);
  probe.facts["/tmp/s"] = FakeNodeProbe::dir(0, 0755);
  NodeDoctorReport rep = run();
  EXPECT_EQ(check(rep, "state-dir").status, CheckStatus::kOk);
  EXPECT_EQ(check(rep, "run-dir").status, CheckStatus::kOk);
  probe.facts["/tmp/s"] = FakeNodeProbe::dir(0, 01777);  // sticky leaf: still writable by all
  EXPECT_EQ(check(run(), "state-dir").status, CheckStatus::kFail);
}

TEST_F(NodeDoctorTest, ToolsFromThePluginArgumentsMustBeExecutable) {
  probe.executables.erase("/opt/nv/nvidia-smi");
  NodeDoctorReport rep = run();
  EXPECT_EQ(check(rep, "nvidia-smi").status, CheckStatus::kFail);
  EXPECT_NE(check(rep, "nvidia-smi").detail.find("/opt/nv/nvidia-smi is missing"), std::string::npos);
  EXPECT_EQ(runner.count_program("/opt/nv/nvidia-smi"), 0u);
  // Without nvidia-smi the table still lists gres.conf, each row flagged.
  ASSERT_EQ(rep.gpus.size(), 4u);
  EXPECT_FALSE(rep.gpus[0].problem.empty());
  probe.executables.erase("/opt/nv/nvidia-cuda-mps-control");
  EXPECT_EQ(check(run(), "mps-control").status, CheckStatus::kFail);
}

TEST_F(NodeDoctorTest, NvidiaSmiWithoutDriverFails) {
  runner.handler = [](const Command&) { return test::exited(9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"); };
  EXPECT_EQ(check(run(), "nvidia-smi").status, CheckStatus::kFail);
}

TEST_F(NodeDoctorTest, EveryUnmappableGpuIsFlagged) {
  probe.files["/etc/slurm/gres.conf"] =
      "AutoDetect=off\nNodeName=gpu02 Name=gpu File=/dev/nvidia2\nNodeName=gpu02 Name=gpu File=/dev/nvidia7\n"
      "NodeName=gpu02 Name=gpu File=/dev/notadevice\nNodeName=gpu01 Name=gpu File=/dev/nvidia0\n";
  probe.minors["/dev/nvidia7"] = 7;
  NodeDoctorReport rep = run();
  EXPECT_FALSE(rep.ok());
  ASSERT_EQ(rep.gpus.size(), 3u);
  EXPECT_TRUE(rep.gpus[0].problem.empty());
  EXPECT_NE(rep.gpus[1].problem.find("minor 7) matches no GPU"), std::string::npos);
  EXPECT_NE(rep.gpus[2].problem.find("not a character device"), std::string::npos);
  EXPECT_NE(check(rep, "gpu-map").detail.find("2 of 3 GPU(s)"), std::string::npos);
  // nvidia-smi GPUs no GRES entry names: Slurm never schedules them.
  EXPECT_EQ(check(rep, "gpu-unlisted").status, CheckStatus::kWarn);
  EXPECT_NE(check(rep, "gpu-unlisted").detail.find(test::kUuid1), std::string::npos);
  EXPECT_NE(rep.to_text().find("NOT MAPPED"), std::string::npos);
}

TEST_F(NodeDoctorTest, TwoGresEntriesOnOneGpuFail) {
  probe.files["/etc/slurm/gres.conf"] = "NodeName=gpu02 Name=gpu File=/dev/nvidia[2,0,3,1]\nName=gpu File=/dev/nvidia2\n";
  // slurm.conf's Gres=gpu:4 takes four lines: Slurm discards the fifth, and the doctor says so.
  const auto discarded = check(run(), "gres.conf");
  EXPECT_EQ(discarded.status, CheckStatus::kWarn);
  EXPECT_NE(discarded.detail.find("1 GPU line(s) beyond slurm.conf's Gres= for the node, which Slurm discards: /dev/nvidia2"),
            std::string::npos) << discarded.detail;
  // Gres=gpu:5 takes it: two GRES on one GPU.
  probe.files[opt.slurm_conf] = "GresTypes=gpu\nNodeName=gpu[01-02] NodeHostname=host[1-2] Gres=gpu:5 CPUs=8\n";
  EXPECT_NE(check(run(), "gpu-map").detail.find("GRES 0,4 are the same GPU"), std::string::npos);
}

TEST_F(NodeDoctorTest, GresConfFromThePluginArgument) {
  set_plugin_line(std::string("optional unilab_mps.so gres_conf=/etc/gres-alt.conf ") + kArgs + "\n");
  NodeDoctorReport rep = run();
  EXPECT_EQ(check(rep, "gres.conf").status, CheckStatus::kFail);
  EXPECT_NE(check(rep, "gres.conf").detail.find("/etc/gres-alt.conf"), std::string::npos);
}

TEST_F(NodeDoctorTest, DaemonOnTheDefaultPipeDirectory) {
  probe.sockets["/tmp/nvidia-mps/control"] = SocketState::kListening;
  NodeDoctorReport rep = run();
  EXPECT_FALSE(rep.ok());
  EXPECT_NE(check(rep, "default-pipe").detail.find("every CUDA program"), std::string::npos);
  probe.sockets["/tmp/nvidia-mps/control"] = SocketState::kRefused;
  EXPECT_EQ(check(run(), "default-pipe").status, CheckStatus::kWarn);
  probe.sockets["/tmp/nvidia-mps/control"] = SocketState::kDenied;
  EXPECT_EQ(check(run(), "default-pipe").status, CheckStatus::kWarn);
}

TEST_F(NodeDoctorTest, JobContainerTmpfsMakesDevShmPrivate) {
  probe.files[opt.slurm_conf] += "JobContainerType=job_container/tmpfs\n";
  NodeDoctorReport rep = run();
  EXPECT_FALSE(rep.ok());
  EXPECT_NE(check(rep, "dev-shm").detail.find("private /dev/shm (Slurm 22.05 always does)"), std::string::npos);
  probe.files["/etc/slurm/job_container.conf"] = "AutoBasePath=true\nBasePath=/var/jc\nDirs=/tmp,/dev/shm\n";
  EXPECT_EQ(check(run(), "dev-shm").status, CheckStatus::kFail);
  probe.files["/etc/slurm/job_container.conf"] = "AutoBasePath=true\nBasePath=/var/jc\nDirs=/tmp\n";
  EXPECT_EQ(check(run(), "dev-shm").status, CheckStatus::kOk);
}

TEST_F(NodeDoctorTest, PrologHelperNextToThePluginIsFlagged) {
  probe.files[opt.slurm_conf] += "Prolog=/usr/sbin/unilab-mps-prolog\nEpilog=/usr/sbin/unilab-mps-epilog\n";
  NodeDoctorReport rep = run();
  EXPECT_TRUE(rep.ok());
  EXPECT_EQ(check(rep, "prolog-helper").status, CheckStatus::kWarn);
}

TEST_F(NodeDoctorTest, NodeNameFromOptionOrAmbiguousHost) {
  opt.node = "gpu01";
  NodeDoctorReport rep = run();
  EXPECT_EQ(rep.node, "gpu01");
  // gpu01 has no pid file and gres.conf lists no GPU for it.
  EXPECT_EQ(check(rep, "slurmd").status, CheckStatus::kFail);
  EXPECT_EQ(check(rep, "gpu-map").status, CheckStatus::kFail);
  opt.node.reset();
  probe.files[opt.slurm_conf] += "NodeName=extra NodeHostname=host2\n";
  EXPECT_NE(check(run(), "node").detail.find("several Slurm nodes (extra,gpu02)"), std::string::npos);
}

TEST_F(NodeDoctorTest, MissingSlurmConfAndPlugstack) {
  probe.files.erase(opt.slurm_conf);
  probe.files.erase("/etc/slurm/plugstack.conf");
  NodeDoctorReport rep = run();
  EXPECT_EQ(check(rep, "slurm.conf").status, CheckStatus::kFail);
  EXPECT_EQ(check(rep, "plugstack").status, CheckStatus::kFail);
  // One root cause, one fail: the plugin line is not looked for in a stack that is not there.
  EXPECT_EQ(check(rep, "plugin-listed").status, CheckStatus::kSkip);
  EXPECT_EQ(check(rep, "plugin-listed").detail, "skipped: needs plugstack");
}

TEST_F(NodeDoctorTest, PlugStackConfigAndIncludesInSlurmConf) {
  probe.files[opt.slurm_conf] = "include /etc/slurm/site.conf\nNodeName=gpu02 NodeHostname=host2\n";
  probe.files["/etc/slurm/site.conf"] = "PlugStackConfig=/srv/spank/stack.conf\nSlurmdPidFile=/run/slurmd-%n.pid\n";
  probe.files["/srv/spank/stack.conf"] = std::string("required /srv/spank/unilab_mps.so ") + kArgs + "\n";
  probe.facts["/srv/spank/unilab_mps.so"] = FakeNodeProbe::file(0, 0755, 10);
  NodeDoctorReport rep = run();
  EXPECT_TRUE(rep.ok()) << rep.to_text();
  EXPECT_NE(check(rep, "slurm.conf").detail.find("/etc/slurm/site.conf"), std::string::npos);
  EXPECT_NE(check(rep, "plugin-listed").detail.find("/srv/spank/stack.conf:1: required"), std::string::npos);
}

// Root cause once: a typo in one plugin argument is one fail line; what
// needs the arguments is reported skipped, naming what it needs.
TEST_F(NodeDoctorTest, OneTypoInAPluginArgumentIsOneFailLine) {
  set_plugin_line(std::string("optional unilab_mps.so ") + kArgs + " stat_dir=/run/x\n");
  NodeDoctorReport rep = run();
  std::vector<std::string> fails;
  for (const auto& c : rep.checks) {
    if (c.status == CheckStatus::kFail) fails.push_back(c.name + ": " + c.detail);
  }
  ASSERT_EQ(fails.size(), 1u) << rep.to_text();
  EXPECT_NE(fails[0].find("plugin-args: unknown plugin argument 'stat_dir'"), std::string::npos) << fails[0];
  for (const char* id : {"state-dir", "run-dir", "nvidia-smi", "mps-control", "gres.conf", "containment"}) {
    EXPECT_EQ(check(rep, id).status, CheckStatus::kSkip) << id;
    EXPECT_EQ(check(rep, id).detail, "skipped: needs plugin-args") << id;
  }
  EXPECT_EQ(check(rep, "gpu-map").detail, "skipped: needs gres.conf");
  EXPECT_NE(rep.to_text().find("[skip] nvidia-smi     skipped: needs plugin-args\n"), std::string::npos) << rep.to_text();
  EXPECT_EQ(rep.to_json()["checks"][5]["status"], "fail");
  EXPECT_FALSE(rep.ok());
}

TEST_F(NodeDoctorTest, AsksTheRunningSlurmdForItsVersion) {
  NodeDoctorReport rep = run();
  EXPECT_EQ(runner.count_program("/usr/sbin/slurmd"), 1u);
  EXPECT_NE(check(rep, "slurm-version").detail.find("Slurm 22.05.8 (series 22.05)"), std::string::npos);
  probe.exes.erase(4242);
  rep = run();
  EXPECT_EQ(check(rep, "slurm-version").status, CheckStatus::kWarn);
  EXPECT_TRUE(rep.ok());
}

// The attack of a stale pid file: slurmd died without removing it, a user's
// process took its pid and runs ~/slurmd. Root's doctor must never run a
// binary a user could have placed, and says why it did not.
TEST_F(NodeDoctorTest, NeverRunsABinaryAUserCouldHavePlacedAsSlurmd) {
  probe.facts["/home"] = FakeNodeProbe::dir(0, 0755);
  probe.facts["/home/u"] = FakeNodeProbe::dir(1000, 0755);
  probe.facts["/home/u/slurmd"] = FakeNodeProbe::file(1000, 0755);
  // The pid belongs to a user's process named slurmd.
  probe.uids[4242] = 1000;
  probe.exes[4242] = "/home/u/slurmd";
  NodeDoctorReport rep = run();
  EXPECT_EQ(runner.count_program("/home/u/slurmd"), 0u);
  EXPECT_EQ(runner.count_program("/usr/sbin/slurmd"), 0u);
  EXPECT_EQ(check(rep, "slurmd").status, CheckStatus::kFail);
  EXPECT_NE(check(rep, "slurmd").detail.find("pid 4242 (slurmd) runs as uid 1000, not root"), std::string::npos)
      << check(rep, "slurmd").detail;
  EXPECT_EQ(check(rep, "slurm-version").status, CheckStatus::kWarn);
  // Root's process, but its binary sits where a user can swap it.
  probe.uids.erase(4242);
  rep = run();
  EXPECT_EQ(runner.count_program("/home/u/slurmd"), 0u);
  EXPECT_EQ(check(rep, "slurm-version").status, CheckStatus::kWarn);
  EXPECT_NE(check(rep, "slurm-version").detail.find("/home/u is owned by uid 1000"), std::string::npos)
      << check(rep, "slurm-version").detail;
  // A root-owned but group-writable binary is no better.
  probe.exes[4242] = "/usr/sbin/slurmd";
  probe.facts["/usr/sbin/slurmd"] = FakeNodeProbe::file(0, 0775);
  EXPECT_NE(check(run(), "slurm-version").detail.find("/usr/sbin/slurmd is owned by uid 0 with mode 775"), std::string::npos);
  // The right path, but not the file the process runs (replaced on disk).
  probe.facts["/usr/sbin/slurmd"] = FakeNodeProbe::file(0, 0755);
  probe.replaced.insert("/usr/sbin/slurmd");
  EXPECT_NE(check(run(), "slurm-version").detail.find("is not the file pid 4242 runs"), std::string::npos);
  EXPECT_EQ(runner.count_program("/usr/sbin/slurmd"), 0u);
  // A pid file a user could have written or swapped is not read at all.
  probe.replaced.clear();
  probe.root_file_problems["/run/slurmd-gpu02.pid"] = "/run/slurmd-gpu02.pid is a symlink";
  rep = run();
  EXPECT_EQ(check(rep, "slurmd").status, CheckStatus::kFail);
  EXPECT_NE(check(rep, "slurmd").detail.find("cannot tell whether slurmd runs: /run/slurmd-gpu02.pid is a symlink"),
            std::string::npos)
      << check(rep, "slurmd").detail;
  EXPECT_EQ(runner.count_program("/usr/sbin/slurmd"), 0u);
  // All sound: asked once, as whom the options say.
  probe.root_file_problems.clear();
  opt.version_query_as = Credentials{65534, 65534};
  rep = run();
  ASSERT_EQ(runner.count_program("/usr/sbin/slurmd"), 1u);
  for (const auto& c : runner.commands) {
    if (c.argv[0] != "/usr/sbin/slurmd") continue;
    ASSERT_TRUE(c.credentials);
    EXPECT_EQ(c.credentials->uid, 65534u);
  }
  EXPECT_EQ(check(rep, "slurm-version").status, CheckStatus::kOk);
}

// status --job reads the plugin's configuration the way the doctor does.
TEST_F(NodeDoctorTest, NodePluginConfigIsWhatTheDoctorReads) {
  NodePluginConfig n = node_plugin_config(probe, opt.slurm_conf, std::nullopt, opt.default_plugin_dir);
  ASSERT_TRUE(n.config) << n.problem;
  EXPECT_EQ(n.config->state_dir, "/run/unilab-mps");
  EXPECT_EQ(n.config->tools.nvidia_smi, "/opt/nv/nvidia-smi");
  EXPECT_EQ(n.config->tools.mps_control, "/opt/nv/nvidia-cuda-mps-control");
  EXPECT_EQ(n.plugin_line, std::string(kPlugstackD) + ":1");
  EXPECT_EQ(n.node, "gpu02");  // host2 is gpu02 in slurm.conf, as for the doctor
  EXPECT_EQ(run().node, n.node);
  EXPECT_EQ(node_plugin_config(probe, opt.slurm_conf, "gpu01", opt.default_plugin_dir).node, "gpu01");
}

TEST_F(NodeDoctorTest, NodePluginConfigSaysWhyThereIsNone) {
  set_plugin_line("optional unilab_mps.so state_dir=relative\n");
  NodePluginConfig n = node_plugin_config(probe, opt.slurm_conf, std::nullopt, opt.default_plugin_dir);
  EXPECT_FALSE(n.config);
  EXPECT_NE(n.problem.find(std::string(kPlugstackD) + ":1: plugin argument state_dir=relative"), std::string::npos) << n.problem;
  set_plugin_line("# none\n");
  n = node_plugin_config(probe, opt.slurm_conf, std::nullopt, opt.default_plugin_dir);
  EXPECT_FALSE(n.config);
  EXPECT_NE(n.problem.find("no `optional .../unilab_mps.so` line in /etc/slurm/plugstack.conf"), std::string::npos) << n.problem;
  n = node_plugin_config(probe, "/etc/none/slurm.conf", std::nullopt, opt.default_plugin_dir);
  EXPECT_FALSE(n.config);
  EXPECT_FALSE(n.problem.empty());
  EXPECT_EQ(n.node, "host2");  // nothing read: the host name, as the doctor assumes
}

TEST_F(NodeDoctorTest, NodePluginConfigLeavesASharedHostToTheCaller) {
  probe.files[opt.slurm_conf] = "NodeName=n1 NodeHostname=host2\nNodeName=n2 NodeHostname=host2\n";
  NodePluginConfig n = node_plugin_config(probe, opt.slurm_conf, std::nullopt, opt.default_plugin_dir);
  EXPECT_EQ(n.node, "");
  EXPECT_EQ(n.host_nodes, (std::vector<std::string>{"n1", "n2"}));
}

}  // namespace
}  // namespace unilab::mps
