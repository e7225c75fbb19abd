// file.h: reading dataset files fast: a pool of reading threads, ranges read together, and a
// file's byte range mapped once its pages are in the page cache (over io/file.h's files).
#ifndef DISTSAMPLER_SRC_LOADER_FILE_H_
#define DISTSAMPLER_SRC_LOADER_FILE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "../io/file.h"

namespace distsampler {
namespace detail {

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

}  // namespace detail
}  // namespace distsampler

#endif  // DISTSAMPLER_SRC_LOADER_FILE_H_
