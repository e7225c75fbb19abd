// npy.h: NumPy .npy arrays, memory-mapped, with the header parsed strictly.
#ifndef DISTSAMPLER_LOADER_NPY_H_
#define DISTSAMPLER_LOADER_NPY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "distsampler/loader/dataset.h"

namespace distsampler {

// A read-only memory map of a .npy file (format versions 1.0, 2.0 and 3.0). The header must be
// exactly what numpy writes: a dict literal with the keys 'descr', 'fortran_order' and 'shape'
// (each once, any order), 'descr' one of '|u1' '|i1' '<i2' '<i4' '<i8' '<f4' '<f8' ('<u1' and
// '|b1'-style variants are rejected as well as big-endian types), 'fortran_order' False, and the
// file exactly as long as header plus data. Anything else throws FormatError naming the file and
// the offset; std::runtime_error when the file cannot be opened or mapped. Movable, not copyable.
class NpyArray {
 public:
  explicit NpyArray(const std::string& path);
  ~NpyArray();
  NpyArray(NpyArray&& other) noexcept;
  NpyArray& operator=(NpyArray&& other) noexcept;
  NpyArray(const NpyArray&) = delete;
  NpyArray& operator=(const NpyArray&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<uint64_t>& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t data_bytes() const { return data_bytes_; }
  // The elements, row-major (C order), little-endian as on disk.
  const unsigned char* data() const { return base_ + data_offset_; }

 private:
  void unmap();

  std::string path_;
  std::vector<uint64_t> shape_;
  DType dtype_ = DType::kUInt8;
  uint64_t data_offset_ = 0;
  uint64_t data_bytes_ = 0;
  const unsigned char* base_ = nullptr;
  uint64_t mapped_bytes_ = 0;
};

// Rows of a memory-mapped .npy array as samples (shape[1:] each), with optional labels from a
// 1-D integer .npy of the same length. Reads copy straight from the map, so opening is O(1) in the
// data size. Throws FormatError as NpyArray does; std::invalid_argument when the array has no
// dimension, or the labels are not 1-D integers of the same length.
class NpyDataset : public Dataset {
 public:
  explicit NpyDataset(const std::string& path, const std::string& labels_path = "");

  uint64_t size() const override { return size_; }
  const SampleSpec& spec() const override { return spec_; }
  bool has_labels() const override { return !labels_.empty(); }
  void read(uint64_t i, void* out) const override;
  int64_t label(uint64_t i) const override;

 private:
  NpyArray array_;
  SampleSpec spec_;
  uint64_t size_;
  uint64_t sample_bytes_;
  std::vector<int64_t> labels_;
};

}  // namespace distsampler

#endif  // DISTSAMPLER_LOADER_NPY_H_
