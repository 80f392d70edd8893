// parse_nvidia_smi_query on arbitrary nvidia-smi output (a broken driver or
// a wrong binary can print anything).
#include "common/mps/errors.hpp"
#include "common/mps/gpu.hpp"
#include "fuzz_util.hpp"

using namespace unilab::mps;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<GpuIdentity> gpus;
  try {
    gpus = parse_nvidia_smi_query(fuzz::as_text(data, size));
  } catch (const CudaMpsError&) {
    return 0;
  }
  // Accepted rows: display-form UUIDs, distinct indices and UUIDs.
  for (size_t i = 0; i < gpus.size(); ++i) {
    if (display_gpu_uuid(gpus[i].uuid) != gpus[i].uuid) fuzz::invariant_failed();
    for (size_t k = i + 1; k < gpus.size(); ++k) {
      if (gpus[i].index == gpus[k].index || gpus[i].uuid == gpus[k].uuid) fuzz::invariant_failed();
    }
  }
  return 0;
}
