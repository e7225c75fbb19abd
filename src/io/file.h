// file.h: a local file opened for reading: regular files only, read with pread or mapped whole,
// every error naming the file and the errno text.
#ifndef DISTSAMPLER_SRC_IO_FILE_H_
#define DISTSAMPLER_SRC_IO_FILE_H_

#include <cstdint>
#include <string>

namespace distsampler {
namespace detail {

// A read-only file descriptor, closed on destruction. Reads with pread, so several threads may
// read one file at once, and a file that shrinks under a reader gives a short read (an error the
// caller reports) where a memory map would give SIGBUS.
class ReadOnlyFile {
 public:
  // Opens `path`. Throws std::runtime_error naming the path and the errno text ("file 'x.npy':
  // cannot open: Permission denied"), or what the path is when it is not a regular file (a FIFO,
  // directory, device or socket), without blocking on a FIFO.
  explicit ReadOnlyFile(std::string path);
  ~ReadOnlyFile();
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;

  const std::string& path() const { return path_; }
  int fd() const { return fd_; }
  // The file's size now (fstat).
  uint64_t size() const;
  // Reads n bytes at `offset` into out; returns how many it read, fewer than n only where the
  // file ends. Throws std::runtime_error naming the file and the errno text when a read fails.
  uint64_t read_at(void* out, uint64_t n, uint64_t offset) const;

 private:
  [[noreturn]] void fail(const std::string& what) const;

  std::string path_;
  int fd_ = -1;
};

// A read-only file read with pread whose descriptor is held only while the process holds fewer
// than kMaxPooledFiles of them: opened when constructed (ReadOnlyFile's checks), it may be closed
// when other PooledFiles are read (the least recently read first) and is opened again when it is
// next read, so that a source of any number of shards stays within the open-file limit. A file
// opened again must be the one first opened (device, inode, size and modification time), or the
// read throws std::runtime_error naming it ("changed since it was opened"). Several threads may
// read one PooledFile, or several, at once; a descriptor being read is never closed (a process
// reading more than kMaxPooledFiles files at the same instant holds one per read). Fork-safe:
// the pool's lock is held across fork(), and the child's descriptors are the parent's copies.
class PooledFile {
 public:
  static constexpr int kMaxPooledFiles = 64;

  explicit PooledFile(std::string path);
  ~PooledFile();
  PooledFile(const PooledFile&) = delete;
  PooledFile& operator=(const PooledFile&) = delete;

  const std::string& path() const;
  uint64_t size() const;  // when opened
  uint64_t current_size() const;  // now (fstat), opened again as read_at does when closed
  uint64_t read_at(void* out, uint64_t n, uint64_t offset) const;  // as ReadOnlyFile's
  // How many pages of bytes [offset, offset + length) the page cache holds (Linux's cachestat),
  // or -1 where the kernel cannot say (before Linux 6.5, or refused).
  int64_t cached_pages(uint64_t offset, uint64_t length) const;
  // Maps bytes [offset, offset + length) read-only (offset a multiple of the page size, length
  // > 0), the descriptor taken as read_at takes it; the caller unmaps. Throws naming the file.
  unsigned char* map(uint64_t offset, uint64_t length) const;

  // The descriptors PooledFiles hold open in this process now (for tests).
  static int open_count();

  struct Slot;

 private:
  int acquire() const;  // the descriptor, opened again when closed; release() after use
  void release() const;
  Slot* slot_ = nullptr;  // owned
};

// A whole regular file mapped read-only (mmap), unmapped on destruction; the descriptor is closed
// once mapped. An empty file maps nothing (data() is nullptr). A file truncated under the mapping
// raises SIGBUS where its lost pages are read: callers that must report that read with pread.
// `random_access`: reads at random places (madvise MADV_RANDOM): a fault reads its page, not the
// kernel's read-ahead window around it (up to megabytes for a few hundred bytes wanted).
class MappedFile {
 public:
  // Throws std::runtime_error as ReadOnlyFile does, and naming the errno text when mmap fails.
  explicit MappedFile(std::string path, bool random_access = false);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  const unsigned char* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  std::string path_;
  const unsigned char* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace detail
}  // namespace distsampler

#endif  // DISTSAMPLER_SRC_IO_FILE_H_
