// indexed_source.cc: IndexedSource (loader/indexed.h), the shards of one source numbered one after
// the other, over IndexedDataset (indexed.cc); and the object-store counts of every source.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "distsampler/loader/indexed.h"
#include "distsampler/tokens/mix.h"
#include "../io/block_cache.h"
#include "../io/curl.h"
#include "file.h"
#include "indexed_internal.h"

namespace distsampler {

using detail::check_range;
using detail::document_message;

std::optional<std::pair<std::string, uint64_t>> IndexedSource::block_of(
    uint64_t document) const {
  const Location at = locate(document);
  return at.shard->block_of(at.document);
}

void IndexedSource::read_in_blocks(uint64_t documents) const {
  for (size_t i = 0; i < shards_.size(); ++i) shards_[i].read_in_blocks(starts_[i], documents);
}

bool IndexedSource::remote() const {
  return std::any_of(shards_.begin(), shards_.end(),
                     [](const IndexedDataset& shard) { return shard.remote(); });
}

ObjectStoreCounts object_store_counts() {
  ObjectStoreCounts c;
  c.requests = detail::http_requests();
  c.bytes = detail::http_bytes_read();
  const detail::BlockCacheCounts cache = detail::block_cache_counts();
  c.block_hits = cache.hits;
  c.block_fetches = cache.fetches;
  c.cached_bytes = cache.bytes;
  return c;
}

IndexedSource::IndexedSource(std::vector<std::string> prefixes) {
  if (prefixes.empty()) {
    throw std::invalid_argument("prefixes: empty; allowed: at least one prefix");
  }
  // The shards opened at once (a few header reads each: their latency paid once for all, not once
  // per shard), then checked in order; the first failing shard's error.
  std::vector<std::unique_ptr<IndexedDataset>> opened(prefixes.size());
  detail::parallel_for(0, prefixes.size(), [&](size_t i) {
    opened[i] = std::make_unique<IndexedDataset>(prefixes[i]);
  });
  shards_.reserve(prefixes.size());
  starts_.reserve(prefixes.size() + 1);
  starts_.push_back(0);
  for (size_t i = 0; i < prefixes.size(); ++i) {
    shards_.push_back(std::move(*opened[i]));
    opened[i].reset();
    const IndexedDataset& shard = shards_.back();
    if (shard.dtype_name() != shards_.front().dtype_name()) {
      throw std::invalid_argument(
          "prefixes[" + std::to_string(i) + "] = '" + prefixes[i] + "' holds " +
          std::string(shard.dtype_name()) + " tokens and prefixes[0] = '" + prefixes[0] +
          "' holds " + std::string(shards_.front().dtype_name()) +
          "; allowed: one dtype for all the shards");
    }
    uint64_t start, tokens;
    if (__builtin_add_overflow(starts_.back(), shard.documents(), &start) ||
        __builtin_add_overflow(total_tokens_, shard.total_tokens(), &tokens)) {
      throw std::invalid_argument("prefixes: the shards up to prefixes[" + std::to_string(i) +
                                  "] = '" + prefixes[i] +
                                  "' hold more than 2^64 - 1 documents or tokens; allowed: fewer");
    }
    starts_.push_back(start);
    total_tokens_ = tokens;
  }
}

uint64_t IndexedSource::shard_start(size_t shard) const {
  if (shard > shards_.size()) {
    throw std::out_of_range("shard = " + std::to_string(shard) +
                            " is out of range; allowed: shard <= shards().size() = " +
                            std::to_string(shards_.size()));
  }
  return starts_[shard];
}

IndexedSource::Location IndexedSource::locate(uint64_t document) const {
  if (document >= documents()) {
    throw std::out_of_range(document_message(document, documents(), ""));
  }
  // The last shard starting at or before `document`; empty shards share their start with the next.
  const size_t shard =
      static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), document) -
                          starts_.begin()) -
      1;
  return Location{&shards_[shard], document - starts_[shard]};
}

void IndexedSource::lengths(const uint64_t* documents, size_t n, uint32_t* out) const {
  detail::lengths_by_part(starts_, documents, n, out,
                          [&](size_t shard, const uint64_t* local, size_t count, uint32_t* into) {
                            shards_[shard].lengths(local, count, into);
                          });
}

bool IndexedSource::wants_prefetch() const {
  if (all_seen_.load(std::memory_order_relaxed)) return false;
  for (const IndexedDataset& shard : shards_) {
    if (shard.wants_prefetch()) return true;
  }
  all_seen_.store(true, std::memory_order_relaxed);
  return false;
}

void IndexedSource::prefetch(const uint64_t* documents, size_t n) const {
  std::vector<uint32_t> unused(n);
  detail::lengths_by_part(starts_, documents, n, unused.data(),
                          [&](size_t shard, const uint64_t* local, size_t count, uint32_t*) {
                            shards_[shard].prefetch(local, count);
                          });
}

uint32_t IndexedSource::length(uint64_t document) const {
  const Location at = locate(document);
  return at.shard->length(at.document);
}

uint64_t IndexedSource::check_read(uint64_t document, uint64_t begin, uint64_t end) const {
  const Location at = locate(document);
  check_range(document, begin, end, at.shard->length(at.document), "");
  return at.shard->check_read(at.document, begin, end);
}

void IndexedSource::read(uint64_t document, uint64_t begin, uint64_t end, int64_t* out) const {
  const Location at = locate(document);
  check_range(document, begin, end, at.shard->length(at.document), "");
  at.shard->read(at.document, begin, end, out);
}

}  // namespace distsampler
