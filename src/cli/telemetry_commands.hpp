// The telemetry commands: `cnnergy devices` (inventory and what each GPU can measure and control),
// `cnnergy monitor` (run a command and report its time and energy, like `perf stat` for joules)
// and `cnnergy restore` (put back GPU settings left changed by a crashed or killed run).
#pragma once

#include <string>
#include <vector>

namespace cnnergy::cli {

int run_devices(const std::vector<std::string>& args);
int run_monitor(const std::vector<std::string>& args);
int run_restore(const std::vector<std::string>& args);
int run_daemon_state(const std::vector<std::string>& args);  // cmd_daemon_state.cpp
int run_exporter(const std::vector<std::string>& args);      // cmd_exporter.cpp

}  // namespace cnnergy::cli
