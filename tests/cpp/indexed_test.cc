#include "distsampler/loader/indexed.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../../src/loader/file.h"
#include "distsampler/hash.h"
#include "distsampler/tokens/mix.h"
#include "skip_log.h"
#include "temp_dir.h"

namespace distsampler {
namespace {

using testing_util::expect_format_error;
using testing_util::expect_runtime_error;
using testing_util::TempDir;
using Bytes = std::vector<unsigned char>;

template <typename T>
void put(Bytes* b, T v) {
  unsigned char raw[sizeof(T)];
  std::memcpy(raw, &v, sizeof(T));  // the format and this host: little-endian
  b->insert(b->end(), raw, raw + sizeof(T));
}

// A dataset byte by byte as megatron-core's IndexedDatasetBuilder writes it (add_item and
// end_document per document: each document one sequence). Fields are public so that tests can
// corrupt them; idx() lays them out.
struct Index {
  uint64_t version = 1;
  uint8_t code = 4;
  std::vector<int32_t> lengths;
  std::vector<int64_t> pointers;
  std::vector<int64_t> documents;

  Bytes idx() const {
    Bytes b = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
    put<uint64_t>(&b, version);
    b.push_back(code);
    put<uint64_t>(&b, lengths.size());
    put<uint64_t>(&b, documents.size());
    for (int32_t v : lengths) put(&b, v);
    for (int64_t v : pointers) put(&b, v);
    for (int64_t v : documents) put(&b, v);
    return b;
  }
  uint64_t length_offset(uint64_t d) const { return 34 + 4 * d; }
  uint64_t pointer_offset(uint64_t d) const { return 34 + 4 * lengths.size() + 8 * d; }
  uint64_t documents_offset(uint64_t i) const { return 34 + 12 * lengths.size() + 8 * i; }
};

struct Files {
  Index index;
  Bytes bin;
};

template <typename T>
Files make_files(uint8_t code, const std::vector<std::vector<T>>& docs) {
  Files f;
  f.index.code = code;
  f.index.documents.push_back(0);
  for (const std::vector<T>& doc : docs) {
    f.index.pointers.push_back(static_cast<int64_t>(f.bin.size()));
    f.index.lengths.push_back(static_cast<int32_t>(doc.size()));
    for (T v : doc) put(&f.bin, v);
    f.index.documents.push_back(static_cast<int64_t>(f.index.lengths.size()));
  }
  return f;
}

// Writes PREFIX.idx and PREFIX.bin into dir; returns the prefix.
std::string write(const TempDir& dir, const std::string& name, const Bytes& idx, const Bytes& bin) {
  dir.write(name + ".idx", idx);
  dir.write(name + ".bin", bin);
  return dir.file(name);
}
std::string write(const TempDir& dir, const std::string& name, const Files& f) {
  return write(dir, name, f.index.idx(), f.bin);
}

std::vector<int64_t> read_all(const IndexedDataset& ds, uint64_t d) {
  std::vector<int64_t> out(ds.length(d));
  ds.read(d, 0, out.size(), out.data());
  return out;
}

// Documents of lengths 0, 1, 2, 5, 3 (uint64 n-th value: value(n)); every span of each.
template <typename T>
void expect_round_trip(uint8_t code, const std::string& name, std::vector<T> values) {
  SCOPED_TRACE(name);
  const TempDir dir;
  std::vector<std::vector<T>> docs;
  size_t next = 0;
  for (size_t length : {0, 1, 2, 5, 3}) {
    std::vector<T> doc;
    for (size_t i = 0; i < length; ++i) doc.push_back(values[next++ % values.size()]);
    docs.push_back(doc);
  }
  const IndexedDataset ds(write(dir, "ds", make_files(code, docs)));
  EXPECT_EQ(ds.prefix(), dir.file("ds"));
  EXPECT_EQ(ds.dtype_name(), name);
  EXPECT_EQ(ds.token_bytes(), static_cast<int>(sizeof(T)));
  ASSERT_EQ(ds.documents(), docs.size());
  EXPECT_EQ(ds.total_tokens(), 11u);
  for (uint64_t d = 0; d < docs.size(); ++d) {
    ASSERT_EQ(ds.length(d), docs[d].size());
    for (uint64_t begin = 0; begin <= docs[d].size(); ++begin) {
      for (uint64_t end = begin; end <= docs[d].size(); ++end) {
        std::vector<int64_t> out(end - begin + 1, -7);  // one guard token after the span
        EXPECT_EQ(ds.check_read(d, begin, end), end - begin);
        ds.read(d, begin, end, out.data());
        for (uint64_t i = begin; i < end; ++i) {
          EXPECT_EQ(out[i - begin], static_cast<int64_t>(docs[d][i])) << d << " " << i;
        }
        EXPECT_EQ(out.back(), -7);
      }
    }
  }
}

TEST(Indexed, EveryDtypeRoundTrips) {
  expect_round_trip<uint8_t>(1, "uint8", {0, 1, 200, 255});
  expect_round_trip<int8_t>(2, "int8", {-128, -1, 0, 127});
  expect_round_trip<int16_t>(3, "int16", {-32768, -2, 0, 32767, 1234});
  expect_round_trip<int32_t>(4, "int32", {std::numeric_limits<int32_t>::min(), -5, 0, 50257,
                                          std::numeric_limits<int32_t>::max()});
  expect_round_trip<int64_t>(5, "int64", {std::numeric_limits<int64_t>::min(), -9, 0,
                                          std::numeric_limits<int64_t>::max()});
  expect_round_trip<double>(6, "float64", {-3.0, 0.0, 9007199254740992.0, -9223372036854775808.0});
  expect_round_trip<float>(7, "float32", {-3.0f, 0.0f, 16777216.0f, 50257.0f});
  expect_round_trip<uint16_t>(8, "uint16", {0, 1, 50256, 65535});
}

TEST(Indexed, FloatTokensThatAreNotIntegersAreFormatErrors) {
  const TempDir dir;
  for (double bad : {0.5, 9223372036854775808.0, std::numeric_limits<double>::quiet_NaN(),
                     std::numeric_limits<double>::infinity()}) {
    const std::string p = write(dir, "f", make_files<double>(6, {{1.0, 2.0, bad}}));
    const IndexedDataset ds(p);
    int64_t out[3];
    ds.read(0, 0, 2, out);  // the integral tokens read
    EXPECT_EQ(out[1], 2);
    expect_format_error([&] { ds.read(0, 0, 3, out); }, p + ".bin", 16, "is not a token id");
  }
}

TEST(Indexed, EmptyDatasetAndEmptyDocuments) {
  const TempDir dir;
  const IndexedDataset none(write(dir, "none", make_files<uint16_t>(8, {})));
  EXPECT_EQ(none.documents(), 0u);
  EXPECT_EQ(none.total_tokens(), 0u);
  EXPECT_THROW(none.length(0), std::out_of_range);
  const IndexedDataset empty(write(dir, "empty", make_files<uint16_t>(8, {{}, {}, {}})));
  EXPECT_EQ(empty.documents(), 3u);
  EXPECT_EQ(empty.total_tokens(), 0u);
  EXPECT_EQ(empty.length(2), 0u);
  empty.read(1, 0, 0, nullptr);
}

TEST(Indexed, ArgumentsOutsideTheDocumentAreOutOfRange) {
  const TempDir dir;
  const std::string p = write(dir, "ds", make_files<int32_t>(4, {{1, 2, 3}, {4}}));
  const IndexedDataset ds(p);
  int64_t out[8];
  const auto expect_range = [&](auto f, const std::string& text) {
    try {
      f();
      ADD_FAILURE() << "no error: " << text;
    } catch (const std::out_of_range& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("'" + p + "'"), std::string::npos) << e.what();
    }
  };
  expect_range([&] { ds.length(2); }, "document = 2 is out of range");
  expect_range([&] { ds.length(2); }, "allowed: document < documents() = 2");
  expect_range([&] { ds.read(2, 0, 0, out); }, "document = 2 is out of range");
  expect_range([&] { ds.read(0, 0, 4, out); },
               "document = 0, begin = 0, end = 4: out of range");
  expect_range([&] { ds.read(0, 0, 4, out); }, "allowed: begin <= end <= length(0) = 3");
  expect_range([&] { ds.read(1, 1, 0, out); }, "document = 1, begin = 1, end = 0");
  expect_range([&] { ds.check_read(0, 2, 5); }, "allowed: begin <= end <= length(0) = 3");
  const uint64_t huge = std::numeric_limits<uint64_t>::max();
  expect_range([&] { ds.read(huge, 0, 0, out); }, "document = 18446744073709551615");
  expect_range([&] { ds.read(0, huge, huge, out); }, "begin = 18446744073709551615");
}

TEST(Indexed, ShardsNumberDocumentsAcrossInTheOrderGiven) {
  const TempDir dir;
  const std::string a = write(dir, "src_0", make_files<uint16_t>(8, {{1, 2}, {3}}));
  const std::string empty = write(dir, "src_1", make_files<uint16_t>(8, {}));
  const std::string b = write(dir, "src_2", make_files<uint16_t>(8, {{}, {4, 5, 6}}));
  const IndexedSource source({a, empty, b, a});
  ASSERT_EQ(source.shards().size(), 4u);
  EXPECT_EQ(source.shards()[2].prefix(), b);
  EXPECT_EQ(source.documents(), 6u);
  EXPECT_EQ(source.total_tokens(), 9u);
  EXPECT_EQ(source.dtype_name(), "uint16");
  EXPECT_EQ(source.token_bytes(), 2);
  EXPECT_EQ(source.shard_start(1), 2u);
  EXPECT_EQ(source.shard_start(2), 2u);
  EXPECT_EQ(source.shard_start(3), 4u);
  EXPECT_EQ(source.shard_start(4), 6u);
  const std::vector<std::vector<int64_t>> expected = {{1, 2}, {3}, {}, {4, 5, 6}, {1, 2}, {3}};
  for (uint64_t d = 0; d < expected.size(); ++d) {
    ASSERT_EQ(source.length(d), expected[d].size());
    std::vector<int64_t> out(expected[d].size());
    EXPECT_EQ(source.check_read(d, 0, out.size()), out.size());
    source.read(d, 0, out.size(), out.data());
    EXPECT_EQ(out, expected[d]) << d;
  }
  int64_t one;
  source.read(3, 1, 2, &one);
  EXPECT_EQ(one, 5);
  try {
    source.read(3, 2, 4, &one);
    ADD_FAILURE() << "no error";
  } catch (const std::out_of_range& e) {  // the source's numbering, not the shard's
    EXPECT_NE(std::string(e.what()).find("document = 3, begin = 2, end = 4: out of range; "
                                         "allowed: begin <= end <= length(3) = 3"),
              std::string::npos)
        << e.what();
  }
  try {
    source.length(6);
    ADD_FAILURE() << "no error";
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("document = 6 is out of range; allowed: document < "
                                         "documents() = 6"),
              std::string::npos)
        << e.what();
  }
}

TEST(Indexed, ShardsMustShareTheirDtype) {
  const TempDir dir;
  const std::string a = write(dir, "a", make_files<uint16_t>(8, {{1}}));
  const std::string b = write(dir, "b", make_files<int32_t>(4, {{1}}));
  try {
    IndexedSource({a, a, b});
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "prefixes[2] = '" + b + "' holds int32 tokens and " +
                                         "prefixes[0] = '" + a +
                                         "' holds uint16; allowed: one dtype for all the shards");
  }
  try {
    IndexedSource({});
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "prefixes: empty; allowed: at least one prefix");
  }
  expect_runtime_error([&] { IndexedSource({a, dir.file("missing")}); },
                       dir.file("missing") + ".idx", "cannot open: No such file or directory");
}

// Copies share the mappings, outlive the original, and several threads read at once.
TEST(Indexed, CopiesShareTheMappingAndThreadsReadAtOnce) {
  const TempDir dir;
  std::vector<std::vector<int32_t>> docs(300);
  for (size_t d = 0; d < docs.size(); ++d) {
    for (size_t i = 0; i < d % 17; ++i) docs[d].push_back(static_cast<int32_t>(d * 1000 + i));
  }
  std::vector<IndexedDataset> copies;
  {
    const IndexedDataset original(write(dir, "ds", make_files<int32_t>(4, docs)));
    copies.assign(4, original);
  }
  std::vector<std::thread> threads;
  std::vector<int> mismatches(copies.size(), 0);
  for (size_t t = 0; t < copies.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        for (uint64_t d = 0; d < docs.size(); ++d) {
          const std::vector<int64_t> out = read_all(copies[t], d);
          if (out != std::vector<int64_t>(docs[d].begin(), docs[d].end())) ++mismatches[t];
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(mismatches, std::vector<int>(copies.size(), 0));
}

TEST(Indexed, MissingAndIrregularFilesNameThePath) {
  const TempDir dir;
  const Files f = make_files<int32_t>(4, {{1}});
  expect_runtime_error([&] { IndexedDataset(dir.file("nothing")); }, dir.file("nothing") + ".idx",
                       "cannot open: No such file or directory");
  dir.write("nobin.idx", f.index.idx());
  expect_runtime_error([&] { IndexedDataset(dir.file("nobin")); }, dir.file("nobin") + ".bin",
                       "cannot open: No such file or directory");
  std::filesystem::create_directory(dir.file("dir.idx"));
  expect_runtime_error([&] { IndexedDataset(dir.file("dir")); }, dir.file("dir") + ".idx",
                       "is a directory; allowed: a regular file");
  ASSERT_EQ(::mkfifo(dir.file("fifo.bin").c_str(), 0600), 0) << std::strerror(errno);
  dir.write("fifo.idx", f.index.idx());
  testing_util::expect_fifo_refused([&] { IndexedDataset(dir.file("fifo")); },
                                    dir.file("fifo") + ".bin",
                                    "is a FIFO; allowed: a regular file");
}

// Documents of 0 to 4 int32 tokens: enough entries to corrupt the first, a middle and the last.
Files sample_files() {
  return make_files<int32_t>(4, {{1, 2}, {}, {3}, {4, 5, 6, 7}, {8, 9}});
}

TEST(Indexed, TruncatedFilesAreFormatErrorsAtEveryLength) {
  const TempDir dir;
  const Files f = sample_files();
  const Bytes idx = f.index.idx();
  ASSERT_EQ(idx.size(), 34u + 12 * 5 + 8 * 6);
  for (size_t n = 0; n < idx.size(); ++n) {
    const std::string p = write(dir, "cut", Bytes(idx.begin(), idx.begin() + n), f.bin);
    const std::string inside = "truncated: the file ends after " + std::to_string(n) +
                               " bytes, inside ";
    const std::string what = n < 9    ? inside + "the magic (bytes up to offset 9)"
                             : n < 17 ? inside + "the version (bytes up to offset 17)"
                             : n < 18 ? inside + "the dtype code (bytes up to offset 18)"
                             : n < 34 ? inside + "sequence_count and document_count (bytes up to "
                                                 "offset 34)"
                                      : "truncated: sequence_count = 5 and document_count = 6 "
                                        "need 34 + 12 * 5 + 8 * 6 = 142 bytes, the file ends "
                                        "after " + std::to_string(n);
    expect_format_error([&] { IndexedDataset ds(p); }, p + ".idx", n, what);
  }
  ASSERT_EQ(f.bin.size(), 36u);
  for (size_t n = 0; n < f.bin.size(); ++n) {
    const std::string p = write(dir, "cut", idx, Bytes(f.bin.begin(), f.bin.begin() + n));
    expect_format_error([&] { IndexedDataset ds(p); }, p + ".bin", n,
                        "truncated: the last sequence (sequence_pointers[4] = 28, "
                        "sequence_lengths[4] = 2 tokens of 4 bytes in '" +
                            p + ".idx') ends at byte 36, the file ends after " +
                            std::to_string(n));
  }
}

TEST(Indexed, TrailingBytesAndTheMultimodalBlock) {
  const TempDir dir;
  const Files f = sample_files();
  Bytes bin = f.bin;
  bin.push_back(0);
  const std::string p1 = write(dir, "bin", f.index.idx(), bin);
  expect_format_error([&] { IndexedDataset ds(p1); }, p1 + ".bin", 36,
                      "1 trailing bytes after the last sequence");
  Bytes idx = f.index.idx();
  idx.push_back(0);
  const std::string p2 = write(dir, "idx", idx, f.bin);
  expect_format_error([&] { IndexedDataset ds(p2); }, p2 + ".idx", 142,
                      "1 trailing bytes after the document indices, where sequence_count = 5 and "
                      "document_count = 6 end the file");
  idx.insert(idx.end(), 4, 0);  // 5 bytes: one mode per sequence
  const std::string p3 = write(dir, "modes", idx, f.bin);
  expect_format_error([&] { IndexedDataset ds(p3); }, p3 + ".idx", 142,
                      "a sequence_modes block (one byte per sequence, sequence_count = 5) follows "
                      "the document indices: a multimodal dataset; allowed: a text dataset");
  Files none = make_files<int32_t>(4, {});
  const std::string p4 = write(dir, "none", none.index.idx(), Bytes{1, 2});
  expect_format_error([&] { IndexedDataset ds(p4); }, p4 + ".bin", 0,
                      "2 bytes, where '" + p4 + ".idx' has no sequences; allowed: an empty file");
}

TEST(Indexed, BadHeadersAreFormatErrors) {
  const TempDir dir;
  const Files f = sample_files();
  for (size_t i = 0; i < 9; ++i) {
    Bytes idx = f.index.idx();
    idx[i] ^= 0x20;
    const std::string p = write(dir, "magic", idx, f.bin);
    expect_format_error(
        [&] { IndexedDataset ds(p); }, p + ".idx", 0,
        "bad magic; allowed: \"MMIDIDX\\0\\0\" (a Megatron indexed dataset's .idx)");
  }
  const std::string p0 = write(dir, "magic", Bytes{'M', 'X'}, f.bin);  // short and wrong
  expect_format_error([&] { IndexedDataset ds(p0); }, p0 + ".idx", 0, "bad magic");
  Index version = f.index;
  version.version = 2;
  const std::string p1 = write(dir, "version", version.idx(), f.bin);
  expect_format_error([&] { IndexedDataset ds(p1); }, p1 + ".idx", 9, "version = 2; allowed: 1");
  for (uint8_t code : {0, 9, 255}) {
    Index bad = f.index;
    bad.code = code;
    const std::string p = write(dir, "code", bad.idx(), f.bin);
    expect_format_error([&] { IndexedDataset ds(p); }, p + ".idx", 17,
                        "dtype code = " + std::to_string(code) +
                            "; allowed: 1 (uint8), 2 (int8), 3 (int16), 4 (int32), 5 (int64), 6 "
                            "(float64), 7 (float32), 8 (uint16)");
  }
}

TEST(Indexed, CountsThatDoNotFitTheFile) {
  const TempDir dir;
  const Files f = sample_files();
  Bytes more = f.index.idx();
  more[18] = 6;  // sequence_count 6 of 5 written
  const std::string p1 = write(dir, "more", more, f.bin);
  expect_format_error([&] { IndexedDataset ds(p1); }, p1 + ".idx", 142,
                      "truncated: sequence_count = 6 and document_count = 6 need 34 + 12 * 6 + 8 * "
                      "6 = 154 bytes, the file ends after 142");
  Bytes fewer = f.index.idx();
  fewer[26] = 5;  // document_count 5 of 6 written: 8 bytes too many
  const std::string p2 = write(dir, "fewer", fewer, f.bin);
  expect_format_error([&] { IndexedDataset ds(p2); }, p2 + ".idx", 134,
                      "8 trailing bytes after the document indices");
  Bytes huge = f.index.idx();
  huge[25] = 0x40;  // sequence_count 2^62 + 5: 12 times that wraps
  const std::string p3 = write(dir, "huge", huge, f.bin);
  expect_format_error([&] { IndexedDataset ds(p3); }, p3 + ".idx", 18,
                      "sequence_count = 4611686018427387909 and document_count = 6 need more "
                      "than 2^64 - 1 bytes; the file has 142");
  Index no_documents = make_files<int32_t>(4, {}).index;
  no_documents.documents.clear();
  const std::string p4 = write(dir, "nodocs", no_documents.idx(), {});
  expect_format_error([&] { IndexedDataset ds(p4); }, p4 + ".idx", 26,
                      "document_count = 0; allowed: at least 1");
  Index first = f.index;
  first.documents[0] = 1;
  const std::string p5 = write(dir, "first", first.idx(), f.bin);
  expect_format_error([&] { IndexedDataset ds(p5); }, p5 + ".idx", first.documents_offset(0),
                      "document_indices[0] = 1; allowed: 0");
  Index last = f.index;
  last.documents.back() = 4;
  const std::string p6 = write(dir, "last", last.idx(), f.bin);
  expect_format_error([&] { IndexedDataset ds(p6); }, p6 + ".idx", last.documents_offset(5),
                      "document_indices[5] (the last) = 4; allowed: sequence_count = 5");
}

// A middle document's entry is checked when it is used: the file opens (O(1)), the others read,
// and that one fails on each access with the same error.
TEST(Indexed, BadLengthsAndPointersAreFoundWhenUsed) {
  const TempDir dir;
  const Files f = sample_files();
  Index negative = f.index;
  negative.lengths[2] = -1;
  const std::string p1 = write(dir, "negative", negative.idx(), f.bin);
  const IndexedDataset ds1(p1);
  EXPECT_EQ(read_all(ds1, 3), (std::vector<int64_t>{4, 5, 6, 7}));
  int64_t out[8];
  for (int attempt = 0; attempt < 2; ++attempt) {
    expect_format_error([&] { ds1.length(2); }, p1 + ".idx", negative.length_offset(2),
                        "sequence_lengths[2] = -1; allowed: >= 0");
    expect_format_error([&] { ds1.read(2, 0, 0, out); }, p1 + ".idx", negative.length_offset(2),
                        "sequence_lengths[2] = -1; allowed: >= 0");
  }
  Index last_negative = f.index;
  last_negative.lengths[4] = -2;
  const std::string p2 = write(dir, "lastneg", last_negative.idx(), f.bin);
  expect_format_error([&] { IndexedDataset ds(p2); }, p2 + ".idx", f.index.length_offset(4),
                      "sequence_lengths[4] = -2; allowed: >= 0");

  // Document 3's pointer 4 bytes late: 3 ends past 4's start, 2 ends before 3's start.
  Index late = f.index;
  late.pointers[3] += 4;
  const std::string p3 = write(dir, "late", late.idx(), f.bin);
  const IndexedDataset ds3(p3);
  EXPECT_EQ(read_all(ds3, 4), (std::vector<int64_t>{8, 9}));
  EXPECT_EQ(ds3.length(3), 4u);  // length() reads the length only
  expect_format_error([&] { ds3.read(3, 0, 1, out); }, p3 + ".idx", late.pointer_offset(3),
                      "sequence_pointers[3] = 16 and sequence_lengths[3] = 4 (tokens of 4 bytes) "
                      "end at byte 32 of '" +
                          p3 + ".bin', but sequence_pointers[4] = 28; allowed: sequences back "
                               "to back");
  expect_format_error([&] { ds3.check_read(2, 0, 1); }, p3 + ".idx", late.pointer_offset(2),
                      "sequence_pointers[2] = 8 and sequence_lengths[2] = 1 (tokens of 4 bytes) "
                      "end at byte 12 of '" +
                          p3 + ".bin', but sequence_pointers[3] = 16");
  Index odd = f.index;
  odd.pointers[2] += 1;
  const std::string p4 = write(dir, "odd", odd.idx(), f.bin);
  const std::string allowed = "; allowed: a multiple of the token size 4 in [0, 36], the size of '";
  expect_format_error([&] { IndexedDataset(p4).read(2, 0, 1, out); }, p4 + ".idx",
                      odd.pointer_offset(2), "sequence_pointers[2] = 9" + allowed + p4 + ".bin'");
  // Pointers outside the .bin, found from either side; and a length that runs document 2 to a
  // pointer past the end (its end matches the next pointer): never read.
  for (int64_t bad : {int64_t{-8}, int64_t{40}, int64_t{1} << 62,
                      std::numeric_limits<int64_t>::min()}) {
    Index outside = f.index;
    outside.pointers[3] = bad;
    if (bad == 40) outside.lengths[2] = 8;
    const std::string p5 = write(dir, "outside", outside.idx(), f.bin);
    const IndexedDataset ds5(p5);
    for (uint64_t d : {2, 3}) {
      expect_format_error([&] { ds5.read(d, 0, 1, out); }, p5 + ".idx", outside.pointer_offset(3),
                          "sequence_pointers[3] = " + std::to_string(bad) + allowed);
    }
    EXPECT_EQ(read_all(ds5, 0), (std::vector<int64_t>{1, 2}));
  }
  Index last = f.index;
  last.pointers[4] = 3;
  const std::string p7 = write(dir, "last", last.idx(), f.bin);
  expect_format_error([&] { IndexedDataset ds(p7); }, p7 + ".idx", last.pointer_offset(4),
                      "sequence_pointers[4] = 3" + allowed);
  Index first = f.index;
  first.pointers[0] = 4;
  const std::string p6 = write(dir, "first", first.idx(), f.bin);
  expect_format_error([&] { IndexedDataset ds(p6); }, p6 + ".idx", first.pointer_offset(0),
                      "sequence_pointers[0] = 4; allowed: 0 (the first sequence starts the .bin)");
}

// Every byte of the .idx set to each of a few values: opening and reading every document either
// works or throws FormatError / std::out_of_range, never anything else, never a crash (the
// sanitizer builds of scripts/test.sh would see a read outside the mappings).
TEST(Indexed, EveryByteMutatedIsAnErrorOrData) {
  const TempDir dir;
  const Files f = sample_files();
  const Bytes good = f.index.idx();
  const std::string p = write(dir, "m", good, f.bin);
  int opened = 0, refused = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    for (unsigned char v : {0x00, 0x01, 0x04, 0x7F, 0x80, 0xFF}) {
      Bytes idx = good;
      if (idx[i] == v) continue;
      idx[i] = v;
      dir.write("m.idx", idx);
      try {
        const IndexedDataset ds(p);
        ++opened;
        for (uint64_t d = 0; d < ds.documents(); ++d) {
          try {
            // check_read first: a corrupt length must not size the buffer (2^31 tokens).
            std::vector<int64_t> out(ds.check_read(d, 0, ds.length(d)));
            ds.read(d, 0, out.size(), out.data());
          } catch (const FormatError&) {
          }
        }
      } catch (const FormatError&) {
        ++refused;
      }
    }
  }
  EXPECT_GT(opened, 0);
  EXPECT_GT(refused, 0);
}

// Out of the page cache (written back, then dropped): a read of them waits for the disk. Pages
// still mapped by a live IndexedSource stay.
void evict(const std::vector<std::string>& prefixes) {
  for (const std::string& prefix : prefixes) {
    const int fd = ::open((prefix + ".idx").c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

// The pages of `path` in the page cache now (mincore over a mapping of it): a read of any kind
// (pread, a mapping's fault, read-ahead) leaves its pages there, holes of a sparse file too.
uint64_t cached_pages(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  struct stat st {};
  ::fstat(fd, &st);
  const size_t bytes = static_cast<size_t>(st.st_size);
  void* map = bytes == 0 ? MAP_FAILED : ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return 0;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in_core((bytes + page - 1) / page);
  uint64_t cached = 0;
  if (::mincore(map, bytes, in_core.data()) == 0) {
    for (unsigned char c : in_core) cached += c & 1;
  }
  ::munmap(map, bytes);
  return cached;
}

// 10^8 documents (a sparse 2.8 GB .idx: every length and pointer 0) open without reading anything
// proportional to the count: a few pages of the .idx (its header, its last pointer) reach the page
// cache, where 690,000 would for a read of every length or pointer. Pages, not seconds: what is
// read does not depend on how busy the machine is.
TEST(Indexed, OpeningReadsNothingProportionalToTheDocuments) {
  const TempDir dir;
  const uint64_t n = 100000000;
  Bytes header = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
  put<uint64_t>(&header, 1);
  header.push_back(8);
  put<uint64_t>(&header, n);
  put<uint64_t>(&header, n + 1);
  const uint64_t size = 34 + 12 * n + 8 * (n + 1);
  const std::string prefix = dir.file("big");
  dir.write("big.bin", {});
  dir.write("big.idx", header);
  {
    Bytes last;
    put<int64_t>(&last, static_cast<int64_t>(n));
    const int fd = ::open((prefix + ".idx").c_str(), O_WRONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, last.data(), 8, static_cast<off_t>(size - 8)), 8);
    ::close(fd);
  }
  evict({prefix});  // what is cached after opening was read by opening
  const uint64_t before = cached_pages(prefix + ".idx");
  const IndexedDataset ds(prefix);
  // 1,024 pages (4 MB) allow the kernel's read-ahead around the two places read.
  EXPECT_LE(cached_pages(prefix + ".idx"), before + 1024);
  EXPECT_EQ(ds.documents(), n);
  EXPECT_EQ(ds.total_tokens(), 0u);
  EXPECT_EQ(ds.length(n / 2), 0u);
  EXPECT_EQ(ds.check_read(n - 1, 0, 0), 0u);
}

// The descriptors this process has open now.
int open_descriptors() {
  int n = 0;
  for (int fd = 0; fd < 65536; ++fd) n += ::fcntl(fd, F_GETFD) >= 0 ? 1 : 0;
  return n;
}

// A source of more shards than the open-file limit allows descriptors: each .bin's descriptor is
// closed once mapped, and the .idx descriptors are pooled (at most 64 open), so every document of
// 3,000 shards reads under a limit of 1,024 open files, and the process never holds more than 64
// descriptors for them. (Before the pool, a source opened 1,100 shards and failed: "cannot open:
// Too many open files".)
TEST(Indexed, ThousandsOfShardsOpenUnderTheOpenFileLimit) {
  const TempDir dir;
  std::vector<std::string> prefixes;
  for (int i = 0; i < 3000; ++i) {
    const std::vector<std::vector<int32_t>> docs = {{i, i + 1}, {}, {i}};
    prefixes.push_back(write(dir, "s" + std::to_string(i), make_files<int32_t>(4, docs)));
  }
  struct rlimit before;
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &before), 0);
  struct rlimit limited = before;
  limited.rlim_cur = std::min<rlim_t>(before.rlim_cur, 1024);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &limited), 0);
  const int base = open_descriptors();
  try {
    const IndexedSource source(prefixes);
    ASSERT_EQ(source.documents(), 9000u);
    EXPECT_LE(open_descriptors() - base, 64);
    for (int round = 0; round < 2; ++round) {  // the second round reopens every .idx
      for (uint64_t d = 0; d < source.documents(); ++d) {
        const int i = static_cast<int>(d / 3);
        std::vector<int64_t> tokens(source.length(d));
        source.read(d, 0, tokens.size(), tokens.data());
        const std::vector<int64_t> want =
            d % 3 == 0 ? std::vector<int64_t>{i, i + 1}
                       : d % 3 == 1 ? std::vector<int64_t>{} : std::vector<int64_t>{i};
        ASSERT_EQ(tokens, want) << "document " << d;
      }
      EXPECT_LE(open_descriptors() - base, 64);
    }
  } catch (...) {
    ::setrlimit(RLIMIT_NOFILE, &before);
    throw;
  }
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &before), 0);
}

// Several threads read a source of more shards than the pool keeps open, at once: every read is
// right while descriptors are closed and opened again under them (ThreadSanitizer runs this).
TEST(Indexed, ThreadsReadManyShardsAtOnce) {
  const TempDir dir;
  std::vector<std::string> prefixes;
  for (int i = 0; i < 200; ++i) {
    const std::vector<std::vector<int32_t>> docs = {{i, i}, {i}};
    prefixes.push_back(write(dir, "s" + std::to_string(i), make_files<int32_t>(4, docs)));
  }
  const IndexedSource source(prefixes);
  std::vector<std::thread> threads;
  std::vector<int> wrong(8, 0);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&source, &wrong, t] {
      for (uint64_t k = 0; k < 3 * source.documents(); ++k) {
        const uint64_t d = (k * 7919 + static_cast<uint64_t>(t) * 131) % source.documents();
        const int64_t i = static_cast<int64_t>(d / 2);
        std::vector<int64_t> tokens(source.length(d));
        source.read(d, 0, tokens.size(), tokens.data());
        if (tokens != (d % 2 == 0 ? std::vector<int64_t>{i, i} : std::vector<int64_t>{i})) {
          ++wrong[static_cast<size_t>(t)];
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(wrong, std::vector<int>(8, 0));
}

// A .idx whose descriptor was closed by the pool and that was replaced meanwhile is refused when
// it is read again, naming it, as a changed file is, never read as the new file's lengths.
TEST(Indexed, AShardReplacedWhileItsDescriptorWasClosedIsRefused) {
  const TempDir dir;
  std::vector<std::string> prefixes;
  for (int i = 0; i < 100; ++i) {
    const std::vector<std::vector<int32_t>> docs = {{i, i}};
    prefixes.push_back(write(dir, "s" + std::to_string(i), make_files<int32_t>(4, docs)));
  }
  const IndexedSource source(prefixes);
  // Every other shard read after it (the shards open in parallel, in no set order): shard 0 is the
  // least recently read, and closed.
  for (uint64_t d = 1; d < 100; ++d) EXPECT_EQ(source.length(d), 2u);
  const std::vector<std::vector<int32_t>> other = {{7, 7, 7}, {7}};  // another size
  const Files replaced = make_files<int32_t>(4, other);
  ::unlink((prefixes[0] + ".idx").c_str());
  dir.write("s0.idx", replaced.index.idx());
  expect_runtime_error([&] { source.length(0); }, prefixes[0] + ".idx",
                       "changed since it was opened");
}

// Four shards of kBatchedDocuments documents each (a shard's lengths: 195 pages, several reads
// a batch), the length of document d (counted across the shards) batched_length(d), their
// files out of the page cache: reads of them are slow.
constexpr uint64_t kBatchedDocuments = 200000;
uint32_t batched_length(uint64_t d) {
  return static_cast<uint32_t>((d * 7 + d / kBatchedDocuments) % 11);
}

std::vector<std::string> write_batched_shards(const TempDir& dir) {
  std::vector<std::string> prefixes;
  for (uint64_t i = 0; i < 4; ++i) {
    std::vector<std::vector<int32_t>> docs(kBatchedDocuments);
    for (uint64_t d = 0; d < kBatchedDocuments; ++d) {
      docs[d].assign(batched_length(i * kBatchedDocuments + d), static_cast<int32_t>(i));
    }
    prefixes.push_back(write(dir, "s" + std::to_string(i), make_files<int32_t>(4, docs)));
  }
  return prefixes;
}

// lengths() of many documents at once, in any order, out of range ones too, equals length() of
// each, from several threads at once while prefetch() reads ahead (ThreadSanitizer runs this;
// the ctest entry indexed_slow_reads runs it with every pread slow).
TEST(Indexed, BatchedLengthsAreEachDocumentsLength) {
  const TempDir dir;
  const std::vector<std::string> prefixes = write_batched_shards(dir);
  evict(prefixes);
  const IndexedSource source(prefixes);
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&source, &wrong, t] {
      for (uint64_t round = 0; round < 8; ++round) {
        std::vector<uint64_t> documents(2000);
        for (size_t k = 0; k < documents.size(); ++k) {
          documents[k] =
              hash_at(round * 4 + static_cast<uint64_t>(t), k) % (source.documents() + 10);
        }
        std::vector<uint64_t> next(documents.rbegin(), documents.rend());
        source.prefetch(next.data(), next.size());
        std::vector<uint32_t> got(documents.size());
        source.lengths(documents.data(), documents.size(), got.data());
        for (size_t k = 0; k < documents.size(); ++k) {
          const uint32_t want = documents[k] < source.documents() ? batched_length(documents[k])
                                                                  : DocumentLengths::kAskAlone;
          if (got[k] != want) ++wrong[static_cast<size_t>(t)];
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(wrong, std::vector<int>(4, 0));
  for (uint64_t d = 0; d < source.documents(); d += 997) {
    ASSERT_EQ(source.length(d), batched_length(d));
  }
}

// Under tests/support/read_latency.cc (every pread slow; *WhenSlow: run only by the ctest entry
// indexed_slow_reads), the pages of a batch not in the page cache are read with the pool's help:
// after the caller's first slow read, the pool's threads read the rest alongside it. From one
// thread, nothing prefetched, so that the pool is idle: with 4 threads prefetching (the test
// above), the pool's threads could all be busy with prefetches while a caller read its few ranges
// alone, and nothing was helped (1 run in 15 on 2 busy cores). A helper that the scheduler starts
// only after the caller has read every range is not counted either: up to 5 cold tries, each 4
// shards of several slow reads.
TEST(Indexed, ColdLengthsAreReadWithThePoolsHelpWhenSlow) {
  if (std::getenv("READ_LATENCY_US") == nullptr) {
    DISTSAMPLER_SKIP("reads are not slowed: the ctest entry indexed_slow_reads runs it, with "
                     "tests/support/read_latency.cc preloaded");
  }
  const TempDir dir;
  const std::vector<std::string> prefixes = write_batched_shards(dir);
  std::vector<uint64_t> documents(4 * kBatchedDocuments);
  for (uint64_t d = 0; d < documents.size(); ++d) documents[d] = d;
  for (int attempt = 0; attempt < 5; ++attempt) {
    evict(prefixes);
    const IndexedSource source(prefixes);
    const uint64_t opened = detail::ranges_read_with_help();  // opening reads headers with help
    std::vector<uint32_t> got(documents.size());
    source.lengths(documents.data(), documents.size(), got.data());
    for (uint64_t d = 0; d < documents.size(); d += 997) ASSERT_EQ(got[d], batched_length(d));
    if (detail::ranges_read_with_help() > opened) return;
  }
  ADD_FAILURE() << "5 cold batches of slow reads, none read with the pool's help";
}

// The kB of `path` this process has mapped and resident (/proc/self/smaps: Rss of each mapping
// of that file).
uint64_t mapped_kb(const std::string& path) {
  FILE* smaps = std::fopen("/proc/self/smaps", "r");
  if (smaps == nullptr) return 0;
  char line[4096];
  bool ours = false;
  uint64_t kb = 0;
  while (std::fgets(line, sizeof line, smaps) != nullptr) {
    const std::string text(line);
    unsigned long long value = 0;
    if (std::sscanf(line, "Rss: %llu kB", &value) == 1) {
      if (ours) kb += value;
    } else if (text.find('-') < text.find(' ') &&
               std::isxdigit(static_cast<unsigned char>(line[0]))) {  // a mapping's first line
      ours = text.size() > path.size() &&
             text.compare(text.size() - 1 - path.size(), path.size(), path) == 0;
    }
  }
  std::fclose(smaps);
  return kb;
}

// The pages of lengths blocks a process holds mapped stay within the budget
// (PageCachedRange::set_mapped_budget; 512 MB unless set), however many lengths it reads through
// the mapping: after every read, the shard's mapped pages are at most the budget. With a budget
// above the block, the same reads leave most of it mapped (what the check would see unbounded).
TEST(Indexed, MappedLengthsStayWithinTheBudget) {
  const TempDir dir;
  constexpr uint64_t kDocuments = 400000;  // 391 pages of lengths
  std::vector<std::vector<int32_t>> docs(kDocuments);
  for (uint64_t d = 0; d < kDocuments; ++d) docs[d].assign(d % 3, 1);
  const std::string prefix = write(dir, "mapped", make_files<int32_t>(4, docs));
  const uint64_t page_kb = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)) / 1024;
  auto read_all_lengths = [&](const IndexedDataset& ds, uint64_t budget_kb) {
    uint64_t most = 0;
    for (uint64_t round = 0; round < 100; ++round) {
      std::vector<uint64_t> documents(2048);  // dense: read through the mapping
      for (size_t k = 0; k < documents.size(); ++k) documents[k] = hash_at(round, k) % kDocuments;
      std::vector<uint32_t> got(documents.size());
      ds.lengths(documents.data(), documents.size(), got.data());
      for (size_t k = 0; k < documents.size(); ++k) {
        EXPECT_EQ(got[k], documents[k] % 3) << "document " << documents[k];
      }
      const uint64_t kb = mapped_kb(prefix + ".idx");
      if (budget_kb > 0) {
        EXPECT_LE(kb, budget_kb) << "round " << round;
      }
      most = std::max(most, kb);
    }
    return most;
  };
  const uint64_t before = detail::PageCachedRange::set_mapped_budget(64);
  EXPECT_EQ(before, detail::PageCachedRange::kMappedBudget);
  {
    const IndexedDataset ds(prefix);
    read_all_lengths(ds, 64 * page_kb);
  }
  detail::PageCachedRange::set_mapped_budget(before);
  const IndexedDataset ds(prefix);
  EXPECT_GT(read_all_lengths(ds, 0), 300 * page_kb);
}

// A .idx cut short while open: lengths() gives kAskAlone for the documents past its end (never
// reading a lost page of the mapping), and length() of one of them says what happened.
TEST(Indexed, LengthsPastAnIdxTruncatedWhileOpenAreAskedAlone) {
  const TempDir dir;
  std::vector<std::vector<int32_t>> docs(5000);
  for (size_t d = 0; d < docs.size(); ++d) docs[d].assign(d % 5, 1);
  const std::string prefix = write(dir, "cut", make_files<int32_t>(4, docs));
  const IndexedDataset ds(prefix);
  ASSERT_EQ(::truncate((prefix + ".idx").c_str(), 34 + 4 * 1500), 0);  // 1,500 lengths left
  std::vector<uint64_t> documents = {0, 1499, 1500, 4999, 2};
  std::vector<uint32_t> got(documents.size());
  ds.lengths(documents.data(), documents.size(), got.data());
  EXPECT_EQ(got, (std::vector<uint32_t>{0, 4, DocumentLengths::kAskAlone,
                                        DocumentLengths::kAskAlone, 2}));
  expect_runtime_error([&] { ds.length(4999); }, prefix + ".idx", "truncated while open");
}

// Documents too few for the pages of their lengths (fewer than one per kDense pages: each fault on
// the mapping would map a block of pages around it for one length), in pages not seen in the page
// cache: lengths() reads those with pread, mapping none. The same answers, and past the end of a
// .idx truncated while open, kAskAlone. (The file was just written, so the range is made not to
// ask the page cache about it: as a cold file reads.)
TEST(Indexed, LengthsOfFewDocumentsOfALargeShardAreReadWithPread) {
  const bool asked = detail::PageCachedRange::set_ask_whole(false);
  struct Restore {
    bool asked;
    ~Restore() { detail::PageCachedRange::set_ask_whole(asked); }
  } restore{asked};
  const TempDir dir;
  constexpr uint64_t kDocuments = 4300000;  // 4,200 pages of lengths
  constexpr uint64_t kAsked = 500;
  ASSERT_LT(kAsked * IndexedDataset::kDense, 4 * kDocuments / 4096);
  Index index;
  index.documents.push_back(0);
  int64_t bytes = 0;
  for (uint64_t d = 0; d < kDocuments; ++d) {
    index.lengths.push_back(static_cast<int32_t>(d % 3));
    index.pointers.push_back(bytes);
    bytes += 4 * static_cast<int64_t>(d % 3);
    index.documents.push_back(static_cast<int64_t>(d + 1));
  }
  const std::string prefix = write(dir, "big", index.idx(), Bytes(static_cast<size_t>(bytes), 0));
  const IndexedDataset ds(prefix);
  std::vector<uint64_t> documents;
  for (uint64_t k = 0; k < kAsked; ++k) documents.push_back(hash_at(7, k) % (kDocuments + 5));
  std::vector<uint32_t> got(documents.size());
  ds.lengths(documents.data(), documents.size(), got.data());
  for (size_t k = 0; k < documents.size(); ++k) {
    const uint32_t want = documents[k] < kDocuments ? static_cast<uint32_t>(documents[k] % 3)
                                                    : DocumentLengths::kAskAlone;
    ASSERT_EQ(got[k], want) << "document " << documents[k];
  }
  EXPECT_EQ(mapped_kb(prefix + ".idx"), 0u) << "read through the mapping";
  ASSERT_EQ(::truncate((prefix + ".idx").c_str(), 34 + 4 * 2000000), 0);
  ds.lengths(documents.data(), documents.size(), got.data());
  for (size_t k = 0; k < documents.size(); ++k) {
    const uint32_t want = documents[k] < 2000000 ? static_cast<uint32_t>(documents[k] % 3)
                                                 : DocumentLengths::kAskAlone;
    ASSERT_EQ(got[k], want) << "document " << documents[k] << " after the truncation";
  }
}

// The same few documents of a shard whose lengths the page cache holds (it was just written): the
// range asks the kernel once about all of its pages (cachestat, or mincore where the kernel has
// none) and reads them through the mapping, pread costing a system call a document where a fault
// maps 16 pages at once. A warm plan's first windows are such reads.
TEST(Indexed, LengthsOfFewDocumentsInThePageCacheAreReadThroughTheMapping) {
  const TempDir dir;
  constexpr uint64_t kDocuments = 1000000;  // 977 pages of lengths, under kAskWholePages
  constexpr uint64_t kAsked = 100;
  ASSERT_LT(kAsked * IndexedDataset::kDense, 4 * kDocuments / 4096);
  std::vector<std::vector<int32_t>> docs(kDocuments);
  for (uint64_t d = 0; d < kDocuments; ++d) docs[d].assign(d % 3, 1);
  const std::string prefix = write(dir, "warm", make_files<int32_t>(4, docs));
  const IndexedDataset ds(prefix);
  std::vector<uint64_t> documents;
  for (uint64_t k = 0; k < kAsked; ++k) documents.push_back(hash_at(9, k) % kDocuments);
  std::vector<uint32_t> got(documents.size());
  ds.lengths(documents.data(), documents.size(), got.data());
  for (size_t k = 0; k < documents.size(); ++k) {
    ASSERT_EQ(got[k], documents[k] % 3) << "document " << documents[k];
  }
  EXPECT_GT(mapped_kb(prefix + ".idx"), 0u) << "read with pread";
}

// A .idx whose descriptor the pool closed (other shards were read since), then cut short: a
// later read through the mapping learns the file's size from its path (the same file, shorter),
// not by opening it again, and gives kAskAlone past the cut, never reading a lost page.
TEST(Indexed, AShardCutShortWhileItsDescriptorWasClosedIsReadUpToItsEnd) {
  const TempDir dir;
  std::vector<std::string> prefixes;
  constexpr uint64_t kDocuments = 5000;
  std::vector<std::vector<int32_t>> docs(kDocuments);
  for (uint64_t d = 0; d < kDocuments; ++d) docs[d].assign(d % 5, 1);
  for (int i = 0; i < 100; ++i) {
    prefixes.push_back(write(dir, "s" + std::to_string(i), make_files<int32_t>(4, docs)));
  }
  const IndexedSource source(prefixes);
  for (uint64_t d = kDocuments; d < 100 * kDocuments; d += kDocuments) {
    EXPECT_EQ(source.length(d + 4), 4u);  // shard 0: the least recently read, and closed
  }
  ASSERT_EQ(::truncate((prefixes[0] + ".idx").c_str(), 34 + 4 * 1500), 0);  // 1,500 left
  std::vector<uint64_t> documents(kDocuments);  // dense: read through the mapping
  for (uint64_t d = 0; d < kDocuments; ++d) documents[d] = d;
  std::vector<uint32_t> got(documents.size());
  source.lengths(documents.data(), documents.size(), got.data());
  for (uint64_t d = 0; d < kDocuments; ++d) {
    ASSERT_EQ(got[d], d < 1500 ? d % 5 : DocumentLengths::kAskAlone) << "document " << d;
  }
}

}  // namespace
}  // namespace distsampler
