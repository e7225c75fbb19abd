#include "file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <utility>

namespace distsampler {
namespace detail {
namespace {

// What a path is when it is not a regular file, or nullptr.
const char* not_regular(mode_t mode) {
  if (S_ISREG(mode)) return nullptr;
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "of an unknown file type";
}

}  // namespace

ReadOnlyFile::ReadOnlyFile(std::string path) : path_(std::move(path)) {
  // stat first: a device or FIFO is refused without being opened at all. O_NONBLOCK: a FIFO that
  // replaced the file in between does not block the open; fstat then refuses it.
  struct stat st;
  if (::stat(path_.c_str(), &st) != 0) fail("cannot open");
  if (const char* kind = not_regular(st.st_mode)) {
    throw std::runtime_error("file '" + path_ + "': is " + kind + "; allowed: a regular file");
  }
  do {
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  } while (fd_ < 0 && errno == EINTR);
  if (fd_ < 0) fail("cannot open");
  if (::fstat(fd_, &st) != 0) {
    const int e = errno;
    ::close(fd_);
    errno = e;
    fail("cannot stat");
  }
  if (const char* kind = not_regular(st.st_mode)) {
    ::close(fd_);
    throw std::runtime_error("file '" + path_ + "': is " + kind + "; allowed: a regular file");
  }
  // A regular file ignores O_NONBLOCK; cleared so that nothing depends on that.
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags >= 0) ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK);
}

ReadOnlyFile::~ReadOnlyFile() {
  if (fd_ >= 0) ::close(fd_);
}

void ReadOnlyFile::fail(const std::string& what) const {
  throw std::runtime_error("file '" + path_ + "': " + what + ": " + std::strerror(errno));
}

uint64_t ReadOnlyFile::size() const {
  struct stat st;
  if (::fstat(fd_, &st) != 0) fail("cannot stat");
  return static_cast<uint64_t>(st.st_size);
}

uint64_t ReadOnlyFile::read_at(void* out, uint64_t n, uint64_t offset) const {
  auto* p = static_cast<unsigned char*>(out);
  uint64_t got = 0;
  while (got < n) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(n - got, uint64_t{1} << 30));
    const ssize_t r = ::pread(fd_, p + got, chunk, static_cast<off_t>(offset + got));
    if (r < 0) {
      if (errno == EINTR) continue;
      fail("cannot read " + std::to_string(n) + " bytes at offset " + std::to_string(offset));
    }
    if (r == 0) break;  // the end of the file
    got += static_cast<uint64_t>(r);
  }
  return got;
}

MappedFile::MappedFile(std::string path) : path_(std::move(path)) {
  const ReadOnlyFile file(path_);
  size_ = file.size();
  if (size_ == 0) return;  // mmap refuses a length of 0
  void* m = ::mmap(nullptr, static_cast<size_t>(size_), PROT_READ, MAP_PRIVATE, file.fd(), 0);
  if (m == MAP_FAILED) {
    throw std::runtime_error("file '" + path_ + "': cannot map " + std::to_string(size_) +
                             " bytes: " + std::strerror(errno));
  }
  data_ = static_cast<const unsigned char*>(m);
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<unsigned char*>(data_), static_cast<size_t>(size_));
}

}  // namespace detail
}  // namespace distsampler
