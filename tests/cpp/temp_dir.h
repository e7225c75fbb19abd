// temp_dir.h: a per-test scratch directory for small (possibly corrupt) files, and the check
// that reading one fails with a FormatError naming the file and the offset.
#ifndef DISTSAMPLER_TESTS_CPP_TEMP_DIR_H_
#define DISTSAMPLER_TESTS_CPP_TEMP_DIR_H_

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <string>
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

}  // namespace testing_util
}  // namespace distsampler

#endif  // DISTSAMPLER_TESTS_CPP_TEMP_DIR_H_
