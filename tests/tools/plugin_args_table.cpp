// Prints the plugin-argument table (common/slurm/slurm_config.cpp) as the
// docs carry it: `brief` for README.md, `full` for docs/ADMIN.md.
// Used by tests/lint/plugin_args_docs.sh.
#include <cstdio>
#include <string_view>

#include "common/slurm/slurm_config.hpp"

int main(int argc, char** argv) {
  using unilab::mps::PluginArgWords;
  const std::string_view which = argc == 2 ? argv[1] : "";
  if (which != "brief" && which != "full") {
    std::fputs("usage: plugin_args_table brief|full\n", stderr);
    return 2;
  }
  std::fputs(unilab::mps::plugin_args_table(which == "brief" ? PluginArgWords::kBrief : PluginArgWords::kFull).c_str(), stdout);
  return 0;
}
