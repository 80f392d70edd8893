#include "common/mps/mps_control.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "common/mps/errors.hpp"
#include "tests/unit/doubles.hpp"

namespace unilab::mps {
namespace {

using namespace std::chrono_literals;
using test::error_of;
using test::RecordingRunner;
using test::TempDir;

TEST(CheckControlPathLength, ExactlyAtTheAfUnixLimit) {
  // The daemon binds "<dir>/control" and "<dir>/control_privileged"; the
  // longer may be 107 bytes (sun_path is 108 with the NUL).
  std::string dir = "/" + std::string(107 - 1 - 19, 'p');
  ASSERT_EQ((dir + "/control_privileged").size(), 107u);
  EXPECT_NO_THROW(check_control_path_length(dir));
  std::string e = error_of([&] { check_control_path_length(dir + "q"); });
  EXPECT_NE(e.find("108 bytes"), std::string::npos) << e;
  EXPECT_NE(e.find("too long"), std::string::npos) << e;
  EXPECT_NE(e.find("control_privileged"), std::string::npos) << e;
  EXPECT_NO_THROW(check_control_path_length("/tmp/nvidia-mps"));
}

TEST(CheckControlPathLength, ControlFitsButControlPrivilegedDoesNot) {
  // Checking only "<dir>/control" would accept this directory, and the real
  // daemon could not bind its second socket.
  std::string dir = "/" + std::string(107 - 1 - 8, 'p');
  ASSERT_EQ((dir + "/control").size(), 107u);
  std::string e = error_of([&] { check_control_path_length(dir); });
  EXPECT_NE(e.find(dir + "/control_privileged"), std::string::npos) << e;
  std::string shorter = dir.substr(0, dir.size() - 11);
  ASSERT_EQ((shorter + "/control_privileged").size(), 107u);
  EXPECT_NO_THROW(check_control_path_length(shorter));
}

TEST(ControlPipeKind, SocketFifoMissingOther) {
  TempDir tmp;
  ASSERT_TRUE(test::bind_unix_socket(tmp / "sock"));
  ASSERT_EQ(mkfifo((tmp / "fifo").c_str(), 0600), 0);
  test::write_text(tmp / "file", "");
  ASSERT_EQ(symlink((tmp / "sock").c_str(), (tmp / "link").c_str()), 0);
  EXPECT_EQ(control_pipe_kind(tmp / "sock"), "socket");
  EXPECT_EQ(control_pipe_kind(tmp / "fifo"), "fifo");
  EXPECT_EQ(control_pipe_kind(tmp / "missing"), "missing");
  EXPECT_EQ(control_pipe_kind(tmp / "file"), "other");
  EXPECT_EQ(control_pipe_kind(tmp / "link"), "other");  // lstat: a link to a socket is not one
}

TEST(MpsEnvironment, IsBuiltFromScratch) {
  MpsEndpoint ep{"/run/p", "/run/l", 1000, 1000};
  auto env = mps_environment(ep, {test::kUuid0, test::kUuid1});
  ASSERT_EQ(env.size(), 4u);
  EXPECT_EQ(env[0].rfind("PATH=", 0), 0u);
  EXPECT_EQ(env[1], "CUDA_MPS_PIPE_DIRECTORY=/run/p");
  EXPECT_EQ(env[2], "CUDA_MPS_LOG_DIRECTORY=/run/l");
  EXPECT_EQ(env[3], "CUDA_VISIBLE_DEVICES=" + test::kUuid0 + "," + test::kUuid1);
  EXPECT_EQ(mps_environment(ep, {}).size(), 3u);
}

TEST(MpsControl, SendWritesTheCommandOnStdinAsTheEndpointsUser) {
  RecordingRunner runner([](const Command&) { return test::exited(0, "100.0\n"); });
  MpsControl mps(runner, "/usr/bin/nvidia-cuda-mps-control");
  MpsEndpoint ep{"/run/p", "/run/l", 1000, 1001};
  CommandResult r = mps.send(ep, "get_default_active_thread_percentage", 3s);
  EXPECT_EQ(r.out, "100.0\n");
  ASSERT_EQ(runner.commands.size(), 1u);
  const Command& c = runner.commands[0];
  EXPECT_EQ(c.argv, (std::vector<std::string>{"/usr/bin/nvidia-cuda-mps-control"}));
  EXPECT_EQ(c.stdin_data, "get_default_active_thread_percentage\n");
  EXPECT_EQ(c.timeout, 3s);
  EXPECT_EQ(test::env_value(c, "CUDA_MPS_PIPE_DIRECTORY"), "/run/p");
  if (test::is_root()) {
    ASSERT_TRUE(c.credentials);
    EXPECT_EQ(c.credentials->uid, 1000u);
    EXPECT_EQ(c.credentials->gid, 1001u);
  } else {
    EXPECT_FALSE(c.credentials);
  }
  // Root's own daemon needs no credential switch.
  mps.send(MpsEndpoint{"/run/p", "/run/l", 0, 0}, "quit");
  EXPECT_FALSE(runner.commands.back().credentials);
}

TEST(MpsControl, AnswersOnlyWithASocketAndASuccessfulReply) {
  TempDir tmp;
  int calls = 0;
  std::string reply_out;
  int reply_code = 0;
  RecordingRunner runner([&](const Command&) {
    ++calls;
    return test::exited(reply_code, reply_out);
  });
  MpsControl mps(runner, "/usr/bin/nvidia-cuda-mps-control");
  MpsEndpoint ep{tmp.path(), tmp / "log", geteuid(), getegid()};
  EXPECT_FALSE(mps.answers(ep));
  EXPECT_EQ(calls, 0);  // no socket: nobody to ask (a stale socket file proves nothing either way)
  ASSERT_TRUE(test::bind_unix_socket(tmp / "control"));
  EXPECT_TRUE(mps.answers(ep));
  EXPECT_EQ(runner.commands.back().stdin_data, "get_server_list\n");
  reply_code = 1;
  EXPECT_FALSE(mps.answers(ep));
  reply_code = 0;
  reply_out = "Cannot find MPS control daemon process\n";
  EXPECT_FALSE(mps.answers(ep));
}

TEST(MpsControl, LaunchAndForegroundCommands) {
  RecordingRunner runner;
  MpsControl mps(runner, "/opt/nv/nvidia-cuda-mps-control");
  MpsEndpoint ep{"/run/p", "/run/l", 1000, 1000};
  mps.launch(ep, {test::kUuid2}, 7s);
  ASSERT_EQ(runner.commands.size(), 1u);
  EXPECT_EQ(runner.commands[0].argv, (std::vector<std::string>{"/opt/nv/nvidia-cuda-mps-control", "-d"}));
  EXPECT_EQ(runner.commands[0].timeout, 7s);
  EXPECT_TRUE(runner.commands[0].stdin_data.empty());
  EXPECT_EQ(test::env_value(runner.commands[0], "CUDA_VISIBLE_DEVICES"), test::kUuid2);
  Command fg = mps.foreground_command(ep, {test::kUuid2});
  EXPECT_EQ(fg.argv, (std::vector<std::string>{"/opt/nv/nvidia-cuda-mps-control", "-f"}));
  EXPECT_EQ(fg.env, runner.commands[0].env);
}

TEST(ControlLogTail, LastLinesBestEffort) {
  TempDir tmp;
  const uid_t me = geteuid();
  EXPECT_EQ(control_log_tail(tmp.path(), me, 3), "");  // no log
  EXPECT_EQ(control_log_tail(tmp / "missing", me, 3), "");
  test::write_text(tmp / "control.log", "one\ntwo\nthree\nfour\n");
  EXPECT_EQ(control_log_tail(tmp.path(), me, 2), "three\nfour");
  EXPECT_EQ(control_log_tail(tmp.path(), me, 10), "one\ntwo\nthree\nfour");
  test::write_text(tmp / "control.log", "single line without newline");
  EXPECT_EQ(control_log_tail(tmp.path(), me, 3), "single line without newline");
  // A symlinked log is not followed.
  unlink((tmp / "control.log").c_str());
  test::write_text(tmp / "secret", "do not show\n");
  ASSERT_EQ(symlink((tmp / "secret").c_str(), (tmp / "control.log").c_str()), 0);
  EXPECT_EQ(control_log_tail(tmp.path(), me, 3), "");
}

// Issue #10 (e): the log of an abandoned start is read as root through the
// same hardened reader as the epilog's copies.
TEST(ControlLogTail, OnlyTheDaemonUsersSingleLinkedFileTailOnlyEscaped) {
  TempDir tmp;
  const uid_t me = geteuid();
  test::write_text(tmp / "control.log", "ok\n");
  EXPECT_EQ(control_log_tail(tmp.path(), me + 1, 3), "");  // not the daemon user's directory/file
  // A hard link to a file the user could not read.
  unlink((tmp / "control.log").c_str());
  test::write_text(tmp / "secret", "root only\n", 0600);
  ASSERT_EQ(link((tmp / "secret").c_str(), (tmp / "control.log").c_str()), 0);
  EXPECT_EQ(control_log_tail(tmp.path(), me, 3), "");
  unlink((tmp / "control.log").c_str());
  // Control characters cannot reach the slurmd log; only the end of a huge log is read.
  std::string big(8u << 20, 'x');
  big += "\nbell\x07 and escape \x1b[31mred\n";
  test::write_text(tmp / "control.log", big);
  EXPECT_EQ(control_log_tail(tmp.path(), me, 3), "bell\\x07 and escape \\x1b[31mred");
}

}  // namespace
}  // namespace unilab::mps
