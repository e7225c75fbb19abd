#include "distsampler/loader/idx.h"

#include <gtest/gtest.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "temp_dir.h"

namespace distsampler {
namespace {

using testing_util::expect_format_error;
using testing_util::TempDir;
using Bytes = std::vector<unsigned char>;

// An IDX file: magic {0, 0, type, dims}, big-endian uint32 dimensions, then `payload`.
Bytes idx_bytes(unsigned char type, const std::vector<uint32_t>& dims, const Bytes& payload) {
  Bytes b = {0, 0, type, static_cast<unsigned char>(dims.size())};
  for (uint32_t d : dims) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<unsigned char>(d >> s));
  }
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

TEST(Idx, ReadsRawAndGzipAlike) {
  const TempDir dir;
  Bytes payload(3 * 2 * 2);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<unsigned char>(i * 7);
  const Bytes file = idx_bytes(0x08, {3, 2, 2}, payload);
  for (const std::string& path : {dir.write("a.idx", file), dir.write_gz("a.idx.gz", file)}) {
    const IdxArray a = read_idx(path);
    EXPECT_EQ(a.dims, (std::vector<uint64_t>{3, 2, 2}));
    EXPECT_EQ(a.dtype, DType::kUInt8);
    EXPECT_EQ(a.data, payload);
  }
}

TEST(Idx, ConvertsBigEndianElementsToNative) {
  const TempDir dir;
  const IdxArray s = read_idx(dir.write("s.idx", idx_bytes(0x0B, {2}, {0x01, 0x02, 0xFF, 0xFE})));
  ASSERT_EQ(s.dtype, DType::kInt16);
  int16_t v[2];
  std::memcpy(v, s.data.data(), 4);
  EXPECT_EQ(v[0], 0x0102);
  EXPECT_EQ(v[1], -2);
  // 1.5f is 0x3FC00000.
  const IdxArray f = read_idx(dir.write("f.idx", idx_bytes(0x0D, {1}, {0x3F, 0xC0, 0, 0})));
  float x;
  std::memcpy(&x, f.data.data(), 4);
  EXPECT_EQ(x, 1.5f);
}

TEST(Idx, DatasetWithLabels) {
  const TempDir dir;
  const std::string images = dir.write("i.idx", idx_bytes(0x08, {3, 2}, {1, 2, 3, 4, 5, 6}));
  const std::string labels = dir.write_gz("l.idx.gz", idx_bytes(0x08, {3}, {7, 8, 9}));
  const InMemoryDataset ds = load_idx_dataset(images, labels);
  EXPECT_EQ(ds.size(), 3u);
  EXPECT_EQ(ds.spec().shape, (std::vector<uint64_t>{2}));
  unsigned char out[2];
  ds.read(2, out);
  EXPECT_EQ(out[0], 5);
  EXPECT_EQ(ds.label(1), 8);
  const std::string short_labels = dir.write("s.idx", idx_bytes(0x08, {2}, {7, 8}));
  EXPECT_THROW(load_idx_dataset(images, short_labels), std::invalid_argument);
  EXPECT_THROW(load_idx_dataset(images, images), std::invalid_argument);  // 2-D labels
}

TEST(Idx, CorruptFilesNameFileAndOffset) {
  const TempDir dir;
  const Bytes good = idx_bytes(0x08, {4, 3}, Bytes(12, 1));
  Bytes bad_magic = good;
  bad_magic[0] = 0x1F;
  const std::string p1 = dir.write("magic.idx", bad_magic);
  expect_format_error([&] { read_idx(p1); }, p1, 0, "bad magic");
  Bytes bad_type = good;
  bad_type[2] = 0x0A;
  const std::string p2 = dir.write("type.idx", bad_type);
  expect_format_error([&] { read_idx(p2); }, p2, 2, "element type 0x0A");
  Bytes no_dims = good;
  no_dims[3] = 0;
  const std::string p3 = dir.write("dims.idx", no_dims);
  expect_format_error([&] { read_idx(p3); }, p3, 3, "0 dimensions");
  // Cut inside the second dimension (bytes 8..11) and inside the data (bytes 12..23).
  const std::string p4 = dir.write("header.idx", Bytes(good.begin(), good.begin() + 10));
  expect_format_error([&] { read_idx(p4); }, p4, 10, "dimension 1 needs 4 bytes from offset 8");
  const std::string p5 = dir.write("data.idx", Bytes(good.begin(), good.end() - 5));
  expect_format_error([&] { read_idx(p5); }, p5, 19, "the data needs 12 bytes from offset 12");
  const std::string p6 = dir.write_gz("data.idx.gz", Bytes(good.begin(), good.end() - 5));
  expect_format_error([&] { read_idx(p6); }, p6, 19, "decompressed stream ends after 7");
  Bytes trailing = good;
  trailing.push_back(0);
  const std::string p7 = dir.write("trailing.idx", trailing);
  expect_format_error([&] { read_idx(p7); }, p7, 24, "trailing bytes");
  EXPECT_THROW(read_idx(dir.file("missing.idx")), std::runtime_error);
}

// The data buffer grows as bytes arrive (1 MiB first): a header claiming 2^48 bytes of a file
// of 10 is a truncation error, not an allocation of the claimed size (std::bad_alloc, or
// gigabytes zero-filled before the error).
TEST(Idx, HugeClaimedDataIsATruncationNotAnAllocation) {
  const TempDir dir;
  const std::string p = dir.write("huge.idx", idx_bytes(0x08, {0xFFFFFFFFu, 0x10000}, Bytes(10)));
  expect_format_error(
      [&] { read_idx(p); }, p, 22,
      "the data needs 281474976645120 bytes from offset 12, the file ends after 10");
  const std::string gz = dir.write_gz("huge.idx.gz", idx_bytes(0x08, {0xFFFFFFFFu, 0x10000}, {}));
  expect_format_error([&] { read_idx(gz); }, gz, 12, "decompressed stream ends after 0");
}

TEST(Idx, DataLargerThanTheFirstBlock) {
  const TempDir dir;
  const uint32_t n = (1u << 26) + 5;
  Bytes payload(n);
  for (uint32_t i = 0; i < n; ++i) payload[i] = static_cast<unsigned char>(i * 2654435761u >> 24);
  const Bytes file = idx_bytes(0x08, {n}, payload);
  const IdxArray a = read_idx(dir.write("big.idx", file));
  EXPECT_EQ(a.dims, (std::vector<uint64_t>{n}));
  EXPECT_TRUE(a.data == payload);
  const std::string cut = dir.write("cut.idx", Bytes(file.begin(), file.end() - 2));
  expect_format_error([&] { read_idx(cut); }, cut, 8 + n - 2,
                      "the data needs " + std::to_string(n) + " bytes from offset 8");
}

TEST(Idx, CorruptGzipStream) {
  const TempDir dir;
  Bytes payload(20000);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<unsigned char>(i * i >> 3);
  const std::string full = dir.write_gz("full.gz", idx_bytes(0x08, {20000}, payload));
  const Bytes gz = testing_util::read_all(full);
  // A compressed stream cut in half: zlib reports the unexpected end.
  const std::string cut = dir.write("cut.gz", Bytes(gz.begin(), gz.begin() + gz.size() / 2));
  try {
    read_idx(cut);
    FAIL() << "no error";
  } catch (const FormatError& e) {
    EXPECT_EQ(e.file(), cut);
    EXPECT_LT(e.offset(), 20008u);
    EXPECT_NE(std::string(e.what()).find("gzip"), std::string::npos) << e.what();
  }
  // Garbage in the deflate data.
  Bytes flipped = gz;
  for (size_t i = 20; i < 40 && i < flipped.size(); ++i) flipped[i] ^= 0x5A;
  const std::string bad = dir.write("bad.gz", flipped);
  EXPECT_THROW(read_idx(bad), FormatError);
}

// A corrupt CRC or length in the gzip trailer is found where the data ends (20008 bytes in), not
// at offset 0 (where zlib's gzread reported it, having inflated everything in its first read).
TEST(Idx, GzipTrailerErrorsAtTheirOffset) {
  const TempDir dir;
  Bytes payload(20000);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<unsigned char>(i * i >> 3);
  const Bytes gz =
      testing_util::read_all(dir.write_gz("full.gz", idx_bytes(0x08, {20000}, payload)));
  Bytes bad_crc = gz;
  bad_crc[gz.size() - 8] ^= 1;
  const std::string p1 = dir.write("crc.gz", bad_crc);
  expect_format_error([&] { read_idx(p1); }, p1, 20008, "incorrect data check");
  Bytes bad_length = gz;
  bad_length[gz.size() - 1] ^= 1;
  const std::string p2 = dir.write("length.gz", bad_length);
  expect_format_error([&] { read_idx(p2); }, p2, 20008, "incorrect length check");
}

// Bytes after the gzip stream are refused, as trailing bytes of a raw file are (zlib's gzread
// ignored them); another gzip member is not garbage: members concatenate, as gzip defines.
TEST(Idx, GzipTrailingGarbageIsRefusedAndMembersConcatenate) {
  const TempDir dir;
  const Bytes file = idx_bytes(0x08, {4, 3}, Bytes(12, 9));
  const Bytes gz = testing_util::read_all(dir.write_gz("a.gz", file));
  for (const Bytes& garbage : {Bytes{0}, Bytes{'x', 'y', 'z'}, Bytes{0x1f}, Bytes(1000, 0)}) {
    Bytes bad = gz;
    bad.insert(bad.end(), garbage.begin(), garbage.end());
    const std::string p = dir.write("garbage.gz", bad);
    expect_format_error(
        [&] { read_idx(p); }, p, 24,
        "trailing bytes after the gzip stream: file offset " + std::to_string(gz.size()));
  }
  const Bytes head =
      testing_util::read_all(dir.write_gz("head.gz", Bytes(file.begin(), file.begin() + 10)));
  Bytes two = head;
  const Bytes tail =
      testing_util::read_all(dir.write_gz("tail.gz", Bytes(file.begin() + 10, file.end())));
  two.insert(two.end(), tail.begin(), tail.end());
  const IdxArray a = read_idx(dir.write("two.gz", two));
  EXPECT_EQ(a.dims, (std::vector<uint64_t>{4, 3}));
  EXPECT_EQ(a.data, Bytes(12, 9));
}

// A FIFO, a directory or a device: an error naming the path, without waiting for a writer on the
// FIFO. Open failures carry the errno text.
TEST(Idx, OnlyRegularFilesAreOpened) {
  const TempDir dir;
  const std::string good = dir.write("l.idx", idx_bytes(0x08, {2}, {1, 2}));
  for (const auto& bad : testing_util::not_regular_files(dir)) {
    SCOPED_TRACE(bad.path);
    const auto check = [&](auto f) {
      if (bad.fifo) {
        testing_util::expect_fifo_refused(f, bad.path, bad.text);
      } else {
        testing_util::expect_runtime_error(f, bad.path, bad.text);
      }
    };
    check([&] { read_idx(bad.path); });
    check([&] { load_idx_dataset(bad.path); });
    check([&] { load_idx_dataset(good, bad.path); });
  }
  const std::string missing = dir.file("missing.idx.gz");
  testing_util::expect_runtime_error([&] { read_idx(missing); }, missing,
                                     std::string("cannot open: ") + std::strerror(ENOENT));
  const std::string under_file = good + "/x.idx";
  testing_util::expect_runtime_error([&] { read_idx(under_file); }, under_file,
                                     std::string("cannot open: ") + std::strerror(ENOTDIR));
}

// Zero items hide no overflow: dimensions [0, 2^32 - 1, 2^32 - 1, 2^32 - 1] made a sample of
// (2^32 - 1)^3 bytes, wrapped. The element size times the non-zero dimensions must fit in
// 2^63 - 1 bytes; the error names the dimension where it stops fitting, at its offset.
TEST(Idx, DimensionsWhoseSizeOverflowsAreRefused) {
  const TempDir dir;
  const std::string p =
      dir.write("o.idx", idx_bytes(0x08, {0, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}, {}));
  expect_format_error([&] { read_idx(p); }, p, 12, "dimension 2 = 4294967295 is too large");
  const std::string gz =
      dir.write_gz("o.idx.gz", idx_bytes(0x0E, {0xFFFFFFFFu, 0, 0x10000000u, 0x10}, {}));
  expect_format_error([&] { read_idx(gz); }, gz, 16, "dimension 3 = 16 is too large: float64");
  // At the limit: 8-byte elements times 2^31 * 2^29 = 2^63 bytes do not fit, 2^62 do.
  const std::string fits =
      dir.write("fits.idx", idx_bytes(0x0E, {0, 0x80000000u, 0x10000000u}, {}));
  EXPECT_EQ(read_idx(fits).dims, (std::vector<uint64_t>{0, 0x80000000u, 0x10000000u}));
  const std::string over =
      dir.write("over.idx", idx_bytes(0x0E, {0, 0x80000000u, 0x20000000u}, {}));
  expect_format_error([&] { read_idx(over); }, over, 12, "dimension 2 = 536870912 is too large");
}

#ifndef DISTSAMPLER_FASHION_MNIST_DIR
#define DISTSAMPLER_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"
#endif

TEST(Idx, FashionMnist) {
  const std::string dir = DISTSAMPLER_FASHION_MNIST_DIR;
  for (const auto& [split, n] :
       {std::pair<std::string, uint64_t>{"train", 60000}, {"t10k", 10000}}) {
    const InMemoryDataset ds = load_idx_dataset(dir + "/" + split + "-images-idx3-ubyte.gz",
                                                dir + "/" + split + "-labels-idx1-ubyte.gz");
    ASSERT_EQ(ds.size(), n);
    EXPECT_EQ(ds.spec().shape, (std::vector<uint64_t>{28, 28}));
    EXPECT_EQ(ds.spec().dtype, DType::kUInt8);
    // Fashion-MNIST is balanced: n / 10 samples of each of the 10 classes.
    std::array<uint64_t, 10> count{};
    for (int64_t label : ds.labels()) {
      ASSERT_GE(label, 0);
      ASSERT_LT(label, 10);
      ++count[static_cast<size_t>(label)];
    }
    for (uint64_t c : count) EXPECT_EQ(c, n / 10);
  }
}

}  // namespace
}  // namespace distsampler
