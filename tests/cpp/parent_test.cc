#include "distsampler/launch/parent.h"

#include <gtest/gtest.h>

#if defined(__linux__)
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace distsampler {
namespace {

// A grandchild guarded against its parent (the creator), which exits once the guard is set.
// Returns whether the grandchild then ended within 20 s: the read end of a pipe that only the
// grandchild holds open for writing sees EOF.
bool grandchild_ends_with_its_parent(bool death_signal) {
  int held[2];
  int ready[2];
  if (pipe(held) != 0 || pipe(ready) != 0) return false;
  const pid_t creator = fork();
  if (creator == 0) {
    close(held[0]);
    const pid_t parent = getpid();
    if (fork() == 0) {
      close(ready[0]);
      end_with_process(parent, death_signal);
      const char c = 'r';
      if (write(ready[1], &c, 1) != 1) _exit(2);
      std::this_thread::sleep_for(std::chrono::seconds(60));  // ended long before, or a failure
      _exit(0);
    }
    close(held[1]);
    close(ready[1]);
    char c = 0;
    _exit(read(ready[0], &c, 1) == 1 ? 0 : 3);  // once the grandchild's guard is set
  }
  close(held[1]);
  close(ready[0]);
  close(ready[1]);
  int status = 0;
  waitpid(creator, &status, 0);
  pollfd fd{held[0], POLLIN, 0};
  char c = 0;
  const bool ended = poll(&fd, 1, 20000) == 1 && read(held[0], &c, 1) == 0;
  close(held[0]);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 && ended;
}

TEST(EndWithProcess, EndsWhenTheCreatorEnds) {
  EXPECT_TRUE(grandchild_ends_with_its_parent(/*death_signal=*/true));
  EXPECT_TRUE(grandchild_ends_with_its_parent(/*death_signal=*/false));  // the pidfd thread
}

TEST(EndWithProcess, EndsAtOnceWhenTheCreatorIsGone) {
  const pid_t gone = fork();
  if (gone == 0) _exit(0);
  waitpid(gone, nullptr, 0);  // reaped: no such process
  for (bool death_signal : {true, false}) {
    const pid_t child = fork();
    if (child == 0) {
      end_with_process(gone, death_signal);  // not the parent, or not alive: ends here
      _exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    EXPECT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 1) << "death_signal " << death_signal;
  }
}

TEST(EndWithProcess, KeepsRunningWhileTheCreatorRuns) {
  const pid_t child = fork();
  if (child == 0) {
    end_with_process(getppid(), false);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace distsampler

#else

TEST(EndWithProcess, DoesNothingOffLinux) { EXPECT_FALSE(distsampler::end_with_process(1, true)); }

#endif
