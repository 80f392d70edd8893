#include "common/mps/daemon.hpp"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "common/mps/errors.hpp"
#include "common/mps/topology.hpp"
#include "tests/unit/doubles.hpp"

namespace unilab::mps {
namespace {

using namespace std::chrono_literals;
using test::Doubles;
using test::error_of;
using test::exists;
using test::make_record;
using test::TempDir;

// The daemon's user: another uid when we are root (the Slurm prolog case),
// else ourselves (the CLI case).
uid_t daemon_uid() { return test::is_root() ? test::kOtherUid : geteuid(); }
gid_t daemon_gid() { return test::is_root() ? test::kOtherGid : getegid(); }

// A stop that found its daemon already gone: outcome "stale", and its one line.
std::string stale_detail(const StopReport& rep) {
  EXPECT_EQ(rep.outcome, StopOutcome::kStale) << rep.detail;
  return rep.detail;
}

class DaemonTest : public ::testing::Test {
 protected:
  TempDir tmp;
  Doubles d;
  RecordStore store{tmp / "state", geteuid(), getegid(), 0700, 0600};
  std::string base = tmp / "run";

  StartRequest request(const std::string& name = "gpu-7fdaf0a5", std::vector<std::string> uuids = {test::kUuid0}) {
    StartRequest r;
    r.name = name;
    r.uid = daemon_uid();
    r.gid = daemon_gid();
    r.host = "ws1";
    r.topology_mode = uuids.size() > 1 ? TopologyMode::kSingleTaskMulti : TopologyMode::kSingle;
    r.gpu_uuids = std::move(uuids);
    r.base_directory = base;
    r.start_timeout = 3000ms;
    return r;
  }

  std::vector<std::string> record_files() { return exists(store.root()) ? test::dir_entries(store.root()) : std::vector<std::string>{}; }

  void expect_credentials(const Command& c) {
    if (test::is_root()) {
      ASSERT_TRUE(c.credentials.has_value());
      EXPECT_EQ(c.credentials->uid, daemon_uid());
      EXPECT_EQ(c.credentials->gid, daemon_gid());
    } else {
      EXPECT_FALSE(c.credentials.has_value());
    }
  }

  // A record (and simulated live daemon) not made by start_daemon.
  DaemonRecord live_record(const std::string& name, uid_t uid, const std::string& host, pid_t pid) {
    DaemonRecord r = make_record(name, uid, host, pid, 5000 + static_cast<uint64_t>(pid), tmp / (name + "-pipe"), {test::kUuid0});
    r.boot_id = d.proc.boot;
    d.proc.add(pid, uid, r.process_start_ticks);
    d.proc.environ[pid]["CUDA_MPS_PIPE_DIRECTORY"] = r.pipe_directory;
    d.host.daemons[r.pipe_directory] = pid;
    return r;
  }
};

// --- start_daemon -----------------------------------------------------------------

TEST_F(DaemonTest, StartHappyPath) {
  StartRequest req = request();
  const std::string pipe = base + "/gpu-7fdaf0a5/pipe";
  const std::string log = base + "/gpu-7fdaf0a5/log";
  bool checked_inside = false;
  d.host.on_launch = [&](const Command&) {
    // Crash safety: the "starting" record is on disk before -d runs.
    auto rec = store.read("gpu-7fdaf0a5");
    ASSERT_TRUE(rec);
    EXPECT_EQ(rec->state, RecordState::kStarting);
    EXPECT_EQ(rec->pid, 0);
    EXPECT_EQ(rec->pipe_directory, pipe);
    EXPECT_EQ(rec->owned_directories, (std::vector<std::string>{base + "/gpu-7fdaf0a5"}));
    EXPECT_TRUE(S_ISDIR(test::mode_of(pipe)));
    EXPECT_TRUE(S_ISDIR(test::mode_of(log)));
    checked_inside = true;
  };

  DaemonRecord rec = start_daemon(d.services, d.tools, store, req);
  EXPECT_TRUE(checked_inside);

  // The launch: `mps_control -d` by absolute path, env exactly the four variables.
  ASSERT_EQ(d.host.launch_commands.size(), 1u);
  const Command& launch = d.host.launch_commands[0];
  EXPECT_EQ(launch.argv, (std::vector<std::string>{d.host.mps_control, "-d"}));
  ASSERT_EQ(launch.env.size(), 4u);
  EXPECT_EQ(launch.env[0].rfind("PATH=", 0), 0u);
  EXPECT_EQ(test::env_value(launch, "CUDA_MPS_PIPE_DIRECTORY"), pipe);
  EXPECT_EQ(test::env_value(launch, "CUDA_MPS_LOG_DIRECTORY"), log);
  EXPECT_EQ(test::env_value(launch, "CUDA_VISIBLE_DEVICES"), test::kUuid0);
  expect_credentials(launch);
  // It was asked whether it answers.
  EXPECT_FALSE(d.runner.with_stdin("get_server_list\n").empty());

  // The final record: running, with the identity /proc reports.
  const pid_t pid = d.host.daemons.at(pipe);
  EXPECT_EQ(rec.state, RecordState::kRunning);
  EXPECT_EQ(rec.pid, pid);
  EXPECT_EQ(rec.process_start_ticks, d.proc.procs.at(pid).start_ticks);
  EXPECT_EQ(rec.boot_id, d.proc.boot);
  EXPECT_EQ(rec.uid, daemon_uid());
  EXPECT_EQ(rec.host, "ws1");
  EXPECT_EQ(rec.gpu_uuids, (std::vector<std::string>{test::kUuid0}));
  EXPECT_EQ(rec.pipe_directory, pipe);
  EXPECT_EQ(rec.log_directory, log);
  EXPECT_EQ(rec.owned_directories, (std::vector<std::string>{base + "/gpu-7fdaf0a5"}));
  EXPECT_EQ(rec.topology_mode, TopologyMode::kSingle);
  EXPECT_GT(rec.created_at, 0);
  auto on_disk = store.read("gpu-7fdaf0a5");
  ASSERT_TRUE(on_disk);
  EXPECT_EQ(*on_disk, rec);
  EXPECT_TRUE(daemon_process_is_live(rec, d.proc));

  // Directories: private to the daemon's user.
  for (const auto& dir : {base + "/gpu-7fdaf0a5", pipe, log}) {
    EXPECT_EQ(test::mode_of(dir) & 07777, 0700u) << dir;
    EXPECT_EQ(test::owner_of(dir), daemon_uid()) << dir;
  }
  EXPECT_TRUE(d.signaller.requests.empty());
  EXPECT_LT(d.clock.elapsed(), req.start_timeout);
  EXPECT_EQ(d.host.smi_calls, 0);
}

TEST_F(DaemonTest, PinnedMemLimitDeviceIsTheOrdinalInTheDaemonsVisibleDevices) {
  // The daemon sees only its CUDA_VISIBLE_DEVICES, renumbered from 0 in that
  // order (NVIDIA's device plugin does the same); the nvidia-smi index
  // (here 3, then 2 and 0) never reaches the daemon.
  StartRequest one = request("one-0f0e0d0c", {test::kUuid3});
  one.limits.pinned_mem_limit = "2048M";
  start_daemon(d.services, d.tools, store, one);
  StartRequest two = request("two-9a8b-7fda", {test::kUuid2, test::kUuid0});
  two.limits.pinned_mem_limit = "4096M";
  start_daemon(d.services, d.tools, store, two);
  ASSERT_EQ(d.host.launch_commands.size(), 2u);
  EXPECT_EQ(test::env_value(d.host.launch_commands.at(1), "CUDA_VISIBLE_DEVICES"), test::kUuid2 + "," + test::kUuid0);
  std::vector<std::string> sets;
  for (const auto& c : d.host.received) if (c.rfind("set_default_device_pinned_mem_limit", 0) == 0) sets.push_back(c);
  EXPECT_EQ(sets, (std::vector<std::string>{"set_default_device_pinned_mem_limit 0 2048M",
                                            "set_default_device_pinned_mem_limit 0 4096M",
                                            "set_default_device_pinned_mem_limit 1 4096M"}));
}

TEST_F(DaemonTest, StartMultiGpuWithLimits) {
  StartRequest req = request("multi-7fdaf0a5-1b2c3d4e", {test::kUuid0, test::kUuid1});
  req.limits.active_thread_percentage = 37.5;
  req.limits.pinned_mem_limit = "8192M";
  DaemonRecord rec = start_daemon(d.services, d.tools, store, req);
  EXPECT_EQ(test::env_value(d.host.launch_commands.at(0), "CUDA_VISIBLE_DEVICES"), test::kUuid0 + "," + test::kUuid1);
  EXPECT_EQ(rec.limits, req.limits);
  EXPECT_EQ(rec.topology_mode, TopologyMode::kSingleTaskMulti);
  std::vector<std::string> sets;
  for (const auto& c : d.host.received) if (c.rfind("set_", 0) == 0) sets.push_back(c);
  EXPECT_EQ(sets, (std::vector<std::string>{"set_default_active_thread_percentage 37.5",
                                            "set_default_device_pinned_mem_limit 0 8192M",
                                            "set_default_device_pinned_mem_limit 1 8192M"}));
  // Limits go through the daemon's own pipe, as its user.
  for (const auto& c : d.runner.commands) {
    if (c.stdin_data.rfind("set_", 0) != 0) continue;
    EXPECT_EQ(test::env_value(c, "CUDA_MPS_PIPE_DIRECTORY"), rec.pipe_directory);
    expect_credentials(c);
  }
}

TEST_F(DaemonTest, RefusedLimitsStopTheDaemonAndClean) {
  d.host.refuse_limits = true;
  StartRequest req = request();
  req.limits.active_thread_percentage = 50;
  std::string e = error_of([&] { start_daemon(d.services, d.tools, store, req); });
  EXPECT_NE(e.find("set_default_active_thread_percentage 50"), std::string::npos) << e;
  const pid_t pid = d.host.daemons.begin()->second;
  EXPECT_FALSE(d.proc.alive(pid));
  ASSERT_FALSE(d.signaller.delivered.empty());
  EXPECT_EQ(d.signaller.delivered[0], std::make_pair(pid, SIGTERM));
  EXPECT_TRUE(record_files().empty());
  EXPECT_FALSE(exists(base + "/gpu-7fdaf0a5"));
}

// A failed start ends more than the pid it went by (a pid file the user can
// rename over with a decoy's): every MPS process of the user on the daemon's
// pipe directory, as a stop's sweep does; the user's other processes stay.
TEST_F(DaemonTest, AFailedStartEndsEveryMpsProcessOnItsPipeDir) {
  d.host.refuse_limits = true;
  StartRequest req = request();
  req.limits.active_thread_percentage = 50;
  const std::string pipe = daemon_directories(base, req.name).pipe;
  auto add = [&](pid_t p, const std::string& comm, const std::string& dir) {
    d.proc.add(p, req.uid, 70000 + static_cast<uint64_t>(p));
    d.proc.comms[p] = comm;
    d.proc.environ[p]["CUDA_MPS_PIPE_DIRECTORY"] = dir;
    return p;
  };
  const pid_t unnamed = add(9101, "nvidia-cuda-mps", pipe);
  const pid_t client = add(9102, "python3", pipe);
  const pid_t elsewhere = add(9103, "nvidia-cuda-mps", tmp / "other/pipe");
  EXPECT_FALSE(error_of([&] { start_daemon(d.services, d.tools, store, req); }).empty());
  EXPECT_FALSE(d.proc.alive(unnamed));
  EXPECT_TRUE(d.proc.alive(client));
  EXPECT_TRUE(d.proc.alive(elsewhere));
  EXPECT_TRUE(record_files().empty());
}

TEST_F(DaemonTest, LaunchFailureCarriesTheDaemonsStderrAndCleansUp) {
  d.host.launch_failures[1] = test::exited(1, "", "nvidia-cuda-mps-control: failed to open log directory\n");
  std::string e = error_of([&] { start_daemon(d.services, d.tools, store, request()); });
  EXPECT_NE(e.find("failed to open log directory"), std::string::npos) << e;
  EXPECT_NE(e.find("exit 1"), std::string::npos) << e;
  EXPECT_NE(e.find(d.host.mps_control), std::string::npos) << e;
  EXPECT_TRUE(record_files().empty());
  EXPECT_FALSE(exists(base + "/gpu-7fdaf0a5"));
  EXPECT_TRUE(d.signaller.requests.empty());
}

TEST_F(DaemonTest, ControlLogTailIsAddedToTheError) {
  d.host.launch_failures[1] = test::exited(1);
  d.host.on_launch = [&](const Command& c) {
    const std::string log = *test::env_value(c, "CUDA_MPS_LOG_DIRECTORY") + "/control.log";
    test::write_text(log, "[2024] line one\n[2024] line two\n[2024] CUDA driver not found\n");
    // The daemon writes it as its user (the tail is read only from that user's file).
    ASSERT_EQ(lchown(log.c_str(), daemon_uid(), daemon_gid()), 0);
  };
  std::string e = error_of([&] { start_daemon(d.services, d.tools, store, request()); });
  EXPECT_NE(e.find("CUDA driver not found"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << "one-line message: " << e;
}

TEST_F(DaemonTest, NeverAnsweringDaemonTimesOutWithoutRealWaitingAndIsCleanedUp) {
  d.host.answers = false;
  StartRequest req = request();
  auto real_start = std::chrono::steady_clock::now();
  std::string e = error_of([&] { start_daemon(d.services, d.tools, store, req); });
  auto real_elapsed = std::chrono::steady_clock::now() - real_start;
  EXPECT_NE(e.find("start_timeout"), std::string::npos) << e;
  EXPECT_NE(e.find("3000 ms"), std::string::npos) << e;
  EXPECT_GE(d.clock.elapsed(), req.start_timeout);
  EXPECT_LT(real_elapsed, 2s);
  // The process it launched (found via pid file + /proc) was ended.
  const pid_t pid = d.host.daemons.begin()->second;
  EXPECT_FALSE(d.proc.alive(pid));
  ASSERT_FALSE(d.signaller.delivered.empty());
  EXPECT_EQ(d.signaller.delivered[0].first, pid);
  EXPECT_TRUE(record_files().empty());
  EXPECT_FALSE(exists(base + "/gpu-7fdaf0a5"));
}

TEST_F(DaemonTest, NoSocketEverAppearingTimesOut) {
  d.host.create_socket = false;
  d.host.write_pid_file = false;
  std::string e = error_of([&] { start_daemon(d.services, d.tools, store, request()); });
  EXPECT_NE(e.find("start_timeout"), std::string::npos) << e;
  // Without a socket the front end is never even asked.
  EXPECT_TRUE(d.runner.with_stdin("get_server_list\n").empty());
  EXPECT_TRUE(record_files().empty());
  EXPECT_FALSE(exists(base + "/gpu-7fdaf0a5"));
}

TEST_F(DaemonTest, PidFileNamingAProcessOfAnotherUidIsRefused) {
  d.host.daemon_uid = 4321;  // whoever wrote the pid file, that pid is not our user's
  std::string e = error_of([&] { start_daemon(d.services, d.tools, store, request()); });
  EXPECT_NE(e.find("uid 4321"), std::string::npos) << e;
  EXPECT_NE(e.find("cannot verify"), std::string::npos) << e;
  EXPECT_TRUE(d.signaller.requests.empty()) << "never signal a process we cannot prove is ours";
  EXPECT_TRUE(d.proc.alive(d.host.daemons.begin()->second));
  EXPECT_TRUE(record_files().empty());
  EXPECT_FALSE(exists(base + "/gpu-7fdaf0a5"));
}

TEST_F(DaemonTest, PidFileNamingAProcessOfAnotherPipeDirIsRefused) {
  StartRequest req = request();
  // After launch, make the recorded process serve some other pipe dir.
  d.runner.handler = [&](const Command& c) {
    CommandResult r = d.host.handle(c);
    if (c.argv.size() == 2 && c.argv[1] == "-d") {
      for (auto& [pid, env] : d.proc.environ) env["CUDA_MPS_PIPE_DIRECTORY"] = "/tmp/nvidia-mps";
    }
    return r;
  };
  std::string e = error_of([&] { start_daemon(d.services, d.tools, store, req); });
  EXPECT_NE(e.find("does not serve pipe directory"), std::string::npos) << e;
  EXPECT_TRUE(d.signaller.requests.empty());
  EXPECT_TRUE(record_files().empty());
}

// --- the daemon proven by ancestry (#22 item 3) ------------------------------

// The attack: a process of the user renames a pid file naming a decoy (its
// own process, with the daemon's pipe directory in its environment) over
// the daemon's. Before, the record named the decoy and the real daemon ran
// unrecorded; now the start is refused and the launched daemon is ended.
TEST_F(DaemonTest, APidFileNamingADecoyOfTheUserIsRefusedAndTheLaunchedDaemonEnds) {
  const StartRequest req = request();
  const std::string pipe = daemon_directories(base, req.name).pipe;
  const pid_t decoy = 9200;
  d.host.write_pid_file = false;
  d.runner.handler = [&](const Command& c) {
    CommandResult r = d.host.handle(c);
    if (c.argv.size() == 2 && c.argv[1] == "-d") {
      const pid_t real = d.host.daemons.at(pipe);
      d.proc.add(decoy, daemon_uid(), 777500);  // after the launch, as the user
      d.proc.adopt(real, decoy);                // forked by the daemon, say: not by this process
      d.proc.exes[decoy] = test::FakeNvidiaHost::kMpsControlFile;
      d.proc.set_environ(decoy, "CUDA_MPS_PIPE_DIRECTORY", pipe);
      test::write_text(pipe + "/" + kPidFileName, std::to_string(decoy) + "\n");
      EXPECT_EQ(lchown((pipe + "/" + kPidFileName).c_str(), daemon_uid(), daemon_gid()), 0);
    }
    return r;
  };
  std::string e = error_of([&] { start_daemon(d.services, d.tools, store, req); });
  EXPECT_NE(e.find("names pid " + std::to_string(decoy) + ", but the daemon this start launched is pid 41000"), std::string::npos) << e;
  EXPECT_FALSE(d.proc.alive(41000)) << "the daemon this start launched is ended";
  EXPECT_TRUE(record_files().empty());
}

TEST_F(DaemonTest, ADaemonThisProcessDidNotAdoptIsNotTheDaemon) {
  d.host.adopted_by = 1;  // init's child: not launched by this start
  std::string e = error_of([&] { start_daemon(d.services, d.tools, store, request()); });
  EXPECT_NE(e.find("is a child of pid 1, not of this process (pid 4000)"), std::string::npos) << e;
  EXPECT_TRUE(d.signaller.requests.empty()) << "nothing proven ours is signalled";
  EXPECT_TRUE(record_files().empty());
}

TEST_F(DaemonTest, ADaemonRunningAnotherBinaryIsNotTheDaemon) {
  d.host.daemon_exe = FileId{64769, 1};  // e.g. /bin/sleep, exec'd by the user in its place
  std::string e = error_of([&] { start_daemon(d.services, d.tools, store, request()); });
  EXPECT_NE(e.find("does not run " + d.host.mps_control), std::string::npos) << e;
  // What it runs instead, and the admin's fix when mps_control= is a wrapper.
  EXPECT_NE(e.find("mps_control= must name the daemon's binary itself, not a script or a wrapper"), std::string::npos) << e;
  EXPECT_TRUE(record_files().empty());
}

TEST_F(DaemonTest, AProcessStartedBeforeTheLaunchIsNotTheDaemon) {
  d.proc.now_ticks = d.host.next_ticks + 100;  // the "daemon" is older than its launch
  std::string e = error_of([&] { start_daemon(d.services, d.tools, store, request()); });
  EXPECT_NE(e.find("started before the launch"), std::string::npos) << e;
  EXPECT_TRUE(record_files().empty());
}

TEST_F(DaemonTest, TwoProcessesLaunchedForOnePipeDirectoryAreRefusedAndBothEnd) {
  const StartRequest req = request();
  const std::string pipe = daemon_directories(base, req.name).pipe;
  const pid_t twin = 9300;
  d.runner.handler = [&](const Command& c) {
    CommandResult r = d.host.handle(c);
    if (c.argv.size() == 2 && c.argv[1] == "-d") {  // a second one forked from the traced launcher
      d.proc.add(twin, daemon_uid(), 777600);
      d.proc.adopt(d.proc.self_pid, twin);
      d.proc.exes[twin] = test::FakeNvidiaHost::kMpsControlFile;
      d.proc.set_environ(twin, "CUDA_MPS_PIPE_DIRECTORY", pipe);
    }
    return r;
  };
  std::string e = error_of([&] { start_daemon(d.services, d.tools, store, req); });
  EXPECT_NE(e.find("2 processes launched by this start"), std::string::npos) << e;
  EXPECT_FALSE(d.proc.alive(41000));
  EXPECT_FALSE(d.proc.alive(twin));
  EXPECT_TRUE(record_files().empty());
}

TEST_F(DaemonTest, TheDaemonIsBornInItsLaunchCgroups) {
  StartRequest req = request();
  req.launch_cgroups = {"/cg/freezer/unilab_mps/job_7/cgroup.procs", "/cg/devices/unilab_mps/job_7/cgroup.procs"};
  start_daemon(d.services, d.tools, store, req);
  ASSERT_EQ(d.host.launch_commands.size(), 1u);
  EXPECT_EQ(d.host.launch_commands[0].cgroups, req.launch_cgroups);
  // Nothing else runs in them (the front end's queries are no daemons).
  for (const auto& c : d.runner.commands) {
    if (c.argv.size() != 2 || c.argv[1] != "-d") {
      EXPECT_TRUE(c.cgroups.empty()) << c.stdin_data;
    }
  }
}

TEST_F(DaemonTest, OverlongPipeDirectoryIsRefusedBeforeAnythingIsCreated) {
  StartRequest req = request();
  req.base_directory = tmp / std::string(90, 'b');  // <base>/<name>/pipe/control > 107 bytes
  ASSERT_GT((req.base_directory + "/" + req.name + "/pipe/control").size(), kMaxUnixSocketPath);
  std::string e = error_of([&] { start_daemon(d.services, d.tools, store, req); });
  EXPECT_NE(e.find("too long"), std::string::npos) << e;
  EXPECT_NE(e.find("107"), std::string::npos) << e;
  EXPECT_FALSE(exists(req.base_directory));
  EXPECT_FALSE(exists(store.root()));
  EXPECT_TRUE(d.runner.commands.empty());

  // The same for an explicit pipe directory.
  req = request();
  req.pipe_directory = tmp / std::string(110, 'p');
  EXPECT_THROW(start_daemon(d.services, d.tools, store, req), CudaMpsError);
  EXPECT_FALSE(exists(*req.pipe_directory));
  EXPECT_FALSE(exists(base));
}

TEST_F(DaemonTest, InvalidRequestsAreRefusedUpFront) {
  StartRequest req = request();
  req.name = "../evil";
  EXPECT_THROW(start_daemon(d.services, d.tools, store, req), CudaMpsError);
  req = request();
  req.gpu_uuids.clear();
  EXPECT_THROW(start_daemon(d.services, d.tools, store, req), CudaMpsError);
  req = request();
  req.pipe_directory = "relative/pipe";
  EXPECT_THROW(start_daemon(d.services, d.tools, store, req), CudaMpsError);
  EXPECT_TRUE(d.runner.commands.empty());
  EXPECT_FALSE(exists(base));
}

TEST_F(DaemonTest, ExistingRecordOfTheSameNameIsRefused) {
  store.write(make_record("gpu-7fdaf0a5", daemon_uid(), "ws1", 99, 1, "/tmp/old/pipe", {test::kUuid0}));
  std::string e = error_of([&] { start_daemon(d.services, d.tools, store, request()); });
  EXPECT_NE(e.find("already recorded"), std::string::npos) << e;
  EXPECT_TRUE(d.runner.commands.empty());
  EXPECT_FALSE(exists(base + "/gpu-7fdaf0a5"));
  EXPECT_EQ(store.read("gpu-7fdaf0a5")->pid, 99);  // untouched
}

TEST_F(DaemonTest, SymlinkPlantedAtTheDaemonDirectoryIsRefused) {
  test::make_dir(base, 0755);
  test::make_dir(tmp / "outside", 0700);
  ASSERT_EQ(symlink((tmp / "outside").c_str(), (base + "/gpu-7fdaf0a5").c_str()), 0);
  std::string e = error_of([&] { start_daemon(d.services, d.tools, store, request()); });
  EXPECT_NE(e.find("symlink"), std::string::npos) << e;
  EXPECT_TRUE(test::dir_entries(tmp / "outside").empty());
  EXPECT_TRUE(S_ISLNK(test::mode_of(base + "/gpu-7fdaf0a5")));
  EXPECT_TRUE(d.runner.commands.empty());
  EXPECT_TRUE(record_files().empty());
}

TEST_F(DaemonTest, SymlinkPlantedAtThePipeDirectoryIsRefused) {
  test::make_dir(base, 0755);
  // A pre-existing private daemon dir of the right user, with a planted pipe link.
  test::make_dir(base + "/gpu-7fdaf0a5", 0700);
  if (test::is_root()) {
    ASSERT_EQ(chown((base + "/gpu-7fdaf0a5").c_str(), daemon_uid(), daemon_gid()), 0);
  }
  test::make_dir(tmp / "outside", 0700);
  ASSERT_EQ(symlink((tmp / "outside").c_str(), (base + "/gpu-7fdaf0a5/pipe").c_str()), 0);
  EXPECT_THROW(start_daemon(d.services, d.tools, store, request()), CudaMpsError);
  EXPECT_TRUE(test::dir_entries(tmp / "outside").empty());
  EXPECT_TRUE(d.runner.commands.empty());
}

TEST_F(DaemonTest, ADaemonAlreadyAnsweringOnThePipeDirIsRefusedAndLeftAlone) {
  DaemonRecord first = start_daemon(d.services, d.tools, store, request());
  StartRequest second = request("second");
  second.pipe_directory = first.pipe_directory;
  second.log_directory = tmp / "second-log";
  std::string e = error_of([&] { start_daemon(d.services, d.tools, store, second); });
  EXPECT_NE(e.find("already answers"), std::string::npos) << e;
  EXPECT_EQ(d.host.launches, 1);
  EXPECT_FALSE(store.read("second"));
  EXPECT_TRUE(exists(first.pipe_directory + "/control"));
  EXPECT_TRUE(daemon_process_is_live(first, d.proc));
  EXPECT_TRUE(exists(first.log_directory));
  // What this refused start created itself does not stay behind.
  EXPECT_FALSE(exists(tmp / "second-log")) << "the refused start left the log directory it created";
}

// --- stop_daemon ------------------------------------------------------------------

class StopTest : public DaemonTest {
 protected:
  DaemonRecord rec;
  pid_t pid = 0;
  void SetUp() override {
    rec = start_daemon(d.services, d.tools, store, request());
    pid = rec.pid;
    d.runner.commands.clear();
    d.host.received.clear();
    d.signaller.requests.clear();
    d.signaller.delivered.clear();
    start_ = d.clock.elapsed();
  }
  std::chrono::milliseconds stop_elapsed() const { return d.clock.elapsed() - start_; }
  void expect_cleaned() {
    EXPECT_FALSE(store.read(rec.name));
    EXPECT_FALSE(exists(base + "/" + rec.name));
  }
  std::chrono::milliseconds start_{0};
};

TEST_F(StopTest, LiveDaemonQuitsThroughItsOwnPipeAsItsUser) {
  StopReport rep = stop_daemon(d.services, d.tools, store, rec, 10s);
  EXPECT_EQ(rep.outcome, StopOutcome::kQuit);
  EXPECT_EQ(rep.name, rec.name);
  EXPECT_EQ(rep.pid, pid);
  // `quit -t`: clients still attached are cut off within the stop timeout.
  auto quits = d.runner.with_stdin("quit -t 5\n");
  ASSERT_EQ(quits.size(), 1u);
  EXPECT_EQ(quits[0].argv, (std::vector<std::string>{d.host.mps_control}));
  EXPECT_EQ(test::env_value(quits[0], "CUDA_MPS_PIPE_DIRECTORY"), rec.pipe_directory);
  EXPECT_EQ(test::env_value(quits[0], "CUDA_MPS_LOG_DIRECTORY"), rec.log_directory);
  EXPECT_FALSE(test::env_value(quits[0], "CUDA_VISIBLE_DEVICES"));
  expect_credentials(quits[0]);
  EXPECT_TRUE(d.signaller.requests.empty());
  EXPECT_FALSE(d.proc.alive(pid));
  expect_cleaned();
  EXPECT_EQ(rep.to_json()["outcome"], "quit");
}

TEST_F(StopTest, IgnoredQuitEscalatesToSigterm) {
  d.host.quit_ends_daemon = false;
  StopReport rep = stop_daemon(d.services, d.tools, store, rec, 10s);
  EXPECT_EQ(rep.outcome, StopOutcome::kTerminated);
  EXPECT_NE(rep.detail.find("ignored quit"), std::string::npos) << rep.detail;
  EXPECT_EQ(d.signaller.delivered, (std::vector<std::pair<pid_t, int>>{{pid, SIGTERM}}));
  EXPECT_LE(stop_elapsed(), 10s);
  EXPECT_GE(stop_elapsed(), 5s);  // quit got its bounded share first
  expect_cleaned();
}

TEST_F(StopTest, IgnoredSigtermEscalatesToSigkill) {
  d.host.quit_ends_daemon = false;
  d.signaller.lethal = {SIGKILL};
  StopReport rep = stop_daemon(d.services, d.tools, store, rec, 10s);
  EXPECT_EQ(rep.outcome, StopOutcome::kKilled);
  EXPECT_EQ(d.signaller.delivered, (std::vector<std::pair<pid_t, int>>{{pid, SIGTERM}, {pid, SIGKILL}}));
  EXPECT_LE(stop_elapsed(), 10s + 1s);
  expect_cleaned();
}

TEST_F(StopTest, SurvivingSigkillIsAnErrorAndTheRecordIsKept) {
  d.host.quit_ends_daemon = false;
  d.signaller.lethal = {};
  std::string e = error_of([&] { stop_daemon(d.services, d.tools, store, rec, 10s); });
  EXPECT_NE(e.find("still alive"), std::string::npos) << e;
  EXPECT_EQ(e.find("no longer running"), std::string::npos) << e;
  EXPECT_EQ(d.signaller.delivered, (std::vector<std::pair<pid_t, int>>{{pid, SIGTERM}, {pid, SIGKILL}}));
  EXPECT_LE(stop_elapsed(), 10s + 1s);
  EXPECT_TRUE(store.read(rec.name));
  EXPECT_TRUE(exists(rec.pipe_directory));
}

TEST_F(StopTest, AHangingQuitStillFitsTheStopTimeout) {
  // `quit` waits for clients: model a front end that blocks until its timeout.
  d.host.quit_ends_daemon = false;
  d.signaller.lethal = {SIGKILL};
  auto inner = d.runner.handler;
  d.runner.handler = [&, inner](const Command& c) {
    if (c.stdin_data == "quit -t 2\n") d.clock.advance(c.timeout);
    return inner(c);
  };
  StopReport rep = stop_daemon(d.services, d.tools, store, rec, 4s);
  EXPECT_EQ(rep.outcome, StopOutcome::kKilled);
  EXPECT_LE(d.runner.with_stdin("quit -t 2\n").at(0).timeout, 4s);
  EXPECT_LE(stop_elapsed(), 4s + 1s);
}

TEST_F(StopTest, ReusedPidIsStaleNothingSignalledNothingRun) {
  d.proc.procs[pid].start_ticks += 1;  // same PID, another process
  std::string e = stale_detail(stop_daemon(d.services, d.tools, store, rec, 10s));
  EXPECT_NE(e.find("pid-reused"), std::string::npos) << e;
  EXPECT_TRUE(d.signaller.requests.empty());
  EXPECT_TRUE(d.runner.commands.empty());
  EXPECT_TRUE(d.proc.alive(pid));
  expect_cleaned();
}

TEST_F(StopTest, PidOfAnotherUidIsStale) {
  d.proc.procs[pid].uid = 0;
  EXPECT_EQ(stop_daemon(d.services, d.tools, store, rec, 10s).outcome, StopOutcome::kStale);
  EXPECT_TRUE(d.signaller.requests.empty());
  EXPECT_TRUE(d.runner.commands.empty());
  expect_cleaned();
}

TEST_F(StopTest, GonePidIsStale) {
  d.proc.kill(pid);
  std::string e = stale_detail(stop_daemon(d.services, d.tools, store, rec, 10s));
  EXPECT_NE(e.find("gone"), std::string::npos) << e;
  EXPECT_TRUE(d.signaller.requests.empty());
  EXPECT_TRUE(d.runner.commands.empty());
  expect_cleaned();
}

TEST_F(StopTest, RecordOfAnotherBootIsStale) {
  d.proc.boot = "after-reboot";
  std::string e = stale_detail(stop_daemon(d.services, d.tools, store, rec, 10s));
  EXPECT_NE(e.find("other-boot"), std::string::npos) << e;
  EXPECT_TRUE(d.signaller.requests.empty());
  EXPECT_TRUE(d.runner.commands.empty());
  expect_cleaned();
}

TEST_F(StopTest, QuitTimeoutIsHalfTheStopTimeoutInWholeSecondsAtLeastOne) {
  StopReport rep = stop_daemon(d.services, d.tools, store, rec, 1500ms);
  EXPECT_EQ(rep.outcome, StopOutcome::kQuit);
  EXPECT_EQ(d.host.received, (std::vector<std::string>{"quit -t 1"}));
}

// --- stop_daemon: what of the daemon's tree outlives it --------------------------------

class SweepTest : public StopTest {
 protected:
  // A process of `uid` named `comm` with `pipe` (if any) as its MPS pipe dir.
  pid_t add_process(pid_t p, uid_t uid, const std::string& comm, const std::optional<std::string>& pipe) {
    d.proc.add(p, uid, 70000 + static_cast<uint64_t>(p));
    d.proc.comms[p] = comm;
    if (pipe) d.proc.environ[p]["CUDA_MPS_PIPE_DIRECTORY"] = *pipe;
    return p;
  }
  // An MPS server the daemon forked (it serves the daemon's pipe dir).
  pid_t add_server(pid_t p) {
    add_process(p, daemon_uid(), "nvidia-cuda-mps", rec.pipe_directory);
    d.proc.adopt(pid, p);
    return p;
  }
  bool signalled(pid_t p) const {
    return std::any_of(d.signaller.requests.begin(), d.signaller.requests.end(), [&](const auto& r) { return r.first == p; });
  }
  uid_t other_uid() const { return daemon_uid() == 4321 ? 4322 : 4321; }
};

TEST_F(SweepTest, AServerThatOutlivesItsDaemonsQuitIsKilled) {
  pid_t server = add_server(pid + 1);
  StopReport rep = stop_daemon(d.services, d.tools, store, rec, 10s);
  EXPECT_EQ(rep.outcome, StopOutcome::kQuit);
  EXPECT_EQ(d.signaller.delivered, (std::vector<std::pair<pid_t, int>>{{server, SIGKILL}}));
  EXPECT_FALSE(d.proc.alive(server));
  EXPECT_NE(rep.detail.find("killed 1 leftover MPS process(es)"), std::string::npos) << rep.detail;
  expect_cleaned();
}

// The sweep looks at every process of the node, once per daemon stopped:
// a process that is not an MPS binary costs it its name only, not a stat.
TEST_F(SweepTest, ProcessesOfOtherNamesCostTheSweepNoStat) {
  for (pid_t p = 50000; p < 50200; ++p) add_process(p, p % 2 ? daemon_uid() : other_uid(), "python", rec.pipe_directory);
  pid_t server = add_server(pid + 1);
  d.proc.stat_calls = 0;
  StopReport rep = stop_daemon(d.services, d.tools, store, rec, 10s);
  EXPECT_EQ(rep.outcome, StopOutcome::kQuit);
  EXPECT_FALSE(d.proc.alive(server));
  for (pid_t p = 50000; p < 50200; ++p) EXPECT_TRUE(d.proc.alive(p)) << p;  // a user's clients are left alone
  EXPECT_LT(d.proc.stat_calls, 50) << "the sweep stats processes whose name rules them out";
}

TEST_F(SweepTest, EveryDescendantSeenBeforeTheQuitIsKilledWhateverItsName) {
  // Not an MPS binary and without the pipe dir: found only as a descendant,
  // seen before the quit (afterwards it is an orphan, no longer a child).
  pid_t child = add_process(pid + 1, daemon_uid(), "sh", std::nullopt);
  pid_t grandchild = add_process(pid + 2, daemon_uid(), "sleep", std::nullopt);
  d.proc.adopt(pid, child);
  d.proc.adopt(child, grandchild);
  StopReport rep = stop_daemon(d.services, d.tools, store, rec, 10s);
  EXPECT_EQ(rep.outcome, StopOutcome::kQuit);
  EXPECT_EQ(d.signaller.delivered, (std::vector<std::pair<pid_t, int>>{{child, SIGKILL}, {grandchild, SIGKILL}}));
  EXPECT_NE(rep.detail.find("killed 2 leftover MPS process(es)"), std::string::npos) << rep.detail;
}

TEST_F(SweepTest, ADescendantWhosePidWasReusedIsNotKilled) {
  pid_t child = add_process(pid + 1, daemon_uid(), "sh", std::nullopt);
  d.proc.adopt(pid, child);
  d.runner.handler = [&, inner = d.runner.handler](const Command& c) {
    CommandResult r = inner(c);
    if (c.stdin_data.rfind("quit", 0) == 0) d.proc.procs[child].start_ticks += 1;  // exited; pid taken by another
    return r;
  };
  StopReport rep = stop_daemon(d.services, d.tools, store, rec, 10s);
  EXPECT_EQ(rep.outcome, StopOutcome::kQuit);
  EXPECT_TRUE(d.signaller.delivered.empty());
  EXPECT_TRUE(d.proc.alive(child));
  EXPECT_EQ(rep.detail, "");
}

TEST_F(SweepTest, AnOrphanServerIsKilledEvenWhenTheDaemonIsAlreadyGone) {
  pid_t orphan = add_process(9001, daemon_uid(), "nvidia-cuda-mps", rec.pipe_directory);
  d.proc.kill(pid);
  std::string e = stale_detail(stop_daemon(d.services, d.tools, store, rec, 10s));
  EXPECT_NE(e.find("no longer running"), std::string::npos) << e;
  EXPECT_NE(e.find("killed 1 leftover MPS process(es)"), std::string::npos) << e;
  EXPECT_EQ(d.signaller.delivered, (std::vector<std::pair<pid_t, int>>{{orphan, SIGKILL}}));
  EXPECT_FALSE(d.proc.alive(orphan));
  EXPECT_TRUE(d.runner.commands.empty());  // nothing to quit
  expect_cleaned();
}

TEST_F(SweepTest, AClientOnThePipeDirIsLeftAlone) {
  pid_t orphan = add_process(9001, daemon_uid(), "nvidia-cuda-mps", rec.pipe_directory);
  pid_t client = add_process(9002, daemon_uid(), "python3", rec.pipe_directory);
  StopReport rep = stop_daemon(d.services, d.tools, store, rec, 10s);
  EXPECT_EQ(rep.outcome, StopOutcome::kQuit);
  EXPECT_FALSE(d.proc.alive(orphan));  // the sweep ran
  EXPECT_FALSE(signalled(client));
  EXPECT_TRUE(d.proc.alive(client));
}

TEST_F(SweepTest, AnotherUsersMpsProcessIsLeftAlone) {
  pid_t orphan = add_process(9001, daemon_uid(), "nvidia-cuda-mps", rec.pipe_directory);
  pid_t foreign = add_process(9003, other_uid(), "nvidia-cuda-mps", rec.pipe_directory);
  d.proc.kill(pid);
  EXPECT_EQ(stop_daemon(d.services, d.tools, store, rec, 10s).outcome, StopOutcome::kStale);
  EXPECT_FALSE(d.proc.alive(orphan));
  EXPECT_FALSE(signalled(foreign));
  EXPECT_TRUE(d.proc.alive(foreign));
}

TEST_F(SweepTest, MpsProcessesOfAnotherPipeDirAreLeftAlone) {
  pid_t orphan = add_process(9001, daemon_uid(), "nvidia-cuda-mps", rec.pipe_directory);
  pid_t other = add_process(9004, daemon_uid(), "nvidia-cuda-mps", tmp / "other/pipe");
  pid_t longer = add_process(9005, daemon_uid(), "nvidia-cuda-mps", rec.pipe_directory + "2");
  pid_t none = add_process(9006, daemon_uid(), "nvidia-cuda-mps", std::nullopt);  // e.g. the default /tmp/nvidia-mps
  StopReport rep = stop_daemon(d.services, d.tools, store, rec, 10s);
  EXPECT_EQ(rep.outcome, StopOutcome::kQuit);
  EXPECT_FALSE(d.proc.alive(orphan));
  for (pid_t p : {other, longer, none}) {
    EXPECT_FALSE(signalled(p)) << p;
    EXPECT_TRUE(d.proc.alive(p)) << p;
  }
}

TEST_F(SweepTest, ASurvivorIsAnErrorAndTheRecordIsKept) {
  pid_t server = add_server(pid + 1);
  d.signaller.immune = {server};
  std::string e = error_of([&] { stop_daemon(d.services, d.tools, store, rec, 10s); });
  EXPECT_NE(e.find(std::to_string(server)), std::string::npos) << e;
  EXPECT_NE(e.find("survive SIGKILL"), std::string::npos) << e;
  EXPECT_NE(e.find(rec.name), std::string::npos) << e;
  EXPECT_FALSE(d.proc.alive(pid));
  EXPECT_TRUE(d.proc.alive(server));
  EXPECT_TRUE(store.read(rec.name));
  EXPECT_TRUE(exists(rec.pipe_directory));
  EXPECT_LE(stop_elapsed(), 10s + 1s);
}

TEST_F(SweepTest, AnIgnoringDaemonAndAServerStillFitTheStopTimeout) {
  d.host.quit_ends_daemon = false;
  d.signaller.lethal = {SIGKILL};  // ignores quit and SIGTERM
  pid_t server = add_server(pid + 1);
  StopReport rep = stop_daemon(d.services, d.tools, store, rec, 10s);
  EXPECT_EQ(rep.outcome, StopOutcome::kKilled);
  EXPECT_EQ(d.signaller.delivered,
            (std::vector<std::pair<pid_t, int>>{{pid, SIGTERM}, {pid, SIGKILL}, {server, SIGKILL}}));
  EXPECT_NE(rep.detail.find("ignored SIGTERM"), std::string::npos) << rep.detail;
  EXPECT_NE(rep.detail.find("killed 1 leftover MPS process(es)"), std::string::npos) << rep.detail;
  EXPECT_LE(stop_elapsed(), 10s + 1s);
  expect_cleaned();
}

TEST_F(SweepTest, AnIgnoringDaemonAndASurvivingServerStillFitTheStopTimeout) {
  d.host.quit_ends_daemon = false;
  d.signaller.lethal = {SIGKILL};
  pid_t server = add_server(pid + 1);
  d.signaller.immune = {server};
  std::string e = error_of([&] { stop_daemon(d.services, d.tools, store, rec, 10s); });
  EXPECT_NE(e.find("survive SIGKILL"), std::string::npos) << e;
  EXPECT_LE(stop_elapsed(), 10s + 1s);
  EXPECT_GE(stop_elapsed(), 10s);  // it did wait for the survivor
  EXPECT_TRUE(store.read(rec.name));
}

TEST_F(DaemonTest, StartingRecordWithoutDaemonIsNotStarted) {
  StartRequest req = request();
  // What a crash right after writing the "starting" record leaves behind.
  d.runner.handler = [&](const Command& c) {
    if (c.argv.size() == 2 && c.argv[1] == "-d") throw std::runtime_error("simulated crash");
    return d.host.handle(c);
  };
  EXPECT_THROW(start_daemon(d.services, d.tools, store, req), std::runtime_error);
  auto left = store.read(req.name);
  ASSERT_TRUE(left);
  EXPECT_EQ(left->state, RecordState::kStarting);
  EXPECT_FALSE(daemon_process_is_live(*left, d.proc));

  d.runner.commands.clear();
  StopReport rep = stop_daemon(d.services, d.tools, store, *left, 10s);
  EXPECT_EQ(rep.outcome, StopOutcome::kNotStarted);
  EXPECT_TRUE(d.runner.commands.empty());
  EXPECT_TRUE(d.signaller.requests.empty());
  EXPECT_FALSE(store.read(req.name));
  EXPECT_FALSE(exists(base + "/" + req.name));
}

TEST_F(DaemonTest, StartingRecordWhoseDaemonRunsIsFoundAndStopped) {
  StartRequest req = request();
  // Crash after the daemon came up but before the final record.
  d.runner.handler = [&](const Command& c) {
    CommandResult r = d.host.handle(c);
    if (c.stdin_data == "get_server_list\n") throw std::runtime_error("simulated crash");
    return r;
  };
  EXPECT_THROW(start_daemon(d.services, d.tools, store, req), std::runtime_error);
  auto left = store.read(req.name);
  ASSERT_TRUE(left);
  ASSERT_EQ(left->state, RecordState::kStarting);
  const pid_t pid = d.host.daemons.begin()->second;
  auto found = recover_starting_identity(*left, d.proc);
  ASSERT_TRUE(found);
  EXPECT_EQ(found->pid, pid);

  d.runner.handler = d.host.handler();
  StopReport rep = stop_daemon(d.services, d.tools, store, *left, 10s);
  EXPECT_EQ(rep.outcome, StopOutcome::kQuit);
  EXPECT_EQ(rep.pid, pid);
  EXPECT_FALSE(d.proc.alive(pid));
  EXPECT_FALSE(store.read(req.name));
}

// --- stop_all_daemons ---------------------------------------------------------------

TEST_F(DaemonTest, StopAllTouchesOnlyInScopeRecords) {
  auto mine1 = live_record("mine1", 1000, "ws1", 501);
  auto mine2 = live_record("mine2", 1000, "ws1", 502);
  auto stale = live_record("stale", 1000, "ws1", 503);
  auto other_user = live_record("other-user", 1001, "ws1", 504);
  auto other_host = live_record("other-host", 1000, "ws2", 505);
  d.proc.kill(503);
  for (const auto* r : {&mine1, &mine2, &stale, &other_user, &other_host}) store.write(*r);

  StopAllResult res = stop_all_daemons(d.services, d.tools, store, 1000, "ws1", 10s);
  EXPECT_TRUE(res.ok());
  std::map<std::string, StopOutcome> outcomes;
  for (const auto& s : res.stopped) outcomes[s.name] = s.outcome;
  EXPECT_EQ(outcomes, (std::map<std::string, StopOutcome>{
                          {"mine1", StopOutcome::kQuit}, {"mine2", StopOutcome::kQuit}, {"stale", StopOutcome::kStale}}));
  EXPECT_TRUE(d.proc.alive(504));
  EXPECT_TRUE(d.proc.alive(505));
  EXPECT_TRUE(store.read("other-user"));
  EXPECT_TRUE(store.read("other-host"));
  EXPECT_FALSE(store.read("mine1"));
  EXPECT_FALSE(store.read("stale"));
  ASSERT_EQ(d.runner.with_stdin("quit -t 5\n").size(), 2u);
  for (const auto& c : d.runner.with_stdin("quit -t 5\n")) {
    auto pipe = test::env_value(c, "CUDA_MPS_PIPE_DIRECTORY");
    EXPECT_TRUE(pipe == mine1.pipe_directory || pipe == mine2.pipe_directory) << *pipe;
  }
}

TEST_F(DaemonTest, StopAllReportsADaemonThatSurvives) {
  auto r = live_record("tough", 1000, "ws1", 601);
  store.write(r);
  d.host.quit_ends_daemon = false;
  d.signaller.lethal = {};
  StopAllResult res = stop_all_daemons(d.services, d.tools, store, 1000, "ws1", 2s);
  EXPECT_FALSE(res.ok());
  ASSERT_EQ(res.errors.size(), 1u);
  EXPECT_NE(res.errors[0].find("tough"), std::string::npos);
  EXPECT_TRUE(store.read("tough"));
}

// --- selection and lookup ----------------------------------------------------------------

TEST_F(DaemonTest, SelectEnvironmentFindsTheSoleLiveDaemonByAnySpelling) {
  auto a = live_record("a", 1000, "ws1", 701);
  auto b = live_record("b", 1000, "ws1", 702);
  b.gpu_uuids = {test::kUuid1};
  for (const std::string& spelling : std::vector<std::string>{test::kUuid0, "7FDAF0A5179BF636D15DDAF243E3FF16", "7fdaf0a5-179b-f636-d15d-daf243e3ff16"}) {
    auto env = select_environment_for_gpu(spelling, {a, b}, d.proc);
    EXPECT_EQ(env, (std::vector<std::pair<std::string, std::string>>{{"CUDA_VISIBLE_DEVICES", test::kUuid0},
                                                                     {"CUDA_MPS_PIPE_DIRECTORY", a.pipe_directory},
                                                                     {"CUDA_MPS_LOG_DIRECTORY", a.log_directory}}))
        << spelling;
  }
  EXPECT_EQ(select_daemon_for_gpu(test::kUuid1, {a, b}, d.proc).name, "b");
}

TEST_F(DaemonTest, SelectEnvironmentWithNoneOrSeveralIsAnError) {
  auto a = live_record("a", 1000, "ws1", 711);
  auto a2 = live_record("a2", 1000, "ws1", 712);
  std::string e = error_of([&] { select_environment_for_gpu(test::kUuid2, {a, a2}, d.proc); });
  EXPECT_NE(e.find("no live"), std::string::npos) << e;
  EXPECT_NE(e.find(test::kUuid2), std::string::npos) << e;
  e = error_of([&] { select_environment_for_gpu(test::kUuid0, {a, a2}, d.proc); });
  EXPECT_NE(e.find("more than one"), std::string::npos) << e;
  // A dead one does not count.
  d.proc.kill(712);
  EXPECT_EQ(select_daemon_for_gpu(test::kUuid0, {a, a2}, d.proc).name, "a");
  d.proc.kill(711);
  EXPECT_THROW(select_daemon_for_gpu(test::kUuid0, {a, a2}, d.proc), CudaMpsError);
  EXPECT_THROW(select_daemon_for_gpu("not-a-uuid", {a}, d.proc), CudaMpsError);
}

TEST_F(DaemonTest, ReadDaemonRecordByNameIsScoped) {
  auto a = live_record("a", 1000, "ws1", 801);
  store.write(a);
  EXPECT_EQ(read_daemon_record(store, std::string("a"), 1000, "ws1", d.proc), a);
  std::string e = error_of([&] { read_daemon_record(store, std::string("a"), 1001, "ws1", d.proc); });
  EXPECT_NE(e.find("refusing"), std::string::npos) << e;
  EXPECT_THROW(read_daemon_record(store, std::string("a"), 1000, "ws2", d.proc), CudaMpsError);
  e = error_of([&] { read_daemon_record(store, std::string("missing"), 1000, "ws1", d.proc); });
  EXPECT_NE(e.find("missing"), std::string::npos) << e;
}

TEST_F(DaemonTest, ReadDaemonRecordWithoutNamePicksTheSoleOne) {
  EXPECT_THROW(read_daemon_record(store, std::nullopt, 1000, "ws1", d.proc), CudaMpsError);
  auto a = live_record("a", 1000, "ws1", 811);
  store.write(a);
  store.write(live_record("theirs", 1001, "ws1", 812));
  EXPECT_EQ(read_daemon_record(store, std::nullopt, 1000, "ws1", d.proc).name, "a");
  // A single dead record is still returned (so it can be stopped/cleaned).
  d.proc.kill(811);
  EXPECT_EQ(read_daemon_record(store, std::nullopt, 1000, "ws1", d.proc).name, "a");
  // Two records, one live: the live one.
  auto b = live_record("b", 1000, "ws1", 813);
  store.write(b);
  EXPECT_EQ(read_daemon_record(store, std::nullopt, 1000, "ws1", d.proc).name, "b");
  // Two live: ambiguous, listing both.
  auto c = live_record("c", 1000, "ws1", 814);
  store.write(c);
  std::string e = error_of([&] { read_daemon_record(store, std::nullopt, 1000, "ws1", d.proc); });
  EXPECT_NE(e.find("b"), std::string::npos) << e;
  EXPECT_NE(e.find("c"), std::string::npos) << e;
  EXPECT_NE(e.find("several"), std::string::npos) << e;
}

TEST_F(DaemonTest, LivenessAndStatusJson) {
  auto a = live_record("a", 1000, "ws1", 901);
  EXPECT_TRUE(daemon_process_is_live(a, d.proc));
  auto j = daemon_status(a, d.proc);
  EXPECT_EQ(j["live"], true);
  EXPECT_EQ(j["liveness"], "live");
  EXPECT_EQ(j["observed_start_ticks"], a.process_start_ticks);
  EXPECT_EQ(j["name"], "a");
  d.proc.procs[901].start_ticks = 1;
  j = daemon_status(a, d.proc);
  EXPECT_EQ(j["live"], false);
  EXPECT_EQ(j["liveness"], "pid-reused");
  EXPECT_EQ(j["observed_start_ticks"], 1);
  a.state = RecordState::kStarting;
  EXPECT_FALSE(daemon_process_is_live(a, d.proc));
  EXPECT_EQ(daemon_status(a, d.proc)["liveness"], "starting");
  a.state = RecordState::kRunning;
  d.proc.kill(901);
  j = daemon_status(a, d.proc);
  EXPECT_EQ(j["liveness"], "gone");
  EXPECT_TRUE(j["observed_start_ticks"].is_null());
}

TEST_F(DaemonTest, EnvironmentForDaemonJoinsUuids) {
  auto a = live_record("a", 1000, "ws1", 951);
  a.gpu_uuids = {test::kUuid2, test::kUuid0};
  auto env = environment_for_daemon(a);
  ASSERT_EQ(env.size(), 3u);
  EXPECT_EQ(env[0], (std::pair<std::string, std::string>{"CUDA_VISIBLE_DEVICES", test::kUuid2 + "," + test::kUuid0}));
  EXPECT_EQ(env[1].second, a.pipe_directory);
  EXPECT_EQ(env[2].second, a.log_directory);
}

TEST_F(DaemonTest, RemoveOwnedDirectoriesNeverFollowsSymlinks) {
  test::make_dir(tmp / "owned", 0700);
  test::make_dir(tmp / "outside", 0700);
  test::write_text(tmp / "outside/keep", "x");
  ASSERT_EQ(symlink((tmp / "outside").c_str(), (tmp / "owned/link").c_str()), 0);
  ASSERT_EQ(symlink((tmp / "outside").c_str(), (tmp / "owned-link").c_str()), 0);
  DaemonRecord r = make_record("r", geteuid(), "ws1", 1, 1, tmp / "owned/pipe", {test::kUuid0});
  r.owned_directories = {tmp / "owned", tmp / "owned-link", tmp / "never-existed"};
  EXPECT_TRUE(remove_owned_directories(r).empty());
  EXPECT_FALSE(exists(tmp / "owned"));
  EXPECT_FALSE(exists(tmp / "owned-link"));
  EXPECT_EQ(test::read_text(tmp / "outside/keep"), "x");
}

TEST(CurrentHost, IsTheHostName) {
  char buf[256] = {};
  ASSERT_EQ(gethostname(buf, sizeof buf - 1), 0);
  EXPECT_EQ(current_host(), std::string(buf));
}


// --- readiness and the pid file -----------------------------------------------

// The front end is asked right after `-d` returns, then after 1, 2, 4 .. ms.
TEST_F(DaemonTest, ReadinessIsAskedAtOnceThenWithAShortBackOff) {
  d.host.answers = false;
  std::vector<std::chrono::milliseconds> pauses;
  d.clock.on_sleep = [&](std::chrono::milliseconds p) {
    pauses.push_back(p);
    if (pauses.size() == 4) d.host.answers = true;  // the 5th look finds it
  };
  start_daemon(d.services, d.tools, store, request());
  EXPECT_EQ(pauses, (std::vector<std::chrono::milliseconds>{1ms, 2ms, 4ms, 8ms}));
  // 5 looks after -d (before it there is no socket: nobody is asked)
  EXPECT_EQ(d.runner.with_stdin("get_server_list\n").size(), 5u);
}

// Before the control socket exists nobody is asked (no front-end run), and
// it is looked for every 1, 2, then 4 ms: a daemon that binds it late is
// found within 4 ms of that, then asked at once.
TEST_F(DaemonTest, ASocketBoundLateIsLookedForOftenWithoutAskingAnyone) {
  d.host.create_socket = false;
  std::vector<std::chrono::milliseconds> pauses;
  size_t asked_before_socket = 0;
  d.clock.on_sleep = [&](std::chrono::milliseconds p) {
    pauses.push_back(p);
    if (pauses.size() != 6) return;
    std::lock_guard lock(d.host.mutex);
    asked_before_socket = d.runner.with_stdin("get_server_list\n").size();
    ASSERT_TRUE(test::bind_unix_socket(d.host.daemons.begin()->first + "/control"));
  };
  DaemonRecord rec = start_daemon(d.services, d.tools, store, request());
  EXPECT_EQ(rec.state, RecordState::kRunning);
  EXPECT_EQ(pauses, (std::vector<std::chrono::milliseconds>{1ms, 2ms, 4ms, 4ms, 4ms, 4ms}));
  EXPECT_EQ(asked_before_socket, 0u);
  EXPECT_EQ(d.runner.with_stdin("get_server_list\n").size(), 1u);  // asked once the socket is there: it answers
}

// No socket ever: the start fails at its deadline, having asked no one.
TEST_F(DaemonTest, ASocketThatNeverComesFailsAtTheDeadline) {
  d.host.create_socket = false;
  StartRequest req = request();
  req.start_timeout = 200ms;
  EXPECT_THROW(start_daemon(d.services, d.tools, store, req), CudaMpsError);
  EXPECT_GE(d.clock.elapsed(), 200ms);
  EXPECT_LE(d.clock.elapsed(), 200ms + 4ms);
  EXPECT_TRUE(d.runner.with_stdin("get_server_list\n").empty());
  EXPECT_FALSE(store.read(req.name));
}

TEST_F(DaemonTest, ReadinessBackOffIsCapped) {
  d.host.answers = false;
  std::chrono::milliseconds longest{0};
  d.clock.on_sleep = [&](std::chrono::milliseconds p) {
    longest = std::max(longest, p);
    if (d.clock.elapsed() >= 500ms) d.host.answers = true;
  };
  start_daemon(d.services, d.tools, store, request());
  EXPECT_EQ(longest, 32ms);
  EXPECT_LE(d.clock.elapsed(), 500ms + 32ms);
}

// The socket may answer before the pid file exists: it is read again until
// the deadline, not once.
TEST_F(DaemonTest, APidFileWrittenAfterTheSocketAnswersIsWaitedFor) {
  d.host.write_pid_file = false;
  int after_launch = 0;
  d.clock.on_sleep = [&](std::chrono::milliseconds) {
    std::lock_guard lock(d.host.mutex);
    if (d.host.daemons.empty() || ++after_launch != 3) return;
    const auto& [pipe, pid] = *d.host.daemons.begin();
    test::write_text(pipe + "/" + kPidFileName, std::to_string(pid) + "\n");
  };
  DaemonRecord rec = start_daemon(d.services, d.tools, store, request());
  EXPECT_EQ(rec.pid, d.host.daemons.begin()->second);
  EXPECT_EQ(rec.state, RecordState::kRunning);
  EXPECT_EQ(after_launch, 3);
}

TEST_F(DaemonTest, APidFileThatNeverComesFailsAtTheDeadline) {
  d.host.write_pid_file = false;
  std::string e = error_of([&] { start_daemon(d.services, d.tools, store, request()); });
  EXPECT_NE(e.find("cannot verify MPS daemon 'gpu-7fdaf0a5'"), std::string::npos) << e;
  EXPECT_NE(e.find("nvidia-cuda-mps-control.pid does not exist"), std::string::npos) << e;
  EXPECT_GE(d.clock.elapsed(), 3000ms);  // looked for until start_timeout
  EXPECT_LE(d.clock.elapsed(), 3000ms + 20ms);
  // No pid file, but the daemon this start launched is known by ancestry:
  // that one, and only that one, is ended.
  const pid_t launched = d.host.daemons.begin()->second;
  EXPECT_FALSE(d.proc.alive(launched));
  for (const auto& [p, sig] : d.signaller.requests) EXPECT_EQ(p, launched);
  EXPECT_TRUE(record_files().empty());
}

// --- start_daemons / stop_daemons: a node's daemons at once -------------------

class ConcurrentStartTest : public DaemonTest {
 protected:
  std::vector<StartRequest> requests(size_t n) {
    const std::vector<std::string> uuids = {test::kUuid0, test::kUuid1, test::kUuid2, test::kUuid3};
    std::vector<StartRequest> out;
    for (size_t i = 0; i < n; ++i) {
      StartRequest r = request("gpu" + std::to_string(i), {uuids[i % uuids.size()]});
      r.topology_mode = TopologyMode::kPerGpu;
      out.push_back(r);
    }
    return out;
  }
  std::vector<pid_t> launched_pids() {
    std::vector<pid_t> out;
    for (const auto& [pipe, pid] : d.host.daemons) out.push_back(pid);
    return out;
  }
};

TEST_F(ConcurrentStartTest, AllLaunchesAreUnderWayTogether) {
  // Each `-d` waits (real time, bounded) until all four have begun: one after
  // another, the first would wait in vain.
  std::mutex m;
  std::condition_variable cv;
  int arrived = 0;
  bool together = true;
  d.host.on_launch = [&](const Command&) {
    std::unique_lock lock(m);
    ++arrived;
    cv.notify_all();
    if (!cv.wait_for(lock, std::chrono::seconds(5), [&] { return arrived == 4; })) together = false;
  };
  auto recs = start_daemons(d.services, d.tools, store, requests(4), 2000ms);
  EXPECT_TRUE(together);
  ASSERT_EQ(recs.size(), 4u);
  for (size_t i = 0; i < recs.size(); ++i) {
    EXPECT_EQ(recs[i].name, "gpu" + std::to_string(i)) << "records come back in request order";
    EXPECT_EQ(recs[i].state, RecordState::kRunning);
    EXPECT_TRUE(d.proc.alive(recs[i].pid));
  }
  EXPECT_EQ(record_files().size(), 4u);
}

TEST_F(ConcurrentStartTest, OneFailureRollsBackEveryDaemon) {
  d.host.launch_failures[3] = test::exited(1, "", "third daemon exploded\n");
  std::string e = error_of([&] { start_daemons(d.services, d.tools, store, requests(4), 2000ms); });
  EXPECT_NE(e.find("third daemon exploded"), std::string::npos) << e;
  EXPECT_EQ(d.host.launches, 4);
  EXPECT_EQ(launched_pids().size(), 3u);
  for (pid_t pid : launched_pids()) EXPECT_FALSE(d.proc.alive(pid)) << pid;
  EXPECT_EQ(d.host.quits, 3);  // each stopped through its own pipe
  EXPECT_TRUE(record_files().empty());
  EXPECT_TRUE(test::dir_entries(base).empty());
}

TEST_F(ConcurrentStartTest, EveryFailureIsNamed) {
  d.host.launch_failures[1] = test::exited(1, "", "one\n");
  d.host.launch_failures[2] = test::exited(1, "", "two\n");
  std::string e = error_of([&] { start_daemons(d.services, d.tools, store, requests(2), 2000ms); });
  EXPECT_NE(e.find("one"), std::string::npos) << e;
  EXPECT_NE(e.find("two"), std::string::npos) << e;
  EXPECT_NE(e.find("; "), std::string::npos) << e;
}

TEST_F(ConcurrentStartTest, TheStartTimeoutIsOneDeadlineForAll) {
  d.host.answers = false;  // nobody ever answers
  std::string e = error_of([&] { start_daemons(d.services, d.tools, store, requests(4), 2000ms); });
  EXPECT_NE(e.find("start_timeout"), std::string::npos) << e;
  // One after another would take 4 x 3000 ms.
  EXPECT_GE(d.clock.elapsed(), 3000ms);
  EXPECT_LE(d.clock.elapsed(), 3000ms + 100ms);
  for (pid_t pid : launched_pids()) EXPECT_FALSE(d.proc.alive(pid)) << pid;
  EXPECT_TRUE(record_files().empty());
}

TEST_F(ConcurrentStartTest, StopDaemonsEndsAllWithinOneStopTimeout) {
  auto recs = start_daemons(d.services, d.tools, store, requests(4), 2000ms);
  d.host.quit_ends_daemon = false;
  d.signaller.lethal = {SIGKILL};  // each ignores quit and SIGTERM: the whole escalation
  const auto before = d.clock.elapsed();
  auto attempts = stop_daemons(d.services, d.tools, store, recs, 2000ms);
  ASSERT_EQ(attempts.size(), 4u);
  for (const auto& a : attempts) {
    ASSERT_TRUE(a.report) << a.error;
    EXPECT_EQ(a.report->outcome, StopOutcome::kKilled);
  }
  // One after another: 4 x 2000 ms at least.
  EXPECT_LE(d.clock.elapsed() - before, 2000ms + 1000ms);
  for (const auto& r : recs) EXPECT_FALSE(d.proc.alive(r.pid));
  EXPECT_TRUE(record_files().empty());
}

TEST_F(ConcurrentStartTest, StopDaemonsReportsEachInOrder) {
  auto recs = start_daemons(d.services, d.tools, store, requests(3), 2000ms);
  d.proc.kill(recs[1].pid);  // gone before the stop: stale
  d.signaller.immune.insert(recs[2].pid);
  d.host.quit_ends_daemon = false;  // and this one survives everything
  auto attempts = stop_daemons(d.services, d.tools, store, recs, 2000ms);
  ASSERT_EQ(attempts.size(), 3u);
  ASSERT_TRUE(attempts[0].report);
  EXPECT_EQ(attempts[0].report->name, "gpu0");
  ASSERT_TRUE(attempts[1].report) << attempts[1].error;
  EXPECT_NE(stale_detail(*attempts[1].report).find("'gpu1'"), std::string::npos);
  EXPECT_FALSE(attempts[2].report);
  EXPECT_NE(attempts[2].error.find("still alive after quit, SIGTERM and SIGKILL"), std::string::npos) << attempts[2].error;
}

TEST(DaemonDirectories, AreTheBaseTheNameAndPipeAndLogBelow) {
  DaemonDirectories dirs = daemon_directories("/run/unilab-mps", "job7.n1.gpu0");
  EXPECT_EQ(dirs.root, "/run/unilab-mps/job7.n1.gpu0");
  EXPECT_EQ(dirs.pipe, "/run/unilab-mps/job7.n1.gpu0/pipe");
  EXPECT_EQ(dirs.log, "/run/unilab-mps/job7.n1.gpu0/log");
}


TEST(StopOutcomeNames, AreTheWordsReportsAndLogsShow) {
  std::vector<std::string_view> names(kStopOutcomeNames.names.begin(), kStopOutcomeNames.names.end());
  EXPECT_EQ(names, (std::vector<std::string_view>{"quit", "terminated", "killed", "stale", "not-started"}));
  StopReport rep{"d", 7, StopOutcome::kNotStarted, "x"};
  EXPECT_EQ(rep.to_json().dump(), R"({"detail":"x","name":"d","outcome":"not-started","pid":7})");
}

}  // namespace
}  // namespace unilab::mps
