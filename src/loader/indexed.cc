// Megatron-LM's indexed dataset reader. The format (megatron/core/datasets/indexed_dataset.py:
// _IndexWriter, _IndexReader, IndexedDatasetBuilder), little-endian:
//   PREFIX.idx  offset 0       magic "MMIDIDX\0\0" (9 bytes)
//               9              version (u64, 1)
//               17             dtype code of the tokens (u8)
//               18, 26         sequence_count S, document_count D (u64 each)
//               34             sequence_lengths (i32[S], tokens)
//               34 + 4S        sequence_pointers (i64[S], byte offsets into the .bin: the running
//                              sum of length x itemsize)
//               34 + 12S       document_indices (i64[D]: 0, then the sequence after each document)
//               34 + 12S + 8D  the end; a multimodal dataset's sequence_modes (i8[S]) follow
//   PREFIX.bin  the tokens of sequence 0, 1, ..., back to back.
// Both files are mapped, not read: opening touches the header and a few entries, so it costs the
// same for 10 documents or 10^9; each other entry is checked when it is used, and a caller that
// reads lengths only (the token-stream planner) never pages in the pointers.
#include "distsampler/loader/indexed.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "distsampler/tokens/mix.h"
#include "../io/block_cache.h"
#include "../io/bytes.h"
#include "file.h"
#include "indexed_internal.h"

namespace distsampler {

using detail::check_range;
using detail::document_message;

namespace {

constexpr unsigned char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
constexpr uint64_t kVersionOffset = 9;
constexpr uint64_t kDtypeOffset = 17;
constexpr uint64_t kCountsOffset = 18;  // sequence_count, then document_count at 26
constexpr uint64_t kHeaderBytes = 34;

// Megatron's DType enum: code, numpy's name, itemsize, the largest token id it holds exactly
// (floats: the last integer of their significand's range).
struct TokenType {
  uint8_t code;
  const char* name;
  uint64_t bytes;
  int64_t max;
};
constexpr TokenType kTokenTypes[] = {
    {1, "uint8", 1, 255},          {2, "int8", 1, 127},
    {3, "int16", 2, 32767},        {4, "int32", 4, 2147483647},
    {5, "int64", 8, std::numeric_limits<int64_t>::max()},    {6, "float64", 8, int64_t{1} << 53},
    {7, "float32", 4, int64_t{1} << 24}, {8, "uint16", 2, 65535}};

const TokenType* token_type(uint8_t code) {
  for (const TokenType& t : kTokenTypes) {
    if (t.code == code) return &t;
  }
  return nullptr;
}

std::string allowed_codes() {
  std::string s;
  for (const TokenType& t : kTokenTypes) {
    s += (s.empty() ? "" : ", ") + std::to_string(t.code) + " (" + t.name + ")";
  }
  return s;
}

template <typename T>
T load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <typename T>
void widen(const unsigned char* p, uint64_t n, int64_t* out) {
  for (uint64_t i = 0; i < n; ++i) out[i] = load<T>(p + i * sizeof(T));
}

// Float tokens must be integers in int64's range: anything else is not a token id.
template <typename T>
void widen_float(const unsigned char* p, uint64_t n, int64_t* out, const std::string& bin,
                 uint64_t first_byte) {
  constexpr double kTwo63 = 9223372036854775808.0;
  for (uint64_t i = 0; i < n; ++i) {
    const double v = load<T>(p + i * sizeof(T));
    if (!(v >= -kTwo63 && v < kTwo63 && std::trunc(v) == v)) {  // NaN fails every comparison
      char text[32];
      std::snprintf(text, sizeof text, "%.17g", v);
      throw FormatError(bin, first_byte + i * sizeof(T),
                        std::string("token ") + text +
                            " is not a token id; allowed: float tokens that are integers in "
                            "[-2^63, 2^63)");
    }
    out[i] = static_cast<int64_t>(v);
  }
}

}  // namespace

namespace {

template <typename T>
T read_entry(const detail::PooledFile& file, uint64_t offset) {
  unsigned char bytes[sizeof(T)];
  if (file.read_at(bytes, sizeof(T), offset) != sizeof(T)) {
    throw FormatError(file.path(), offset, "truncated while open: the file ends before byte " +
                                               std::to_string(offset + sizeof(T)));
  }
  return load<T>(bytes);
}

}  // namespace

struct IndexedDataset::Blocks {
  explicit Blocks(std::shared_ptr<const detail::ByteSource> bin) : cached(std::move(bin)) {}
  detail::CachedBlocks cached;
  // read_in_blocks(): documents a block (0: each read its own range), and the source's number
  // of this shard's first document (blocks are counted in the source's numbering).
  mutable std::atomic<uint64_t> block_documents{0};
  mutable std::atomic<uint64_t> first_document{0};
};

void IndexedDataset::read_in_blocks(uint64_t first_document, uint64_t documents) const {
  if (blocks_ == nullptr) return;
  blocks_->first_document.store(first_document, std::memory_order_relaxed);
  blocks_->block_documents.store(documents, std::memory_order_relaxed);
}

std::optional<std::pair<std::string, uint64_t>> IndexedDataset::block_of(
    uint64_t document) const {
  const uint64_t per_block =
      blocks_ != nullptr ? blocks_->block_documents.load(std::memory_order_relaxed) : 0;
  if (per_block == 0) return std::nullopt;
  return blocks_->cached.key(block_number(document, per_block));
}

uint64_t IndexedDataset::block_number(uint64_t document, uint64_t per_block) const {
  return (blocks_->first_document.load(std::memory_order_relaxed) + document) / per_block;
}

IndexedDataset::IndexedDataset(const std::string& prefix) : prefix_(prefix) {
  const uint16_t one = 1;
  unsigned char little;
  std::memcpy(&little, &one, 1);
  if (little != 1) throw std::runtime_error("IndexedDataset: big-endian hosts are not supported");

  // The .idx is read with pread (its descriptor pooled, PooledFile: a source of thousands of
  // shards stays within the open-file limit), but for the lengths block that a plan reads in
  // batches at random, mapped (PageCachedRange: MADV_RANDOM, so that a fault maps no pages
  // around it; the pages not in the page cache read together with pread first).
  // A remote prefix (io/bytes.h): the .idx is a local copy, fetched once per node into the cache
  // directory (a plan reads lengths at random, many per step: not a request each); the .bin is
  // read by range.
  entries_ = std::make_shared<const detail::PooledFile>(detail::local_file(prefix + ".idx"));
  const std::string& idx_path = entries_->path();
  const uint64_t size = entries_->size();
  unsigned char idx[kHeaderBytes] = {};
  entries_->read_at(idx, std::min<uint64_t>(size, kHeaderBytes), 0);
  const uint64_t magic_bytes = std::min<uint64_t>(size, sizeof kMagic);
  if (magic_bytes > 0 && std::memcmp(idx, kMagic, magic_bytes) != 0) {
    throw FormatError(idx_path, 0,
                      "bad magic; allowed: \"MMIDIDX\\0\\0\" (a Megatron indexed dataset's .idx)");
  }
  const auto need = [&](uint64_t end, const std::string& what) {
    if (size < end) {
      throw FormatError(idx_path, size,
                        "truncated: the file ends after " + std::to_string(size) +
                            " bytes, inside " + what + " (bytes up to offset " +
                            std::to_string(end) + ")");
    }
  };
  need(sizeof kMagic, "the magic");
  need(kDtypeOffset, "the version");
  const uint64_t version = load<uint64_t>(idx + kVersionOffset);
  if (version != 1) {
    throw FormatError(idx_path, kVersionOffset,
                      "version = " + std::to_string(version) + "; allowed: 1");
  }
  need(kDtypeOffset + 1, "the dtype code");
  const TokenType* type = token_type(idx[kDtypeOffset]);
  if (type == nullptr) {
    throw FormatError(idx_path, kDtypeOffset,
                      "dtype code = " + std::to_string(idx[kDtypeOffset]) +
                          "; allowed: " + allowed_codes());
  }
  need(kHeaderBytes, "sequence_count and document_count");
  const uint64_t sequences = load<uint64_t>(idx + kCountsOffset);
  const uint64_t documents = load<uint64_t>(idx + kCountsOffset + 8);
  const std::string counts = "sequence_count = " + std::to_string(sequences) +
                             " and document_count = " + std::to_string(documents);
  uint64_t entries, indices, expected;
  if (__builtin_mul_overflow(sequences, 12, &entries) ||
      __builtin_mul_overflow(documents, 8, &indices) ||
      __builtin_add_overflow(entries, indices, &expected) ||
      __builtin_add_overflow(expected, kHeaderBytes, &expected)) {
    throw FormatError(idx_path, kCountsOffset,
                      counts + " need more than 2^64 - 1 bytes; the file has " +
                          std::to_string(size));
  }
  if (size < expected) {
    throw FormatError(idx_path, size,
                      "truncated: " + counts + " need 34 + 12 * " + std::to_string(sequences) +
                          " + 8 * " + std::to_string(documents) + " = " +
                          std::to_string(expected) + " bytes, the file ends after " +
                          std::to_string(size));
  }
  if (size > expected) {
    if (sequences > 0 && size - expected == sequences) {
      throw FormatError(idx_path, expected,
                        "a sequence_modes block (one byte per sequence, sequence_count = " +
                            std::to_string(sequences) +
                            ") follows the document indices: a multimodal dataset; allowed: a "
                            "text dataset, whose .idx ends with the document indices");
    }
    throw FormatError(idx_path, expected,
                      std::to_string(size - expected) +
                          " trailing bytes after the document indices, where " + counts +
                          " end the file");
  }
  if (documents == 0) {
    throw FormatError(idx_path, kCountsOffset + 8,
                      "document_count = 0; allowed: at least 1 (document_indices starts with 0)");
  }
  const uint64_t indices_offset = kHeaderBytes + entries;
  const int64_t first_index = read_entry<int64_t>(*entries_, indices_offset);
  if (first_index != 0) {
    throw FormatError(idx_path, indices_offset,
                      "document_indices[0] = " + std::to_string(first_index) + "; allowed: 0");
  }
  const uint64_t last_offset = indices_offset + 8 * (documents - 1);
  const int64_t last_index = read_entry<int64_t>(*entries_, last_offset);
  if (last_index < 0 || static_cast<uint64_t>(last_index) != sequences) {
    throw FormatError(idx_path, last_offset,
                      "document_indices[" + std::to_string(documents - 1) +
                          "] (the last) = " + std::to_string(last_index) +
                          "; allowed: sequence_count = " + std::to_string(sequences));
  }
  sequences_ = sequences;
  token_bytes_ = type->bytes;
  dtype_code_ = type->code;
  pointers_offset_ = kHeaderBytes + 4 * sequences;
  if (sequences > 0) {
    lengths_ = std::make_shared<const detail::PageCachedRange>(entries_, kHeaderBytes,
                                                               pointers_offset_);
  }

  // Documents are read in a shuffled order (a few hundred tokens each, at random): no read-ahead.
  bin_ = detail::open_bytes(prefix + ".bin");
  tokens_ = bin_->view();
  bin_bytes_ = bin_->size();
  bin_path_ = bin_->name();
  if (bin_->remote()) blocks_ = std::make_shared<const Blocks>(bin_);
  const std::string& bin_path = bin_path_;
  if (sequences == 0) {
    if (bin_bytes_ != 0) {
      throw FormatError(bin_path, 0,
                        std::to_string(bin_bytes_) + " bytes, where '" + idx_path +
                            "' has no sequences; allowed: an empty file");
    }
    return;
  }
  checked_pointer(0);
  // The pointers are running sums, so the last sequence's end is the .bin's size. A pointer that
  // cannot be one (negative, unaligned) is the .idx's error; one that can, the .bin's size's.
  const uint64_t last = sequences - 1;
  const uint32_t last_length = checked_length(last);
  const int64_t last_pointer = pointer_at(last);
  if (last_pointer >= 0 && static_cast<uint64_t>(last_pointer) % token_bytes_ == 0) {
    const uint64_t end = static_cast<uint64_t>(last_pointer) + uint64_t{last_length} * token_bytes_;
    const std::string last_text =
        "the last sequence (sequence_pointers[" + std::to_string(last) + "] = " +
        std::to_string(last_pointer) + ", sequence_lengths[" + std::to_string(last) +
        "] = " + std::to_string(last_length) + " tokens of " + std::to_string(token_bytes_) +
        " bytes in '" + idx_path + "') ends at byte " + std::to_string(end);
    if (bin_bytes_ < end) {
      throw FormatError(bin_path, bin_bytes_,
                        "truncated: " + last_text + ", the file ends after " +
                            std::to_string(bin_bytes_));
    }
    if (bin_bytes_ > end) {
      throw FormatError(bin_path, end,
                        std::to_string(bin_bytes_ - end) + " trailing bytes after " + last_text);
    }
  }
  checked_pointer(last);
}

std::string_view IndexedDataset::dtype_name() const { return token_type(dtype_code_)->name; }

int64_t IndexedDataset::max_token() const { return token_type(dtype_code_)->max; }


int32_t IndexedDataset::length_at(uint64_t document) const {
  return read_entry<int32_t>(*entries_, kHeaderBytes + 4 * document);
}

int64_t IndexedDataset::pointer_at(uint64_t document) const {
  return read_entry<int64_t>(*entries_, pointer_offset(document));
}

uint64_t IndexedDataset::pointer_offset(uint64_t document) const {
  return pointers_offset_ + 8 * document;
}

void IndexedDataset::check_document(uint64_t document) const {
  if (document >= sequences_) {
    throw std::out_of_range(document_message(document, sequences_, " of '" + prefix_ + "'"));
  }
}

void IndexedDataset::lengths(const uint64_t* documents, size_t n, uint32_t* out) const {
  thread_local std::vector<uint64_t> offsets;
  offsets.clear();
  for (size_t i = 0; i < n; ++i) {
    out[i] = DocumentLengths::kAskAlone;
    if (documents[i] < sequences_) offsets.push_back(kHeaderBytes + 4 * documents[i]);
  }
  if (offsets.empty()) return;
  if (offsets.size() * kDense >= lengths_->pages()) {
    // Read through the mapping, when the documents are dense enough (kDense pages or fewer each)
    // that the faults, each mapping a block of pages around it (the kernel's fault-around), are
    // few for them; what the process has mapped is kept within a budget (mapped()).
    const uint64_t readable = lengths_->prepare(offsets.data(), offsets.size());
    for (size_t i = 0; i < n; ++i) {
      const uint64_t at = kHeaderBytes + 4 * documents[i];
      if (documents[i] >= sequences_ || at + 4 > readable) continue;  // past the end: length()
      const int32_t length = load<int32_t>(lengths_->at(at));
      if (length >= 0) out[i] = static_cast<uint32_t>(length);
    }
    lengths_->mapped(kFaultAround * offsets.size());
    return;
  }
  // Else (documents too few for their faults): those whose pages were seen in the page cache
  // (all of them, warm: the range asked when made) read through the mapping, where a fault costs
  // about what a pread does and maps 16 pages the next documents may find mapped; the others with
  // pread, the pages in order, neighbours (kReadGap bytes apart or less) in one read, several at
  // once when slow (read_ranges), their pages marked seen once read.
  thread_local std::vector<uint64_t> sorted;  // offset << 20 | i while they fit, else unsorted
  sorted.clear();
  const bool packed = n <= (size_t{1} << 20) && kHeaderBytes + 4 * sequences_ <= (uint64_t{1} << 44);
  std::vector<std::pair<uint64_t, size_t>> pairs;
  uint64_t readable = 0;
  size_t mapped = 0;
  for (size_t i = 0; i < n; ++i) {
    if (documents[i] >= sequences_) continue;
    const uint64_t at = kHeaderBytes + 4 * documents[i];
    if (lengths_->seen(at)) {
      if (mapped++ == 0) readable = lengths_->readable();
      if (at + 4 > readable) continue;  // past the end: length()
      const int32_t length = load<int32_t>(lengths_->at(at));
      if (length >= 0) out[i] = static_cast<uint32_t>(length);
    } else if (packed) {
      sorted.push_back(at << 20 | i);
    } else {
      pairs.push_back({at, i});
    }
  }
  if (mapped > 0) lengths_->mapped(kFaultAround * mapped);
  if (packed) {
    std::sort(sorted.begin(), sorted.end());
    for (uint64_t p : sorted) pairs.push_back({p >> 20, p & ((uint64_t{1} << 20) - 1)});
  } else {
    std::sort(pairs.begin(), pairs.end());
  }
  if (pairs.empty()) return;
  std::vector<detail::Range> ranges;
  std::vector<size_t> run_start;  // index in `pairs` of each range's first offset
  for (size_t k = 0; k < pairs.size(); ++k) {
    const uint64_t at = pairs[k].first;
    if (!ranges.empty() && at <= ranges.back().offset + ranges.back().bytes + kReadGap &&
        at + 4 - ranges.back().offset <= detail::Range::kMaxBytes) {
      ranges.back().bytes = at + 4 - ranges.back().offset;
    } else {
      ranges.push_back(detail::Range{at, 4});
      run_start.push_back(k);
    }
  }
  run_start.push_back(pairs.size());
  detail::read_ranges(*entries_, ranges, [&](size_t r, const unsigned char* data, uint64_t got) {
    lengths_->read_done(ranges[r].offset, ranges[r].bytes, got);
    for (size_t k = run_start[r]; k < run_start[r + 1]; ++k) {
      const uint64_t at = pairs[k].first - ranges[r].offset;
      if (at + 4 > got) continue;  // truncated while open: length() says so
      const int32_t length = load<int32_t>(data + at);
      if (length >= 0) out[pairs[k].second] = static_cast<uint32_t>(length);
    }
  });
}

void IndexedDataset::prefetch(const uint64_t* documents, size_t n) const {
  std::vector<uint64_t> offsets;
  for (size_t i = 0; i < n; ++i) {
    if (documents[i] < sequences_) offsets.push_back(kHeaderBytes + 4 * documents[i]);
  }
  if (!offsets.empty()) lengths_->prefetch(offsets.data(), offsets.size());
}

uint32_t IndexedDataset::checked_length(uint64_t document) const {
  const int32_t length = length_at(document);
  if (length < 0) {
    throw FormatError(entries_->path(), kHeaderBytes + 4 * document,
                      "sequence_lengths[" + std::to_string(document) +
                          "] = " + std::to_string(length) + "; allowed: >= 0");
  }
  return static_cast<uint32_t>(length);
}

uint64_t IndexedDataset::checked_pointer(uint64_t document) const {
  const int64_t pointer = pointer_at(document);
  const bool first = document == 0;
  if (first ? pointer != 0
            : pointer < 0 || static_cast<uint64_t>(pointer) > bin_bytes_ ||
                  static_cast<uint64_t>(pointer) % token_bytes_ != 0) {
    throw FormatError(entries_->path(), pointer_offset(document),
                      "sequence_pointers[" + std::to_string(document) +
                          "] = " + std::to_string(pointer) + "; allowed: " +
                          (first ? std::string("0 (the first sequence starts the .bin)")
                                 : "a multiple of the token size " +
                                       std::to_string(token_bytes_) + " in [0, " +
                                       std::to_string(bin_bytes_) + "], the size of '" +
                                       bin_path_ + "'"));
  }
  return static_cast<uint64_t>(pointer);
}

IndexedDataset::Entry IndexedDataset::entry(uint64_t document) const {
  const uint32_t length = checked_length(document);
  const uint64_t pointer = checked_pointer(document);
  // Cannot wrap: pointer <= the .bin's size < 2^63, length x token bytes < 2^34.
  const uint64_t end = pointer + uint64_t{length} * token_bytes_;
  const bool last = document + 1 == sequences_;
  const uint64_t next = last ? bin_bytes_ : checked_pointer(document + 1);
  if (end != next) {
    const std::string d = std::to_string(document);
    throw FormatError(
        entries_->path(), pointer_offset(document),
        "sequence_pointers[" + d + "] = " + std::to_string(pointer) + " and sequence_lengths[" +
            d + "] = " + std::to_string(length) + " (tokens of " +
            std::to_string(token_bytes_) + " bytes) end at byte " + std::to_string(end) +
            " of '" + bin_path_ + "', but " +
            (last ? "the file ends at byte " + std::to_string(bin_bytes_)
                  : "sequence_pointers[" + std::to_string(document + 1) +
                        "] = " + std::to_string(next)) +
            "; allowed: sequences back to back");
  }
  return Entry{pointer, length};
}

uint32_t IndexedDataset::length(uint64_t document) const {
  check_document(document);
  return checked_length(document);
}

IndexedDataset::Entry IndexedDataset::prepare(uint64_t document, uint64_t begin,
                                              uint64_t end) const {
  check_document(document);
  const Entry e = entry(document);
  check_range(document, begin, end, e.length, " of '" + prefix_ + "'");
  return e;
}

uint64_t IndexedDataset::check_read(uint64_t document, uint64_t begin, uint64_t end) const {
  prepare(document, begin, end);
  return end - begin;
}

void IndexedDataset::read(uint64_t document, uint64_t begin, uint64_t end, int64_t* out) const {
  const Entry e = prepare(document, begin, end);
  const uint64_t n = end - begin;
  if (n == 0) return;
  const uint64_t first_byte = e.byte + begin * token_bytes_;
  const unsigned char* p = tokens_ + first_byte;
  thread_local std::vector<unsigned char> fetched;
  std::shared_ptr<const detail::Block> block;  // holds p's bytes while they are read
  const uint64_t per_block =
      blocks_ != nullptr ? blocks_->block_documents.load(std::memory_order_relaxed) : 0;
  if (per_block > 0) {
    // The whole block of documents holding this one, one request, cached: its neighbours in the
    // block are read from it too.
    // Its byte range (two pointer reads of the .idx) is worked out only when it is fetched.
    const uint64_t first = blocks_->first_document.load(std::memory_order_relaxed);
    const uint64_t number = block_number(document, per_block);
    block = blocks_->cached.block(number, [&] {
      const uint64_t a = std::max(number * per_block, first) - first;
      const uint64_t b = std::min((number + 1) * per_block, first + sequences_) - first;
      const uint64_t from = checked_pointer(a);
      const uint64_t to = b == sequences_ ? bin_bytes_ : checked_pointer(b);
      return std::make_pair(from, to - from);
    });
    p = block->bytes.data() + (first_byte - block->offset);
  } else if (tokens_ == nullptr) {
    fetched.resize(n * token_bytes_);
    bin_->read(first_byte, n * token_bytes_, fetched.data());
    p = fetched.data();
  }
  switch (dtype_code_) {
    case 1:
      return widen<uint8_t>(p, n, out);
    case 2:
      return widen<int8_t>(p, n, out);
    case 3:
      return widen<int16_t>(p, n, out);
    case 4:
      return widen<int32_t>(p, n, out);
    case 5:
      return widen<int64_t>(p, n, out);
    case 6:
      return widen_float<double>(p, n, out, bin_path_, first_byte);
    case 7:
      return widen_float<float>(p, n, out, bin_path_, first_byte);
    default:
      return widen<uint16_t>(p, n, out);  // 8: the only other code the constructor takes
  }
}

bool IndexedDataset::remote() const { return bin_->remote(); }

bool IndexedDataset::wants_prefetch() const { return lengths_ && !lengths_->all_seen(); }

}  // namespace distsampler
