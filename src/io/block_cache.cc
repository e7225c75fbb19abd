// The process's cache of blocks, evicting by next use (block_cache.h).
#include "block_cache.h"

#include <pthread.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "env.h"

namespace distsampler {
namespace detail {
namespace {

// cached_block()'s cache: blocks by (source's name and version, block number), the most recently used first.
struct BlockCache {
  using Key = std::pair<std::string, uint64_t>;
  using Data = std::shared_ptr<const Block>;
  struct Entry {
    std::shared_future<Data> data;
    uint64_t bytes = 0;  // counted once fetched
    std::list<Key>::iterator used;
  };
  std::mutex lock;
  std::map<Key, Entry> blocks;
  std::list<Key> recency;  // front: the most recently used
  uint64_t bytes = 0, hits = 0, fetches = 0;
  uint64_t budget = 0;
  std::set<BlockUseList*> readers;  // BlockUseLists registered (their order is never read)
  bool next_use = true;            // DISTSAMPLER_S3_EVICT
};

BlockCache& block_cache() {
  static BlockCache* cache = [] {
    const double mb = env_number("DISTSAMPLER_S3_CACHE_MB", 256, 0, 1e7, false,
                                 "megabytes in [0, 10^7]");
    const std::string evict = env("DISTSAMPLER_S3_EVICT");
    if (!evict.empty() && evict != "next-use" && evict != "lru") {
      throw std::invalid_argument("DISTSAMPLER_S3_EVICT = '" + evict +
                                  "'; allowed: next-use (the default) or lru");
    }
    auto* c = new BlockCache;  // never destroyed: reads may run while the process exits
    c->budget = static_cast<uint64_t>(mb * 1e6);
    c->next_use = evict != "lru";
    // Held across fork(), so that a child never inherits it locked; the child starts empty (a
    // fetch in flight in the parent has no thread in the child to finish it).
    ::pthread_atfork([] { block_cache().lock.lock(); }, [] { block_cache().lock.unlock(); },
                     [] {
                       BlockCache& cache = block_cache();
                       cache.blocks.clear();
                       cache.recency.clear();
                       cache.readers.clear();  // the parent's; a child's own register anew
                       cache.bytes = cache.hits = cache.fetches = 0;
                       cache.lock.unlock();
                     });
    return c;
  }();
  return *cache;
}

// The fetched block to drop: the one whose next use is furthest (blocks no reader names first),
// the least recently used among equals; recency.end() when none is fetched.
std::list<BlockCache::Key>::iterator victim(BlockCache& cache) {
  auto best = cache.recency.end();
  uint64_t furthest = 0;
  for (auto at = cache.recency.end(); at != cache.recency.begin();) {
    --at;  // from the least recently used
    if (cache.blocks.find(*at)->second.bytes == 0) continue;  // still being fetched
    if (!cache.next_use || cache.readers.empty()) return at;
    uint64_t d = UINT64_MAX;
    for (BlockUseList* reader : cache.readers) d = std::min(d, reader->distance(*at));
    if (d == UINT64_MAX) return at;
    if (best == cache.recency.end() || d > furthest) {
      best = at;
      furthest = d;
    }
  }
  return best;
}

}  // namespace

std::string block_source_name(const ByteSource& source) {
  return source.name() + "\n" + source.version();
}

BlockUseList::BlockUseList() {
  BlockCache& cache = block_cache();
  std::lock_guard<std::mutex> hold(cache.lock);
  cache.readers.insert(this);
}

BlockUseList::~BlockUseList() {
  BlockCache& cache = block_cache();
  std::lock_guard<std::mutex> hold(cache.lock);
  cache.readers.erase(this);
}

void BlockUseList::add(uint64_t step, const std::vector<Key>& blocks) {
  BlockCache& cache = block_cache();
  std::lock_guard<std::mutex> hold(cache.lock);
  for (const Key& key : blocks) {
    std::deque<uint64_t>& steps = steps_[key];
    if (steps.empty() || steps.back() < step) steps.push_back(step);
  }
}

void BlockUseList::at(uint64_t step) {
  BlockCache& cache = block_cache();
  std::lock_guard<std::mutex> hold(cache.lock);
  now_ = step;
}

uint64_t BlockUseList::distance(const Key& block) {
  auto it = steps_.find(block);
  if (it == steps_.end()) return UINT64_MAX;
  std::deque<uint64_t>& steps = it->second;
  while (!steps.empty() && steps.front() < now_) steps.pop_front();
  if (steps.empty()) {
    steps_.erase(it);
    return UINT64_MAX;
  }
  return steps.front() - now_;
}

std::shared_ptr<const Block> cached_block(
    const ByteSource& source, uint64_t block,
    const std::function<std::pair<uint64_t, uint64_t>()>& range) {
  BlockCache& cache = block_cache();
  const BlockCache::Key key{block_source_name(source), block};
  std::unique_ptr<std::promise<BlockCache::Data>> mine;
  std::shared_future<BlockCache::Data> data;
  {
    std::lock_guard<std::mutex> hold(cache.lock);
    auto it = cache.blocks.find(key);
    if (it != cache.blocks.end()) {
      cache.recency.splice(cache.recency.begin(), cache.recency, it->second.used);
      ++cache.hits;
      data = it->second.data;
    } else {
      ++cache.fetches;
      mine = std::make_unique<std::promise<BlockCache::Data>>();
      data = mine->get_future().share();
      cache.recency.push_front(key);
      cache.blocks.emplace(key, BlockCache::Entry{data, 0, cache.recency.begin()});
    }
  }
  if (!mine) return data.get();  // found, or being fetched by another thread: its result
  try {
    auto fetched = std::make_shared<Block>();
    const auto [offset, n] = range();
    fetched->offset = offset;
    fetched->bytes.resize(n);
    source.read(offset, n, fetched->bytes.data());
    mine->set_value(fetched);
  } catch (...) {
    mine->set_exception(std::current_exception());
    std::lock_guard<std::mutex> hold(cache.lock);
    auto it = cache.blocks.find(key);  // not kept: the next read tries again
    if (it != cache.blocks.end() && it->second.bytes == 0) {
      cache.recency.erase(it->second.used);
      cache.blocks.erase(it);
    }
    throw;
  }
  std::lock_guard<std::mutex> hold(cache.lock);
  auto it = cache.blocks.find(key);
  if (it != cache.blocks.end() && it->second.bytes == 0) {
    it->second.bytes = std::max<uint64_t>(data.get()->bytes.size(), 1);
    cache.bytes += it->second.bytes;
  }
  // Over the budget: fetched blocks go, the one used furthest ahead first (a reader holding one
  // keeps its bytes until it is done); blocks still being fetched stay.
  while (cache.bytes > cache.budget) {
    const auto at = victim(cache);
    if (at == cache.recency.end()) break;
    auto entry = cache.blocks.find(*at);
    cache.bytes -= entry->second.bytes;
    cache.blocks.erase(entry);
    cache.recency.erase(at);
  }
  return data.get();
}

BlockCacheCounts block_cache_counts() {
  BlockCache& cache = block_cache();
  std::lock_guard<std::mutex> hold(cache.lock);
  BlockCacheCounts c;
  c.hits = cache.hits;
  c.fetches = cache.fetches;
  c.bytes = cache.bytes;
  return c;
}

}  // namespace detail
}  // namespace distsampler
