// gres.conf text, Slurm hostlists and GPU index lists (SLURM_JOB_GPUS).
// Input: "<node name>\n<gres.conf text...>".
#include "common/mps/errors.hpp"
#include "common/slurm/gres.hpp"
#include "fuzz_util.hpp"

using namespace unilab::mps;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text = fuzz::as_text(data, size);
  size_t nl = text.find('\n');
  std::string node(text.substr(0, nl == std::string_view::npos ? text.size() : nl));
  std::string_view rest = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
  try {
    GresConf c = parse_gres_conf(rest, node);
    (void)c;
  } catch (const CudaMpsError&) {
  }
  try {
    (void)expand_hostlist(node);
  } catch (const CudaMpsError&) {
  }
  try {
    for (int i : parse_gpu_index_list(node)) {
      if (i < 0 || i > 4096) fuzz::invariant_failed();
    }
  } catch (const CudaMpsError&) {
  }
  return 0;
}
