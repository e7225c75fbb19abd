// dataset.h: the interface every dataset offers the loader (size, sample shape, read sample i),
// and the in-memory dataset.
#ifndef DISTSAMPLER_LOADER_DATASET_H_
#define DISTSAMPLER_LOADER_DATASET_H_

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace distsampler {

// Element types of samples, stored in native byte order once loaded.
enum class DType { kUInt8, kInt8, kInt16, kInt32, kInt64, kFloat32, kFloat64 };

std::string_view to_string(DType dtype);
size_t dtype_size(DType dtype);

// The fixed shape and element type of every sample of a dataset.
struct SampleSpec {
  std::vector<uint64_t> shape;  // one sample's dimensions; empty means a scalar
  DType dtype = DType::kUInt8;

  uint64_t elements() const;
  uint64_t bytes() const { return elements() * dtype_size(dtype); }
};

// A file that is not what it claims to be (bad magic, header, type, truncated data). The message
// names the file, the byte offset where the problem is, and what was expected there.
class FormatError : public std::runtime_error {
 public:
  FormatError(std::string file, uint64_t offset, const std::string& problem);
  const std::string& file() const { return file_; }
  uint64_t offset() const { return offset_; }

 private:
  std::string file_;
  uint64_t offset_;
};

// size() samples of one SampleSpec, each with an optional integer label. read() and label() are
// const and must be safe to call from several threads at once: the DataLoader's workers do.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual uint64_t size() const = 0;
  virtual const SampleSpec& spec() const = 0;
  virtual bool has_labels() const = 0;
  // Copies sample i (spec().bytes() bytes) to out. Throws std::out_of_range when i >= size().
  virtual void read(uint64_t i, void* out) const = 0;
  // Sample i's label. Throws std::out_of_range when i >= size(), std::logic_error without labels.
  virtual int64_t label(uint64_t i) const = 0;
  // Samples indices[0, count) to out (count * spec().bytes() bytes) and, when has_labels(), their
  // labels to labels[0, count). The default calls read() and label() for each; a dataset may
  // override it to read faster, with the same results and errors.
  virtual void read_batch(const uint64_t* indices, uint64_t count, void* out,
                          int64_t* labels) const;

 protected:
  // Throws std::out_of_range naming the index and size() when i >= size().
  void check_index(uint64_t i) const;
  // For datasets whose samples are rows of one buffer: checks i and copies row i.
  void copy_row(const unsigned char* rows, uint64_t row_bytes, uint64_t i, void* out) const;
  // For datasets with a label vector (empty when unlabelled): checks i and returns labels[i].
  int64_t label_at(const std::vector<int64_t>& labels, uint64_t i) const;
};

// Samples held in one contiguous buffer: sample i is bytes [i * spec.bytes(), (i + 1) * ...).
class InMemoryDataset : public Dataset {
 public:
  // Throws std::invalid_argument when spec.bytes() is 0 or its product overflows (more than
  // 2^63 - 1 bytes), data.size() is not a multiple of it, or labels is neither empty nor one label
  // per sample.
  InMemoryDataset(SampleSpec spec, std::vector<unsigned char> data,
                  std::vector<int64_t> labels = {});

  uint64_t size() const override { return size_; }
  const SampleSpec& spec() const override { return spec_; }
  bool has_labels() const override { return !labels_.empty(); }
  void read(uint64_t i, void* out) const override;
  int64_t label(uint64_t i) const override;
  // Checks every index, then copies with the next samples' memory prefetched.
  void read_batch(const uint64_t* indices, uint64_t count, void* out,
                  int64_t* labels) const override;

  const std::vector<unsigned char>& data() const { return data_; }
  const std::vector<int64_t>& labels() const { return labels_; }

 private:
  SampleSpec spec_;
  uint64_t sample_bytes_;
  uint64_t size_;
  std::vector<unsigned char> data_;
  std::vector<int64_t> labels_;
};

}  // namespace distsampler

#endif  // DISTSAMPLER_LOADER_DATASET_H_
