// /proc/PID/stat and /proc/PID/status parsers (a process name can hold any
// byte but NUL and '/', including spaces and ')').
#include "common/mps/proc.hpp"
#include "fuzz_util.hpp"

using namespace unilab::mps;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text = fuzz::as_text(data, size);
  auto st = parse_proc_stat(text);
  // Whatever the comm holds, a stat line we build must parse to its fields.
  std::string comm(text.substr(0, std::min<size_t>(text.size(), 15)));
  if (comm.find('\0') == std::string::npos) {
    std::string line = "4242 (" + comm + ") S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1 2 3\n";
    auto parsed = parse_proc_stat(line);
    if (!parsed || parsed->state != 'S' || parsed->start_ticks != 987654) fuzz::invariant_failed();
  }
  (void)st;
  (void)parse_proc_status_uid(text);
  return 0;
}
