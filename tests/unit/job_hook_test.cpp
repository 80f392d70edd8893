#include "common/slurm/job_hook.hpp"

#include <unistd.h>

#include <gtest/gtest.h>

#include <map>

#include "common/slurm/job_failure.hpp"
#include "tests/unit/doubles.hpp"

namespace unilab::mps {
namespace {

using test::TempDir;
using Strings = std::vector<std::string>;

const std::string kOpt = "SPANK__SLURM_SPANK_OPTION_unilab_mps_unilab_mps";

struct Hook {
  std::map<std::string, std::string> vars{{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_UID", std::to_string(getuid())},
                                          {"SLURM_JOB_GID", std::to_string(getgid())}, {"SLURMD_NODENAME", "n1"}};
  Strings args;
  int args_read = 0;
  Strings info, errors;

  Getenv env() {
    return [this](const char* k) -> std::optional<std::string> {
      auto it = vars.find(k);
      return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
    };
  }
  HookArguments arguments() {
    return [this] {
      ++args_read;
      return args;
    };
  }
  HookLog log() {
    return {[this](const std::string& m) { info.push_back(m); }, [this](const std::string& m) { errors.push_back(m); }};
  }
  bool prolog() { return run_prolog_hook(env(), arguments(), log()); }
  bool epilog() { return run_epilog_hook(env(), arguments(), log()); }
};

TEST(PrologHook, AJobThatDidNotAskNeverHasTheConfigurationRead) {
  Hook h;
  h.args = {"bogus_key=1"};
  EXPECT_TRUE(h.prolog());
  EXPECT_EQ(h.args_read, 0);
  EXPECT_TRUE(h.errors.empty());
  EXPECT_TRUE(h.info.empty());
}

TEST(PrologHook, AConfigurationErrorFailsAJobThatAsked) {
  Hook h;
  h.vars[kOpt] = "(null)";
  h.args = {"bogus_key=1"};
  EXPECT_FALSE(h.prolog());
  ASSERT_EQ(h.errors.size(), 1u);
  EXPECT_EQ(h.errors[0].rfind("job 7 prolog failed: unknown plugin argument 'bogus_key'", 0), 0u) << h.errors[0];
}

TEST(EpilogHook, AConfigurationErrorNeverFailsAJobThatDidNotAsk) {
  Hook h;
  h.args = {"bogus_key=1"};
  EXPECT_TRUE(h.epilog());
  ASSERT_EQ(h.errors.size(), 1u);
  EXPECT_NE(h.errors[0].find("did not ask for MPS"), std::string::npos) << h.errors[0];
}

TEST(EpilogHook, AConfigurationErrorFailsAJobThatAskedClosed) {
  Hook h;
  h.vars[kOpt] = "(null)";
  h.args = {"bogus_key=1"};
  EXPECT_FALSE(h.epilog());
  ASSERT_EQ(h.errors.size(), 1u);
  EXPECT_NE(h.errors[0].find("may be left running"), std::string::npos) << h.errors[0];
}

TEST(EpilogHook, NothingToStopIsSuccessForEveryJob) {
  TempDir tmp;
  for (bool asked : {false, true}) {
    Hook h;
    if (asked) h.vars[kOpt] = "(null)";
    h.args = {"state_dir=" + tmp / "state", "run_dir=" + tmp / "run", "contain=off"};
    EXPECT_TRUE(h.epilog()) << asked;
    EXPECT_TRUE(h.errors.empty()) << (h.errors.empty() ? "" : h.errors[0]);
  }
}

TEST(PrologHook, AFailedPrologKeepsItsReasonForTheTasksAndTheEpilogRemovesIt) {
  TempDir tmp;
  Hook h;
  h.vars[kOpt] = "(null)";
  h.vars["SLURM_JOB_GPUS"] = "0";
  h.args = {"state_dir=" + tmp / "state", "run_dir=" + tmp / "run", "gres_conf=" + tmp / "no-gres.conf", "contain=off"};
  EXPECT_FALSE(h.prolog());
  ASSERT_EQ(h.errors.size(), 1u);
  auto kept = read_prolog_failure(tmp / "state", geteuid(), "7", "n1");
  ASSERT_TRUE(kept);
  EXPECT_NE(kept->find("no-gres.conf does not exist"), std::string::npos) << *kept;
  EXPECT_NE(h.errors[0].find(*kept), std::string::npos) << h.errors[0];
  EXPECT_TRUE(h.epilog());
  EXPECT_FALSE(read_prolog_failure(tmp / "state", geteuid(), "7", "n1"));
}

}  // namespace
}  // namespace unilab::mps
