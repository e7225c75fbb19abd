// block_cache.h: a process's cache of blocks of byte sources (bytes.h), the decorator over any
// source that makes the callers reading inside one block make one read of it: for a remote
// source read in a locality order (loader/indexed.h's read_in_blocks), one request a block.
//
// The cache holds DISTSAMPLER_S3_CACHE_MB (default 256) megabytes of blocks at most, the one
// whose next use is furthest dropped first (BlockUseList; the least recently used without one);
// a block wanted by several threads at once is read once; a failed read is not kept (the next
// read tries again). Fork-safe: a child starts empty. DISTSAMPLER_S3_EVICT = next-use (the
// default) or lru (readers ignored, for comparison); anything else is one std::invalid_argument
// naming the variable and its value, as is a bad DISTSAMPLER_S3_CACHE_MB.
#ifndef DISTSAMPLER_SRC_IO_BLOCK_CACHE_H_
#define DISTSAMPLER_SRC_IO_BLOCK_CACHE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bytes.h"

namespace distsampler {
namespace detail {

struct Block {
  uint64_t offset = 0;  // the source's byte at bytes[0]
  std::vector<unsigned char> bytes;
};

// Bytes [offset, offset + n) of `source`, read whole once and kept under `block` (the caller's
// number for the range: one range a block of a source). `range` gives offset and n and is called
// only when the block is not in the cache (working it out may cost reads).
std::shared_ptr<const Block> cached_block(
    const ByteSource& source, uint64_t block,
    const std::function<std::pair<uint64_t, uint64_t>()>& range);
// The cache's name for a source's blocks: its name and version (another version's blocks are
// others).
std::string block_source_name(const ByteSource& source);

// A source read through the cache, a block at a time.
class CachedBlocks {
 public:
  explicit CachedBlocks(std::shared_ptr<const ByteSource> source) : source_(std::move(source)) {}
  std::shared_ptr<const Block> block(
      uint64_t number, const std::function<std::pair<uint64_t, uint64_t>()>& range) const {
    return cached_block(*source_, number, range);
  }
  std::pair<std::string, uint64_t> key(uint64_t number) const {
    return {block_source_name(*source_), number};
  }

 private:
  std::shared_ptr<const ByteSource> source_;
};

// Plan-aware eviction (Belady's rule). A reader that knows which blocks it will read at which of
// its steps (a token stream knows its plan) says so here; when the cache is over its budget, the
// fetched block whose next use is furthest away goes first: its next step in some reader's list,
// counted from that reader's current step (the least over readers). Blocks no reader names go
// before any named one, the least recently used first; with no reader at all that is plain LRU.
// Registered with the cache while it lives; thread-safe against reads (the cache's lock).
class BlockUseList {
 public:
  using Key = std::pair<std::string, uint64_t>;  // block_source_name(), block number
  BlockUseList();
  ~BlockUseList();
  BlockUseList(const BlockUseList&) = delete;
  BlockUseList& operator=(const BlockUseList&) = delete;
  // This reader reads `blocks` at `step` (steps added in increasing order).
  void add(uint64_t step, const std::vector<Key>& blocks);
  // This reader reads `step` now: uses before it are gone.
  void at(uint64_t step);
  // Steps from the current one to the block's next use; UINT64_MAX when none is known. Called
  // under the cache's lock.
  uint64_t distance(const Key& block);

 private:
  std::map<Key, std::deque<uint64_t>> steps_;
  uint64_t now_ = 0;
};

// The cache's counts in this process: blocks found, blocks fetched, bytes held now.
struct BlockCacheCounts {
  uint64_t hits = 0, fetches = 0, bytes = 0;
};
BlockCacheCounts block_cache_counts();

}  // namespace detail
}  // namespace distsampler

#endif  // DISTSAMPLER_SRC_IO_BLOCK_CACHE_H_
