// indexed.h: Megatron-LM's indexed datasets (PREFIX.idx + PREFIX.bin, what megatron-core's
// IndexedDatasetBuilder writes), memory-mapped; one document's tokens at a time, as int64.
#ifndef DISTSAMPLER_LOADER_INDEXED_H_
#define DISTSAMPLER_LOADER_INDEXED_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "distsampler/loader/dataset.h"

namespace distsampler {

namespace detail {
class ByteSource;
class PageCachedRange;
class PooledFile;
}

// One Megatron indexed dataset (PREFIX.idx + PREFIX.bin): the .bin memory-mapped read-only, zero
// copy, its descriptor closed once mapped; the .idx read with pread (its header at open, each
// length and pointer when used: a mapping would pull the page cache around each random lookup
// into the process), its descriptor one of at most 64 the process keeps open for .idx files
// (the least recently read closed first, opened again when read, and refused if the file changed
// meanwhile): a source of any number of shards opens within the default limit of 1,024 files.
// Document d is the .idx's sequence d (as in Megatron's GPTDataset); the .idx's document_indices
// (which group sequences) are checked at both ends and otherwise not read.
//
// Opening is O(1) in the number of documents: it checks the .idx's magic, version (1), dtype code
// (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16), that its size is
// exactly what sequence_count and document_count make, document_indices[0] == 0 and its last ==
// sequence_count, sequence_pointers[0] == 0, the last sequence's length and pointer, and that
// the .bin ends exactly where the last sequence does. Each other document's length (>= 0) and
// pointer (a multiple of the token size inside the .bin, its tokens ending where the next
// document's pointer points) are checked when it is accessed: length() checks the length, read()
// both. A .idx that ends with a sequence_modes block (one byte per sequence: a multimodal
// dataset) is refused: its sequences are not documents of tokens.
// Float tokens (float32, float64) read as int64 when they are integers in int64's range.
// Every bad file throws FormatError naming the file (the .idx or the .bin), the byte offset and
// the problem; std::runtime_error naming the path and the errno text when a file cannot be opened
// or mapped, or what it is when it is not a regular file. Nothing reads outside the mappings.
// A file truncated while open raises SIGBUS when its lost pages are read (a mapping cannot report
// it). Copies share the mappings; const members are safe to call from several threads at once.
class IndexedDataset {
 public:
  explicit IndexedDataset(const std::string& prefix);  // opens PREFIX.idx and PREFIX.bin

  const std::string& prefix() const { return prefix_; }
  uint64_t documents() const { return sequences_; }  // the sequence_count of the .idx
  // Tokens of `document`. Throws std::out_of_range when document >= documents(), FormatError when
  // its length is negative.
  uint32_t length(uint64_t document) const;
  // The lengths of documents[0, n) (DocumentLengths::lengths' contract: kAskAlone for a document
  // out of range, with a negative length, or past the end of a .idx truncated while open). When
  // the documents are at least one per kDense pages of the lengths block, read from it mapped
  // (detail::PageCachedRange: the pages not in the page cache read together first, several at
  // once when slow; what a process maps of all blocks kept within a budget of 512 MB). Fewer:
  // those on pages seen in the page cache (all of them, warm) read mapped as well, the others
  // with pread, sorted, neighbours (kReadGap bytes apart or less) in one read, several reads at
  // once when slow.
  void lengths(const uint64_t* documents, size_t n, uint32_t* out) const;
  static constexpr uint64_t kDense = 4;
  static constexpr uint64_t kFaultAround = 16;  // pages a fault may map (the kernel's default)
  static constexpr uint64_t kReadGap = 4096;
  // Starts reading the pages lengths() of these documents needs, in the background (a hint);
  // wants_prefetch(): whether some page of the lengths has not been seen in memory yet.
  void prefetch(const uint64_t* documents, size_t n) const;
  bool wants_prefetch() const;
  uint64_t total_tokens() const { return bin_bytes_ / token_bytes_; }  // O(1)
  // Whether the .bin is a remote store's (an s3://, https:// or http:// prefix): each read() is
  // a request.
  bool remote() const;
  // A remote .bin: from now on read() fetches the whole block of `documents` documents holding
  // its document (blocks counted from the source's document 0; this shard's first is the
  // source's `first_document`), one request, and keeps it in the process's cache of blocks
  // (DISTSAMPLER_S3_CACHE_MB, the block used furthest ahead dropped first), so that documents
  // read near each other (a locality order, mix.h's SourceOrder) cost one request a block. A
  // local .bin: nothing changes. Safe while other threads read.
  void read_in_blocks(uint64_t first_document, uint64_t documents) const;
  // The name under which read() keeps `document`'s block in the cache (its file's URL and
  // version, and the block's number), for plan-aware eviction (BlockUses); nullopt when this
  // shard is not read in blocks. Unchecked: `document` < documents().
  std::optional<std::pair<std::string, uint64_t>> block_of(uint64_t document) const;
  int token_bytes() const { return static_cast<int>(token_bytes_); }
  std::string_view dtype_name() const;  // "uint16", "int32", ... (numpy's names)
  int64_t max_token() const;  // the largest token id the dtype holds exactly (uint16: 65535)

  // Tokens [begin, end) of `document`, converted to int64, written to out[0, end - begin).
  // Throws std::out_of_range naming document, begin and end and the allowed range when document
  // >= documents() or not begin <= end <= length(document); FormatError when the document's
  // length or pointer is bad, or a float token is not an int64 integer.
  void read(uint64_t document, uint64_t begin, uint64_t end, int64_t* out) const;
  // end - begin, after read()'s checks of the arguments and the document (for a caller that
  // allocates `out` first); throws what read() throws, but for the float tokens' check.
  uint64_t check_read(uint64_t document, uint64_t begin, uint64_t end) const;

 private:
  struct Entry {
    uint64_t byte;    // in the .bin
    uint32_t length;  // tokens
  };
  int32_t length_at(uint64_t document) const;   // unchecked
  int64_t pointer_at(uint64_t document) const;  // unchecked
  uint64_t pointer_offset(uint64_t document) const;  // in the .idx
  void check_document(uint64_t document) const;      // std::out_of_range
  uint32_t checked_length(uint64_t document) const;  // FormatError when negative
  uint64_t checked_pointer(uint64_t document) const;  // FormatError unless aligned, 0 for the first
  Entry entry(uint64_t document) const;  // and the pointer matches the next one or the .bin's end
  Entry prepare(uint64_t document, uint64_t begin, uint64_t end) const;  // read()'s checks
  // read_in_blocks(): the number of `document`'s block, `per_block` documents a block (> 0).
  uint64_t block_number(uint64_t document, uint64_t per_block) const;

  std::string prefix_;
  std::shared_ptr<const detail::PooledFile> entries_;  // the .idx, read with pread
  std::shared_ptr<const detail::ByteSource> bin_;  // the .bin (io/bytes.h): mapped, or remote
  struct Blocks;
  std::shared_ptr<const Blocks> blocks_;  // a remote .bin's blocks (read_in_blocks)
  std::string bin_path_;  // the .bin's path or URL, for errors
  std::shared_ptr<const detail::PageCachedRange> lengths_;  // sequence_lengths, for lengths()
  uint64_t pointers_offset_ = 0;  // of int64[sequences_] in the .idx; int32 lengths at offset 34
  const unsigned char* tokens_ = nullptr;    // the .bin's bytes when mapped, else nullptr
  uint64_t bin_bytes_ = 0;
  uint64_t sequences_ = 0;
  uint64_t token_bytes_ = 1;
  uint8_t dtype_code_ = 1;
};

// What this process has asked of remote stores for s3://, https:// and http:// sources (tests,
// benchmarks): requests (each try of each counts) and the bytes their bodies returned.
struct ObjectStoreCounts {
  uint64_t requests = 0;
  uint64_t bytes = 0;
  // read_in_blocks' cache: blocks found in it, blocks fetched, bytes it holds now.
  uint64_t block_hits = 0;
  uint64_t block_fetches = 0;
  uint64_t cached_bytes = 0;
};
ObjectStoreCounts object_store_counts();

// Several shards of one source (PREFIX_0, PREFIX_1, ... written separately), as one: documents
// numbered across the shards in the order given. Throws std::invalid_argument when `prefixes` is
// empty or the shards' dtypes differ (naming both prefixes and dtypes), and what IndexedDataset
// throws for each shard.
class IndexedSource {
 public:
  explicit IndexedSource(std::vector<std::string> prefixes);

  uint64_t documents() const { return starts_.back(); }
  uint32_t length(uint64_t document) const;  // as IndexedDataset's, numbered across the shards
  void lengths(const uint64_t* documents, size_t n, uint32_t* out) const;  // the same
  void prefetch(const uint64_t* documents, size_t n) const;
  bool wants_prefetch() const;  // true until every shard's lengths were seen in memory
  uint64_t total_tokens() const { return total_tokens_; }
  int token_bytes() const { return shards_.front().token_bytes(); }
  std::string_view dtype_name() const { return shards_.front().dtype_name(); }
  int64_t max_token() const { return shards_.front().max_token(); }
  void read(uint64_t document, uint64_t begin, uint64_t end, int64_t* out) const;
  uint64_t check_read(uint64_t document, uint64_t begin, uint64_t end) const;

  const std::vector<IndexedDataset>& shards() const { return shards_; }
  bool remote() const;  // whether some shard is a remote store's
  void read_in_blocks(uint64_t documents) const;  // IndexedDataset's, for every shard
  // IndexedDataset's, numbered across the shards; std::out_of_range past the end.
  std::optional<std::pair<std::string, uint64_t>> block_of(uint64_t document) const;
  // The source's first document in shards()[shard]; shard_start(shards().size()) == documents().
  // Throws std::out_of_range when shard > shards().size().
  uint64_t shard_start(size_t shard) const;

 private:
  struct Location {
    const IndexedDataset* shard;
    uint64_t document;  // in that shard
  };
  Location locate(uint64_t document) const;  // std::out_of_range past the end

  std::vector<IndexedDataset> shards_;
  std::vector<uint64_t> starts_;  // shards_.size() + 1 entries, from 0 to documents()
  uint64_t total_tokens_ = 0;
  mutable std::atomic<bool> all_seen_{false};
};

}  // namespace distsampler

#endif  // DISTSAMPLER_LOADER_INDEXED_H_
