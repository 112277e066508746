// The table of commands, in the order `cnnergy --help` lists them.
#include "cli/commands.hpp"

namespace cnnergy::cli {

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
  };
  return table;
}

}  // namespace cnnergy::cli
