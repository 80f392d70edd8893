// What a prolog/epilog reads from its environment (Slurm variables and the
// SPANK option variables, which a crafted job submission controls).
// Input: KEY=VALUE lines.
#include <map>

#include "common/mps/errors.hpp"
#include "common/slurm/job.hpp"
#include "fuzz_util.hpp"

using namespace unilab::mps;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::map<std::string, std::string> vars;
  for (const auto& line : fuzz::split_any(fuzz::as_text(data, size), std::string_view("\n\0", 2))) {
    auto eq = line.find('=');
    if (eq != std::string::npos) vars[line.substr(0, eq)] = line.substr(eq + 1);
  }
  Getenv env = [&](const char* key) -> std::optional<std::string> {
    auto it = vars.find(key);
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
  PluginConfig cfg;
  cfg.max_threads = 80;
  cfg.max_mem_bytes = 1ULL << 36;
  try {
    JobContext j = job_context_from_env(env);
    if (j.job_id.empty()) fuzz::invariant_failed();
    // A record name built from hostile input is either safe or refused.
    try {
      std::string n = job_daemon_name(j.job_id, j.node, "gpu0");
      if (n.find('/') != std::string::npos || n.find("..") == 0) fuzz::invariant_failed();
    } catch (const CudaMpsError&) {
    }
  } catch (const CudaMpsError&) {
  }
  try {
    auto req = job_request_from_env(env, cfg);
    if (req && req->mode != JobMode::kAuto && req->mode != JobMode::kMulti) fuzz::invariant_failed();
  } catch (const CudaMpsError&) {
  }
  return 0;
}
