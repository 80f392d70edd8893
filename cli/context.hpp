// What every command works with: the system seams, the NVIDIA tools and the
// caller's record store, from flags, then environment, then defaults.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <optional>
#include <string>

#include "cli/args.hpp"
#include "common/mps/daemon.hpp"
#include "common/mps/record.hpp"
#include "common/mps/status.hpp"

namespace unilab::mps::cli {

// getenv(3) as an optional.
std::optional<std::string> getenv_opt(const char* key);

// The caller's own records: $XDG_STATE_HOME/unilab-mps, else
// ~/.local/state/unilab-mps (HOME, else the passwd entry).
std::string default_user_state_dir();

// Pipe/log parent: $XDG_RUNTIME_DIR/unilab-mps, else /tmp/unilab-mps-UID.
std::string default_user_run_dir(uid_t uid);

struct Context {
  SystemServices sys;
  SystemRunner& runner{sys.runner};
  SystemProcReader& proc{sys.proc};
  Services& services{sys.services};
  Tools tools;
  std::string state_dir;
  std::string run_dir;
  uid_t uid = getuid();
  gid_t gid = getgid();
  std::string host = current_host();
  bool json = false;

  explicit Context(const ParsedArgs& a);
  // The caller's store: owned by the caller, 0700/0600.
  RecordStore store() const { return RecordStore(state_dir, uid, gid, 0700, 0600); }
};

// The caller's view: its mask, its pipe directory, its own records on this host.
StatusQuery caller_query(const Context& c);

}  // namespace unilab::mps::cli
