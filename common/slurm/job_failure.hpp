// Why a job's prolog failed on a node, kept so the job's tasks can tell the
// user (the slurmd log, where the prolog reports it, is the admin's).
//
// One file per job and node beside the Slurm record store:
// <state_dir>/prolog-failures/job<ID>.<node>.prolog-failure, one line,
// written atomically by root, mode 0600 in a 0700 directory. Not readable
// like the records: the reason can name the job's GPUs and quote its
// daemon's log, and no other user may read it. The
// task side reads it while slurmstepd is still root (task_init_privileged),
// and trusts it only as a root-owned, not group/other-writable file in a
// directory that passes the record store's trust walk. The prolog removes a
// stale one before it starts (a requeued job), the epilog removes it.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>

namespace unilab::mps {

std::string prolog_failure_file(const std::string& job_id, const std::string& node);

// The reason as kept: one line, control bytes escaped, at most 400 bytes.
std::string prolog_failure_line(const std::string& reason);

// Writes the reason (prolog_failure_line of it). `owner` is the store owner
// (root for Slurm). Throws CudaMpsError.
void keep_prolog_failure(const std::string& state_dir, uid_t owner, const std::string& job_id, const std::string& node,
                         const std::string& reason);

// The kept reason; nullopt when none. A file that is not the owner's, or is
// group/other writable, or sits in an untrusted directory, throws
// CudaMpsError and is never believed.
std::optional<std::string> read_prolog_failure(const std::string& state_dir, uid_t owner, const std::string& job_id,
                                               const std::string& node);

// Every reason kept for this job on this host, by node name (several
// slurmd may share a host and its state dir). For the task side, which reads
// while still root but before Slurm has put SLURMD_NODENAME in the task's
// environment. Throws CudaMpsError like read_prolog_failure.
std::map<std::string, std::string> read_job_prolog_failures(const std::string& state_dir, uid_t owner, const std::string& job_id);

// Removes it; missing is fine. Throws CudaMpsError when it cannot.
void clear_prolog_failure(const std::string& state_dir, uid_t owner, const std::string& job_id, const std::string& node);

// What the task says when no daemon was started for it and the prolog kept
// a reason.
std::string prolog_failure_message(const std::string& job_id, const std::string& node, const std::string& reason);

}  // namespace unilab::mps
