// Finding a daemon from its record: liveness, status, the environment its
// clients need, the record serving a GPU or named by the user (daemon.hpp).
#include "common/mps/daemon.hpp"

#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

#include "common/mps/daemon_detail.hpp"
#include "common/mps/errors.hpp"
#include "common/mps/gpu.hpp"

namespace unilab::mps {

DaemonDirectories daemon_directories(const std::string& base, const std::string& name) {
  const std::string root = base + "/" + name;
  return {root, root + "/" + kPipeLeaf, root + "/" + kLogLeaf};
}

std::string current_host() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

std::optional<ProcessIdentity> recover_starting_identity(const DaemonRecord& record, ProcReader& proc) {
  return detail::identify_daemon(record.pipe_directory, record.uid, proc, nullptr);
}

bool daemon_process_is_live(const DaemonRecord& record, ProcReader& proc) {
  if (record.state == RecordState::kStarting) return false;
  return check_identity(record.identity(), proc) == Liveness::kLive;
}

nlohmann::json daemon_status(const DaemonRecord& record, ProcReader& proc) {
  nlohmann::json j = record.to_json();
  const bool starting = record.state == RecordState::kStarting;
  Liveness l = starting ? Liveness::kGone : check_identity(record.identity(), proc);
  j["live"] = l == Liveness::kLive;
  j["liveness"] = std::string(starting ? to_string(record.state) : to_string(l));
  auto st = record.pid > 0 ? proc.stat(record.pid) : std::nullopt;
  j["observed_start_ticks"] = st ? nlohmann::json(st->start_ticks) : nlohmann::json(nullptr);
  return j;
}

std::vector<std::pair<std::string, std::string>> environment_for_daemon(const DaemonRecord& record) {
  return {{"CUDA_VISIBLE_DEVICES", join(record.gpu_uuids, ",")},
          {"CUDA_MPS_PIPE_DIRECTORY", record.pipe_directory},
          {"CUDA_MPS_LOG_DIRECTORY", record.log_directory}};
}

const DaemonRecord& select_daemon_for_gpu(const std::string& gpu_uuid, const std::vector<DaemonRecord>& records,
                                          ProcReader& proc) {
  const std::string token = canonicalize_gpu_uuid(gpu_uuid);
  const DaemonRecord* hit = nullptr;
  for (const auto& r : records) {
    bool serves = std::any_of(r.gpu_uuids.begin(), r.gpu_uuids.end(),
                              [&](const auto& u) { return canonicalize_gpu_uuid(u) == token; });
    if (!serves || !daemon_process_is_live(r, proc)) continue;
    if (hit != nullptr) {
      throw CudaMpsError(fmt::format("GPU {} is served by more than one live daemon ('{}' and '{}'); name one", display_gpu_uuid(gpu_uuid),
                                     hit->name, r.name));
    }
    hit = &r;
  }
  if (hit == nullptr) {
    throw CudaMpsError(fmt::format("no live unilab-mps daemon serves GPU {}; start one with `unilab-mps start {}`",
                                   display_gpu_uuid(gpu_uuid), display_gpu_uuid(gpu_uuid)));
  }
  return *hit;
}

std::vector<std::pair<std::string, std::string>> select_environment_for_gpu(const std::string& gpu_uuid,
                                                                            const std::vector<DaemonRecord>& records,
                                                                            ProcReader& proc) {
  return environment_for_daemon(select_daemon_for_gpu(gpu_uuid, records, proc));
}

DaemonRecord read_daemon_record(RecordStore& store, const std::optional<std::string>& name, uid_t uid,
                                const std::string& host, ProcReader& proc) {
  if (name) {
    auto rec = store.read(*name);
    if (!rec) {
      throw CudaMpsError(fmt::format("no daemon record named '{}' in {}; `unilab-mps status` lists them", *name, store.root()));
    }
    if (rec->uid != uid || rec->host != host) {
      throw CudaMpsError(fmt::format("record '{}' belongs to uid {} on {}, not uid {} on {}; refusing to act on it", *name,
                                     rec->uid, rec->host, uid, host));
    }
    return *rec;
  }
  auto listing = store.list(uid, host);
  std::vector<const DaemonRecord*> live;
  for (const auto& r : listing.records) if (daemon_process_is_live(r, proc)) live.push_back(&r);
  if (live.size() == 1) return *live.front();
  if (live.empty() && listing.records.size() == 1) return listing.records.front();
  if (listing.records.empty()) {
    throw CudaMpsError(fmt::format("no unilab-mps daemon is recorded for uid {} on {}; start one with `unilab-mps start`", uid, host));
  }
  std::vector<std::string> names;
  for (const auto& r : listing.records) names.push_back(r.name);
  throw CudaMpsError(fmt::format("several daemons are recorded ({}); name one", join(names, ", ")));
}

}  // namespace unilab::mps
