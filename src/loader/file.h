// file.h: a dataset file opened for reading: regular files only, read with pread or mapped whole,
// every error naming the file and the errno text.
#ifndef DISTSAMPLER_SRC_LOADER_FILE_H_
#define DISTSAMPLER_SRC_LOADER_FILE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

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

// A byte range of a file to read.
struct Range {
  static constexpr uint64_t kMaxBytes = uint64_t{1} << 18;
  uint64_t offset = 0;
  uint64_t bytes = 0;
};
// Called with range `index`'s bytes, `got` of them (fewer than asked only where the file ends),
// on the thread that read them: several calls may run at once, for different ranges.
using RangeRead = std::function<void(size_t index, const unsigned char* data, uint64_t got)>;

// Reads every range of `file` (each at most Range::kMaxBytes) into a buffer per thread, reused:
// one after the other while the reads are fast (the page cache), and once one takes kSlowRead or
// longer (a cold disk, a parallel file system), the rest kReadThreads at a time (parallel_for),
// so that their latency is paid about once per kReadThreads ranges. Throws what read_at throws
// (the first range's failure, once every range was tried).
void read_ranges(const PooledFile& file, const std::vector<Range>& ranges, const RangeRead& done);
constexpr int kReadThreads = 16;
// Runs body(i) for i in [first, count) on this thread and up to threads - 1 (at most
// kReadThreads - 1) of the read pool's threads, for work that waits on files (opening shards,
// reads). Returns once every index has run; rethrows the exception of the lowest index that
// threw, if any.
void parallel_for(size_t first, size_t count, const std::function<void(size_t)>& body,
                  int threads = kReadThreads);
// Indices parallel_for() (read_ranges' reads among them) has had run by the pool's threads in
// this process (for tests).
uint64_t ranges_read_with_help();

// Bytes [begin, end) of a PooledFile's file mapped read-only, read from memory once the pages
// holding them are in the page cache. prepare() makes sure of that for the pages it is given:
// those it has seen resident before are taken to be (a page the kernel evicted since is faulted in
// again: slower, still right); of the others, the kernel is asked which are (mincore), and the
// rest are read with pread first (read_ranges: several at once when the reads are slow), so that
// a cold disk's or a parallel file system's latency is paid about once per batch, not once per
// page fault and one at a time. Memory: the mapping is the page cache's (shared, not private),
// plus one bit per page. A file truncated while mapped raises SIGBUS where its lost pages are
// read (as the .bin's mapping does); a page found past the end by prepare() is reported.
// Several threads may call prepare() and read at once.
class PageCachedRange : public std::enable_shared_from_this<PageCachedRange> {
 public:
  PageCachedRange(std::shared_ptr<const PooledFile> file, uint64_t begin, uint64_t end);
  ~PageCachedRange();
  PageCachedRange(const PageCachedRange&) = delete;
  PageCachedRange& operator=(const PageCachedRange&) = delete;

  // Makes the pages holding offsets[0, n) (file offsets in [begin, end)) resident. Returns the
  // first file offset past what may be read (end when all of it; less when the file was
  // truncated while open: what a read found, and the file's size now).
  uint64_t prepare(const uint64_t* offsets, size_t n) const;
  // The same on one of the read pool's threads, not waited for: pages wanted soon (a hint,
  // dropped when many wait already). The range must be owned by a shared_ptr.
  void prefetch(const uint64_t* offsets, size_t n) const;
  const unsigned char* at(uint64_t offset) const { return base_ + (offset - first_); }
  uint64_t pages() const { return (length_ + page_ - 1) / page_; }
  // After reads through at() that may have mapped up to `pages` pages of this range into the
  // process (a fault maps a block of pages around it): once the pages all ranges may have mapped
  // exceed the budget (kMappedBudget), every range's mappings are dropped (madvise
  // MADV_DONTNEED; the page cache keeps the pages, and the next read maps them again), so that a
  // process's RSS holds at most the budget of the ranges' pages whatever their sizes. The pages
  // are the page cache's, shared with every process that maps them, not private memory: 512 MB
  // holds a plan's working set at 10^8 documents (400 MB of lengths), which a plan of 100 steps
  // touches nearly all of, so that it maps each page once (under a budget of 64 MB it mapped
  // them several times over: docs/design.md).
  void mapped(uint64_t pages) const;
  static constexpr uint64_t kMappedBudget = uint64_t{1} << 17;  // pages: 512 MB of 4 KB pages
  // Sets the budget, in pages, for this process (tests: a small one); returns the one before.
  static uint64_t set_mapped_budget(uint64_t pages);
  static constexpr uint64_t kAskWholePages = 4096;
  // Whether ranges made from now on ask the page cache about all of their pages (true unless set;
  // tests: false, to read a file just written as though it were cold). Returns the setting before.
  static bool set_ask_whole(bool ask);
  // Whether every page has been seen resident (or read) already.
  bool all_seen() const { return unseen_.load(std::memory_order_relaxed) == 0; }
  // Whether the page holding file offset `offset` was seen resident (or read) before: reading it
  // through the mapping waits on no disk. The range asks the page cache about all of its pages
  // when made.
  bool seen(uint64_t offset) const { return seen_page((offset - first_) / page_); }
  // The first file offset past what may be read through at() now (the file's size now: a file cut
  // short while open; prepare() returns the same).
  uint64_t readable() const;
  // After a read of the file (not through the mapping) of `bytes` at `offset` that got `got`:
  // its pages are in the page cache now, and marked seen (fewer: the file ends there).
  void read_done(uint64_t offset, uint64_t bytes, uint64_t got) const;

 private:
  std::shared_ptr<const PooledFile> file_;
  uint64_t first_ = 0;   // the file offset of base_[0], page-aligned
  uint64_t length_ = 0;  // mapped bytes
  uint64_t end_ = 0;
  unsigned char* base_ = nullptr;
  size_t page_ = 4096;
  static constexpr uint64_t kGapPages = 16;
  bool seen_page(uint64_t page) const;  // seen resident (or read) before
  // When made: every page marked seen when the page cache holds them all (cachestat), else the
  // resident ones of a range of kAskWholePages pages or fewer (mincore over all of it).
  void ask_whole();
  void mark(uint64_t first_page, uint64_t end_offset) const;  // pages up to end_offset seen
  // Pages from, from + 1, ... marked seen where mincore's answer for them, in_core, says resident.
  void mark_resident(uint64_t from, const std::vector<unsigned char>& in_core) const;
  void cut(uint64_t offset) const;  // the file found to end at `offset`: nothing past it read
  // The reads that the pages holding these offsets need (those not seen: mincore, the resident
  // ones marked seen), neighbours together.
  std::vector<Range> reads_for(const uint64_t* offsets, size_t n) const;
  std::unique_ptr<std::atomic<uint64_t>[]> resident_;  // a bit per page, once seen resident
  mutable std::atomic<uint64_t> readable_end_;
  mutable std::atomic<uint64_t> unseen_{0};  // pages not yet seen
  mutable std::atomic<uint64_t> mapped_{0};  // pages it may have mapped since its last drop
};

constexpr int kSlowReadMicroseconds = 50;

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

#endif  // DISTSAMPLER_SRC_LOADER_FILE_H_
