// Where the NVIDIA tools are: the one struct the daemon lifecycle, the
// plugin's configuration and the CLI share.
#pragma once

#include <optional>
#include <string>

namespace unilab::mps {

// Absolute paths of the NVIDIA tools (no PATH lookup, ever).
// `driver_dir` (plugin driver_dir=, CLI --driver-dir): where the driver keeps
// bin/ and lib64/ when that is not /usr/bin and the linker path; the tools
// then run with tool_environment(driver_dir) (runner.hpp) and, unless given
// explicitly, are looked for in <driver_dir>/bin (nvidia_checks.hpp).
// `driver_proc` (plugin driver_proc=, CLI --driver-proc): where the kernel
// module shows itself, /proc/driver: nvidia/gpus/<bus>/information (each
// GPU's device minor, which nvidia-smi 580 no longer has as a query field)
// and nvidia-caps/mig-minors (the capability minors of MIG instances).
struct Tools {
  std::string nvidia_smi = "/usr/bin/nvidia-smi";
  std::string mps_control = "/usr/bin/nvidia-cuda-mps-control";
  std::optional<std::string> driver_dir;
  std::string driver_proc = "/proc/driver";
};

}  // namespace unilab::mps
