// The table of commands, in the order `cnnergy --help` lists them.
#include "cli/commands.hpp"

#include "cli/cmd_profile.hpp"
#include "cli/cmd_train.hpp"

namespace cnnergy::cli {

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
      {"train", "train a model; time, throughput, accuracy (and energy) per epoch", run_train},
      {"profile", "per-layer and per-phase time and energy of a training iteration", run_profile},
  };
  return table;
}

}  // namespace cnnergy::cli
