// The modes a daemon is started in, each an enum with its one string table
// (the words records, JSON, status and messages hold).
#pragma once

#include <string>
#include <vector>

#include "common/mps/string_table.hpp"

namespace unilab::mps {

// How a Slurm job asked for its daemons: one per GPU (auto) or one for all
// of its GPUs on the node (multi). Recorded as the binding's `mode`.
enum class JobMode { kAuto, kMulti };
inline constexpr StringTable<JobMode, 2> kJobModeNames{{"auto", "multi"}};
inline std::string_view to_string(JobMode m) { return kJobModeNames.name(m); }

// Which tasks a daemon serves (a record's `topology_mode`): one GPU; one
// task using several GPUs; one task per GPU, each daemon serving one.
enum class TopologyMode { kSingle, kSingleTaskMulti, kPerGpu };
inline constexpr StringTable<TopologyMode, 3> kTopologyModeNames{{"single_gpu", "single_task_multi_gpu", "task_per_gpu"}};
inline std::string_view to_string(TopologyMode m) { return kTopologyModeNames.name(m); }
// Every topology mode's word, in table order (status's compatible_topology_modes).
inline std::vector<std::string> topology_mode_words() { return {kTopologyModeNames.names.begin(), kTopologyModeNames.names.end()}; }

// The MPS client priority of a job's tasks (CUDA_MPS_CLIENT_PRIORITY, read
// by each client when it starts): NVIDIA's two levels, 0 (normal, the
// default) and 1 (below normal). Recorded in a record's limits by word.
enum class ClientPriority { kNormal, kBelowNormal };
inline constexpr StringTable<ClientPriority, 2> kClientPriorityNames{{"normal", "below-normal"}};
inline std::string_view to_string(ClientPriority p) { return kClientPriorityNames.name(p); }
// The value CUDA_MPS_CLIENT_PRIORITY takes.
inline const char* client_priority_value(ClientPriority p) { return p == ClientPriority::kNormal ? "0" : "1"; }

}  // namespace unilab::mps
