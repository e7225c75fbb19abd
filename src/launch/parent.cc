#include "distsampler/launch/parent.h"

#if defined(__linux__)
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#endif

namespace distsampler {

#if defined(__linux__)
namespace {

// Whether process `pid` runs (a zombie does not): its state in /proc, else kill(pid, 0).
bool alive(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  if (FILE* stat = std::fopen(path.c_str(), "rb")) {
    char buffer[1024];
    const size_t n = std::fread(buffer, 1, sizeof buffer - 1, stat);
    std::fclose(stat);
    const std::string text(buffer, n);
    const size_t paren = text.rfind(')');  // the command name may hold anything but ends there
    const size_t state = text.find_first_not_of(' ', paren == std::string::npos ? 0 : paren + 1);
    if (paren == std::string::npos || state == std::string::npos) return true;
    return text[state] != 'Z' && text[state] != 'X';
  }
  if (errno == ENOENT) return false;
  return kill(pid, 0) == 0 || errno != ESRCH;  // no procfs: EPERM means it runs
}

int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif
}

void watch(pid_t creator) {
  const int pidfd = open_pidfd(creator);
  if (pidfd < 0 && (errno == ESRCH || !alive(creator))) _exit(1);
  std::thread([creator, pidfd] {
    if (pidfd >= 0) {
      pollfd fd{pidfd, POLLIN, 0};
      while (poll(&fd, 1, -1) < 0 && errno == EINTR) {
      }  // readable once the process has ended
    } else {
      while (alive(creator)) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    _exit(1);
  }).detach();
}

}  // namespace

bool end_with_process(int64_t creator, bool death_signal) {
  const auto pid = static_cast<pid_t>(creator);
  if (death_signal && prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) == 0) {
    if (getppid() != pid) _exit(1);  // the parent died before the signal was set
  } else {
    watch(pid);
  }
  return true;
}

#else

bool end_with_process(int64_t, bool) { return false; }

#endif

}  // namespace distsampler
