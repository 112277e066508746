// Runs the cnnergy binary (from $CNNERGY_BIN) with arguments and captures stdout+stderr and the exit code.
#pragma once

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <sys/wait.h>

namespace cnnergy::testing {

struct CliResult {
  int exit_code = -1;
  std::string output;
};

inline std::string cnnergy_binary() {
  const char* dir = std::getenv("CNNERGY_BIN");
  return std::string(dir && *dir ? dir : CNNERGY_TEST_BIN_DIR) + "/cnnergy";
}

// `env` is a prefix of NAME=value assignments for the shell ("" for none).
inline CliResult run_cli_with_env(const std::string& env, const std::string& args) {
  CliResult r;
  const std::string cmd = env + cnnergy_binary() + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf{};
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

inline CliResult run_cli(const std::string& args) { return run_cli_with_env("", args); }

}  // namespace cnnergy::testing
