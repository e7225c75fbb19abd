#include "distsampler/loader/dataset.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <vector>

namespace distsampler {
namespace {

TEST(InMemoryDataset, ReadsSamplesAndLabels) {
  std::vector<unsigned char> data(5 * 6);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i);
  const InMemoryDataset ds(SampleSpec{{2, 3}, DType::kUInt8}, data, {10, 11, 12, 13, 14});
  EXPECT_EQ(ds.size(), 5u);
  EXPECT_EQ(ds.spec().bytes(), 6u);
  EXPECT_TRUE(ds.has_labels());
  std::vector<unsigned char> out(6);
  ds.read(3, out.data());
  EXPECT_EQ(out, (std::vector<unsigned char>{18, 19, 20, 21, 22, 23}));
  EXPECT_EQ(ds.label(4), 14);
}

TEST(InMemoryDataset, ReadBatchEqualsReadingEachSample) {
  const uint64_t n = 300, bytes = 100;
  std::vector<unsigned char> data(n * bytes);
  std::vector<int64_t> labels(n);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 31 + i / 97);
  for (uint64_t i = 0; i < n; ++i) labels[i] = static_cast<int64_t>(i * 3);
  const InMemoryDataset ds(SampleSpec{{bytes}, DType::kUInt8}, data, labels);
  const std::vector<uint64_t> indices = {299, 0, 17, 17, 150, 3, 298, 1, 42};
  std::vector<unsigned char> got(indices.size() * bytes), want(got.size());
  std::vector<int64_t> got_labels(indices.size());
  ds.read_batch(indices.data(), indices.size(), got.data(), got_labels.data());
  for (size_t j = 0; j < indices.size(); ++j) {
    ds.read(indices[j], want.data() + j * bytes);
    EXPECT_EQ(got_labels[j], ds.label(indices[j]));
  }
  EXPECT_EQ(got, want);
  const std::vector<uint64_t> bad = {1, 300};
  EXPECT_THROW(ds.read_batch(bad.data(), 2, got.data(), got_labels.data()), std::out_of_range);
}

TEST(InMemoryDataset, WiderTypes) {
  std::vector<unsigned char> data(3 * 2 * sizeof(float));
  const InMemoryDataset ds(SampleSpec{{2}, DType::kFloat32}, data);
  EXPECT_EQ(ds.size(), 3u);
  EXPECT_FALSE(ds.has_labels());
  EXPECT_THROW(ds.label(0), std::logic_error);
  EXPECT_EQ(dtype_size(DType::kFloat64), 8u);
  EXPECT_EQ(to_string(DType::kInt16), "int16");
}

TEST(InMemoryDataset, RejectsBadInput) {
  EXPECT_THROW(InMemoryDataset(SampleSpec{{3}, DType::kUInt8}, std::vector<unsigned char>(7)),
               std::invalid_argument);
  EXPECT_THROW(InMemoryDataset(SampleSpec{{0}, DType::kUInt8}, std::vector<unsigned char>(0)),
               std::invalid_argument);
  EXPECT_THROW(InMemoryDataset(SampleSpec{{1}, DType::kUInt8}, std::vector<unsigned char>(2), {1}),
               std::invalid_argument);
  // A sample of (2^62 + 1) float32 elements is 2^64 + 4 bytes: refused, not wrapped to 4.
  try {
    InMemoryDataset(SampleSpec{{2, (uint64_t{1} << 62) + 1}, DType::kFloat32},
                    std::vector<unsigned char>(4));
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "spec: shape dimension 1 = 4611686018427387905 is too large; allowed: float32 "
                 "elements times the dimensions at most 2^63 - 1 bytes");
  }
  const InMemoryDataset ds(SampleSpec{{1}, DType::kUInt8}, std::vector<unsigned char>(2));
  unsigned char b;
  try {
    ds.read(2, &b);
    FAIL() << "no throw";
  } catch (const std::out_of_range& e) {
    EXPECT_STREQ(e.what(), "index = 2 is out of range; allowed: index < size = 2");
  }
}

TEST(FormatError, NamesFileAndOffset) {
  const FormatError e("/tmp/x.idx", 17, "bad");
  EXPECT_EQ(e.file(), "/tmp/x.idx");
  EXPECT_EQ(e.offset(), 17u);
  EXPECT_STREQ(e.what(), "file '/tmp/x.idx', offset 17: bad");
}

}  // namespace
}  // namespace distsampler
