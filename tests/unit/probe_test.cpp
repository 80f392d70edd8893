// Tests for common/mps/probe.cpp: the fail-closed `mps` prerequisites in order,
// the best-effort null path, the default device resolver and the manifest.
// Doubles: a scripted command runner, a /proc reader, a device resolver and
// an environment map; control pipes are real files in a temp directory.
#include "common/mps/probe.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>

#include "common/mps/errors.hpp"

namespace unilab::mps {
namespace {

const std::string kSmi = "/fake/nvidia-smi";
const std::string kMps = "/fake/nvidia-cuda-mps-control";
const std::string kGpuA = "GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16";
const std::string kGpuB = "GPU-3c8a1d5e-94b2-4f7e-8a61-0b2c9d4e5f60";
const std::string kMig = "MIG-11111111-2222-3333-4444-555555555555";
const std::string kSmiCsv =
    "0, GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16, 00000000:18:00.0, Default, Disabled, NVIDIA H200\n"
    "1, GPU-3c8a1d5e-94b2-4f7e-8a61-0b2c9d4e5f60, 00000000:2A:00.0, Default, Disabled, NVIDIA H200\n";
constexpr pid_t kDaemonPid = 4242;

// Scripted runner: nvidia-smi prints `smi_csv` (or fails), the MPS front end
// answers `get_server_list` when `daemon_answers`.
class FakeRunner final : public CommandRunner {
 public:
  bool daemon_answers = true;
  bool smi_fails = false;
  std::string smi_csv = kSmiCsv;
  std::string smi_list;  // `nvidia-smi -L`
  std::vector<Command> calls;

  CommandResult run(const Command& c) override {
    calls.push_back(c);
    CommandResult r;
    if (c.argv.at(0) == kSmi && c.argv.size() == 2 && c.argv[1] == "-L") {
      r.exit_code = smi_fails ? 9 : 0;
      r.out = smi_list;
    } else if (c.argv.at(0) == kSmi) {
      if (smi_fails) {
        r.exit_code = 9;
        r.out = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n";
      } else {
        r.exit_code = 0;
        r.out = smi_csv;
      }
    } else if (c.argv.at(0) == kMps) {
      if (daemon_answers) {
        r.exit_code = 0;
        r.out = "1234\n";
      } else {
        r.exit_code = 1;
        r.out = "Cannot find MPS control daemon process\n";
      }
    } else {
      r.exec_error = "cannot execute " + c.argv.at(0) + ": No such file or directory";
    }
    return r;
  }
  size_t count(const std::string& program) const {
    size_t n = 0;
    for (const auto& c : calls) n += c.argv.at(0) == program;
    return n;
  }
};

class FakeProc final : public ProcReader {
 public:
  std::map<pid_t, ProcStat> procs;
  std::map<std::pair<pid_t, std::string>, std::string> environ;
  std::optional<ProcStat> stat(pid_t pid) override {
    auto it = procs.find(pid);
    return it == procs.end() ? std::nullopt : std::optional<ProcStat>(it->second);
  }
  std::string boot_id() override { return "boot"; }
  std::optional<std::string> environ_value(pid_t pid, std::string_view key) override {
    auto it = environ.find({pid, std::string(key)});
    return it == environ.end() ? std::nullopt : std::optional<std::string>(it->second);
  }
};

class FakeResolver final : public CudaDeviceResolver {
 public:
  std::map<std::string, std::string> uuids;
  bool fails = false;
  std::optional<std::string> uuid_for(const std::string& device) override {
    if (fails) throw CudaMpsError("nvidia-smi failed (exit 9)");
    auto it = uuids.find(device);
    return it == uuids.end() ? std::nullopt : std::optional<std::string>(it->second);
  }
};

EnvLookup env_from(const std::map<std::string, std::string>* env) {
  return [env](const std::string& k) -> std::optional<std::string> {
    auto it = env->find(k);
    return it == env->end() ? std::nullopt : std::optional<std::string>(it->second);
  };
}

// A scratch directory (0700, ours) for pipe directories and manifests.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/probe-test.XXXXXX";
    if (mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Leaves a socket file behind, as a killed daemon does.
void make_socket(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(path.size(), sizeof addr.sun_path);
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << std::strerror(errno);
  close(fd);
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class ProbeTest : public ::testing::Test {
 protected:
  // Every prerequisite met: a socket with an answering daemon of ours that
  // serves GPU A, learner and collector on GPU A.
  void SetUp() override {
    pipe = tmp.path() + "/pipe";
    ASSERT_EQ(mkdir(pipe.c_str(), 0755), 0);
    make_socket(pipe + "/control");
    write_text(pipe + "/" + kPidFileName, std::to_string(kDaemonPid) + "\n");
    env["CUDA_MPS_PIPE_DIRECTORY"] = pipe;
    ProcStat st;
    st.state = 'S';
    st.start_ticks = 99;
    st.uid = getuid();
    proc.procs[kDaemonPid] = st;
    proc.environ[{kDaemonPid, "CUDA_VISIBLE_DEVICES"}] = kGpuA;
    devices.uuids = {{"cuda", kGpuA}, {"cuda:0", kGpuA}, {"cuda:1", kGpuB}};
  }

  ProbeHost host() { return ProbeHost{.proc = proc, .env = env_from(&env), .mps_control = kMps, .nvidia_smi = kSmi}; }

  CudaProcessSharingEvidence probe(const std::optional<std::string>& requested = "mps",
                                   const std::string& learner = "cuda:0",
                                   const std::optional<std::string>& collector = "cuda:0", int rank = 0,
                                   int world_size = 1) {
    return probe_cuda_process_sharing(requested, learner, collector, "test-backend", rank, world_size, devices, runner,
                                      host());
  }

  // The message of the CudaMpsError an `mps` probe throws ("" when none).
  std::string failure(const std::string& learner = "cuda:0", const std::optional<std::string>& collector = "cuda:0",
                      int rank = 0, int world_size = 1) {
    try {
      probe("mps", learner, collector, rank, world_size);
    } catch (const CudaMpsError& e) {
      std::string m = e.what();
      EXPECT_EQ(m.find('\n'), std::string::npos) << "one line: " << m;
      return m;
    }
    return "";
  }

  TempDir tmp;
  std::string pipe;
  std::map<std::string, std::string> env;
  FakeRunner runner;
  FakeProc proc;
  FakeResolver devices;
};

#define EXPECT_HAS(hay, needle) EXPECT_NE(std::string(hay).find(needle), std::string::npos) << (hay)

// --- success -----------------------------------------------------------------

TEST_F(ProbeTest, AllPrerequisitesMetValidates) {
  auto ev = probe();
  EXPECT_EQ(ev.configured, "mps");
  EXPECT_EQ(ev.effective, "mps");
  EXPECT_TRUE(ev.validated);
  EXPECT_EQ(ev.rank, 0);
  EXPECT_EQ(ev.world_size, 1);
  EXPECT_EQ(ev.learner_device, "cuda:0");
  EXPECT_EQ(ev.collector_device, "cuda:0");
  EXPECT_EQ(ev.learner_gpu_uuid, kGpuA);
  EXPECT_EQ(ev.collector_gpu_uuid, kGpuA);
  EXPECT_EQ(ev.pipe_directory_env, pipe);
  EXPECT_EQ(ev.pipe_directory, pipe);
  EXPECT_EQ(ev.control_pipe, pipe + "/control");
  EXPECT_EQ(ev.control_pipe_kind, "socket");
  EXPECT_EQ(ev.server_pid, kDaemonPid);
  EXPECT_FALSE(ev.ambient_server);
  // The query went through the front end with the pipe dir, no shell.
  ASSERT_EQ(runner.count(kMps), 1u);
  const Command& q = runner.calls.back();
  EXPECT_EQ(q.stdin_data, "get_server_list\n");
  EXPECT_NE(std::find(q.env.begin(), q.env.end(), "CUDA_MPS_PIPE_DIRECTORY=" + pipe), q.env.end());
}

TEST_F(ProbeTest, TheEvidenceRecordsTheShareAndPriorityThisRankSaw) {
  auto ev = probe();
  EXPECT_FALSE(ev.active_thread_percentage.has_value());
  EXPECT_FALSE(ev.client_priority.has_value());
  // --unilab-mps-threads=auto gave this rank 33, --unilab-mps-priority=below-normal 1.
  env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = "33";
  env["CUDA_MPS_CLIENT_PRIORITY"] = "1";
  ev = probe();
  EXPECT_EQ(ev.active_thread_percentage, "33");
  EXPECT_EQ(ev.client_priority, "1");
  EXPECT_EQ(ev.to_json().at("active_thread_percentage"), "33");
  // Unconfigured runs record them too.
  EXPECT_EQ(probe(std::nullopt).active_thread_percentage, "33");
  EXPECT_FALSE(ev.learner_gpu_parent_uuid.has_value());  // a whole GPU
}

TEST_F(ProbeTest, AMigLearnerNamesItsParentGpu) {
  const std::string mig = "MIG-1a2b3c4d-5e6f-5a7b-8c9d-0e1f2a3b4c5d";
  devices.uuids = {{"cuda", mig}, {"cuda:0", mig}};
  proc.environ[{kDaemonPid, "CUDA_VISIBLE_DEVICES"}] = mig;
  runner.smi_list = std::string("GPU 0: NVIDIA H200 (UUID: ") + kGpuA + ")\n  MIG 1g.18gb     Device  0: (UUID: " + mig + ")\n";
  auto ev = probe();
  EXPECT_TRUE(ev.validated);
  EXPECT_EQ(ev.learner_gpu_uuid, mig);
  EXPECT_EQ(ev.learner_gpu_parent_uuid, kGpuA);
  // nvidia-smi failing costs the parent, never the probe.
  runner.smi_fails = true;
  ev = probe();
  EXPECT_TRUE(ev.validated);
  EXPECT_FALSE(ev.learner_gpu_parent_uuid.has_value());
}

TEST_F(ProbeTest, RankWithinWorldAndPlainCudaDevice) {
  auto ev = probe("mps", "cuda", "cuda:0", 2, 4);
  EXPECT_TRUE(ev.validated);
  EXPECT_EQ(ev.rank, 2);
  EXPECT_EQ(ev.world_size, 4);
}

// --- requested ----------------------------------------------------------------

TEST_F(ProbeTest, RequestedOtherThanNullOrMpsIsRejected) {
  for (std::string bad : {"MPS", "none", "", "time-slicing", "mps "}) {
    EXPECT_THROW(probe(bad), CudaMpsError) << bad;
  }
  try {
    probe("time-slicing");
  } catch (const CudaMpsError& e) {
    EXPECT_HAS(e.what(), "'time-slicing'");
    EXPECT_HAS(e.what(), "'mps'");
  }
  EXPECT_TRUE(runner.calls.empty());
}

// --- prerequisites, each failing alone, in order -----------------------------

TEST_F(ProbeTest, Prerequisite1RankAndWorldSize) {
  for (auto [rank, world] : {std::pair{1, 1}, {-1, 2}, {0, 0}, {3, 2}}) {
    std::string m = failure("cuda:0", "cuda:0", rank, world);
    EXPECT_HAS(m, "needs a valid rank and world size");
    EXPECT_HAS(m, "0 <= rank < world_size");
  }
}

TEST_F(ProbeTest, Prerequisite2LearnerIsCuda) {
  for (std::string bad : {"cpu", "cuda:x", "cuda:-1", "cuda:", "CUDA:0", "mps"}) {
    std::string m = failure(bad);
    EXPECT_HAS(m, "needs a CUDA learner device");
    EXPECT_HAS(m, "'" + bad + "'");
  }
}

TEST_F(ProbeTest, Prerequisite2ComesBeforeEverythingLater) {
  ASSERT_EQ(unlink((pipe + "/control").c_str()), 0);
  std::string m = failure("cpu", std::nullopt);
  EXPECT_HAS(m, "needs a CUDA learner device");
}

TEST_F(ProbeTest, Prerequisite3CollectorBoundByBackend) {
  std::string m = failure("cuda:0", std::nullopt);
  EXPECT_HAS(m, "needs a CUDA collector device");
  EXPECT_HAS(m, "backend 'test-backend' binds no collector device");
  m = failure("cuda:0", "cpu");
  EXPECT_HAS(m, "needs a CUDA collector device");
  EXPECT_HAS(m, "'cpu'");
}

TEST_F(ProbeTest, Prerequisite4DifferentGpus) {
  std::string m = failure("cuda:0", "cuda:1");
  EXPECT_HAS(m, "needs learner and collector on one GPU");
  EXPECT_HAS(m, kGpuA);
  EXPECT_HAS(m, kGpuB);
}

TEST_F(ProbeTest, Prerequisite4UnresolvableDevice) {
  std::string m = failure("cuda:5", "cuda:5");
  EXPECT_HAS(m, "needs learner and collector on one GPU");
  EXPECT_HAS(m, "learner device 'cuda:5' names no GPU");
  m = failure("cuda:0", "cuda:7");
  EXPECT_HAS(m, "collector device 'cuda:7' names no GPU");
  devices.fails = true;
  m = failure();
  EXPECT_HAS(m, "needs learner and collector on one GPU");
  EXPECT_HAS(m, "nvidia-smi failed");
}

TEST_F(ProbeTest, Prerequisite4SpellingsOfOneUuidMatch) {
  const std::vector<std::string> spellings = {
      kGpuA,
      "GPU-7FDAF0A5-179B-F636-D15D-DAF243E3FF16",
      "7fdaf0a5179bf636d15ddaf243e3ff16",
      "7FDAF0A5-179B-F636-D15D-DAF243E3FF16",
      "gpu-7fdaf0a5179bf636d15ddaf243e3ff16",
  };
  for (const auto& learner : spellings) {
    for (const auto& collector : spellings) {
      devices.uuids["cuda:0"] = learner;
      devices.uuids["cuda:1"] = collector;
      auto ev = probe("mps", "cuda:0", "cuda:1");
      EXPECT_TRUE(ev.validated) << learner << " vs " << collector;
      EXPECT_EQ(ev.learner_gpu_uuid, kGpuA);  // display form
      EXPECT_EQ(ev.collector_gpu_uuid, kGpuA);
    }
  }
  // The daemon's mask may spell it differently again.
  proc.environ[{kDaemonPid, "CUDA_VISIBLE_DEVICES"}] = "7FDAF0A5179BF636D15DDAF243E3FF16";
  EXPECT_TRUE(probe().validated);
}

TEST_F(ProbeTest, Prerequisite5ControlMissing) {
  ASSERT_EQ(unlink((pipe + "/control").c_str()), 0);
  std::string m = failure();
  EXPECT_HAS(m, "needs an MPS control pipe");
  EXPECT_HAS(m, pipe + "/control does not exist");
  EXPECT_HAS(m, "unilab-mps start");
  EXPECT_EQ(runner.count(kMps), 0u);
}

TEST_F(ProbeTest, Prerequisite5ControlIsFifoOrFile) {
  ASSERT_EQ(unlink((pipe + "/control").c_str()), 0);
  ASSERT_EQ(mkfifo((pipe + "/control").c_str(), 0600), 0);
  std::string m = failure();
  EXPECT_HAS(m, "needs an MPS control pipe");
  EXPECT_HAS(m, "is a FIFO, not a socket");
  ASSERT_EQ(unlink((pipe + "/control").c_str()), 0);
  write_text(pipe + "/control", "x");
  m = failure();
  EXPECT_HAS(m, "is another kind of file, not a socket");
  EXPECT_EQ(runner.count(kMps), 0u);
}

TEST_F(ProbeTest, Prerequisite5RelativeOrTooLongPipeDirectory) {
  env["CUDA_MPS_PIPE_DIRECTORY"] = "relative/pipe";
  std::string m = failure();
  EXPECT_HAS(m, "needs an MPS control pipe");
  EXPECT_HAS(m, "not an absolute path");
  env["CUDA_MPS_PIPE_DIRECTORY"] = "/" + std::string(120, 'p');
  m = failure();
  EXPECT_HAS(m, "needs an MPS control pipe");
  EXPECT_HAS(m, "too long");
}

TEST_F(ProbeTest, Prerequisite6DaemonDoesNotAnswer) {
  runner.daemon_answers = false;  // a stale socket
  std::string m = failure();
  EXPECT_HAS(m, "needs an answering MPS control daemon");
  EXPECT_HAS(m, "Cannot find MPS control daemon process");
  EXPECT_HAS(m, "stale");
}

TEST_F(ProbeTest, Prerequisite6NoPidFile) {
  ASSERT_EQ(unlink((pipe + "/" + kPidFileName).c_str()), 0);
  std::string m = failure();
  EXPECT_HAS(m, "needs an answering MPS control daemon");
  EXPECT_HAS(m, kPidFileName);
}

TEST_F(ProbeTest, Prerequisite6PidFileProcessDead) {
  proc.procs.clear();
  std::string m = failure();
  EXPECT_HAS(m, "needs an answering MPS control daemon");
  EXPECT_HAS(m, "pid 4242");
  EXPECT_HAS(m, "is not running");
  proc.procs[kDaemonPid].state = 'Z';
  proc.procs[kDaemonPid].uid = getuid();
  EXPECT_HAS(failure(), "is not running");
}

TEST_F(ProbeTest, Prerequisite6DaemonOfAnotherUser) {
  proc.procs[kDaemonPid].uid = getuid() + 1;
  std::string m = failure();
  EXPECT_HAS(m, "needs an MPS control daemon of your own");
  EXPECT_HAS(m, "runs as uid " + std::to_string(getuid() + 1));
}

TEST_F(ProbeTest, Prerequisite7DaemonServesAnotherGpu) {
  proc.environ[{kDaemonPid, "CUDA_VISIBLE_DEVICES"}] = kGpuB;
  std::string m = failure();
  EXPECT_HAS(m, "needs a daemon serving the learner's GPU");
  EXPECT_HAS(m, "serves " + kGpuB);
  EXPECT_HAS(m, "unilab-mps start " + kGpuA);
}

TEST_F(ProbeTest, Prerequisite7NumericDaemonMaskResolvedThroughNvidiaSmi) {
  proc.environ[{kDaemonPid, "CUDA_VISIBLE_DEVICES"}] = "1";
  EXPECT_HAS(failure(), "serves " + kGpuB);
  EXPECT_EQ(runner.count(kSmi), 1u);
  proc.environ[{kDaemonPid, "CUDA_VISIBLE_DEVICES"}] = "1,0";
  EXPECT_TRUE(probe().validated);
  proc.environ[{kDaemonPid, "CUDA_VISIBLE_DEVICES"}] = "7";  // unknown index
  std::string m = failure();
  EXPECT_HAS(m, "needs a daemon serving the learner's GPU");
  EXPECT_HAS(m, "entry 7 names no GPU");
  runner.smi_fails = true;
  proc.environ[{kDaemonPid, "CUDA_VISIBLE_DEVICES"}] = "0";
  EXPECT_HAS(failure(), "needs a daemon serving the learner's GPU");
}

TEST_F(ProbeTest, Prerequisite7MigAndMinusOnePassThrough) {
  // MIG entries pass through untouched (and do not match a whole GPU).
  proc.environ[{kDaemonPid, "CUDA_VISIBLE_DEVICES"}] = kMig + "," + kGpuA;
  EXPECT_TRUE(probe().validated);
  proc.environ[{kDaemonPid, "CUDA_VISIBLE_DEVICES"}] = kMig;
  EXPECT_HAS(failure(), "serves " + kMig);
  // CUDA enumerates nothing after -1.
  proc.environ[{kDaemonPid, "CUDA_VISIBLE_DEVICES"}] = "-1," + kGpuA;
  EXPECT_HAS(failure(), "serves no GPU");
  EXPECT_EQ(runner.count(kSmi), 0u);  // nothing numeric: no nvidia-smi call
  // A learner on a MIG slice served by a daemon over that slice.
  devices.uuids["cuda:0"] = "mig-11111111222233334444555555555555";
  proc.environ[{kDaemonPid, "CUDA_VISIBLE_DEVICES"}] = kMig;
  auto ev = probe();
  EXPECT_TRUE(ev.validated);
  EXPECT_EQ(ev.learner_gpu_uuid, kMig);
}

TEST_F(ProbeTest, Prerequisite7DaemonWithoutMaskServesEveryGpu) {
  proc.environ.clear();
  EXPECT_TRUE(probe().validated);
  devices.uuids["cuda:0"] = kGpuB;
  EXPECT_TRUE(probe().validated);
}

TEST_F(ProbeTest, DefaultPipeDirectoryWhenUnsetOrEmpty) {
  // Through the null path, so that whatever /tmp/nvidia-mps holds here does
  // not matter.
  env.erase("CUDA_MPS_PIPE_DIRECTORY");
  auto ev = probe(std::nullopt);
  EXPECT_EQ(ev.pipe_directory_env, std::nullopt);
  EXPECT_EQ(ev.pipe_directory, "/tmp/nvidia-mps");
  EXPECT_EQ(ev.control_pipe, "/tmp/nvidia-mps/control");
  env["CUDA_MPS_PIPE_DIRECTORY"] = "";
  ev = probe(std::nullopt);
  EXPECT_EQ(ev.pipe_directory_env, "");
  EXPECT_EQ(ev.pipe_directory, "/tmp/nvidia-mps");
}

// --- null: ambient state, never throws ----------------------------------------

TEST_F(ProbeTest, NullWithNoDaemon) {
  ASSERT_EQ(unlink((pipe + "/control").c_str()), 0);
  ASSERT_EQ(unlink((pipe + "/" + kPidFileName).c_str()), 0);
  auto ev = probe(std::nullopt);
  EXPECT_EQ(ev.configured, std::nullopt);
  EXPECT_EQ(ev.effective, std::nullopt);
  EXPECT_FALSE(ev.validated);
  EXPECT_EQ(ev.control_pipe_kind, "missing");
  EXPECT_EQ(ev.control_pipe, pipe + "/control");
  EXPECT_EQ(ev.pipe_directory_env, pipe);
  EXPECT_EQ(ev.server_pid, std::nullopt);
  EXPECT_FALSE(ev.ambient_server);
  EXPECT_EQ(ev.learner_gpu_uuid, kGpuA);
  EXPECT_EQ(runner.count(kMps), 0u);  // no socket: no front end run
}

TEST_F(ProbeTest, NullWithStaleSocketAndDeadPid) {
  runner.daemon_answers = false;
  proc.procs.clear();
  auto ev = probe(std::nullopt);
  EXPECT_EQ(ev.control_pipe_kind, "socket");
  EXPECT_FALSE(ev.ambient_server);
  EXPECT_EQ(ev.server_pid, std::nullopt);
  EXPECT_EQ(runner.count(kMps), 1u);
}

TEST_F(ProbeTest, NullWithFifo) {
  ASSERT_EQ(unlink((pipe + "/control").c_str()), 0);
  ASSERT_EQ(mkfifo((pipe + "/control").c_str(), 0600), 0);
  auto ev = probe(std::nullopt);
  EXPECT_EQ(ev.control_pipe_kind, "fifo");
  EXPECT_FALSE(ev.ambient_server);
  EXPECT_EQ(runner.count(kMps), 0u);
}

TEST_F(ProbeTest, NullWithLiveDaemon) {
  auto ev = probe(std::nullopt);
  EXPECT_TRUE(ev.ambient_server);
  EXPECT_EQ(ev.server_pid, kDaemonPid);
  EXPECT_EQ(ev.control_pipe_kind, "socket");
  EXPECT_EQ(ev.configured, std::nullopt);
  EXPECT_EQ(ev.effective, std::nullopt);  // ambient MPS is not a validated mode
  EXPECT_FALSE(ev.validated);
  EXPECT_EQ(ev.learner_gpu_uuid, kGpuA);
  EXPECT_EQ(ev.collector_gpu_uuid, kGpuA);
}

TEST_F(ProbeTest, NullRecordsAmbientDaemonOfAnotherUser) {
  // Ambient observation reports any live daemon; only `mps` demands our own.
  proc.procs[kDaemonPid].uid = getuid() + 1;
  auto ev = probe(std::nullopt);
  EXPECT_EQ(ev.server_pid, kDaemonPid);
  EXPECT_TRUE(ev.ambient_server);
}

TEST_F(ProbeTest, NullNeverThrows) {
  devices.fails = true;
  runner.daemon_answers = false;
  auto ev = probe(std::nullopt, "cpu", std::nullopt, -3, 0);
  EXPECT_EQ(ev.rank, -3);
  EXPECT_EQ(ev.world_size, 0);
  EXPECT_EQ(ev.learner_device, "cpu");
  EXPECT_EQ(ev.learner_gpu_uuid, std::nullopt);
  EXPECT_EQ(ev.collector_device, std::nullopt);
  EXPECT_EQ(ev.collector_gpu_uuid, std::nullopt);
  ev = probe(std::nullopt, "cuda:0", "cuda:0");
  EXPECT_EQ(ev.learner_gpu_uuid, std::nullopt);  // the resolver threw
  EXPECT_EQ(ev.control_pipe_kind, "socket");
  env["CUDA_MPS_PIPE_DIRECTORY"] = "relative";
  EXPECT_NO_THROW(ev = probe(std::nullopt));
  EXPECT_EQ(ev.control_pipe_kind, "missing");
}

// --- JSON ---------------------------------------------------------------------

TEST(EvidenceJson, UnknownFactsAreNull) {
  CudaProcessSharingEvidence ev;
  nlohmann::json j = ev.to_json();
  EXPECT_EQ(j.size(), 18u);
  for (const char* k : {"configured", "effective", "learner_device", "collector_device", "learner_gpu_uuid",
                        "collector_gpu_uuid", "pipe_directory_env", "pipe_directory", "control_pipe",
                        "control_pipe_kind", "server_pid", "active_thread_percentage", "client_priority",
                        "learner_gpu_parent_uuid"}) {
    EXPECT_TRUE(j.at(k).is_null()) << k;
  }
  EXPECT_EQ(j.at("validated"), false);
  EXPECT_EQ(j.at("ambient_server"), false);
  EXPECT_EQ(j.at("rank"), 0);
  EXPECT_EQ(j.at("world_size"), 1);
  ev.server_pid = 12;
  ev.configured = "mps";
  EXPECT_EQ(ev.to_json().at("server_pid"), 12);
  EXPECT_EQ(ev.to_json().at("configured"), "mps");
}

// --- default resolver -----------------------------------------------------------

class ResolverTest : public ::testing::Test {
 protected:
  std::optional<std::string> uuid(const std::string& device) {
    VisibleDevicesResolver r(runner, kSmi, env_from(&env));
    return r.uuid_for(device);
  }
  std::map<std::string, std::string> env;
  FakeRunner runner;
};

TEST(ParseCudaDevice, Forms) {
  EXPECT_EQ(parse_cuda_device_index("cuda"), 0);
  EXPECT_EQ(parse_cuda_device_index("cuda:0"), 0);
  EXPECT_EQ(parse_cuda_device_index("cuda:12"), 12);
  for (const char* bad : {"cpu", "cuda:", "cuda:-1", "cuda:+1", "cuda:1x", "cuda1", "Cuda:0", " cuda:0", "cuda:99999999999"}) {
    EXPECT_EQ(parse_cuda_device_index(bad), std::nullopt) << bad;
  }
}

TEST_F(ResolverTest, UnsetMaskIsNvidiaSmiOrder) {
  EXPECT_EQ(uuid("cuda"), kGpuA);
  EXPECT_EQ(uuid("cuda:1"), kGpuB);
  EXPECT_EQ(uuid("cuda:2"), std::nullopt);
  EXPECT_EQ(uuid("cpu"), std::nullopt);
}

TEST_F(ResolverTest, UuidMaskNeedsNoNvidiaSmi) {
  env["CUDA_VISIBLE_DEVICES"] = "GPU-3C8A1D5E-94B2-4F7E-8A61-0B2C9D4E5F60, 7fdaf0a5179bf636d15ddaf243e3ff16";
  EXPECT_EQ(uuid("cuda:0"), kGpuB);  // display form
  EXPECT_EQ(uuid("cuda:1"), kGpuA);
  EXPECT_EQ(uuid("cuda:2"), std::nullopt);  // beyond the mask
  EXPECT_EQ(runner.count(kSmi), 0u);
}

TEST_F(ResolverTest, NumericEntriesResolveThroughNvidiaSmi) {
  env["CUDA_VISIBLE_DEVICES"] = "1";
  EXPECT_EQ(uuid("cuda:0"), kGpuB);  // the first visible entry, not index 0
  env["CUDA_VISIBLE_DEVICES"] = "1,0";
  EXPECT_EQ(uuid("cuda:1"), kGpuA);
  env["CUDA_VISIBLE_DEVICES"] = "9";
  EXPECT_EQ(uuid("cuda:0"), std::nullopt);  // unknown index
  env["CUDA_VISIBLE_DEVICES"] = "0,9,1";
  EXPECT_EQ(uuid("cuda:0"), kGpuA);
  EXPECT_EQ(uuid("cuda:1"), std::nullopt);  // CUDA stops at the invalid entry
  env["CUDA_VISIBLE_DEVICES"] = "3c8a1d5e";  // a unique UUID prefix
  EXPECT_EQ(uuid("cuda:0"), kGpuB);
}

TEST_F(ResolverTest, MigAndMinusOne) {
  env["CUDA_VISIBLE_DEVICES"] = "mig-11111111-2222-3333-4444-555555555555";
  EXPECT_EQ(uuid("cuda:0"), kMig);
  env["CUDA_VISIBLE_DEVICES"] = "MIG-GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16/1/0";  // old style: as is
  EXPECT_EQ(uuid("cuda:0"), "MIG-GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16/1/0");
  env["CUDA_VISIBLE_DEVICES"] = "-1," + kGpuA;
  EXPECT_EQ(uuid("cuda:0"), std::nullopt);
  env["CUDA_VISIBLE_DEVICES"] = kGpuA + ",-1," + kGpuB;
  EXPECT_EQ(uuid("cuda:1"), std::nullopt);
  env["CUDA_VISIBLE_DEVICES"] = "";
  EXPECT_EQ(uuid("cuda:0"), std::nullopt);
  EXPECT_EQ(runner.count(kSmi), 0u);
}

TEST_F(ResolverTest, BrokenNvidiaSmiIsAnErrorNotAbsence) {
  runner.smi_fails = true;
  env["CUDA_VISIBLE_DEVICES"] = "0";
  EXPECT_THROW(uuid("cuda:0"), CudaMpsError);
  env.erase("CUDA_VISIBLE_DEVICES");
  EXPECT_THROW(uuid("cuda:0"), CudaMpsError);
}

// --- manifest -------------------------------------------------------------------

CudaProcessSharingEvidence evidence(int rank, const std::string& uuid = kGpuA) {
  CudaProcessSharingEvidence ev;
  ev.configured = "mps";
  ev.effective = "mps";
  ev.validated = true;
  ev.rank = rank;
  ev.world_size = 2;
  ev.learner_device = "cuda:0";
  ev.learner_gpu_uuid = uuid;
  ev.server_pid = 77;
  return ev;
}

TEST(Manifest, AddsTheKeyAndLeavesOthersAlone) {
  nlohmann::json m = {{"run", "abc"}, {"learner", {{"steps", 10}}}};
  apply_cuda_process_sharing_manifest(m, evidence(0));
  EXPECT_EQ(m.at("run"), "abc");
  EXPECT_EQ(m.at("learner"), nlohmann::json({{"steps", 10}}));
  EXPECT_EQ(m.at("cuda_process_sharing").size(), 1u);
  EXPECT_EQ(m.at("cuda_process_sharing").at("0"), evidence(0).to_json());
}

TEST(Manifest, IdenticalReapplyIsANoop) {
  nlohmann::json m = nlohmann::json::object();
  apply_cuda_process_sharing_manifest(m, evidence(1));
  nlohmann::json before = m;
  EXPECT_NO_THROW(apply_cuda_process_sharing_manifest(m, evidence(1)));
  EXPECT_EQ(m, before);
}

TEST(Manifest, ConflictingEntryIsAnError) {
  nlohmann::json m = nlohmann::json::object();
  apply_cuda_process_sharing_manifest(m, evidence(0));
  nlohmann::json before = m;
  try {
    apply_cuda_process_sharing_manifest(m, evidence(0, kGpuB));
    FAIL() << "expected CudaMpsError";
  } catch (const CudaMpsError& e) {
    EXPECT_HAS(e.what(), "different cuda_process_sharing evidence for rank 0");
  }
  EXPECT_EQ(m, before);
}

TEST(Manifest, TwoRanksCoexist) {
  nlohmann::json m = nlohmann::json::object();
  apply_cuda_process_sharing_manifest(m, evidence(0));
  apply_cuda_process_sharing_manifest(m, evidence(1, kGpuB));
  EXPECT_EQ(m.at("cuda_process_sharing").at("0"), evidence(0).to_json());
  EXPECT_EQ(m.at("cuda_process_sharing").at("1"), evidence(1, kGpuB).to_json());
}

TEST(Manifest, NotAnObjectIsAnError) {
  nlohmann::json arr = nlohmann::json::array();
  EXPECT_THROW(apply_cuda_process_sharing_manifest(arr, evidence(0)), CudaMpsError);
  nlohmann::json m = {{"cuda_process_sharing", "yes"}};
  EXPECT_THROW(apply_cuda_process_sharing_manifest(m, evidence(0)), CudaMpsError);
}

TEST(ManifestFile, CreatesUpdatesAndKeepsMode) {
  TempDir tmp;
  std::string path = tmp.path() + "/manifest.json";
  update_manifest_file(path, evidence(0));
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  auto j = nlohmann::json::parse(read_text(path));
  EXPECT_EQ(j, nlohmann::json({{"cuda_process_sharing", {{"0", evidence(0).to_json()}}}}));

  write_text(path, R"({"producer": "trainer", "cuda_process_sharing": {"0": )" + evidence(0).to_json().dump() + "}}");
  ASSERT_EQ(chmod(path.c_str(), 0600), 0);
  update_manifest_file(path, evidence(0));  // identical: fine
  update_manifest_file(path, evidence(1));
  j = nlohmann::json::parse(read_text(path));
  EXPECT_EQ(j.at("producer"), "trainer");
  EXPECT_EQ(j.at("cuda_process_sharing").size(), 2u);
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_THROW(update_manifest_file(path, evidence(1, kGpuB)), CudaMpsError);
  EXPECT_EQ(nlohmann::json::parse(read_text(path)), j);  // untouched
  // No temp files left behind.
  size_t entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(tmp.path())) ++entries;
  EXPECT_EQ(entries, 1u);
}

TEST(ManifestFile, BadContentAndSymlinksAreRefused) {
  TempDir tmp;
  std::string path = tmp.path() + "/m.json";
  write_text(path, "[1, 2]");
  EXPECT_THROW(update_manifest_file(path, evidence(0)), CudaMpsError);
  write_text(path, "{not json");
  EXPECT_THROW(update_manifest_file(path, evidence(0)), CudaMpsError);
  std::string target = tmp.path() + "/target.json";
  write_text(target, "{}");
  std::string link = tmp.path() + "/link.json";
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  EXPECT_THROW(update_manifest_file(link, evidence(0)), CudaMpsError);
  EXPECT_EQ(read_text(target), "{}");
  EXPECT_THROW(update_manifest_file(tmp.path() + "/missing-dir/m.json", evidence(0)), CudaMpsError);
}

}  // namespace
}  // namespace unilab::mps
