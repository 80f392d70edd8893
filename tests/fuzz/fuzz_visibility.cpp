// CUDA_VISIBLE_DEVICES masks and GPU selectors against a fixed GPU table:
// visible_gpus, resolve_topology, resolve_mps_visibility_entries, UUID
// spelling. Input: "<mask>\n<selector>" (a missing line means unset).
#include "common/mps/errors.hpp"
#include "common/mps/gpu.hpp"
#include "common/mps/topology.hpp"
#include "fuzz_util.hpp"

using namespace unilab::mps;

namespace {

const std::vector<GpuIdentity>& table() {
  static const std::vector<GpuIdentity> t = {
      {0, "GPU-7fdaf0a5-179b-f636-d15d-daf243e3ff16", 2, "00000000:85:00.0", "NVIDIA H200", "Exclusive_Process", "Disabled"},
      {1, "GPU-7fdaf0a5-1111-2222-3333-444455556666", 0, "00000000:05:00.0", "NVIDIA H200", "Exclusive_Process", "Disabled"},
      {2, "GPU-3c8a1d5e-94b2-4f7e-8a61-0b2c9d4e5f60", 3, "00000000:C5:00.0", "NVIDIA H200", "Exclusive_Process", "Disabled"},
      {3, "GPU-0f1e2d3c-4b5a-4697-8877-66554433aa10", 1, "00000000:45:00.0", "NVIDIA H200", "Exclusive_Process", "Disabled"},
  };
  return t;
}

template <typename F>
void expect_clean(F&& f) {
  try {
    f();
  } catch (const CudaMpsError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto lines = fuzz::split_any(fuzz::as_text(data, size), "\n");
  std::optional<std::string> mask, selector;
  if (!lines.empty() && lines[0] != "<unset>") mask = lines[0];
  if (lines.size() > 1) selector = lines[1];
  const auto& gpus = table();

  expect_clean([&] {
    auto v = visible_gpus(mask, gpus);
    if (v.size() > gpus.size()) fuzz::invariant_failed();
  });
  expect_clean([&] {
    TopologyPlan p = resolve_topology(selector, mask, gpus);
    if (p.gpus.empty()) fuzz::invariant_failed();
    (void)default_daemon_name(p.gpus);
  });
  if (mask) {
    expect_clean([&] {
      auto out = resolve_mps_visibility_entries(split_mask(*mask), gpus);
      // Numeric entries become UUIDs; nothing else changes, nothing is lost.
      if (out.size() != split_mask(*mask).size()) fuzz::invariant_failed();
    });
  }
  for (const auto& l : lines) {
    expect_clean([&] {
      std::string c = canonicalize_gpu_uuid(l);
      if (canonicalize_gpu_uuid(display_gpu_uuid(l)) != c) fuzz::invariant_failed();
      if (!looks_like_gpu_uuid(l)) fuzz::invariant_failed();
    });
  }
  return 0;
}
