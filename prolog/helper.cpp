#include "prolog/helper.hpp"

#include <cstdio>

#include "common/mps/errors.hpp"
#include "common/mps/gpu.hpp"
#include "common/mps/safefs.hpp"
#include "common/slurm/job.hpp"
#include "common/slurm/job_hook.hpp"
#include "common/slurm/job_logs.hpp"
#include "common/slurm/slurm_config.hpp"

namespace unilab::mps::helper {
namespace {

HookLog stderr_log(const char* who) {
  auto line = [who](const std::string& m) { std::fprintf(stderr, "%s: %s\n", who, m.c_str()); };
  return {line, line};
}

void append_config_file(const std::string& path, std::vector<std::string>& out) {
  if (path.empty() || path[0] != '/') throw CudaMpsError("--config needs an absolute path");
  auto [dir, file] = split_parent(path);
  Fd d = open_trusted_dir(dir, 0);
  auto text = read_file_at(d.get(), file, 1 << 16);
  if (!text) throw CudaMpsError(path + " does not exist");
  for (auto& arg : plugin_args_from_config(*text, path)) out.push_back(std::move(arg));
}

}  // namespace

std::vector<std::string> collect_arguments(const std::vector<std::string>& argv) {
  std::vector<std::string> out;
  for (size_t i = 0; i < argv.size(); ++i) {
    if (argv[i] != "--config") {
      out.push_back(argv[i]);
    } else if (i + 1 >= argv.size()) {
      throw CudaMpsError("--config needs a file");
    } else {
      append_config_file(argv[++i], out);
    }
  }
  return out;
}

int run_prolog(const std::vector<std::string>& argv) {
  return run_prolog_hook(process_getenv(), [&] { return collect_arguments(argv); }, stderr_log("unilab-mps-prolog")) ? 0 : 1;
}

int run_epilog(const std::vector<std::string>& argv) {
  return run_epilog_hook(process_getenv(), [&] { return collect_arguments(argv); }, stderr_log("unilab-mps-epilog")) ? 0 : 1;
}

}  // namespace unilab::mps::helper
