// python_module.cc: the package's Python modules run from the CLI (tokens_run.h's helper_python
// and run_python_module): `tokens prepare` becomes one, `tokens explain --tokenizer` feeds one.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cli.h"
#include "tokens_run.h"

namespace distsampler::cli {

std::string helper_python(bool* from_env) {
  const char* named = std::getenv("DISTSAMPLER_PYTHON");
  *from_env = named != nullptr && *named != '\0';
  return *from_env ? named : "python3";
}

int run_python_module(const std::string& module, const std::vector<std::string>& args,
                      const std::string& input, const std::string& what,
                      const std::string& prog_variable, const std::string& prog) {
  bool from_env = false;
  const std::string python = helper_python(&from_env);
  std::vector<std::string> argv = {python, "-m", module};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> c_argv;
  for (std::string& arg : argv) c_argv.push_back(arg.data());
  c_argv.push_back(nullptr);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw UsageError(what + ": cannot make a pipe: " + std::strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[0], STDIN_FILENO);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, (prog_variable + "=").c_str(), prog_variable.size() + 1) != 0) {
      env_strings.push_back(*e);
    }
  }
  env_strings.push_back(prog_variable + "=" + prog);
  std::vector<char*> c_env;
  for (std::string& e : env_strings) c_env.push_back(e.data());
  c_env.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = ::posix_spawnp(&pid, c_argv[0], &actions, nullptr, c_argv.data(),
                                     c_env.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[0]);
  if (spawned != 0) {
    ::close(fds[1]);
    throw UsageError(what + ": cannot run " +
                     (from_env ? "DISTSAMPLER_PYTHON='" + python + "'" : "'python3' from PATH") +
                     ": " + std::strerror(spawned) +
                     (from_env ? "" : "; set DISTSAMPLER_PYTHON to a Python with distsampler"));
  }
  // The input, then end of file; a child that stops reading early ends the write (EPIPE).
  ::signal(SIGPIPE, SIG_IGN);
  for (size_t at = 0; at < input.size();) {
    const ssize_t n = ::write(fds[1], input.data() + at, input.size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    at += static_cast<size_t>(n);
  }
  ::close(fds[1]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : kExitUsage;
}

}  // namespace distsampler::cli
