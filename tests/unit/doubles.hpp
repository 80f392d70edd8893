// Test doubles for the seams of the core library (runner, /proc reader,
// signaller, clock) plus a small simulated NVIDIA host (nvidia-smi and an MPS
// control daemon) built on them, and a self-cleaning temp directory. No test
// using these needs a GPU, Slurm, the network or real waiting.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/mps/daemon.hpp"
#include "common/mps/errors.hpp"
#include "common/mps/gpu.hpp"
#include "common/mps/proc.hpp"
#include "common/mps/record.hpp"
#include "common/mps/runner.hpp"

namespace unilab::mps::test {

// ---------------------------------------------------------------------------
// Files

// A fresh directory under /tmp (short, so sockets below it fit sun_path),
// removed with everything in it when the test ends.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/umt.XXXXXX";
    if (mkdtemp(tmpl) == nullptr) throw std::runtime_error(std::string("mkdtemp: ") + std::strerror(errno));
    path_ = tmpl;
  }
  ~TempDir() {
    namespace fs = std::filesystem;
    std::error_code ec;
    // Make every directory traversable/writable again (tests chmod some).
    fs::permissions(path_, fs::perms::owner_all, fs::perm_options::add, ec);
    for (auto it = fs::recursive_directory_iterator(path_, fs::directory_options::skip_permission_denied, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (it->is_directory(ec) && !it->is_symlink(ec)) fs::permissions(it->path(), fs::perms::owner_all, fs::perm_options::add, ec);
    }
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& rel) const { return path_ + "/" + rel; }

 private:
  std::string path_;
};

inline void write_text(const std::string& path, const std::string& content, mode_t mode = 0644) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw std::runtime_error("cannot write " + path);
  f << content;
  f.close();
  chmod(path.c_str(), mode);
}

inline std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// lstat semantics: a dangling symlink exists.
inline bool exists(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0;
}

inline mode_t mode_of(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return 0;
  return st.st_mode;
}

inline uid_t owner_of(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return static_cast<uid_t>(-1);
  return st.st_uid;
}

inline std::vector<std::string> dir_entries(const std::string& path) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(path, ec)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

inline void make_dir(const std::string& path, mode_t mode = 0700) {
  if (mkdir(path.c_str(), mode) != 0 && errno != EEXIST) throw std::runtime_error("mkdir " + path + ": " + std::strerror(errno));
  chmod(path.c_str(), mode);
}

// Binds a real AF_UNIX socket at `path` and closes it: the socket file stays,
// as it does after a daemon dies.
inline bool bind_unix_socket(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un addr {};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) {
    close(fd);
    return false;
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return ok;
}

inline bool is_root() { return geteuid() == 0; }

// An uid that is neither root nor us (for "owned by someone else").
inline constexpr uid_t kOtherUid = 65534;
inline constexpr gid_t kOtherGid = 65534;

// ---------------------------------------------------------------------------
// GPUs

inline const std::string kUuid0 = "GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16";
inline const std::string kUuid1 = "GPU-1b2c3d4e-0000-1111-2222-333344445555";
inline const std::string kUuid2 = "GPU-9a8b7c6d-aaaa-bbbb-cccc-ddddeeeeffff";
inline const std::string kUuid3 = "GPU-0f0e0d0c-1234-5678-9abc-def012345678";

inline GpuIdentity make_gpu(int index, const std::string& uuid, int minor, const std::string& bus,
                            const std::string& name = "NVIDIA H200") {
  return GpuIdentity{index, uuid, minor, bus, name, "", "", std::nullopt};
}

// Four GPUs whose nvidia-smi index, minor number and PCI order all differ.
inline std::vector<GpuIdentity> four_gpus() {
  return {make_gpu(0, kUuid0, 2, "00000000:85:00.0"), make_gpu(1, kUuid1, 0, "00000000:05:00.0"),
          make_gpu(2, kUuid2, 3, "00000000:C5:00.0"), make_gpu(3, kUuid3, 1, "00000000:45:00.0")};
}

// `nvidia-smi --query-gpu=<kNvidiaSmiQueryFields> --format=csv,noheader`;
// modes not set print as an H200 out of the box: Default, MIG Disabled.
// MIG devices (g.mig) are not rows of the query.
inline std::string smi_csv(const std::vector<GpuIdentity>& gpus) {
  std::string out;
  for (const auto& g : gpus) {
    if (g.mig) continue;
    out += std::to_string(g.index) + ", " + g.uuid + ", " + g.pci_bus_id + ", " +
           (g.compute_mode.empty() ? "Default" : g.compute_mode) + ", " + (g.mig_mode.empty() ? "Disabled" : g.mig_mode) +
           ", " + g.name + "\n";
  }
  return out;
}

// MIG: GPU 1 of four_gpus() (minor 0, bus 05) with MIG enabled and two MIG
// devices: device 0 = GPU instance 1 / compute instance 0 (3g.71gb),
// device 1 = GPU instance 5 / compute instance 0 (1g.18gb).
inline const std::string kMig0 = "MIG-1a2b3c4d-5e6f-5a7b-8c9d-0e1f2a3b4c5d";
inline const std::string kMig1 = "MIG-2b3c4d5e-6f70-5b8c-9d0e-1f2a3b4c5d6e";
inline GpuIdentity make_mig(const GpuIdentity& parent, const std::string& uuid, int device, const std::string& profile, int gi,
                            int ci) {
  GpuIdentity g{-1, uuid, parent.minor_number, parent.pci_bus_id, parent.name + " MIG " + profile, "", "", std::nullopt};
  g.mig = MigSlice{parent.uuid, parent.index, parent.minor_number, device, profile, gi, ci};
  return g;
}
inline std::vector<GpuIdentity> mig_gpus() {
  auto gpus = four_gpus();
  gpus[1].mig_mode = "Enabled";
  gpus.push_back(make_mig(gpus[1], kMig0, 0, "3g.71gb", 1, 0));
  gpus.push_back(make_mig(gpus[1], kMig1, 1, "1g.18gb", 5, 0));
  return gpus;
}

// `nvidia-smi -L` of `gpus` (MIG devices under their parents, the real spacing).
inline std::string smi_list(const std::vector<GpuIdentity>& gpus) {
  std::string out;
  for (const auto& g : gpus) {
    if (g.mig) continue;
    out += "GPU " + std::to_string(g.index) + ": " + g.name + " (UUID: " + g.uuid + ")\n";
    for (const auto& m : gpus) {
      if (!m.mig || m.mig->parent_uuid != g.uuid) continue;
      char line[256];
      std::snprintf(line, sizeof line, "  MIG %-11s Device %2d: (UUID: %s)\n", m.mig->profile.c_str(), m.mig->device, m.uuid.c_str());
      out += line;
    }
  }
  return out;
}

// nvidia-smi's human table, as far as its "MIG devices:" block (the MIG
// User Guide's shape) and the process block after it.
inline std::string smi_table(const std::vector<GpuIdentity>& gpus) {
  std::string out =
      "+-----------------------------------------------------------------------------------------+\n"
      "| MIG devices:                                                                            |\n"
      "+------------------+----------------------------------+-----------+-----------------------+\n"
      "| GPU  GI  CI  MIG |                     Memory-Usage |        Vol|        Shared         |\n"
      "|      ID  ID  Dev |                       BAR1-Usage | SM     Unc| CE ENC  DEC  OFA  JPG |\n"
      "|==================+==================================+===========+=======================|\n";
  for (const auto& m : gpus) {
    if (!m.mig) continue;
    char line[256];
    std::snprintf(line, sizeof line, "| %2d  %3d %3d %3d  |              12MiB / 19968MiB    | 16      0 |  1   0    1    0    1 |\n",
                  m.mig->parent_index, m.mig->gpu_instance, m.mig->compute_instance, m.mig->device);
    out += line;
    out += "|                  |                 0MiB / 32767MiB  |           |                       |\n";
  }
  out += "+-----------------------------------------------------------------------------------------+\n"
         "| Processes:                                                                              |\n"
         "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |\n"
         "|    1    1    0             3805    M+C   ./bin/BlackScholes                     326MiB |\n";
  return out;
}

// Tools with this nvidia-smi (and driver_dir); driver_proc is a directory
// that does not exist, so no minor is found unless a test gives one.
inline Tools smi_tools(const std::string& nvidia_smi, const std::optional<std::string>& driver_dir = std::nullopt) {
  Tools t;
  t.nvidia_smi = nvidia_smi;
  t.driver_dir = driver_dir;
  t.driver_proc = "/nonexistent/unilab-test/proc-driver";
  return t;
}

// The driver's /proc/driver view of `gpus` (Tools::driver_proc): each GPU's
// information file with its device minor, as the real driver writes it.
// One GPU's /proc/driver/nvidia/gpus/<bus>/information, relative to driver_proc.
inline std::string driver_information_path(const GpuIdentity& g) {
  return "nvidia/gpus/" + driver_bus_directory(g.pci_bus_id) + "/information";
}
inline std::string driver_information(const GpuIdentity& g) {
  return "Model: \t\t " + g.name + "\nGPU UUID: \t " + g.uuid + "\nBus Location: \t " + driver_bus_directory(g.pci_bus_id) +
         "\nDevice Minor: \t " + std::to_string(g.minor_number) + "\nGPU Excluded:\t No\n";
}

class DriverProc {
 public:
  explicit DriverProc(const std::vector<GpuIdentity>& gpus) {
    for (const auto& g : gpus) {
      if (g.mig || g.minor_number < 0) continue;
      const std::string file = dir_ / driver_information_path(g);
      std::filesystem::create_directories(std::filesystem::path(file).parent_path());
      std::ofstream(file) << driver_information(g);
    }
  }
  const std::string& path() const { return dir_.path(); }

 private:
  TempDir dir_;
};

// ---------------------------------------------------------------------------
// Seams

inline CommandResult exited(int code, std::string out = "", std::string err = "") {
  CommandResult r;
  r.exit_code = code;
  r.out = std::move(out);
  r.err = std::move(err);
  return r;
}

inline CommandResult exec_failed(const std::string& path) {
  CommandResult r;
  r.exec_error = "cannot execute " + path + ": No such file or directory";
  return r;
}

inline std::optional<std::string> env_value(const Command& c, const std::string& key) {
  for (const auto& e : c.env) {
    if (e.size() > key.size() && e.compare(0, key.size(), key) == 0 && e[key.size()] == '=') return e.substr(key.size() + 1);
  }
  return std::nullopt;
}

// Records every Command and answers with the scripted handler (default: exit 0).
// Safe to run from several threads (start_daemons does): the record is
// locked; the handler runs unlocked and guards its own state.
class RecordingRunner final : public CommandRunner {
 public:
  using Handler = std::function<CommandResult(const Command&)>;
  RecordingRunner() = default;
  explicit RecordingRunner(Handler h) : handler(std::move(h)) {}

  CommandResult run(const Command& command) override {
    {
      std::lock_guard lock(mutex_);
      commands.push_back(command);
    }
    return handler ? handler(command) : exited(0);
  }
  size_t count_program(const std::string& argv0) const {
    size_t n = 0;
    for (const auto& c : commands) n += !c.argv.empty() && c.argv[0] == argv0;
    return n;
  }
  // Commands sent through the MPS front end with this stdin (e.g. "quit\n").
  std::vector<Command> with_stdin(const std::string& data) const {
    std::vector<Command> out;
    for (const auto& c : commands) if (c.stdin_data == data) out.push_back(c);
    return out;
  }
  std::vector<Command> with_arg(const std::string& arg) const {
    std::vector<Command> out;
    for (const auto& c : commands) {
      if (std::find(c.argv.begin() + (c.argv.empty() ? 0 : 1), c.argv.end(), arg) != c.argv.end()) out.push_back(c);
    }
    return out;
  }

  Handler handler;
  std::vector<Command> commands;

 private:
  std::mutex mutex_;
};

// /proc as a map: pid -> stat, per-pid environment, one boot id. Its
// methods may be called from several threads (the maps are for the test's
// own thread, before and after).
class FakeProcReader final : public ProcReader {
 public:
  std::optional<ProcStat> stat(pid_t pid) override {
    std::lock_guard lock(mutex);
    ++stat_calls;
    auto it = procs.find(pid);
    if (it == procs.end()) return std::nullopt;
    return it->second;
  }
  std::string boot_id() override {
    std::lock_guard lock(mutex);
    return boot;
  }
  std::optional<std::string> environ_value(pid_t pid, std::string_view key) override {
    std::lock_guard lock(mutex);
    auto it = environ.find(pid);
    if (it == environ.end()) return std::nullopt;
    auto v = it->second.find(std::string(key));
    if (v == it->second.end()) return std::nullopt;
    return v->second;
  }
  std::vector<pid_t> pids() override {
    std::lock_guard lock(mutex);
    std::vector<pid_t> out;
    for (const auto& [pid, st] : procs) out.push_back(pid);
    return out;
  }
  std::vector<pid_t> children(pid_t pid) override {
    std::lock_guard lock(mutex);
    auto it = kids.find(pid);
    // "This process" is always there, whether or not a test added it.
    return it == kids.end() || (!procs.count(pid) && pid != self_pid) ? std::vector<pid_t>{} : it->second;
  }
  std::optional<std::string> comm(pid_t pid) override {
    std::lock_guard lock(mutex);
    auto it = comms.find(pid);
    if (it == comms.end() || !procs.count(pid)) return std::nullopt;
    return it->second;
  }
  std::optional<FileId> exe(pid_t pid) override {
    std::lock_guard lock(mutex);
    auto it = exes.find(pid);
    if (it == exes.end() || !procs.count(pid)) return std::nullopt;
    return it->second;
  }
  std::optional<FileId> file(const std::string& path) override {
    std::lock_guard lock(mutex);
    auto it = files.find(path);
    if (it == files.end()) return any_file;
    return it->second;
  }
  pid_t self() override { return self_pid; }
  uint64_t ticks_now() override {
    std::lock_guard lock(mutex);
    return now_ticks;
  }
  std::optional<std::string> cgroup(pid_t pid) override {
    std::lock_guard lock(mutex);
    ++cgroup_calls;
    if (on_cgroup) on_cgroup(pid);
    auto it = cgroups.find(pid);
    if (it == cgroups.end() || !procs.count(pid)) return std::nullopt;
    return it->second;
  }

  void add(pid_t pid, uid_t uid, uint64_t start_ticks, char state = 'S') {
    std::lock_guard lock(mutex);
    ProcStat st;
    st.state = state;
    st.start_ticks = start_ticks;
    st.uid = uid;
    procs[pid] = st;
  }
  // `pid` becomes a child of `parent` (its stat names it, the parent's
  // children list holds it).
  void adopt(pid_t parent, pid_t pid) {
    std::lock_guard lock(mutex);
    procs[pid].ppid = parent;
    kids[parent].push_back(pid);
  }
  // Gone, with everything /proc showed of it; its children stay (orphans).
  void kill(pid_t pid) {
    std::lock_guard lock(mutex);
    procs.erase(pid);
    environ.erase(pid);
    kids.erase(pid);
    comms.erase(pid);
    cgroups.erase(pid);
  }
  bool alive(pid_t pid) const {
    std::lock_guard lock(mutex);
    auto it = procs.find(pid);
    return it != procs.end() && !process_state_gone(it->second.state);
  }
  void set_environ(pid_t pid, const std::string& key, const std::string& value) {
    std::lock_guard lock(mutex);
    environ[pid][key] = value;
  }

  mutable std::recursive_mutex mutex;
  std::map<pid_t, ProcStat> procs;
  std::map<pid_t, std::map<std::string, std::string>> environ;
  std::map<pid_t, std::vector<pid_t>> kids;  // pid -> direct children
  std::map<pid_t, std::string> comms;        // pid -> /proc/PID/comm
  std::map<pid_t, std::string> cgroups;      // pid -> /proc/PID/cgroup text
  std::map<pid_t, FileId> exes;              // pid -> the binary it runs
  std::map<std::string, FileId> files;       // path -> file identity
  std::optional<FileId> any_file;            // the identity of every path not in `files`
  pid_t self_pid = 4000;                     // "this process"
  uint64_t now_ticks = 0;                    // ticks_now()
  // Called on every cgroup() read, before the answer (e.g. to move a process).
  std::function<void(pid_t)> on_cgroup;
  std::string boot = "0c1e3a55-boot-0000-0000-000000000001";
  int stat_calls = 0;
  int cgroup_calls = 0;
};

// Records every signal request; a request is "delivered" (and may kill the
// process in a FakeProcReader) only when the identity is live, as with the
// real pidfd-based signaller.
class RecordingSignaller final : public Signaller {
 public:
  Liveness send_verified(const ProcessIdentity& id, int sig, ProcReader& proc) override {
    {
      std::lock_guard lock(mutex_);
      requests.emplace_back(id.pid, sig);
    }
    Liveness l = check_identity(id, proc);
    if (l != Liveness::kLive) return l;
    {
      std::lock_guard lock(mutex_);
      delivered.emplace_back(id.pid, sig);
    }
    if (lethal.count(sig) && !immune.count(id.pid)) {
      if (auto* fake = dynamic_cast<FakeProcReader*>(&proc)) fake->kill(id.pid);
    }
    return Liveness::kLive;
  }
  std::vector<std::pair<pid_t, int>> requests;
  std::vector<std::pair<pid_t, int>> delivered;
  std::set<int> lethal = {SIGTERM, SIGKILL};
  std::set<pid_t> immune;  // processes no signal ends (stuck in the kernel)

 private:
  std::mutex mutex_;
};

// Monotonic time that only moves when someone sleeps (or the test advances
// it). One time for all threads: a sleep of any of them moves it for all, so
// a deadline shared by threads comes no later than it would in real time.
class FakeClock final : public Clock {
 public:
  std::chrono::steady_clock::time_point now() override {
    std::lock_guard lock(mutex_);
    return now_;
  }
  void sleep_for(std::chrono::milliseconds d) override {
    std::function<void(std::chrono::milliseconds)> hook;
    {
      std::lock_guard lock(mutex_);
      now_ += d;
      ++sleeps;
      hook = on_sleep;
    }
    if (hook) hook(d);
  }
  double wall_seconds() override {
    std::lock_guard lock(mutex_);
    return 1.7e9 + std::chrono::duration<double>(now_ - start_).count();
  }
  void advance(std::chrono::milliseconds d) {
    std::lock_guard lock(mutex_);
    now_ += d;
  }
  std::chrono::milliseconds elapsed() const {
    std::lock_guard lock(mutex_);
    return std::chrono::duration_cast<std::chrono::milliseconds>(now_ - start_);
  }

  int sleeps = 0;
  // Called after every sleep, unlocked (e.g. to let a file appear "later").
  std::function<void(std::chrono::milliseconds)> on_sleep;

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::time_point(std::chrono::hours(10000));
  std::chrono::steady_clock::time_point now_ = start_;
  mutable std::mutex mutex_;
};

// ---------------------------------------------------------------------------
// A simulated NVIDIA host: nvidia-smi answers with `smi_out`, and
// `nvidia-cuda-mps-control -d` "starts" a daemon: a pid in the FakeProcReader
// (uid = the credentials it was run with, environment with its pipe dir), a
// pid file and a real control socket in its pipe directory. The front end
// answers `get_server_list` while that daemon lives, and `quit` ends it.
class FakeNvidiaHost {
 public:
  // Every path is the one MPS binary unless a test says otherwise.
  explicit FakeNvidiaHost(FakeProcReader& proc) : proc_(proc) { proc_.any_file = kMpsControlFile; }
  static constexpr FileId kMpsControlFile{64769, 424242};

  RecordingRunner::Handler handler() {
    return [this](const Command& c) { return handle(c); };
  }

  // Thread-safe: each command is handled under the host's lock, except
  // on_launch, which runs before it (so a test can hold launches together).
  CommandResult handle(const Command& c) {
    if (c.argv.size() == 2 && c.argv[0] == mps_control && c.argv[1] == "-d") {
      int n = 0;
      {
        std::lock_guard lock(mutex);
        n = ++launches;
        launch_commands.push_back(c);
      }
      if (on_launch) on_launch(c);
      std::lock_guard lock(mutex);
      return launch(c, env_value(c, "CUDA_MPS_PIPE_DIRECTORY").value_or("/tmp/nvidia-mps"), n);
    }
    std::lock_guard lock(mutex);
    return handle_locked(c);
  }

  CommandResult handle_locked(const Command& c) {
    if (c.argv.empty()) return exec_failed("");
    if (c.argv[0] == nvidia_smi) {
      ++smi_calls;
      if (c.argv.size() == 2 && c.argv[1] == "-L") return exited(0, smi_list_out);
      if (c.argv.size() == 1) return exited(0, smi_table_out);
      return exited(smi_exit, smi_exit == 0 ? smi_out : smi_err_out, smi_exit == 0 ? "" : smi_err);
    }
    if (c.argv[0] != mps_control) return exec_failed(c.argv[0]);
    const std::string pipe = env_value(c, "CUDA_MPS_PIPE_DIRECTORY").value_or("/tmp/nvidia-mps");
    std::string cmd = c.stdin_data;
    while (!cmd.empty() && cmd.back() == '\n') cmd.pop_back();
    received.push_back(cmd);
    auto it = daemons.find(pipe);
    bool live = it != daemons.end() && proc_.alive(it->second);
    if (!live || !answers) return exited(1, "Cannot find MPS control daemon process\n");
    if (cmd == "quit" || cmd.rfind("quit -t ", 0) == 0) {
      ++quits;
      if (quit_ends_daemon) proc_.kill(it->second);
      return exited(0);
    }
    if (cmd == "get_server_list") return exited(0, "");
    if (cmd.rfind("set_", 0) == 0) return refuse_limits ? exited(0, "Invalid value\n") : exited(0);
    return exited(0);
  }

  // nvidia-smi
  std::string nvidia_smi = "/opt/fake/bin/nvidia-smi";
  std::string smi_out;
  std::string smi_list_out;   // `nvidia-smi -L`
  std::string smi_table_out;  // `nvidia-smi` (the human table)
  int smi_exit = 0;
  std::string smi_err_out;
  std::string smi_err;
  int smi_calls = 0;

  // MPS
  std::string mps_control = "/opt/fake/bin/nvidia-cuda-mps-control";
  bool answers = true;              // front end finds the daemon
  bool quit_ends_daemon = true;     // `quit` makes the daemon exit
  bool write_pid_file = true;
  bool create_socket = true;
  bool refuse_limits = false;
  std::optional<uid_t> daemon_uid;  // force the daemon's uid (default: the credentials)
  std::optional<pid_t> adopted_by;  // the daemon's parent (default: the launching process)
  std::optional<FileId> daemon_exe; // the binary it runs (default: mps_control's)
  // Launch number (1-based) -> result that replaces the launch (e.g. a failure).
  std::map<int, CommandResult> launch_failures;
  // Called at the moment `-d` runs, before the daemon appears (unlocked).
  std::function<void(const Command&)> on_launch;
  std::recursive_mutex mutex;

  int launches = 0;
  int quits = 0;
  std::vector<std::string> received;     // front-end commands (stdin), in order
  std::map<std::string, pid_t> daemons;  // pipe dir -> pid
  std::vector<Command> launch_commands;
  pid_t next_pid = 41000;
  uint64_t next_ticks = 777000;

 private:
  CommandResult launch(const Command& c, const std::string& pipe, int number) {
    if (auto f = launch_failures.find(number); f != launch_failures.end()) return f->second;
    if (auto it = daemons.find(pipe); it != daemons.end() && proc_.alive(it->second)) {
      return exited(1, "", "An instance of this daemon is already running\n");
    }
    pid_t pid = next_pid++;
    uid_t uid = daemon_uid ? *daemon_uid : (c.credentials ? c.credentials->uid : geteuid());
    proc_.add(pid, uid, next_ticks++);
    // Daemonized: adopted by the launching process (its subreaper).
    proc_.adopt(adopted_by ? *adopted_by : proc_.self_pid, pid);
    proc_.exes[pid] = daemon_exe ? *daemon_exe : kMpsControlFile;
    proc_.set_environ(pid, "CUDA_MPS_PIPE_DIRECTORY", pipe);
    if (auto v = env_value(c, "CUDA_VISIBLE_DEVICES")) proc_.set_environ(pid, "CUDA_VISIBLE_DEVICES", *v);
    daemons[pipe] = pid;
    if (write_pid_file) write_text(pipe + "/" + kPidFileName, std::to_string(pid) + "\n");
    if (create_socket) bind_unix_socket(pipe + "/control");
    return exited(0);
  }

  FakeProcReader& proc_;
};

// The seams bundled the way the library wants them.
struct Doubles {
  RecordingRunner runner;
  FakeProcReader proc;
  RecordingSignaller signaller;
  FakeClock clock;
  FakeNvidiaHost host{proc};
  Services services{runner, proc, signaller, clock};
  DriverProc driver{four_gpus()};  // the driver's view of four_gpus(): their minors
  Tools tools{host.nvidia_smi, host.mps_control, std::nullopt, driver.path()};

  Doubles() { runner.handler = host.handler(); }
};

// ---------------------------------------------------------------------------
// Records

inline DaemonRecord make_record(const std::string& name, uid_t uid, const std::string& host, pid_t pid,
                                uint64_t ticks, const std::string& pipe_dir, const std::vector<std::string>& uuids) {
  DaemonRecord r;
  r.name = name;
  r.uid = uid;
  r.gid = uid;
  r.host = host;
  r.topology_mode = uuids.size() > 1 ? TopologyMode::kSingleTaskMulti : TopologyMode::kSingle;
  r.gpu_uuids = uuids;
  r.pipe_directory = pipe_dir;
  r.log_directory = pipe_dir + "-log";
  r.pid = pid;
  r.process_start_ticks = ticks;
  r.created_at = 1.7e9;
  r.boot_id = "0c1e3a55-boot-0000-0000-000000000001";
  r.state = RecordState::kRunning;
  return r;
}

// Fails the current test when `fn` does not throw E, else returns what().
template <typename E = CudaMpsError, typename F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<unexpected exception type: ") + e.what() + ">";
  }
  return "<no exception>";
}

}  // namespace unilab::mps::test
