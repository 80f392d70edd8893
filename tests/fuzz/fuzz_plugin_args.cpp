// plugstack.conf arguments (split on blanks, as slurmd passes argv) and the
// per-job option values (--unilab-mps, --unilab-mps-threads, --unilab-mps-mem).
#include "common/mps/errors.hpp"
#include "common/slurm/slurm_config.hpp"
#include "fuzz_util.hpp"

using namespace unilab::mps;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // argv strings never hold NUL: split on it too.
  auto args = fuzz::split_any(fuzz::as_text(data, size), std::string_view(" \t\n\0", 4));
  try {
    PluginConfig cfg = parse_plugin_args(args);
    if (cfg.start_timeout.count() <= 0 || cfg.stop_timeout.count() <= 0) fuzz::invariant_failed();
  } catch (const CudaMpsError&) {
  }
  // Each refused value costs an exception; a few dozen values per input keep
  // the target fast (a real option has one value).
  for (size_t i = 0; i < args.size() && i < 32; ++i) {
    const std::string& a = args[i];
    try {
      std::string m = parse_mode(a.c_str());
      if (m != "auto" && m != "multi") fuzz::invariant_failed();
    } catch (const CudaMpsError&) {
    }
    try {
      double p = parse_thread_percentage(a, 50.0);
      if (!(p > 0 && p <= 50.0)) fuzz::invariant_failed();
    } catch (const CudaMpsError&) {
    }
    try {
      std::string m = parse_mem_limit(a, 1ULL << 40);
      if (m.empty() || m.back() != 'M') fuzz::invariant_failed();
    } catch (const CudaMpsError&) {
    }
  }
  return 0;
}
