#include "distsampler/loader/npy.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "distsampler/loader/data_loader.h"
#include "distsampler/sampler.h"
#include "temp_dir.h"

namespace distsampler {
namespace {

using testing_util::expect_format_error;
using testing_util::TempDir;
using Bytes = std::vector<unsigned char>;

// A .npy file as numpy writes it: magic, version, header length, the dict padded with spaces to a
// multiple of 64 bytes in all and ended by '\n', then `data`.
Bytes npy_bytes(const std::string& dict, const Bytes& data, unsigned major = 1) {
  const size_t prefix = major == 1 ? 10 : 12;
  std::string header = dict;
  while ((prefix + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  Bytes b = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<unsigned char>(major), 0};
  const size_t len = header.size();
  for (size_t i = 0; i < prefix - 8; ++i) b.push_back(static_cast<unsigned char>(len >> (8 * i)));
  b.insert(b.end(), header.begin(), header.end());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

Bytes floats(std::vector<float> v) {
  Bytes b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

TEST(Npy, MapsRowsAsSamples) {
  const TempDir dir;
  const std::string p =
      dir.write("x.npy", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }",
                                   floats({0, 1, 2, 3, 4.5f, 5})));
  const std::string l = dir.write(
      "y.npy", npy_bytes("{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }",
                         Bytes{7, 0, 0, 0, 0,    0,    0,    0,    8,    0,    0,    0,
                               0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}));
  const NpyDataset ds(p, l);
  EXPECT_EQ(ds.size(), 3u);
  EXPECT_EQ(ds.spec().shape, (std::vector<uint64_t>{2}));
  EXPECT_EQ(ds.spec().dtype, DType::kFloat32);
  float out[2];
  ds.read(2, out);
  EXPECT_EQ(out[0], 4.5f);
  EXPECT_EQ(out[1], 5.0f);
  EXPECT_EQ(ds.label(0), 7);
  EXPECT_EQ(ds.label(2), -1);
  EXPECT_THROW(ds.read(3, out), std::out_of_range);
}

TEST(Npy, AcceptsNumpyVariants) {
  const TempDir dir;
  // Key order, version 2.0 and 3.0, no trailing comma, 1-byte types, empty arrays.
  NpyArray a(
      dir.write("a.npy", npy_bytes("{'shape': (2, 1, 2), 'fortran_order': False, 'descr': '|u1'}",
                                   Bytes{1, 2, 3, 4}, 2)));
  EXPECT_EQ(a.shape(), (std::vector<uint64_t>{2, 1, 2}));
  EXPECT_EQ(a.data()[3], 4);
  EXPECT_EQ(a.data_offset() % 64, 0u);
  const NpyArray b(dir.write(
      "b.npy", npy_bytes("{'descr': '|i1', 'fortran_order': False, 'shape': (0, 5), }", {}, 3)));
  EXPECT_EQ(b.shape(), (std::vector<uint64_t>{0, 5}));
  EXPECT_EQ(NpyDataset(dir.file("b.npy")).size(), 0u);
  NpyArray moved = std::move(a);
  EXPECT_EQ(moved.data()[0], 1);
}

TEST(Npy, StrictHeader) {
  const TempDir dir;
  struct Case {
    std::string dict;
    uint64_t column;  // offset of the problem inside the dict
    std::string text;
  };
  const std::vector<Case> cases = {
      {"{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", 10, "descr '>f4'"},
      {"{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }", 34, "fortran_order True"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1), }", 52, "1-tuple"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", 56, "unknown key 'x'"},
      {"{'descr': '<f4', 'descr': '<f4', 'shape': (1,), }", 17, "appears twice"},
      {"{'descr': '<f4', 'shape': (1,), }", 32, "missing key 'fortran_order'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,-2), }", 53, "expected a dimension"},
      {"{'descr': '<f4' 'fortran_order': False, 'shape': (1,), }", 16, "expected ',' or '}'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,), } x", 58, "must end"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string p =
        dir.write("h" + std::to_string(i) + ".npy", npy_bytes(cases[i].dict, Bytes(4)));
    expect_format_error([&] { NpyArray a(p); }, p, 10 + cases[i].column, cases[i].text);
  }
}

TEST(Npy, CorruptFilesNameFileAndOffset) {
  const TempDir dir;
  const Bytes good = npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }",
                               floats({1, 2, 3, 4}));
  Bytes bad_magic = good;
  bad_magic[1] = 'n';
  const std::string p1 = dir.write("magic.npy", bad_magic);
  expect_format_error([&] { NpyArray a(p1); }, p1, 0, "bad magic");
  Bytes bad_version = good;
  bad_version[6] = 4;
  const std::string p2 = dir.write("version.npy", bad_version);
  expect_format_error([&] { NpyArray a(p2); }, p2, 6, "format version 4.0");
  const std::string p3 = dir.write("short.npy", Bytes(good.begin(), good.begin() + 5));
  expect_format_error([&] { NpyArray a(p3); }, p3, 5, "truncated");
  const std::string p4 = dir.write("header.npy", Bytes(good.begin(), good.begin() + 40));
  expect_format_error([&] { NpyArray a(p4); }, p4, 40, "the header needs 118 bytes from offset 10");
  const std::string p5 = dir.write("data.npy", Bytes(good.begin(), good.end() - 3));
  expect_format_error([&] { NpyArray a(p5); }, p5, 141, "the data needs 16 bytes from offset 128");
  Bytes trailing = good;
  trailing.push_back(0);
  const std::string p6 = dir.write("trailing.npy", trailing);
  expect_format_error([&] { NpyArray a(p6); }, p6, 144, "1 trailing bytes");
  const std::string p7 = dir.write("empty.npy", {});
  expect_format_error([&] { NpyArray a(p7); }, p7, 0, "truncated");
  EXPECT_THROW(NpyArray(dir.file("missing.npy")), std::runtime_error);
}

TEST(Npy, DatasetRejectsBadShapes) {
  const TempDir dir;
  const std::string scalar = dir.write(
      "s.npy", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", Bytes(4)));
  EXPECT_THROW(NpyDataset{scalar}, std::invalid_argument);
  const std::string x = dir.write(
      "x.npy", npy_bytes("{'descr': '|u1', 'fortran_order': False, 'shape': (3, 1), }", Bytes(3)));
  const std::string float_labels = dir.write(
      "f.npy", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", Bytes(12)));
  const std::string short_labels = dir.write(
      "l.npy", npy_bytes("{'descr': '|u1', 'fortran_order': False, 'shape': (2,), }", Bytes(2)));
  EXPECT_THROW(NpyDataset(x, float_labels), std::invalid_argument);
  EXPECT_THROW(NpyDataset(x, short_labels), std::invalid_argument);
}

// Rows of `row_bytes` bytes, row i filled with (i * 7 + byte) & 0xFF, as a 2-D uint8 .npy.
std::string write_rows(const TempDir& dir, const std::string& name, uint64_t rows,
                       uint64_t row_bytes) {
  Bytes data(rows * row_bytes);
  for (size_t b = 0; b < data.size(); ++b) {
    data[b] = static_cast<unsigned char>((b / row_bytes) * 7 + b % row_bytes);
  }
  return dir.write(
      name, npy_bytes("{'descr': '|u1', 'fortran_order': False, 'shape': (" + std::to_string(rows) +
                          ", " + std::to_string(row_bytes) + "), }",
                      data));
}

// A dataset rewritten in place during training: the .npy shrinks between two batches of a loader
// epoch. Over a memory map that was SIGBUS; now it is an error naming the file, after the batches
// read before it, with every thread count.
TEST(Npy, TruncatedDuringALoaderEpochIsAnErrorNamingTheFile) {
  const TempDir dir;
  constexpr uint64_t kRows = 256, kRowBytes = 1024;  // 64 pages: a cut leaves most rows behind it
  SamplerOptions o;
  o.size = kRows;
  const DistributedSampler sampler(o);
  for (unsigned threads : {0u, 1u, 2u}) {
    SCOPED_TRACE("threads=" + std::to_string(threads));
    const std::string p = write_rows(dir, "x.npy", kRows, kRowBytes);
    const auto ds = std::make_shared<NpyDataset>(p);
    DataLoader loader(ds, sampler.epoch(0), {8, false, threads, 2});
    Batch batch;
    for (int k = 0; k < 2; ++k) {
      ASSERT_TRUE(loader.next(batch));
      const uint64_t i = batch.indices[3];
      EXPECT_EQ(batch.data[3 * kRowBytes + 5], static_cast<unsigned char>(i * 7 + 5));
    }
    ASSERT_EQ(::truncate(p.c_str(), 128 + 4 * kRowBytes), 0) << std::strerror(errno);
    try {
      while (loader.next(batch)) {
      }
      ADD_FAILURE() << "the epoch ended without an error";
    } catch (const SampleReadError& e) {
      EXPECT_NE(std::string(e.what()).find("'" + p + "'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("changed size while open"), std::string::npos)
          << e.what();
      try {
        std::rethrow_exception(e.cause());
      } catch (const FormatError& cause) {
        EXPECT_EQ(cause.file(), p);
      }
    }
  }
}

// The size check and the read are two steps: a file that shrinks between them gives a short read,
// also an error naming the file. One thread shrinks and regrows the file while another reads.
TEST(Npy, ShrinkingUnderConcurrentReadsIsAnErrorNeverASignal) {
  const TempDir dir;
  constexpr uint64_t kRows = 64, kRowBytes = 4096;
  const std::string p = write_rows(dir, "x.npy", kRows, kRowBytes);
  const NpyDataset ds(p);
  const off_t full = static_cast<off_t>(128 + kRows * kRowBytes);
  std::atomic<bool> done{false};
  std::thread resizer([&] {
    while (!done.load()) {
      EXPECT_EQ(::truncate(p.c_str(), 128 + kRowBytes), 0);
      EXPECT_EQ(::truncate(p.c_str(), full), 0);
    }
  });
  std::vector<uint64_t> indices(kRows);
  for (uint64_t i = 0; i < kRows; ++i) indices[i] = kRows - 1 - i;  // the far rows first
  std::vector<unsigned char> out(kRows * kRowBytes);
  uint64_t errors = 0, reads = 0;
  // 300 ms, longer (up to 10 s) until the first error on a loaded machine.
  const auto start = std::chrono::steady_clock::now();
  const auto elapsed = [&] { return std::chrono::steady_clock::now() - start; };
  while (elapsed() < std::chrono::milliseconds(300) ||
         (errors == 0 && elapsed() < std::chrono::seconds(10))) {
    ++reads;
    try {
      if (reads % 2 == 0) {
        ds.read_batch(indices.data(), kRows, out.data(), nullptr);
      } else {
        ds.read(kRows - 1, out.data());
      }
    } catch (const FormatError& e) {
      ++errors;
      EXPECT_EQ(e.file(), p);
      const std::string what = e.what();
      EXPECT_TRUE(what.find("changed size while open") != std::string::npos ||
                  what.find("shrank while open") != std::string::npos)
          << what;
    }
  }
  done = true;
  resizer.join();
  EXPECT_GT(errors, 0u);
}

TEST(Npy, GrownFileIsAnError) {
  const TempDir dir;
  const std::string p = write_rows(dir, "x.npy", 4, 16);
  const NpyDataset ds(p);
  unsigned char row[16];
  ds.read(3, row);
  EXPECT_EQ(row[1], 3 * 7 + 1);
  ASSERT_EQ(::truncate(p.c_str(), 128 + 4 * 16 + 1), 0);
  expect_format_error([&] { ds.read(0, row); }, p, 192,
                      "the file changed size while open: 192 bytes when opened, 193 now");
  const uint64_t index = 1;
  expect_format_error([&] { ds.read_batch(&index, 1, row, nullptr); }, p, 192,
                      "changed size while open");
}

// A FIFO, a directory or a device as the array or the labels: an error naming the path, and no
// wait for a writer on the FIFO. Open failures carry the errno text.
TEST(Npy, OnlyRegularFilesAreOpened) {
  const TempDir dir;
  const std::string good = write_rows(dir, "x.npy", 2, 1);
  for (const auto& bad : testing_util::not_regular_files(dir)) {
    SCOPED_TRACE(bad.path);
    const auto check = [&](auto f) {
      if (bad.fifo) {
        testing_util::expect_fifo_refused(f, bad.path, bad.text);
      } else {
        testing_util::expect_runtime_error(f, bad.path, bad.text);
      }
    };
    check([&] { NpyArray a(bad.path); });
    check([&] { NpyDataset d(bad.path); });
    check([&] { NpyDataset d(good, bad.path); });
  }
  const std::string missing = dir.file("missing.npy");
  testing_util::expect_runtime_error([&] { NpyDataset d(missing); }, missing,
                                     std::string("cannot open: ") + std::strerror(ENOENT));
  const std::string under_file = good + "/x.npy";
  testing_util::expect_runtime_error([&] { NpyArray a(under_file); }, under_file,
                                     std::string("cannot open: ") + std::strerror(ENOTDIR));
}

// Zero rows hide no overflow: the element size times the non-zero dimensions must fit in
// 2^63 - 1 bytes (numpy's limit), or a row's byte count wraps (it was 4 for (0, 2^62 + 1) <f4,
// 2^64 - 8 for (0, 2^64 - 1) <i8).
TEST(Npy, ShapesWhoseSizeOverflowsAreRefused) {
  const TempDir dir;
  const auto dict = [](const std::string& descr, const std::string& shape) {
    return "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  };
  struct Case {
    std::string descr, shape;
    std::string dimension;  // the one refused, as written in the shape
    size_t k;
  };
  const std::vector<Case> cases = {
      {"<f4", "(0, 4611686018427387905)", "4611686018427387905", 1},
      {"<i8", "(0, 18446744073709551615)", "18446744073709551615", 1},
      {"<f4", "(0, 2305843009213693952)", "2305843009213693952", 1},  // 2^63 bytes
      {"<f8", "(0, 1048576, 1099511627776)", "1099511627776", 2},
      {"|u1", "(3, 0, 9223372036854775808)", "9223372036854775808", 2},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const std::string text = dict(c.descr, c.shape);
    const std::string p = dir.write("o" + std::to_string(i) + ".npy", npy_bytes(text, {}));
    const uint64_t at = 10 + text.find(c.dimension);
    const std::string message =
        "shape dimension " + std::to_string(c.k) + " = " + c.dimension + " is too large";
    expect_format_error([&] { NpyArray a(p); }, p, at, message);
    expect_format_error([&] { NpyDataset d(p); }, p, at, message);
  }
  // At the limit: an empty array whose rows would take 2^63 - 4 bytes.
  const std::string fits =
      dir.write("fits.npy", npy_bytes(dict("<f4", "(0, 2305843009213693951)"), {}));
  const NpyDataset empty(fits);
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_EQ(empty.spec().bytes(), (uint64_t{1} << 63) - 4);
}

}  // namespace
}  // namespace distsampler
