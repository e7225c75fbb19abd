// skip_log.h: a skipped test says so, in gtest's output and in the run's skip log, so that a
// kernel or feature this machine lacks is counted instead of passing silently.
#ifndef DISTSAMPLER_TESTS_CPP_SKIP_LOG_H_
#define DISTSAMPLER_TESTS_CPP_SKIP_LOG_H_

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace distsampler::testing {

// Appends the line "<test>: <reason>" to the file named by $DISTSAMPLER_SKIP_LOG when it is set
// (scripts/test.sh prints that file's lines at the end of the run). One write with O_APPEND, so
// that the tests ctest runs in parallel never interleave their lines.
inline void log_skip(const std::string& test, const std::string& reason) {
  const char* path = std::getenv("DISTSAMPLER_SKIP_LOG");
  if (path == nullptr || *path == '\0') return;
  const int fd = ::open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;  // the skip is still in gtest's output
  const std::string line = test + ": " + reason + "\n";
  const ssize_t written = ::write(fd, line.data(), line.size());
  (void)written;
  ::close(fd);
}

// The running test's full name, e.g. "Kernels/FeistelKernel.GatherEqualsOperator/avx512".
inline std::string current_test_name() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return info == nullptr ? "(no test)"
                         : std::string(info->test_suite_name()) + "." + info->name();
}

}  // namespace distsampler::testing

// Skips the rest of the current test (gtest: SKIPPED, with the reason) and logs the skip. Only in
// the test body itself, as GTEST_SKIP.
#define DISTSAMPLER_SKIP(reason)                                                             \
  do {                                                                                       \
    const std::string distsampler_skip_reason_ = (reason);                                   \
    ::distsampler::testing::log_skip(::distsampler::testing::current_test_name(),            \
                                     distsampler_skip_reason_);                              \
    GTEST_SKIP() << distsampler_skip_reason_;                                                \
  } while (0)

#endif  // DISTSAMPLER_TESTS_CPP_SKIP_LOG_H_
