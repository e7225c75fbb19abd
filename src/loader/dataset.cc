#include "distsampler/loader/dataset.h"

#include <cstring>
#include <utility>

#include "integers.h"

namespace distsampler {

std::string_view to_string(DType dtype) {
  switch (dtype) {
    case DType::kUInt8:
      return "uint8";
    case DType::kInt8:
      return "int8";
    case DType::kInt16:
      return "int16";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
    case DType::kFloat32:
      return "float32";
    case DType::kFloat64:
      return "float64";
  }
  return "?";
}

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kUInt8:
    case DType::kInt8:
      return 1;
    case DType::kInt16:
      return 2;
    case DType::kInt32:
    case DType::kFloat32:
      return 4;
    case DType::kInt64:
    case DType::kFloat64:
      return 8;
  }
  return 0;
}

uint64_t SampleSpec::elements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

FormatError::FormatError(std::string file, uint64_t offset, const std::string& problem)
    : std::runtime_error("file '" + file + "', offset " + std::to_string(offset) + ": " + problem),
      file_(std::move(file)),
      offset_(offset) {}

void Dataset::check_index(uint64_t i) const {
  if (i >= size()) {
    throw std::out_of_range("index = " + std::to_string(i) +
                            " is out of range; allowed: index < size = " + std::to_string(size()));
  }
}

void Dataset::copy_row(const unsigned char* rows, uint64_t row_bytes, uint64_t i, void* out) const {
  check_index(i);
  std::memcpy(out, rows + i * row_bytes, row_bytes);
}

int64_t Dataset::label_at(const std::vector<int64_t>& labels, uint64_t i) const {
  check_index(i);
  if (labels.empty()) throw std::logic_error("label(): this dataset has no labels");
  return labels[i];
}

void Dataset::read_batch(const uint64_t* indices, uint64_t count, void* out,
                         int64_t* labels) const {
  const uint64_t bytes = spec().bytes();
  const bool labelled = has_labels();
  for (uint64_t j = 0; j < count; ++j) {
    read(indices[j], static_cast<unsigned char*>(out) + j * bytes);
    if (labelled) labels[j] = label(indices[j]);
  }
}

InMemoryDataset::InMemoryDataset(SampleSpec spec, std::vector<unsigned char> data,
                                 std::vector<int64_t> labels)
    : spec_(std::move(spec)),
      sample_bytes_(spec_.bytes()),
      size_(0),
      data_(std::move(data)),
      labels_(std::move(labels)) {
  const size_t k = detail::first_oversized_dimension(spec_.shape, dtype_size(spec_.dtype));
  if (k < spec_.shape.size()) {
    throw std::invalid_argument("spec: shape dimension " + std::to_string(k) + " = " +
                                std::to_string(spec_.shape[k]) +
                                " is too large; allowed: " + std::string(to_string(spec_.dtype)) +
                                " elements times the dimensions at most 2^63 - 1 bytes");
  }
  if (sample_bytes_ == 0) {
    throw std::invalid_argument("spec: a sample of " + std::to_string(sample_bytes_) +
                                " bytes; allowed: a shape with no zero dimension");
  }
  if (data_.size() % sample_bytes_ != 0) {
    throw std::invalid_argument("data: " + std::to_string(data_.size()) +
                                " bytes; allowed: a multiple of the sample size, " +
                                std::to_string(sample_bytes_) + " bytes");
  }
  size_ = data_.size() / sample_bytes_;
  if (!labels_.empty() && labels_.size() != size_) {
    throw std::invalid_argument("labels: " + std::to_string(labels_.size()) +
                                " labels; allowed: none or one per sample, " +
                                std::to_string(size_));
  }
}

void InMemoryDataset::read(uint64_t i, void* out) const {
  copy_row(data_.data(), sample_bytes_, i, out);
}

int64_t InMemoryDataset::label(uint64_t i) const { return label_at(labels_, i); }

void InMemoryDataset::read_batch(const uint64_t* indices, uint64_t count, void* out,
                                 int64_t* labels) const {
  for (uint64_t j = 0; j < count; ++j) check_index(indices[j]);
  // Random rows of a large buffer miss the cache; fetching a few rows ahead hides that latency.
  constexpr uint64_t kAhead = 4;
  auto* dst = static_cast<unsigned char*>(out);
  for (uint64_t j = 0; j < count; ++j) {
    if (j + kAhead < count) {
      const unsigned char* next = data_.data() + indices[j + kAhead] * sample_bytes_;
      for (uint64_t b = 0; b < sample_bytes_; b += 64) __builtin_prefetch(next + b);
    }
    std::memcpy(dst + j * sample_bytes_, data_.data() + indices[j] * sample_bytes_, sample_bytes_);
  }
  if (!labels_.empty()) {
    for (uint64_t j = 0; j < count; ++j) labels[j] = labels_[indices[j]];
  }
}

}  // namespace distsampler
