// unilab-mps-prolog: Prolog= program (root). Arguments: plugin key=value
// words and/or --config FILE.
#include <string>
#include <vector>

#include "prolog/helper.hpp"

int main(int argc, char** argv) { return unilab::mps::helper::run_prolog(std::vector<std::string>(argv + 1, argv + argc)); }
