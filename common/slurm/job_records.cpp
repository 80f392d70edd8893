// Record and run-dir names of a job's daemons, and the trust scan of its
// records (every field must agree with the job, or the record is not acted on).
#include "common/slurm/job.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <set>
#include <string_view>

#include <fmt/format.h>

#include "common/mps/errors.hpp"
#include "common/mps/gpu.hpp"
#include "common/mps/mps_control.hpp"
#include "common/mps/nvidia_checks.hpp"
#include "common/mps/safefs.hpp"
#include "common/mps/topology.hpp"
#include "common/slurm/containment.hpp"
#include "common/slurm/gres.hpp"
#include "common/slurm/slurm_conf_path.hpp"

namespace unilab::mps {

namespace {

// "job<ID>.<node>.": what every record name of the job on the node starts with.
std::string record_name_prefix(const std::string& job_id, const std::string& node) { return fmt::format("job{}.{}.", job_id, node); }


std::string disagreement(const DaemonRecord& r, const std::string& job_id, const std::string& node, std::optional<uid_t> uid,
                         const std::optional<std::string>& run_dir) {
  if (r.job_id != job_id || !r.slurm || r.slurm->job_id != job_id) return fmt::format("it does not name job {}", job_id);
  if (r.host != node || r.slurm->node != node) return fmt::format("it names host '{}', not node {}", r.host, node);
  if (uid && r.uid != *uid) return fmt::format("it names uid {}, not the job's uid {}", r.uid, *uid);
  if (run_dir) {
    // The prolog lays every daemon out as run_dir/<entry>/{pipe,log} and owns
    // exactly run_dir/<entry> (job_run_entry, or the record's own name where
    // earlier code wrote it). Anything else did not come from it, and root
    // must never remove, or send a daemon's commands to, what it names.
    const std::string suffix = r.name.substr(record_name_prefix(job_id, node).size());
    const DaemonDirectories mine = daemon_directories(*run_dir, job_run_entry(job_id, node, suffix));
    const DaemonDirectories legacy = daemon_directories(*run_dir, r.name);
    const DaemonDirectories& want = r.owned_directories == std::vector<std::string>{legacy.root} ? legacy : mine;
    if (r.owned_directories != std::vector<std::string>{want.root}) {
      return fmt::format("its owned_directories [{}] are not exactly {}", join(r.owned_directories, ", "), mine.root);
    }
    if (r.pipe_directory != want.pipe || r.log_directory != want.log) {
      return fmt::format("its pipe/log directories {} and {} are not {} and {}", r.pipe_directory, r.log_directory, want.pipe,
                         want.log);
    }
  }
  return {};
}

}  // namespace

JobRecordScan scan_job_records(RecordStore& store, const std::string& job_id, const std::string& node, std::optional<uid_t> uid,
                               const std::optional<std::string>& run_dir) {
  JobRecordScan out;
  RecordListing listing = store.list(std::nullopt, std::nullopt);
  for (auto& r : listing.records) {
    if (!is_job_daemon_name(r.name, job_id, node)) continue;
    std::string why = disagreement(r, job_id, node, uid, run_dir);
    if (why.empty()) {
      out.trusted.push_back(std::move(r));
    } else {
      out.untrusted.push_back({record_file_name(r.name), why});
    }
  }
  for (auto& p : listing.problems) {
    const std::string ext = record_file_name("");
    if (p.file.ends_with(ext) && is_job_daemon_name(p.file.substr(0, p.file.size() - ext.size()), job_id, node)) {
      out.untrusted.push_back(std::move(p));
    }
  }
  return out;
}

RecordStore slurm_record_store(const PluginConfig& cfg) { return RecordStore(cfg.state_dir, 0, 0, 0755, 0644); }

std::string job_daemon_name(const std::string& job_id, const std::string& node, const std::string& suffix) {
  std::string name = fmt::format("job{}.{}.{}", job_id, node, suffix);
  if (!is_safe_name(name)) {
    throw CudaMpsError(fmt::format("cannot name a daemon for job {} on node '{}': the node name has unsupported characters",
                                   job_id, node));
  }
  return name;
}

DaemonSpec job_daemon_spec(const JobContext& job, const std::string& suffix) {
  DaemonSpec spec;
  spec.name = job_daemon_name(job.job_id, job.node, suffix);
  spec.uid = job.uid;
  spec.gid = job.gid;
  spec.host = job.node;
  spec.job_id = job.job_id;
  return spec;
}

namespace {

// "gpuN" (N decimal digits) or "multi": the suffixes a record name may end in.
bool is_daemon_suffix(std::string_view suffix) {
  if (suffix == "multi") return true;
  if (!suffix.starts_with("gpu") || suffix.size() == 3) return false;
  return std::all_of(suffix.begin() + 3, suffix.end(), [](unsigned char c) { return std::isdigit(c); });
}

// Three base-62 characters of the node name's FNV-1a hash (about 238,000
// values): apart only the nodes of one host, which are few.
std::string node_tag(const std::string& node) {
  static constexpr std::string_view kDigits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  uint32_t h = 2166136261u;
  for (unsigned char c : node) h = (h ^ c) * 16777619u;
  std::string tag(3, '0');
  for (auto& c : tag) {
    c = kDigits[h % kDigits.size()];
    h /= static_cast<uint32_t>(kDigits.size());
  }
  return tag;
}

}  // namespace

bool is_job_daemon_name(const std::string& name, const std::string& job_id, const std::string& node) {
  const std::string prefix = record_name_prefix(job_id, node);
  return name.starts_with(prefix) && is_daemon_suffix(std::string_view(name).substr(prefix.size()));
}

std::string job_run_entry(const std::string& job_id, const std::string& node, const std::string& suffix) {
  if (!is_daemon_suffix(suffix)) throw CudaMpsError(fmt::format("'{}' is not a daemon suffix (gpuN or multi)", suffix));
  const std::string_view shown = suffix == "multi" ? std::string_view("m") : std::string_view(suffix).substr(3);
  std::string entry = fmt::format("{}.{}.{}", job_id, shown, node_tag(node));
  if (!is_safe_name(entry)) throw CudaMpsError(fmt::format("cannot name a run-dir entry for job '{}'", job_id));
  return entry;
}

std::optional<std::string> job_run_entry_suffix(const std::string& entry, const std::string& job_id, const std::string& node) {
  if (is_job_daemon_name(entry, job_id, node)) return entry.substr(record_name_prefix(job_id, node).size());
  const std::string prefix = job_id + ".";
  const std::string tail = "." + node_tag(node);
  if (!entry.starts_with(prefix) || !entry.ends_with(tail) || entry.size() <= prefix.size() + tail.size()) return std::nullopt;
  const std::string shown = entry.substr(prefix.size(), entry.size() - prefix.size() - tail.size());
  std::string suffix = shown == "m" ? "multi" : "gpu" + shown;
  if (!is_daemon_suffix(suffix) || job_run_entry(job_id, node, suffix) != entry) return std::nullopt;
  return suffix;
}

size_t max_run_dir_length() {
  const std::string worst = "/" + job_run_entry("4294967295", "n", "gpu999") + "/" + kPipeLeaf;
  return max_pipe_directory_length() - worst.size();
}

std::vector<DaemonRecord> job_records(RecordStore& store, const std::string& job_id, const std::string& node,
                                      std::optional<uid_t> uid, std::vector<std::string>* problems,
                                      const std::optional<std::string>& run_dir) {
  JobRecordScan scan = scan_job_records(store, job_id, node, uid, run_dir);
  if (problems != nullptr) {
    for (const auto& p : scan.untrusted) problems->push_back(fmt::format("record {}/{} ignored: {}", store.root(), p.file, p.reason));
  }
  return std::move(scan.trusted);
}

std::vector<std::string> job_nodes_in_store(RecordStore& store, const std::string& job_id, uid_t uid) {
  std::vector<std::string> nodes;
  for (const auto& r : store.list(uid, std::nullopt).records) {
    if (r.job_id != job_id || !r.slurm) continue;
    if (std::find(nodes.begin(), nodes.end(), r.slurm->node) == nodes.end()) nodes.push_back(r.slurm->node);
  }
  return nodes;
}

}  // namespace unilab::mps
