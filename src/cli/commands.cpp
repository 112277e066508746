// The table of commands, in the order `cnnergy --help` lists them.
#include "cli/commands.hpp"

#include "cli/cmd_train.hpp"

namespace cnnergy::cli {

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
      {"train", "train a model; time, throughput, accuracy (and energy) per epoch", run_train},
  };
  return table;
}

}  // namespace cnnergy::cli
