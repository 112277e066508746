// spawn_command / wait_command over posix_spawnp and waitpid.
#include "core/subprocess.hpp"

#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "core/errors.hpp"

extern char** environ;

namespace cnnergy {

int spawn_command(const std::vector<std::string>& argv, const std::vector<std::pair<std::string, std::string>>& extra_env) {
  if (argv.empty()) throw InvalidArgument("no command given");
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv(*e);
    const auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : extra_env) env[k] = v;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], nullptr, nullptr, args.data(), envp.data());
  if (rc != 0)
    throw Error(ExitCode::kChildFailed, "cannot start '" + argv[0] + "': " + std::strerror(rc));
  return pid;
}

ChildStatus wait_command(int pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw InternalError(std::string("waitpid failed: ") + std::strerror(errno));
  }
  ChildStatus s;
  if (WIFSIGNALED(status)) {
    s.signalled = true;
    s.exit_code = 128 + WTERMSIG(status);
  } else {
    s.exit_code = WEXITSTATUS(status);
  }
  // posix_spawnp reports exec failures of a missing program as exit 127 of the child.
  return s;
}

ChildStatus run_command(const std::vector<std::string>& argv,
                        const std::vector<std::pair<std::string, std::string>>& extra_env) {
  return wait_command(spawn_command(argv, extra_env));
}

}  // namespace cnnergy
