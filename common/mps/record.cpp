#include "common/mps/record.hpp"

#include <unistd.h>

#include <fcntl.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

#include "common/mps/errors.hpp"
#include "common/mps/gpu.hpp"
#include "common/mps/safefs.hpp"

namespace unilab::mps {
namespace {

// An integer field within T's range. nlohmann's get<int>() casts a float
// such as 1e300 (undefined behaviour) and wraps -1 into a uid: refuse both.
template <typename T>
T integer_value(const nlohmann::json& v, const char* key) {
  if (v.is_number_unsigned()) {
    auto u = v.get<uint64_t>();
    if (std::in_range<T>(u)) return static_cast<T>(u);
  } else if (v.is_number_integer()) {
    auto i = v.get<int64_t>();
    if (std::in_range<T>(i)) return static_cast<T>(i);
  } else {
    throw CudaMpsError(fmt::format("field '{}' has the wrong type (an integer is needed)", key));
  }
  throw CudaMpsError(fmt::format("field '{}' is out of range", key));
}

template <typename T>
T field(const nlohmann::json& j, const char* key) {
  if (!j.contains(key)) throw CudaMpsError(fmt::format("missing field '{}'", key));
  const nlohmann::json& v = j.at(key);
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    return integer_value<T>(v, key);
  } else if constexpr (std::is_same_v<T, std::vector<int>>) {
    if (!v.is_array()) throw CudaMpsError(fmt::format("field '{}' has the wrong type (an array is needed)", key));
    std::vector<int> out;
    for (const auto& e : v) out.push_back(integer_value<int>(e, key));
    return out;
  } else {
    try {
      return v.get<T>();
    } catch (const nlohmann::json::exception&) {
      throw CudaMpsError(fmt::format("field '{}' has the wrong type", key));
    }
  }
}

// A string field that must be one of the table's names.
template <typename E, size_t N>
E enum_field(const StringTable<E, N>& table, const nlohmann::json& j, const char* key) {
  const std::string v = field<std::string>(j, key);
  if (auto e = table.lookup(v)) return *e;
  throw CudaMpsError(fmt::format("unknown {} '{}'", key, v));
}

}  // namespace

std::string record_file_name(const std::string& name) { return name + ".json"; }

nlohmann::json ContainmentPlan::to_json() const {
  return {{"cgroup_version", cgroup_version},
          {"mountpoint", mountpoint},
          {"controllers", controllers},
          {"job_cgroup", job_cgroup}};
}

ContainmentPlan ContainmentPlan::from_json(const nlohmann::json& j) {
  try {
    ContainmentPlan p;
    p.cgroup_version = integer_value<int>(j.at("cgroup_version"), "cgroup_version");  // not get<int>: casts floats
    p.mountpoint = j.at("mountpoint").get<std::string>();
    p.controllers = j.at("controllers").get<std::vector<std::string>>();
    p.job_cgroup = j.at("job_cgroup").get<std::string>();
    if ((p.cgroup_version != 1 && p.cgroup_version != 2) || p.job_cgroup.empty() || p.mountpoint.empty() ||
        p.mountpoint[0] != '/') {
      throw CudaMpsError("bad containment values");
    }
    for (const auto& c : p.controllers) {
      if (!is_safe_name(c)) throw CudaMpsError("bad containment controller");
    }
    return p;
  } catch (const nlohmann::json::exception&) {
    throw CudaMpsError("field 'containment' is malformed");
  }
}

nlohmann::json DaemonRecord::to_json() const {
  nlohmann::json j = {
      {"schema_version", schema_version},
      {"name", name},
      {"uid", uid},
      {"gid", gid},
      {"host", host},
      {"topology_mode", std::string(to_string(topology_mode))},
      {"gpu_uuids", gpu_uuids},
      {"pipe_directory", pipe_directory},
      {"log_directory", log_directory},
      {"pid", pid},
      {"process_start_ticks", process_start_ticks},
      {"created_at", created_at},
      {"boot_id", boot_id},
      {"state", std::string(to_string(state))},
      {"job_id", job_id ? nlohmann::json(*job_id) : nlohmann::json(nullptr)},
      {"owned_directories", owned_directories},
  };
  j["limits"] = {
      {"active_thread_percentage",
       limits.active_thread_percentage ? nlohmann::json(*limits.active_thread_percentage) : nlohmann::json(nullptr)},
      {"pinned_mem_limit", limits.pinned_mem_limit ? nlohmann::json(*limits.pinned_mem_limit) : nlohmann::json(nullptr)},
  };
  // Only when given: records of jobs without it stay as they were.
  if (limits.client_priority) j["limits"]["client_priority"] = std::string(to_string(*limits.client_priority));
  if (limits.active_thread_share_auto) j["limits"]["active_thread_share"] = "auto";
  if (slurm) {
    nlohmann::json gpus = nlohmann::json::array();
    for (const auto& g : slurm->node_gpus) {
      nlohmann::json gj = {{"gres_index", g.gres_index}, {"device", g.device}, {"minor", g.minor}, {"uuid", g.uuid}};
      if (g.mig) gj["mig"] = g.mig->to_json();  // only for MIG slices: other records stay as they were
      gpus.push_back(std::move(gj));
    }
    j["slurm"] = {{"job_id", slurm->job_id},
                  {"node", slurm->node},
                  {"mode", std::string(to_string(slurm->mode))},
                  {"gres_indices", slurm->gres_indices},
                  {"node_gpus", gpus}};
  } else {
    j["slurm"] = nullptr;
  }
  if (containment) j["containment"] = containment->to_json();  // absent otherwise: older records stay byte-identical
  return j;
}

DaemonRecord DaemonRecord::from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw CudaMpsError("not a JSON object");
  DaemonRecord r;
  r.schema_version = field<int>(j, "schema_version");
  if (r.schema_version != kSchemaVersion) {
    throw CudaMpsError(fmt::format("schema version {} is not supported (this build reads {})", r.schema_version, kSchemaVersion));
  }
  r.name = field<std::string>(j, "name");
  if (!is_safe_name(r.name)) throw CudaMpsError("field 'name' is not a safe name");
  r.uid = field<uid_t>(j, "uid");
  r.gid = field<gid_t>(j, "gid");
  r.host = field<std::string>(j, "host");
  r.topology_mode = enum_field(kTopologyModeNames, j, "topology_mode");
  for (const auto& u : field<std::vector<std::string>>(j, "gpu_uuids")) r.gpu_uuids.push_back(display_gpu_uuid(u));
  if (r.gpu_uuids.empty()) throw CudaMpsError("field 'gpu_uuids' is empty");
  r.pipe_directory = field<std::string>(j, "pipe_directory");
  r.log_directory = field<std::string>(j, "log_directory");
  if (r.pipe_directory.empty() || r.pipe_directory[0] != '/' || r.log_directory.empty() || r.log_directory[0] != '/') {
    throw CudaMpsError("pipe/log directories must be absolute paths");
  }
  r.pid = field<pid_t>(j, "pid");
  r.process_start_ticks = field<uint64_t>(j, "process_start_ticks");
  r.created_at = field<double>(j, "created_at");
  r.boot_id = field<std::string>(j, "boot_id");
  r.state = enum_field(kRecordStateNames, j, "state");
  if (r.state == RecordState::kRunning && r.pid <= 0) throw CudaMpsError("a running record needs a positive pid");
  if (r.pid < 0) throw CudaMpsError("negative pid");
  if (j.contains("job_id") && !j.at("job_id").is_null()) r.job_id = field<std::string>(j, "job_id");
  for (const auto& d : field<std::vector<std::string>>(j, "owned_directories")) {
    if (d.empty() || d[0] != '/' || d.find("/../") != std::string::npos || d.ends_with("/..")) {
      throw CudaMpsError("owned_directories must hold normalized absolute paths");
    }
    r.owned_directories.push_back(d);
  }
  if (j.contains("limits") && j.at("limits").is_object()) {
    const auto& l = j.at("limits");
    if (l.contains("active_thread_percentage") && !l.at("active_thread_percentage").is_null()) {
      r.limits.active_thread_percentage = field<double>(l, "active_thread_percentage");
    }
    if (l.contains("pinned_mem_limit") && !l.at("pinned_mem_limit").is_null()) {
      r.limits.pinned_mem_limit = field<std::string>(l, "pinned_mem_limit");
    }
    if (l.contains("client_priority") && !l.at("client_priority").is_null()) {
      const auto word = field<std::string>(l, "client_priority");
      auto p = kClientPriorityNames.lookup(word);
      if (!p) throw CudaMpsError(fmt::format("limits.client_priority '{}' is not normal or below-normal", word));
      r.limits.client_priority = *p;
    }
    if (l.contains("active_thread_share") && !l.at("active_thread_share").is_null()) {
      const auto word = field<std::string>(l, "active_thread_share");
      if (word != "auto") throw CudaMpsError(fmt::format("limits.active_thread_share '{}' is not auto", word));
      r.limits.active_thread_share_auto = true;
    }
  }
  if (j.contains("slurm") && !j.at("slurm").is_null()) {
    const auto& s = j.at("slurm");
    SlurmBinding b;
    b.job_id = field<std::string>(s, "job_id");
    b.node = field<std::string>(s, "node");
    b.mode = enum_field(kJobModeNames, s, "mode");
    b.gres_indices = field<std::vector<int>>(s, "gres_indices");
    for (const auto& g : field<nlohmann::json>(s, "node_gpus")) {
      NodeGpu n;
      n.gres_index = field<int>(g, "gres_index");
      n.device = field<std::string>(g, "device");
      n.minor = field<int>(g, "minor");
      n.uuid = display_gpu_uuid(field<std::string>(g, "uuid"));
      if (g.contains("mig") && !g.at("mig").is_null()) n.mig = MigSlice::from_json(g.at("mig"));
      b.node_gpus.push_back(n);
    }
    r.slurm = b;
  }
  if (j.contains("containment") && !j.at("containment").is_null()) r.containment = ContainmentPlan::from_json(j.at("containment"));
  return r;
}

RecordStore::RecordStore(std::string root, uid_t owner, gid_t owner_gid, mode_t dir_mode, mode_t file_mode)
    : root_(std::move(root)), owner_(owner), owner_gid_(owner_gid), dir_mode_(dir_mode), file_mode_(file_mode) {}

void RecordStore::write(const DaemonRecord& record) {
  if (!is_safe_name(record.name)) throw CudaMpsError(fmt::format("'{}' is not a valid daemon name", record.name));
  Fd dir = ensure_trusted_dir(root_, owner_, owner_, owner_gid_, dir_mode_);
  write_file_atomic(dir.get(), record_file_name(record.name), record.to_json().dump(2) + "\n", file_mode_);
}

std::optional<DaemonRecord> RecordStore::read(const std::string& name) {
  if (!is_safe_name(name)) throw CudaMpsError(fmt::format("'{}' is not a valid daemon name", name));
  Fd dir = open_trusted_dir_if_exists(root_, owner_, Leaf::kPrivate);
  if (!dir) return std::nullopt;
  std::optional<std::string> text;
  try {
    text = read_owned_file_at(dir.get(), record_file_name(name), owner_);
  } catch (const CudaMpsError& e) {
    throw CudaMpsError(fmt::format("record {}/{} is not trusted ({}); inspect it, then remove it", root_,
                                   record_file_name(name), e.what()));
  }
  if (!text) return std::nullopt;
  try {
    return DaemonRecord::from_json(nlohmann::json::parse(*text));
  } catch (const nlohmann::json::exception& e) {
    throw CudaMpsError(fmt::format("record {}/{} is corrupt ({}); inspect it, then remove it", root_, record_file_name(name),
                                   "invalid JSON"));
  } catch (const CudaMpsError& e) {
    throw CudaMpsError(fmt::format("record {}/{} is corrupt ({}); inspect it, then remove it", root_, record_file_name(name),
                                   e.what()));
  }
}

RecordListing RecordStore::list(std::optional<uid_t> uid, std::optional<std::string> host) {
  RecordListing out;
  Fd dir = open_trusted_dir_if_exists(root_, owner_, Leaf::kPrivate);
  if (!dir) return out;
  for (const auto& file : list_dir(dir.get())) {
    if (file.starts_with(".") || !file.ends_with(".json")) continue;  // temp files of an atomic write
    try {
      auto text = read_owned_file_at(dir.get(), file, owner_);
      if (!text) continue;  // removed meanwhile
      DaemonRecord r = DaemonRecord::from_json(nlohmann::json::parse(*text));
      if (record_file_name(r.name) != file) throw CudaMpsError(fmt::format("its name '{}' does not match the file name", r.name));
      if ((uid && r.uid != *uid) || (host && r.host != *host)) {
        ++out.out_of_scope;
        continue;
      }
      out.records.push_back(std::move(r));
    } catch (const nlohmann::json::exception&) {
      out.problems.push_back({file, "invalid JSON"});
    } catch (const CudaMpsError& e) {
      out.problems.push_back({file, e.what()});
    }
  }
  return out;
}

void RecordStore::remove(const std::string& name) { remove_file(record_file_name(name)); }

void RecordStore::remove_file(const std::string& file) {
  Fd dir = open_trusted_dir_if_exists(root_, owner_, Leaf::kPrivate);
  if (!dir) return;
  if (unlinkat(dir.get(), file.c_str(), 0) != 0 && errno != ENOENT) {
    throw CudaMpsError(fmt::format("cannot remove record {}/{}: {}", root_, file, std::strerror(errno)));
  }
  fsync(dir.get());
}

}  // namespace unilab::mps
