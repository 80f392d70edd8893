// The CLI's own defaults (cli/context.cpp): where a user's records and
// daemon directories go when no flag or variable says.
#include "cli/context.hpp"

#include "cli/commands.hpp"

#include <gtest/gtest.h>

namespace unilab::mps::cli {
namespace {

// Sets a variable for one test and restores it afterwards.
class ScopedEnv {
 public:
  ScopedEnv(const char* key, const char* value) : key_(key) {
    if (const char* v = getenv(key)) old_ = v;
    if (value != nullptr) setenv(key, value, 1); else unsetenv(key);
  }
  ~ScopedEnv() {
    if (old_) setenv(key_, old_->c_str(), 1); else unsetenv(key_);
  }

 private:
  const char* key_;
  std::optional<std::string> old_;
};

TEST(CliContext, UserStateDirFollowsXdgStateHomeThenHome) {
  ScopedEnv home("HOME", "/home/u");
  {
    ScopedEnv xdg("XDG_STATE_HOME", "/x/state");
    EXPECT_EQ(default_user_state_dir(), "/x/state/unilab-mps");
  }
  {
    ScopedEnv xdg("XDG_STATE_HOME", "relative");  // not absolute: ignored
    EXPECT_EQ(default_user_state_dir(), "/home/u/.local/state/unilab-mps");
  }
  ScopedEnv xdg("XDG_STATE_HOME", nullptr);
  EXPECT_EQ(default_user_state_dir(), "/home/u/.local/state/unilab-mps");
}

TEST(CliContext, UserRunDirFollowsXdgRuntimeDirThenTmp) {
  {
    ScopedEnv xdg("XDG_RUNTIME_DIR", "/run/user/1000");
    EXPECT_EQ(default_user_run_dir(1000), "/run/user/1000/unilab-mps");
  }
  ScopedEnv xdg("XDG_RUNTIME_DIR", "rel");
  EXPECT_EQ(default_user_run_dir(1000), "/tmp/unilab-mps-1000");
}

TEST(CliContext, FlagsBeatEnvironmentAndRelativeEnvironmentIsRefused) {
  ScopedEnv sd("UNILAB_MPS_STATE_DIR", "/env/state");
  ScopedEnv smi("UNILAB_MPS_NVIDIA_SMI", "/env/nvidia-smi");
  Context c(parse_command_line({"status", "--state-dir", "/flag/state"}));
  EXPECT_EQ(c.state_dir, "/flag/state");
  EXPECT_EQ(c.tools.nvidia_smi, "/env/nvidia-smi");
  ScopedEnv rel("UNILAB_MPS_RUN_DIR", "relative/run");
  EXPECT_THROW(Context(parse_command_line({"status"})), UsageError);
}

}  // namespace
}  // namespace unilab::mps::cli
