// `unilab-mps probe`: validate (mps) or record (none) one rank's CUDA
// process-sharing state; optionally record it in a runtime manifest.
#include <unistd.h>

#include <charconv>
#include <iostream>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "common/mps/probe.hpp"

namespace unilab::mps::cli {
namespace {

// A value the table declared required (parse_args enforced it).
std::string required(const ParsedArgs& a, const std::string& key) { return a.value(key).value_or(""); }

// --rank/--world-size: checked to be integers by the table.
int int_option(const ParsedArgs& a, const std::string& key, int def) {
  auto v = a.value(key);
  return v ? std::stoi(*v) : def;
}

// Human output: one `key: value` per line, in the `cuda_process_sharing` manifest's field order.
void print_human(const nlohmann::json& j) {
  static const char* const kOrder[] = {
      "configured",       "effective",          "validated",          "rank",           "world_size",
      "learner_device",   "collector_device",   "learner_gpu_uuid",   "collector_gpu_uuid",
      "pipe_directory_env", "pipe_directory",   "control_pipe",       "control_pipe_kind", "server_pid",
      "ambient_server"};
  for (const char* key : kOrder) {
    const auto& v = j.at(key);
    std::cout << key << ": " << (v.is_string() ? v.get<std::string>() : v.dump()) << "\n";
  }
}

}  // namespace

int cmd_probe(Context& c, const ParsedArgs& a) {
  const std::string& nvidia_smi = c.tools.nvidia_smi;
  const std::string& mps_control = c.tools.mps_control;
  std::optional<std::string> requested;
  if (required(a, "--requested") == "mps") requested = "mps";  // else none (the table allows only these)
  std::string learner = required(a, "--learner-device");
  std::string backend = required(a, "--backend");
  auto collector = a.value("--collector-device");
  int rank = int_option(a, "--rank", 0);
  int world_size = int_option(a, "--world-size", 1);
  if (!requested && (world_size < 1 || rank < 0 || rank >= world_size)) {
    // `none` never fails on the ambient state, but the manifest is keyed by
    // rank: a rank outside 0..world_size-1 is a bad command line.
    throw UsageError(fmt::format("--rank {} with --world-size {}: need world size >= 1 and 0 <= rank < world size", rank,
                                 world_size));
  }

  SystemRunner& runner = c.runner;
  VisibleDevicesResolver devices(runner, nvidia_smi);
  ProbeHost host{.proc = c.proc, .mps_control = mps_control, .nvidia_smi = nvidia_smi};
  // A failed explicit request throws CudaMpsError: main prints it, exit 1.
  CudaProcessSharingEvidence ev =
      probe_cuda_process_sharing(requested, learner, collector, backend, rank, world_size, devices, runner, host);
  // Record first, so that output on stdout means the manifest holds it too.
  if (auto manifest = a.value("--manifest")) update_manifest_file(*manifest, ev);
  if (c.json) {
    std::cout << ev.to_json().dump(2) << "\n";
  } else {
    print_human(ev.to_json());
  }
  return kExitOk;
}

}  // namespace unilab::mps::cli
