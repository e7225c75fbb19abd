// The read pool and the page-cache-aware mapped ranges (file.h).
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

// kReadThreads threads that read for read_ranges() and PageCachedRange::prefetch(), made on first
// use and never destroyed (a process exits with them waiting). Two queues: a call's helpers
// (someone waits on them) before prefetches (nobody does). A child after fork() makes its own
// pool: the parent's threads do not exist in it, and it never touches the parent's pool.
class ReadPool {
 public:
  static ReadPool& get() {
    static std::atomic<ReadPool*> current{nullptr};
    static std::mutex making;
    const pid_t pid = ::getpid();
    ReadPool* p = current.load(std::memory_order_acquire);
    if (p != nullptr && p->pid_ == pid) return *p;
    std::lock_guard<std::mutex> hold(making);
    p = current.load(std::memory_order_acquire);
    if (p == nullptr || p->pid_ != pid) {
      p = new ReadPool(pid);  // the parent's, if any, is left as it is
      current.store(p, std::memory_order_release);
    }
    return *p;
  }

  void help(std::function<void()> task) { push(std::move(task), urgent_); }
  // A prefetch is dropped when kMaxPrefetches wait already (it is only a hint). 65,536: a plan's
  // first windows over 1,000 sources of large blocks are 16,000 reads, one task each (with 1,024,
  // most were dropped, and each source's first window was then read in turn: the cold first
  // batch at 10^10 documents of bench/tokens_scale.py); a task is about 100 bytes, 6.5 MB at
  // most.
  void prefetch(std::function<void()> task) {
    std::lock_guard<std::mutex> hold(lock_);
    if (later_.size() >= kMaxPrefetches) return;
    later_.push_back(std::move(task));
    wake_.notify_one();
  }

 private:
  static constexpr size_t kMaxPrefetches = 65536;
  explicit ReadPool(pid_t pid) : pid_(pid) {
    for (int t = 0; t < kReadThreads; ++t) {
      try {
        std::thread([this] { run(); }).detach();
      } catch (const std::system_error&) {
        break;  // no more threads to be had: callers read for themselves
      }
    }
  }
  void push(std::function<void()> task, std::deque<std::function<void()>>& queue) {
    std::lock_guard<std::mutex> hold(lock_);
    queue.push_back(std::move(task));
    wake_.notify_one();
  }
  void run() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> hold(lock_);
        wake_.wait(hold, [this] { return !urgent_.empty() || !later_.empty(); });
        auto& queue = urgent_.empty() ? later_ : urgent_;
        task = std::move(queue.front());
        queue.pop_front();
      }
      try {
        task();
      } catch (...) {
        // a prefetch that failed: the read that needs the pages reports it
      }
    }
  }

  const pid_t pid_;
  std::mutex lock_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> urgent_, later_;
};

}  // namespace

namespace {
std::atomic<uint64_t> helped_ranges{0};  // indices run by helpers, in parallel_for
}  // namespace

uint64_t ranges_read_with_help() { return helped_ranges.load(std::memory_order_relaxed); }

void parallel_for(size_t first, size_t count, const std::function<void(size_t)>& body,
                  int threads) {
  if (first >= count) return;
  // Work is claimed an index at a time by this thread and the pool's helpers; a helper that
  // starts after this call has stopped waiting (the state closed) touches nothing of it. Every
  // index is run even when one throws; the lowest failing index's exception is rethrown.
  struct Call {
    std::mutex lock;
    std::condition_variable idle;
    bool closed = false;
    int active = 0;
    std::atomic<size_t> claim{0};
    size_t failed = SIZE_MAX;
    std::exception_ptr error;
  };
  auto call = std::make_shared<Call>();
  call->claim.store(first);
  auto work = [&body, count, call] {
    uint64_t done = 0;
    for (size_t i; (i = call->claim.fetch_add(1)) < count; ++done) {
      try {
        body(i);
      } catch (...) {
        std::lock_guard<std::mutex> hold(call->lock);
        if (i < call->failed) call->failed = i, call->error = std::current_exception();
      }
    }
    return done;
  };
  const size_t helpers =
      std::min<size_t>(static_cast<size_t>(std::clamp(threads, 1, kReadThreads)), count - first) -
      1;
  ReadPool& pool = ReadPool::get();
  for (size_t h = 0; h < helpers; ++h) {
    pool.help([call, &work] {
      {
        std::lock_guard<std::mutex> hold(call->lock);
        if (call->closed) return;
        ++call->active;
      }
      helped_ranges.fetch_add(work(), std::memory_order_relaxed);
      std::lock_guard<std::mutex> hold(call->lock);
      if (--call->active == 0) call->idle.notify_all();
    });
  }
  work();
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> hold(call->lock);
    call->closed = true;
    call->idle.wait(hold, [&] { return call->active == 0; });
    // Taken out: a helper that starts late may free `call` on its thread, never the exception.
    error = std::move(call->error);
    call->error = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

void read_ranges(const PooledFile& file, const std::vector<Range>& ranges, const RangeRead& done) {
  auto read = [&](size_t i) {
    thread_local std::vector<unsigned char> buffer;
    const Range& r = ranges[i];
    if (buffer.size() < r.bytes) buffer.resize(Range::kMaxBytes);
    done(i, buffer.data(), file.read_at(buffer.data(), r.bytes, r.offset));
  };
  size_t next = 0;
  for (; next < ranges.size(); ++next) {
    const auto start = std::chrono::steady_clock::now();
    read(next);
    if (std::chrono::steady_clock::now() - start >=
        std::chrono::microseconds(kSlowReadMicroseconds)) {
      ++next;
      break;
    }
  }
  parallel_for(next, ranges.size(), read);
}

namespace {

// The PageCachedRanges alive in this process, and the pages they may have mapped in all.
struct MappedRanges {
  std::mutex lock;
  std::set<const PageCachedRange*> live;
  std::atomic<uint64_t> pages{0};
  std::atomic<uint64_t> budget{PageCachedRange::kMappedBudget};
  std::atomic<bool> ask_whole{true};
};

MappedRanges& mapped_ranges() {
  static auto* ranges = new MappedRanges;  // never destroyed: ranges in static objects outlive it
  return *ranges;
}

}  // namespace

PageCachedRange::PageCachedRange(std::shared_ptr<const PooledFile> file, uint64_t begin,
                                 uint64_t end)
    : file_(std::move(file)), end_(end), readable_end_(end) {
  const long page = ::sysconf(_SC_PAGESIZE);
  if (page > 0) page_ = static_cast<size_t>(page);
  first_ = begin - begin % page_;
  length_ = end - first_;
  if (length_ == 0) return;
  base_ = file_->map(first_, length_);
  // Read at random: no read-ahead around a fault (prepare() reads what is needed).
  ::madvise(base_, static_cast<size_t>(length_), MADV_RANDOM);
  const uint64_t pages = (length_ + page_ - 1) / page_;
  resident_ = std::make_unique<std::atomic<uint64_t>[]>((pages + 63) / 64);
  unseen_.store(pages, std::memory_order_relaxed);
  MappedRanges& all = mapped_ranges();
  std::lock_guard<std::mutex> hold(all.lock);
  all.live.insert(this);
  for (uint64_t w = 0; w < (pages + 63) / 64; ++w) resident_[w].store(0, std::memory_order_relaxed);
  if (all.ask_whole.load(std::memory_order_relaxed)) ask_whole();
}

PageCachedRange::~PageCachedRange() {
  if (base_ == nullptr) return;
  MappedRanges& all = mapped_ranges();
  {
    std::lock_guard<std::mutex> hold(all.lock);
    all.live.erase(this);
    all.pages.fetch_sub(mapped_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
  ::munmap(base_, static_cast<size_t>(length_));
}

bool PageCachedRange::seen_page(uint64_t page) const {
  return resident_[page / 64].load(std::memory_order_relaxed) >> (page % 64) & 1;
}

void PageCachedRange::mark(uint64_t first_page, uint64_t end_offset) const {
  const uint64_t readable = readable_end_.load(std::memory_order_relaxed);
  for (uint64_t page = first_page; first_ + page * page_ < end_offset; ++page) {
    if (readable < end_ && first_ + (page + 1) * page_ > readable) return;  // cut short
    const uint64_t bit = uint64_t{1} << (page % 64);
    if (!(resident_[page / 64].fetch_or(bit, std::memory_order_relaxed) & bit)) {
      unseen_.fetch_sub(1, std::memory_order_relaxed);
    }
  }
}

void PageCachedRange::cut(uint64_t offset) const {
  uint64_t end = readable_end_.load(std::memory_order_relaxed);
  while (offset < end && !readable_end_.compare_exchange_weak(end, offset)) {
  }
}

void PageCachedRange::ask_whole() {
  // The whole range, once (here, while the descriptor is open: asked later, the pool may have
  // closed it): when the page cache holds every page (a warm start), all are marked seen in one
  // call (cachestat: about 16 us for 4 MB, where mincore pays a page lookup per page, about
  // 70 us), and nothing is asked of the kernel again.
  const int64_t cached = file_->cached_pages(first_, length_);
  if (cached >= 0 && static_cast<uint64_t>(cached) >= pages()) {
    mark(0, first_ + length_);
  } else if (cached != 0 && pages() <= kAskWholePages) {
    // Some cached (or the kernel could not say): which, in one call over the range.
    std::vector<unsigned char> in_core(pages());
    if (::mincore(base_, static_cast<size_t>(length_), in_core.data()) != 0) return;
    mark_resident(0, in_core);
  }
}

void PageCachedRange::mark_resident(uint64_t from,
                                    const std::vector<unsigned char>& in_core) const {
  for (uint64_t page = from; page < from + in_core.size(); ++page) {
    if (in_core[page - from] & 1) {
      mark(page, std::min<uint64_t>(first_ + (page + 1) * page_, first_ + length_));
    }
  }
}

uint64_t PageCachedRange::readable() const {
  // The file's size now, as well: a page the kernel still holds past a truncation (part of a
  // large folio) is no proof that reading it through the mapping is safe.
  return std::min(readable_end_.load(std::memory_order_relaxed), file_->current_size());
}

void PageCachedRange::read_done(uint64_t offset, uint64_t bytes, uint64_t got) const {
  if (got < bytes) cut(offset + got);
  if (got > 0) mark((offset - first_) / page_, offset + got);
}

std::vector<Range> PageCachedRange::reads_for(const uint64_t* offsets, size_t n) const {
  std::vector<uint64_t> missing;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t page = (offsets[i] - first_) / page_;
    if (!seen_page(page)) missing.push_back(page);
  }
  std::vector<Range> reads;
  if (missing.empty()) return reads;
  const uint64_t words = (pages() + 63) / 64;
  if (missing.size() > 64 && missing.size() > words) {
    // Many pages: ordered and deduplicated through a bit per page, in O(pages / 64 + n), where
    // a sort would cost O(n log n) (a plan's first read of 10,000 lengths a source).
    thread_local std::vector<uint64_t> bits;
    bits.assign(words, 0);
    for (uint64_t page : missing) bits[page / 64] |= uint64_t{1} << (page % 64);
    missing.clear();
    for (uint64_t w = 0; w < words; ++w) {
      for (uint64_t b = bits[w]; b != 0; b &= b - 1) {
        missing.push_back(w * 64 + static_cast<uint64_t>(__builtin_ctzll(b)));
      }
    }
  } else {
    std::sort(missing.begin(), missing.end());
    missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
  }
  // Ask the kernel which are resident, a mincore call per run of pages within 256 of each other;
  // those are marked seen now.
  std::vector<unsigned char> in_core;
  for (size_t k = 0; k < missing.size();) {
    size_t last = k;
    while (last + 1 < missing.size() && missing[last + 1] - missing[k] < 256) ++last;
    const uint64_t from = missing[k], count = missing[last] - from + 1;
    in_core.assign(count, 0);
    if (::mincore(base_ + from * page_,
                  static_cast<size_t>(std::min<uint64_t>(count * page_, length_ - from * page_)),
                  in_core.data()) != 0) {
      in_core.assign(count, 0);  // unknown: read them
    }
    // Every resident page the call reported is marked seen, not only those asked for: the
    // run spans pages between them, and a later batch then asks the kernel nothing for them
    // (warm, a plan's first batches see the whole block resident in a few calls).
    mark_resident(from, in_core);
    for (size_t j = k; j <= last; ++j) {
      const uint64_t offset = first_ + missing[j] * page_;
      const uint64_t end = std::min<uint64_t>(offset + page_, first_ + length_);
      if (in_core[missing[j] - from] & 1) continue;  // marked above
      // Pages not resident, kGapPages or fewer apart, in one read (the gap's pages read too):
      // fewer, larger reads for a cold disk or a remote file system.
      if (!reads.empty() && offset <= reads.back().offset + reads.back().bytes + kGapPages * page_ &&
          end - reads.back().offset <= Range::kMaxBytes) {
        reads.back().bytes = end - reads.back().offset;
      } else {
        reads.push_back(Range{offset, end - offset});
      }
    }
    k = last + 1;
  }
  return reads;
}

void PageCachedRange::prefetch(const uint64_t* offsets, size_t n) const {
  bool all_seen = true;
  for (size_t i = 0; i < n && all_seen; ++i) all_seen = seen_page((offsets[i] - first_) / page_);
  if (all_seen) return;
  // One task a read, so that a rank waiting for its own reads is helped between them.
  auto self = shared_from_this();
  for (const Range& r : reads_for(offsets, n)) {
    ReadPool::get().prefetch([self, r] {
      bool all_seen = true;  // by a rank's own read meanwhile
      for (uint64_t at = r.offset; at < r.offset + r.bytes && all_seen; at += self->page_) {
        all_seen = self->seen_page((at - self->first_) / self->page_);
      }
      if (all_seen) return;
      thread_local std::vector<unsigned char> buffer;
      buffer.resize(Range::kMaxBytes);
      const uint64_t got = self->file_->read_at(buffer.data(), r.bytes, r.offset);
      if (got < r.bytes) self->cut(r.offset + got);
      self->mark((r.offset - self->first_) / self->page_, r.offset + r.bytes);
    });
  }
}


void PageCachedRange::mapped(uint64_t pages) const {
  pages = std::min(pages, this->pages());
  const uint64_t before = mapped_.load(std::memory_order_relaxed);
  const uint64_t now = std::min(before + pages, this->pages());
  mapped_.store(now, std::memory_order_relaxed);
  MappedRanges& all = mapped_ranges();
  if (all.pages.fetch_add(now - before, std::memory_order_relaxed) + (now - before) <=
      all.budget.load(std::memory_order_relaxed)) {
    return;
  }
  std::lock_guard<std::mutex> hold(all.lock);
  for (const PageCachedRange* range : all.live) {
    if (range->base_ != nullptr) {
      ::madvise(range->base_, static_cast<size_t>(range->length_), MADV_DONTNEED);
    }
    all.pages.fetch_sub(range->mapped_.exchange(0, std::memory_order_relaxed),
                        std::memory_order_relaxed);
  }
}

bool PageCachedRange::set_ask_whole(bool ask) {
  return mapped_ranges().ask_whole.exchange(ask, std::memory_order_relaxed);
}

uint64_t PageCachedRange::set_mapped_budget(uint64_t pages) {
  return mapped_ranges().budget.exchange(pages, std::memory_order_relaxed);
}

uint64_t PageCachedRange::prepare(const uint64_t* offsets, size_t n) const {
  const std::vector<Range> reads = reads_for(offsets, n);
  read_ranges(*file_, reads, [&](size_t r, const unsigned char*, uint64_t got) {
    if (got < reads[r].bytes) cut(reads[r].offset + got);  // the file ends early: truncated
  });
  for (const Range& r : reads) mark((r.offset - first_) / page_, r.offset + r.bytes);
  return readable();
}

}  // namespace detail
}  // namespace distsampler
