// Value checks of the command table's options (ValueCheck in args.hpp): each
// returns the value as the command will use it, or throws UsageError naming
// the option and the fix. The MPS limits go through the plugin's own parsers
// (common/slurm/slurm_config.hpp), so the CLI and --unilab-mps-threads/-mem accept
// and send exactly the same values.
#pragma once

#include <string>

namespace unilab::mps::cli {

std::string absolute_path_value(const std::string& option, const std::string& value);
std::string seconds_value(const std::string& option, const std::string& value);   // (0, 3600]
std::string integer_value(const std::string& option, const std::string& value);
std::string daemon_name_value(const std::string& option, const std::string& value);
std::string node_name_value(const std::string& option, const std::string& value);
std::string job_id_value(const std::string& option, const std::string& value);
// parse_since (common/slurm/history.hpp): returns epoch seconds.
std::string since_value(const std::string& option, const std::string& value);
std::string requested_sharing_value(const std::string& option, const std::string& value);  // none | mps
// parse_thread_percentage: the plugin's --unilab-mps-threads parser.
std::string thread_percentage_value(const std::string& option, const std::string& value);
// parse_mem_limit: the plugin's --unilab-mps-mem parser; returns its
// normalized MPS spelling (whole MiB, e.g. 8G -> 8192M).
std::string mem_limit_value(const std::string& option, const std::string& value);

}  // namespace unilab::mps::cli
