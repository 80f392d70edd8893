// Prints unilab-mps(1) in roff, from the --help table (build-time generator).
#include <cstdio>

#include "cli/commands.hpp"

int main() {
  std::fputs(unilab::mps::cli::man_page().c_str(), stdout);
  return 0;
}
