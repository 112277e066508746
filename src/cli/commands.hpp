// The command table: every `cnnergy COMMAND` is one function registered in commands.cpp
// (explicit registration, no static self-registration).
#pragma once

#include <string>
#include <vector>

namespace cnnergy::cli {

using CommandFn = int (*)(const std::vector<std::string>& args);

struct Command {
  std::string name;
  std::string summary;
  CommandFn run;
};

const std::vector<Command>& commands();

}  // namespace cnnergy::cli
