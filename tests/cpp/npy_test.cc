#include "distsampler/loader/npy.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace distsampler
