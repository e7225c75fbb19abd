// Local files read with pread or mapped whole (file.h).
#include "file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <cstring>
#include <list>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

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

namespace {

// Reads n bytes at `offset` of fd into out; returns how many it read, fewer than n only where the
// file ends. Sets *error to errno (and returns what it read) when a read fails.
uint64_t pread_all(int fd, void* out, uint64_t n, uint64_t offset, int* error) {
  auto* p = static_cast<unsigned char*>(out);
  uint64_t got = 0;
  *error = 0;
  while (got < n) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(n - got, uint64_t{1} << 30));
    const ssize_t r = ::pread(fd, p + got, chunk, static_cast<off_t>(offset + got));
    if (r < 0) {
      if (errno == EINTR) continue;
      *error = errno;
      break;
    }
    if (r == 0) break;  // the end of the file
    got += static_cast<uint64_t>(r);
  }
  return got;
}

std::string read_failed(uint64_t n, uint64_t offset) {
  return "cannot read " + std::to_string(n) + " bytes at offset " + std::to_string(offset);
}

}  // namespace

uint64_t ReadOnlyFile::read_at(void* out, uint64_t n, uint64_t offset) const {
  int error;
  const uint64_t got = pread_all(fd_, out, n, offset, &error);
  if (error != 0) {
    errno = error;
    fail(read_failed(n, offset));
  }
  return got;
}

struct PooledFile::Slot {
  std::string path;
  struct stat identity;  // at the first open
  int fd = -1;
  int readers = 0;
  std::list<Slot*>::iterator recent;  // in Pool::open, when fd >= 0
};

namespace {

// The open descriptors of every PooledFile, most recently read first.
struct Pool {
  std::mutex lock;
  std::list<PooledFile::Slot*> open;
};

Pool& pool() {
  // Never destroyed: PooledFiles in static objects may outlive it otherwise.
  static Pool* p = [] {
    auto* made = new Pool;
    // The lock is taken across fork(), so that a child never inherits it held by a thread that
    // the child does not have; the forking thread releases it on both sides.
    ::pthread_atfork([] { pool().lock.lock(); }, [] { pool().lock.unlock(); },
                     [] { pool().lock.unlock(); });
    return made;
  }();
  return *p;
}

bool same_file(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino && a.st_size == b.st_size &&
         a.st_mtim.tv_sec == b.st_mtim.tv_sec && a.st_mtim.tv_nsec == b.st_mtim.tv_nsec;
}

// Closes the least recently read descriptors that no thread reads until fewer than the bound
// are open (or none is left to close). Called with the pool's lock held.
void shrink(Pool& p) {
  for (auto it = p.open.end(); it != p.open.begin() &&
                               static_cast<int>(p.open.size()) >= PooledFile::kMaxPooledFiles;) {
    --it;
    PooledFile::Slot* s = *it;
    if (s->readers > 0) continue;
    ::close(s->fd);
    s->fd = -1;
    it = p.open.erase(it);
  }
}

}  // namespace

PooledFile::PooledFile(std::string path) {
  auto slot = std::make_unique<Slot>();
  slot->path = std::move(path);
  const ReadOnlyFile file(slot->path);
  if (::fstat(file.fd(), &slot->identity) != 0) {
    throw std::runtime_error("file '" + file.path() + "': cannot stat: " + std::strerror(errno));
  }
  Pool& p = pool();
  std::lock_guard<std::mutex> hold(p.lock);
  shrink(p);
  slot->fd = ::fcntl(file.fd(), F_DUPFD_CLOEXEC, 0);  // kept past `file`
  if (slot->fd < 0) {
    throw std::runtime_error("file '" + slot->path + "': cannot keep open: " +
                             std::strerror(errno));
  }
  p.open.push_front(slot.get());
  slot->recent = p.open.begin();
  slot_ = slot.release();
}

PooledFile::~PooledFile() {
  Pool& p = pool();
  {
    std::lock_guard<std::mutex> hold(p.lock);
    if (slot_->fd >= 0) {
      ::close(slot_->fd);
      p.open.erase(slot_->recent);
    }
  }
  delete slot_;
}

const std::string& PooledFile::path() const { return slot_->path; }

uint64_t PooledFile::size() const { return static_cast<uint64_t>(slot_->identity.st_size); }

int PooledFile::open_count() {
  Pool& p = pool();
  std::lock_guard<std::mutex> hold(p.lock);
  return static_cast<int>(p.open.size());
}

int PooledFile::acquire() const {
  Pool& p = pool();
  std::lock_guard<std::mutex> hold(p.lock);
  Slot* s = slot_;
  if (s->fd < 0) {
    shrink(p);
    int opened;
    do {
      opened = ::open(s->path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    } while (opened < 0 && errno == EINTR);
    if (opened < 0) {
      throw std::runtime_error("file '" + s->path + "': cannot open again: " +
                               std::strerror(errno));
    }
    struct stat now;
    if (::fstat(opened, &now) != 0 || !same_file(now, s->identity)) {
      ::close(opened);
      throw std::runtime_error(
          "file '" + s->path + "': changed since it was opened (another file, size or "
          "modification time); allowed: files left unchanged while a run reads them");
    }
    s->fd = opened;
    p.open.push_front(s);
  } else {
    p.open.splice(p.open.begin(), p.open, s->recent);
  }
  s->recent = p.open.begin();
  ++s->readers;
  return s->fd;
}

void PooledFile::release() const {
  Pool& p = pool();
  std::lock_guard<std::mutex> hold(p.lock);
  --slot_->readers;
}

int64_t PooledFile::cached_pages(uint64_t offset, uint64_t length) const {
#if defined(__linux__)
#ifndef SYS_cachestat
#define SYS_cachestat 451  // the same number on every architecture (Linux 6.5's table)
#endif
  struct {
    uint64_t offset, length;
  } range{offset, length};
  struct {
    uint64_t cache, dirty, writeback, evicted, recently_evicted;
  } counts{};
  const int fd = acquire();
  const long rc = ::syscall(SYS_cachestat, fd, &range, &counts, 0);
  release();
  if (rc == 0) return static_cast<int64_t>(counts.cache);
#else
  (void)offset;
  (void)length;
#endif
  return -1;  // not known (a kernel before 6.5, or a seccomp filter that refuses the call)
}

uint64_t PooledFile::read_at(void* out, uint64_t n, uint64_t offset) const {
  const int fd = acquire();
  int error;
  const uint64_t got = pread_all(fd, out, n, offset, &error);
  release();
  if (error != 0) {
    throw std::runtime_error("file '" + slot_->path + "': " + read_failed(n, offset) + ": " +
                             std::strerror(error));
  }
  return got;
}

uint64_t PooledFile::current_size() const {
  {
    // Closed (other files were read since): the path's file, when it is still the one opened,
    // answers without opening it again (a plan over more sources than the pool holds asks for
    // every window it reads). Another file there: opened again below, which says so.
    Pool& p = pool();
    std::unique_lock<std::mutex> hold(p.lock);
    if (slot_->fd < 0) {
      const std::string path = slot_->path;
      const struct stat identity = slot_->identity;
      hold.unlock();
      struct stat now;
      if (::stat(path.c_str(), &now) == 0 && now.st_dev == identity.st_dev &&
          now.st_ino == identity.st_ino) {
        return static_cast<uint64_t>(now.st_size);
      }
    }
  }
  const int fd = acquire();
  struct stat now;
  const int failed = ::fstat(fd, &now);
  const int error = errno;
  release();
  if (failed != 0) {
    throw std::runtime_error("file '" + slot_->path + "': cannot stat: " + std::strerror(error));
  }
  return static_cast<uint64_t>(now.st_size);
}

unsigned char* PooledFile::map(uint64_t offset, uint64_t length) const {
  const int fd = acquire();
  void* m = ::mmap(nullptr, static_cast<size_t>(length), PROT_READ, MAP_SHARED, fd,
                   static_cast<off_t>(offset));
  const int error = errno;
  release();
  if (m == MAP_FAILED) {
    throw std::runtime_error("file '" + slot_->path + "': cannot map " + std::to_string(length) +
                             " bytes at offset " + std::to_string(offset) + ": " +
                             std::strerror(error));
  }
  return static_cast<unsigned char*>(m);
}

MappedFile::MappedFile(std::string path, bool random_access) : path_(std::move(path)) {
  const ReadOnlyFile file(path_);
  size_ = file.size();
  if (size_ == 0) return;  // mmap refuses a length of 0
  void* m = ::mmap(nullptr, static_cast<size_t>(size_), PROT_READ, MAP_PRIVATE, file.fd(), 0);
  if (m == MAP_FAILED) {
    throw std::runtime_error("file '" + path_ + "': cannot map " + std::to_string(size_) +
                             " bytes: " + std::strerror(errno));
  }
  data_ = static_cast<const unsigned char*>(m);
  if (random_access) ::madvise(m, static_cast<size_t>(size_), MADV_RANDOM);  // a hint: may fail
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<unsigned char*>(data_), static_cast<size_t>(size_));
}

}  // namespace detail
}  // namespace distsampler
