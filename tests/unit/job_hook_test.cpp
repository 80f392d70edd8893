#include "common/slurm/job_hook.hpp"

#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <array>
#include <cerrno>
#include <functional>
#include <map>

#include "common/mps/errors.hpp"
#include "common/slurm/job_failure.hpp"
#include "tests/unit/doubles.hpp"

namespace unilab::mps {
namespace {

using test::TempDir;
using Strings = std::vector<std::string>;

const std::string kOpt = "SPANK__SLURM_SPANK_OPTION_unilab_mps_unilab_mps";
const char* const kRootOnly = "the hooks act only with real uid 0 (take_root_identity)";

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
  if (getuid() != 0) GTEST_SKIP() << kRootOnly;
  Hook h;
  h.vars[kOpt] = "(null)";
  h.args = {"bogus_key=1"};
  EXPECT_FALSE(h.prolog());
  ASSERT_EQ(h.errors.size(), 1u);
  EXPECT_EQ(h.errors[0].rfind("job 7 prolog failed: unknown plugin argument 'bogus_key'", 0), 0u) << h.errors[0];
}

// What reaches the slurmd log is one printable line, whatever the message
// holds (here a plugin argument with a newline and an escape sequence, as
// tool output or a user's log line could hold them).
TEST(PrologHook, EveryLogLineIsOnePrintableLine) {
  if (getuid() != 0) GTEST_SKIP() << kRootOnly;
  Hook h;
  h.vars[kOpt] = "(null)";
  h.args = {"bogus\nunilab-mps: job 7: forged\x1b[2J=1"};
  EXPECT_FALSE(h.prolog());
  ASSERT_EQ(h.errors.size(), 1u);
  EXPECT_EQ(h.errors[0].find('\n'), std::string::npos) << h.errors[0];
  EXPECT_EQ(h.errors[0].find('\x1b'), std::string::npos) << h.errors[0];
  EXPECT_NE(h.errors[0].find("bogus\\x0aunilab-mps: job 7: forged\\x1b[2J"), std::string::npos) << h.errors[0];
}

TEST(EpilogHook, AConfigurationErrorNeverFailsAJobThatDidNotAsk) {
  if (getuid() != 0) GTEST_SKIP() << kRootOnly;
  Hook h;
  h.args = {"bogus_key=1"};
  EXPECT_TRUE(h.epilog());
  ASSERT_EQ(h.errors.size(), 1u);
  EXPECT_NE(h.errors[0].find("did not ask for MPS"), std::string::npos) << h.errors[0];
}

TEST(EpilogHook, AConfigurationErrorFailsAJobThatAskedClosed) {
  if (getuid() != 0) GTEST_SKIP() << kRootOnly;
  Hook h;
  h.vars[kOpt] = "(null)";
  h.args = {"bogus_key=1"};
  EXPECT_FALSE(h.epilog());
  ASSERT_EQ(h.errors.size(), 1u);
  EXPECT_NE(h.errors[0].find("may be left running"), std::string::npos) << h.errors[0];
}

TEST(EpilogHook, NothingToStopIsSuccessForEveryJob) {
  if (getuid() != 0) GTEST_SKIP() << kRootOnly;
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
  if (getuid() != 0) GTEST_SKIP() << kRootOnly;
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

// Runs `body` in a forked child (its ids change; the test process's must not)
// and returns the child's exit code: 0 when every check held, else the
// number of the first one that failed.
int in_child(const std::function<int()>& body) {
  pid_t pid = fork();
  if (pid == 0) _exit(body());
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

// The ids Slurm 24.11's extern step can start a RunInJob Prolog=/Epilog=
// with (its x11 cleanup racing the fork; run_command copies effective ids
// into real ones), and one it never does (real uid 0, effective the user's).
enum class Start { kUserGid, kUserEffective, kUser, kSetUidRoot };

// The user is test::kOtherUid/kOtherGid, with one more group.
bool start_as(Start how) {
  const uid_t uid = test::kOtherUid;
  const gid_t gid = test::kOtherGid;
  const std::array<gid_t, 2> groups{gid, 100};
  if (setgroups(groups.size(), groups.data()) != 0) return false;
  switch (how) {
    case Start::kUserGid: return setresgid(gid, gid, gid) == 0;
    case Start::kUserEffective: return setresgid(0, gid, gid) == 0 && setresuid(0, uid, uid) == 0;
    case Start::kUser: return setresgid(gid, gid, gid) == 0 && setresuid(uid, uid, uid) == 0;
    case Start::kSetUidRoot: return setresgid(gid, gid, gid) == 0 && setresuid(uid, 0, 0) == 0;
  }
  return false;
}

const std::string kUid = std::to_string(test::kOtherUid);
const std::string kGid = std::to_string(test::kOtherGid);

bool all_ids_are_root() {
  uid_t r = 1, e = 1, s = 1;
  gid_t rg = 1, eg = 1, sg = 1;
  return getresuid(&r, &e, &s) == 0 && getresgid(&rg, &eg, &sg) == 0 && r == 0 && e == 0 && s == 0 && rg == 0 &&
         eg == 0 && sg == 0;
}

TEST(TakeRootIdentity, AnEpilogStartedWithTheUsersGidOrEffectiveIdsTakesRootBackSaysSoAndCleansUp) {
  if (getuid() != 0) GTEST_SKIP() << "needs root: it drops to a user's ids and takes root's back";
  for (Start how : {Start::kUserGid, Start::kUserEffective}) {
    TempDir tmp;
    const std::string state = tmp / "state";
    ASSERT_EQ(mkdir(state.c_str(), 0755), 0);
    const std::string written = state + "/root-wrote-this";
    ASSERT_EQ(close(open(written.c_str(), O_CREAT | O_WRONLY, 0644)), 0);
    const bool effective = how == Start::kUserEffective;
    int code = in_child([&] {
      if (!start_as(how)) return 1;
      if (effective && (unlink(written.c_str()) == 0 || errno != EACCES)) return 2;  // the CI failure's state
      Hook h;
      h.vars[kOpt] = "(null)";
      h.args = {"state_dir=" + state, "run_dir=" + tmp / "run", "contain=off"};
      if (!h.epilog()) return 3;
      const std::string want = effective ? "job 7 epilog: started with uid 0/" + kUid + " and gid 0/" + kGid + " (real/effective)"
                                         : "job 7 epilog: started with uid 0/0 and gid " + kGid + "/" + kGid + " (real/effective)";
      if (h.info.size() != 1 || h.info[0].rfind(want, 0) != 0 ||
          h.info[0].find("took root's ids back before acting") == std::string::npos) {
        return 4;
      }
      if (!all_ids_are_root()) return 5;
      if (getgroups(0, nullptr) != 0) return 6;
      if (unlink(written.c_str()) != 0) return 7;  // root again: what root wrote can go
      return 0;
    });
    EXPECT_EQ(code, 0) << static_cast<int>(how)
                       << ": 1 drop, 2 the user's ids could remove root's file, 3 epilog failed, 4 no note, 5 ids, "
                          "6 groups kept, 7 still not root";
  }
}

TEST(TakeRootIdentity, AHookRunningAsTheUserActsOnNothingAndSaysHowToFinishByHand) {
  if (getuid() != 0) GTEST_SKIP() << "needs root: it becomes a user in a child";
  TempDir tmp;
  int code = in_child([&] {
    if (!start_as(Start::kUser)) return 1;
    Hook asked;
    asked.vars[kOpt] = "(null)";
    asked.args = {"state_dir=" + tmp / "state", "run_dir=" + tmp / "run", "contain=off"};
    if (asked.epilog() || asked.errors.size() != 1 || asked.args_read != 0) return 2;
    const std::string& e = asked.errors[0];
    if (e.rfind("job 7 epilog failed: runs as uid " + kUid + " (gid " + kGid + "), not root", 0) != 0 ||
        e.find("With PrologFlags=RunInJob, Slurm 24.11.0 to 25.11.3 can start the Prolog=/Epilog= as the job's user") == std::string::npos ||
        e.find("as root, run unilab-mps-epilog again with the job's SLURM_JOB_ID") == std::string::npos) {
      return 3;
    }
    if (asked.prolog() || asked.errors.size() != 2 || asked.errors[1].rfind("job 7 prolog failed: runs as uid " + kUid, 0) != 0) {
      return 4;
    }
    Hook plain;
    if (!plain.epilog() || plain.errors.size() != 1 || plain.errors[0].find("(the job did not ask for MPS: not failing it)") == std::string::npos) {
      return 5;
    }
    if (!plain.prolog() || plain.errors.size() != 1) return 6;  // a job that did not ask: its prolog does nothing
    return geteuid() == test::kOtherUid ? 0 : 7;
  });
  EXPECT_EQ(code, 0) << "1 drop, 2 epilog did not fail or read its arguments, 3 epilog message, 4 prolog, "
                        "5 epilog of a job that did not ask, 6 prolog of a job that did not ask, 7 ids changed";
}

TEST(TakeRootIdentity, ChangesNothingForRootAndRefusesASetUidStart) {
  if (getuid() != 0) GTEST_SKIP() << "needs root: it checks a set-uid start in a child";
  std::vector<gid_t> before(getgroups(0, nullptr));
  ASSERT_EQ(getgroups(before.size(), before.data()), static_cast<int>(before.size()));
  EXPECT_EQ(take_root_identity(), "");
  std::vector<gid_t> after(getgroups(0, nullptr));
  ASSERT_EQ(getgroups(after.size(), after.data()), static_cast<int>(after.size()));
  EXPECT_EQ(before, after);
  int code = in_child([] {
    if (!start_as(Start::kSetUidRoot)) return 1;
    try {
      take_root_identity();
      return 2;
    } catch (const CudaMpsError& e) {
      if (std::string(e.what()).rfind("runs as uid " + kUid + " (gid " + kGid + "), not root", 0) != 0) return 3;
    }
    return geteuid() == 0 && getuid() == test::kOtherUid ? 0 : 4;
  });
  EXPECT_EQ(code, 0) << "1 drop, 2 a set-uid start was accepted, 3 message, 4 ids changed";
}

}  // namespace
}  // namespace unilab::mps
