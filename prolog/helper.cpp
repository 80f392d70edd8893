#include "prolog/helper.hpp"

#include <fcntl.h>

#include <cstdio>
#include <exception>

#include "common/errors.hpp"
#include "common/gpu.hpp"
#include "common/job.hpp"
#include "common/job_logs.hpp"
#include "common/safefs.hpp"

namespace unilab::mps::helper {
namespace {

void log(const char* who, const std::string& msg) { std::fprintf(stderr, "%s: %s\n", who, msg.c_str()); }


}  // namespace

std::vector<std::string> collect_arguments(const std::vector<std::string>& argv) {
  std::vector<std::string> out;
  for (size_t i = 0; i < argv.size(); ++i) {
    if (argv[i] == "--config") {
      if (i + 1 >= argv.size()) throw CudaMpsError("--config needs a file");
      const std::string& path = argv[++i];
      if (path.empty() || path[0] != '/') throw CudaMpsError("--config needs an absolute path");
      auto [dir, file] = split_parent(path);
      Fd d = open_trusted_dir(dir, 0);
      auto text = read_file_at(d.get(), file, 1 << 16);
      if (!text) throw CudaMpsError(path + " does not exist");
      size_t pos = 0;
      while (pos < text->size()) {
        size_t end = text->find('\n', pos);
        if (end == std::string::npos) end = text->size();
        std::string line = text->substr(pos, end - pos);
        pos = end + 1;
        if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
        while (!line.empty() && (line.back() == ' ' || line.back() == '\t' || line.back() == '\r')) line.pop_back();
        size_t start = line.find_first_not_of(" \t");
        if (start == std::string::npos) continue;
        out.push_back(line.substr(start));
      }
    } else {
      out.push_back(argv[i]);
    }
  }
  return out;
}

int run_prolog(const std::vector<std::string>& argv) {
  const char* who = "unilab-mps-prolog";
  Getenv env = process_getenv();
  try {
    PluginConfig cfg = parse_plugin_args(collect_arguments(argv));
    auto req = job_request_from_env(env, cfg);
    if (!req) return 0;
    JobContext job = job_context_from_env(env);
    SystemServices sys;
    Services& s = sys.services;
    PrologOutcome out = run_job_prolog(s, cfg, job, *req);
    for (const auto& w : out.warnings) log(who, w);
    if (!out.note.empty()) log(who, out.note);
    for (const auto& r : out.started) {
      log(who, "job " + job.job_id + ": started MPS daemon " + r.name + " (pid " + std::to_string(r.pid) + ") on " +
                   join(r.gpu_uuids, ","));
    }
    return 0;
  } catch (const std::exception& e) {
    log(who, std::string("job ") + env("SLURM_JOB_ID").value_or("?") + " prolog failed: " + e.what());
    return 1;
  }
}

int run_epilog(const std::vector<std::string>& argv) {
  const char* who = "unilab-mps-epilog";
  Getenv env = process_getenv();
  try {
    PluginConfig cfg = parse_plugin_args(collect_arguments(argv));
    JobContext job = job_context_from_env(env);
    SystemServices sys;
    Services& s = sys.services;
    for (const auto& line : epilog_log_report(cfg, job, job_end_from_env(env))) log(who, line);
    EpilogOutcome out = run_job_epilog(s, cfg, job);
    for (const auto& r : out.stopped) log(who, "job " + job.job_id + ": daemon " + r.name + ": " + std::string(to_string(r.outcome)));
    for (const auto& w : out.warnings) log(who, w);
    for (const auto& e : out.errors) log(who, "epilog failed: " + e);
    return out.ok() ? 0 : 1;
  } catch (const std::exception& e) {
    log(who, std::string("job ") + env("SLURM_JOB_ID").value_or("?") + " epilog: " + e.what());
    return 1;
  }
}

}  // namespace unilab::mps::helper
