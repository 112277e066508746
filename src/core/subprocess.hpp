// Running an external command (sweeps rerun a user's training program per trial): posix_spawnp with
// extra environment variables, waiting for it, and the exit status decoded. Signals the parent
// receives are the caller's business (see telemetry/signals.hpp).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace cnnergy {

struct ChildStatus {
  int exit_code = 0;      // the command's exit code, or 128 + signal when a signal ended it
  bool signalled = false;
  bool ok() const { return exit_code == 0; }
};

// Starts `argv` with the current environment plus `extra_env` (which override). Throws Error with
// ExitCode::kChildFailed when the command cannot be started (not found, not executable).
int spawn_command(const std::vector<std::string>& argv, const std::vector<std::pair<std::string, std::string>>& extra_env);
// Waits for a child started by spawn_command.
ChildStatus wait_command(int pid);
// spawn + wait.
ChildStatus run_command(const std::vector<std::string>& argv,
                        const std::vector<std::pair<std::string, std::string>>& extra_env);

}  // namespace cnnergy
