// temp_dir.h: a per-test scratch directory for small (possibly corrupt) files, and the check
// that reading one fails with a FormatError naming the file and the offset.
#ifndef DISTSAMPLER_TESTS_CPP_TEMP_DIR_H_
#define DISTSAMPLER_TESTS_CPP_TEMP_DIR_H_

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "distsampler/loader/dataset.h"

namespace distsampler {
namespace testing_util {

class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::path(::testing::TempDir()) /
            ("distsampler_" + std::to_string(::getpid()) + "_" + info->test_suite_name() + "_" +
             info->name());
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

  std::string write(const std::string& name, const std::vector<unsigned char>& bytes) const {
    const std::string p = file(name);
    std::ofstream out(p, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    return p;
  }
  std::string write_gz(const std::string& name, const std::vector<unsigned char>& bytes) const {
    const std::string p = file(name);
    gzFile f = gzopen(p.c_str(), "wb");
    EXPECT_NE(f, nullptr);
    if (!bytes.empty()) gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
    return p;
  }

 private:
  std::filesystem::path path_;
};

inline std::vector<unsigned char> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(in), {});
}

// Runs f; expects a FormatError naming `path` and `offset` (in its fields and its message) whose
// message contains `text`.
template <class F>
void expect_format_error(F f, const std::string& path, uint64_t offset, const std::string& text) {
  try {
    f();
    ADD_FAILURE() << "no FormatError for " << path;
  } catch (const FormatError& e) {
    EXPECT_EQ(e.file(), path);
    EXPECT_EQ(e.offset(), offset) << e.what();
    const std::string what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    EXPECT_NE(what.find("offset " + std::to_string(offset)), std::string::npos) << what;
    EXPECT_NE(what.find(text), std::string::npos) << what;
  }
}

// Runs f, which must throw std::runtime_error whose message names `path` and contains `text`.
template <class F>
void expect_runtime_error(F f, const std::string& path, const std::string& text) {
  try {
    f();
    ADD_FAILURE() << "no error for " << path;
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'" + path + "'"), std::string::npos) << what;
    EXPECT_NE(what.find(text), std::string::npos) << what;
  }
}

// expect_runtime_error for a FIFO at `fifo`: f must refuse it without blocking in open(). A helper
// thread opens the FIFO for writing whenever a reader is waiting on it, so that code which does
// block is released and fails here instead of hanging the suite.
template <class F>
void expect_fifo_refused(F f, const std::string& fifo, const std::string& text) {
  std::atomic<bool> done{false}, released{false};
  std::thread helper([&] {
    while (!done.load()) {
      // Succeeds only while some reader has the FIFO open or waits in open().
      const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
      if (fd >= 0) {
        released = true;
        ::close(fd);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  expect_runtime_error(f, fifo, text);
  done = true;
  helper.join();
  EXPECT_FALSE(released.load()) << "blocked in open() on the FIFO " << fifo;
}

// A FIFO, a directory and a character device, with what a dataset opener must say of each.
struct NotAFile {
  std::string path;
  std::string text;
  bool fifo;
};
inline std::vector<NotAFile> not_regular_files(const TempDir& dir) {
  const std::string fifo = dir.file("fifo");
  EXPECT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  const std::string subdir = dir.file("subdir");
  std::filesystem::create_directory(subdir);
  return {{fifo, "is a FIFO; allowed: a regular file", true},
          {subdir, "is a directory; allowed: a regular file", false},
          {"/dev/null", "is a character device; allowed: a regular file", false}};
}

}  // namespace testing_util
}  // namespace distsampler

#endif  // DISTSAMPLER_TESTS_CPP_TEMP_DIR_H_
