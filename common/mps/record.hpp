// Daemon records: the only stop authority. A record proves which process we
// started (pid + start ticks + boot id + uid) and which directories we own.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/mps/mig.hpp"
#include "common/mps/proc.hpp"
#include "common/mps/modes.hpp"
#include "common/mps/string_table.hpp"

namespace unilab::mps {

// A record's `state`. kStarting: written before the daemon is launched, so
// a crash between launch and the final record still leaves a way to find
// the daemon (its pid is 0 then).
enum class RecordState { kStarting, kRunning };
inline constexpr StringTable<RecordState, 2> kRecordStateNames{{"starting", "running"}};
inline std::string_view to_string(RecordState s) { return kRecordStateNames.name(s); }

// One GPU of a Slurm node, as the prolog mapped it: GRES index -> gres.conf
// device file -> device minor -> nvidia-smi UUID. A MIG slice is one GRES
// too: its `device` is the file that tells it apart from the node's other
// slices (its compute instance's capability file, which the job's device
// cgroup allows and other slices' jobs may not open), its uuid MIG-...,
// and `mig` names its parent GPU and instances.
struct NodeGpu {
  int gres_index = -1;
  std::string device;  // gres.conf File= entry, e.g. /dev/nvidia3 (MIG: /dev/nvidia-caps/nvidia-capN)
  int minor = -1;
  std::string uuid;
  std::optional<MigSlice> mig;
  bool operator==(const NodeGpu&) const = default;
};

// What a Slurm job's records add: enough for the task path to work from the
// records alone (no nvidia-smi there).
struct SlurmBinding {
  std::string job_id;
  std::string node;                 // SLURMD_NODENAME (hosts are shared in tests)
  JobMode mode = JobMode::kAuto;
  std::vector<int> gres_indices;    // the GPUs this daemon serves
  std::vector<NodeGpu> node_gpus;   // every GPU of the node in GRES order
  bool operator==(const SlurmBinding&) const = default;
};

// Per-job MPS settings: the daemon's defaults, applied before any client
// connects (active threads, pinned memory), and what each task's clients
// get in their environment (client priority).
struct MpsLimits {
  std::optional<double> active_thread_percentage;
  std::optional<std::string> pinned_mem_limit;  // e.g. "8G", per GPU
  std::optional<ClientPriority> client_priority;  // CUDA_MPS_CLIENT_PRIORITY of the tasks
  // --unilab-mps-threads=auto: no daemon default; each task's clients get
  // CUDA_MPS_ACTIVE_THREAD_PERCENTAGE of 100 over the tasks sharing its GPU.
  bool active_thread_share_auto = false;
  bool operator==(const MpsLimits&) const = default;
};

// Where a job's daemon must live; recorded as "containment" in its record.
struct ContainmentPlan {
  int cgroup_version = 1;
  std::string mountpoint = "/sys/fs/cgroup";
  std::vector<std::string> controllers;  // v1 hierarchies to move into (v2: none)
  // The job-relative cgroup the daemon must be in: v1 the exact leaf
  // `uid_U/job_J/step_extern` under the Slurm root; v2 `job_J/step_extern`
  // (the daemon may sit in a child of it).
  std::string job_cgroup;
  nlohmann::json to_json() const;
  static ContainmentPlan from_json(const nlohmann::json& j);  // throws CudaMpsError
  bool operator==(const ContainmentPlan&) const = default;
};

// What a daemon is for: who, where, which GPUs, which job, with which
// limits. Asked for by a start (StartRequest) and kept by the record
// (DaemonRecord): both are one, so the start copies it in one piece.
struct DaemonSpec {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;
  std::string host;
  TopologyMode topology_mode = TopologyMode::kSingle;
  std::vector<std::string> gpu_uuids;  // display form
  std::optional<std::string> job_id;
  std::optional<SlurmBinding> slurm;
  MpsLimits limits;
  // Slurm jobs on nodes that contain them: the cgroup the daemon must be in
  // before a task may use it (absent: not contained, e.g. no cgroup plugin).
  std::optional<ContainmentPlan> containment;
  bool operator==(const DaemonSpec&) const = default;
};

// A daemon's spec and what its start found and made: the process it is, its
// directories, when and on which boot.
struct DaemonRecord : DaemonSpec {
  static constexpr int kSchemaVersion = 1;

  int schema_version = kSchemaVersion;
  std::string pipe_directory;
  std::string log_directory;
  pid_t pid = 0;                       // 0 while starting
  uint64_t process_start_ticks = 0;
  double created_at = 0;
  std::string boot_id;
  RecordState state = RecordState::kRunning;
  std::vector<std::string> owned_directories;  // removed on stop

  ProcessIdentity identity() const { return {pid, process_start_ticks, boot_id, uid}; }
  nlohmann::json to_json() const;
  // Throws CudaMpsError naming the missing/bad field.
  static DaemonRecord from_json(const nlohmann::json& j);
  bool operator==(const DaemonRecord&) const = default;
};

struct RecordProblem {
  std::string file;
  std::string reason;
  nlohmann::json to_json() const { return {{"file", file}, {"reason", reason}}; }
};

struct RecordListing {
  std::vector<DaemonRecord> records;     // in scope (uid/host), parsed
  std::vector<RecordProblem> problems;   // corrupt, unreadable, unsupported schema: never trusted
  size_t out_of_scope = 0;               // other users' or hosts' records
};

// One file per daemon, `<name>.json`, in a records directory that must be
// owned by `owner` (root for Slurm, the user for the CLI) and not writable by
// group or others, not even as a sticky directory (there any user could
// plant a record under a free name). Files are written atomically and read
// without following symlinks; a record file not owned by `owner`, or
// writable by group or others, is refused (a problem, never a record).
// A store that does not exist reads as empty, decided on the open's own
// errno (prologs that create it concurrently never see a stale error).
class RecordStore {
 public:
  RecordStore(std::string root, uid_t owner, gid_t owner_gid, mode_t dir_mode, mode_t file_mode);
  const std::string& root() const { return root_; }

  void write(const DaemonRecord& record);
  // nullopt when absent; throws CudaMpsError when corrupt.
  std::optional<DaemonRecord> read(const std::string& name);
  RecordListing list(std::optional<uid_t> uid, std::optional<std::string> host);
  // Removes the record file; missing is fine.
  void remove(const std::string& name);
  // Removes a corrupt file by its file name (as listed in a RecordProblem).
  void remove_file(const std::string& file);

 private:
  std::string root_;
  uid_t owner_;
  gid_t owner_gid_;
  mode_t dir_mode_;
  mode_t file_mode_;
};

std::string record_file_name(const std::string& name);


}  // namespace unilab::mps
