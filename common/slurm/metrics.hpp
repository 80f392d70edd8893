// `unilab-mps metrics`: the node's job MPS daemons as OpenMetrics text, for
// node_exporter's textfile collector (or any scraper), labelled by job,
// user, node, daemon and GPU UUID, so a GPU's DCGM metrics (labelled by the
// same UUID) can be joined to the job and user whose MPS server uses it.
//
// It reads the plugin's records and /proc only: it never asks a user's
// daemon anything (root talking to a user's socket would trust the user's
// process), and never runs nvidia-smi. Families (gauges, one sample per
// GPU of each daemon where labelled by gpu_uuid):
//   unilab_mps_daemons                      records on this node
//   unilab_mps_records_unreadable           record files it could not use
//   unilab_mps_daemon_up                    1 while the recorded process runs (identity verified)
//   unilab_mps_daemon_start_time_seconds    when the prolog started it (record)
//   unilab_mps_servers                      its MPS server processes (children in /proc)
//   unilab_mps_bound_processes              processes of the job's user whose environment
//                                           names its pipe directory (the tasks bound to it and
//                                           their children: its clients are among them; which
//                                           are connected only the daemon can say)
//   unilab_mps_active_thread_percentage     the daemon's default, when the job set one
//   unilab_mps_pinned_memory_limit_bytes    likewise, per GPU
//   unilab_mps_client_priority              CUDA_MPS_CLIENT_PRIORITY of the job's tasks, when set
//   unilab_mps_faults                       server faults recorded for it (job_faults.hpp)
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "common/mps/proc.hpp"
#include "common/slurm/slurm_config.hpp"

namespace unilab::mps {

// The exposition, ending in "# EOF". `node` scopes the records (the Slurm
// node name); `user_of` names a uid (getpwuid on the real node).
std::string node_metrics(ProcReader& proc, const PluginConfig& cfg, const std::string& node,
                         const std::function<std::string(uid_t)>& user_of);

// A label value as OpenMetrics writes it: \\, \" and \n escaped.
std::string metric_label_value(std::string_view v);

}  // namespace unilab::mps
