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

}  // namespace unilab::mps
