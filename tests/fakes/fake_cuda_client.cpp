// A stand-in for a CUDA program running under MPS: it finds the control
// daemon through CUDA_MPS_PIPE_DIRECTORY, gets attached to an MPS server,
// stays for a while and exits. The daemon applies CUDA's visibility rules to
// this process's CUDA_VISIBLE_DEVICES, so a mask the daemon cannot satisfy
// fails the way a real client does ("No CUDA GPUs are available").
//
//   fake-cuda-client [--hold SECONDS]      (SECONDS may be fractional)
//
// stdout: `CUDA_VISIBLE_DEVICES=<value|(unset)>`,
//         `client <pid> connected to MPS server <server pid>`,
//         `devices=<uuid,uuid|unknown>`, `pipe=<the pipe directory it used>`
// exit 0 after the hold; 1 when no daemon / no GPU / the server went away.
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "fake_config.hpp"
#include "fake_mps_protocol.hpp"

namespace {

int fail(const std::string& message) {
  std::fprintf(stderr, "CUDA error: %s\n", message.c_str());
  return 1;
}

// Reads one reply line (the daemon keeps the connection open afterwards).
std::string read_line(int fd) {
  std::string line;
  char c;
  while (::read(fd, &c, 1) == 1 && c != '\n') line += c;
  return line;
}

}  // namespace

int main(int argc, char** argv) {
  const fake::Config cfg = fake::Config::load();
  fake::log_call(cfg, "fake-cuda-client", argc, argv);

  double hold_s = 2.0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    std::string value;
    if (arg == "--hold" && i + 1 < argc) {
      value = argv[++i];
    } else if (arg.rfind("--hold=", 0) == 0) {
      value = arg.substr(7);
    } else {
      std::fprintf(stderr, "usage: fake-cuda-client [--hold SECONDS]\n");
      return 2;
    }
    char* end = nullptr;
    hold_s = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || !std::isfinite(hold_s) || hold_s < 0) {
      std::fprintf(stderr, "fake-cuda-client: bad --hold value '%s'\n", value.c_str());
      return 2;
    }
  }

  const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
  std::printf("CUDA_VISIBLE_DEVICES=%s\n", cvd ? cvd : "(unset)");
  std::fflush(stdout);

  const std::string pipe_dir = fake::mps_pipe_dir();
  errno = 0;
  const int fd = fake::connect_control(pipe_dir + "/control");
  if (fd < 0) {
    // The reason (errno of connect) lets tests tell "refused by permissions"
    // from "no daemon there" (not something the real CUDA prints).
    return fail("MPS client failed to connect to the MPS control daemon or the MPS server (" + pipe_dir +
                "/control: " + (errno != 0 ? std::strerror(errno) : "path too long") + ")");
  }
  std::string request = std::string(fake::kClientConnect) + " " + std::to_string(::getpid());
  if (cvd) request += std::string(" =") + cvd;
  if (!fake::send_all(fd, request + "\n")) {
    return fail("MPS client failed to connect to the MPS control daemon or the MPS server");
  }

  const std::string reply = read_line(fd);
  if (reply.rfind("ERR ", 0) == 0) return fail(reply.substr(4));
  const auto parts = fake::split(reply, ' ');
  if (parts.size() != 3 || parts[0] != "OK") {
    return fail("MPS client failed to connect to the MPS control daemon or the MPS server");
  }
  std::printf("client %ld connected to MPS server %s\n", static_cast<long>(::getpid()), parts[1].c_str());
  std::printf("devices=%s\n", parts[2].c_str());
  std::printf("pipe=%s\n", pipe_dir.c_str());
  std::fflush(stdout);

  // Hold, watching the connection: the daemon closing it means our server
  // is gone (shutdown_server, quit -t, daemon killed), which kills a real client.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::llround(hold_s * 1000));
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::min<long long>(left, 60000))) > 0) {
      char c;
      if (::read(fd, &c, 1) <= 0) return fail("the MPS server connection was lost");
    }
  }
  ::close(fd);
  return 0;
}
