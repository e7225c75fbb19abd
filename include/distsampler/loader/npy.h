// npy.h: NumPy .npy arrays with the header parsed strictly: memory-mapped (NpyArray), or read row
// by row as a dataset (NpyDataset).
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
// '|b1'-style variants are rejected as well as big-endian types), 'fortran_order' False, the
// element size times the non-zero dimensions at most 2^63 - 1 bytes (numpy's limit), and the file
// exactly as long as header plus data. Anything else throws FormatError naming the file and the
// offset; std::runtime_error naming the file when it cannot be opened (with the errno text) or
// mapped, or is not a regular file (a FIFO, directory or device; a FIFO does not block).
// A mapping cannot report a file truncated under it: reading data() then raises SIGBUS. NpyDataset
// reads with pread and reports it instead. Movable, not copyable.
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

namespace detail {
class ReadOnlyFile;
}

// Rows of a .npy array as samples (shape[1:] each), with optional labels from a 1-D integer .npy
// of the same length (read into memory). The file stays open and each row is read with pread, so
// opening is O(1) in the data size and a file changed while open is an error, never a signal:
// read() and read_batch() throw FormatError naming the file when its size differs from the size
// it had when opened, or when it shrinks during the read. Throws FormatError as NpyArray does;
// std::invalid_argument when the array has no dimension, or the labels are not 1-D integers of the
// same length.
class NpyDataset : public Dataset {
 public:
  explicit NpyDataset(const std::string& path, const std::string& labels_path = "");

  uint64_t size() const override { return size_; }
  const SampleSpec& spec() const override { return spec_; }
  bool has_labels() const override { return !labels_.empty(); }
  void read(uint64_t i, void* out) const override;
  int64_t label(uint64_t i) const override;
  // Checks every index and the file's size once, then reads the rows.
  void read_batch(const uint64_t* indices, uint64_t count, void* out,
                  int64_t* labels) const override;

 private:
  void check_unchanged() const;
  void read_row(uint64_t i, void* out) const;

  std::shared_ptr<const detail::ReadOnlyFile> file_;
  uint64_t file_size_ = 0;  // when opened
  uint64_t data_offset_ = 0;
  SampleSpec spec_;
  uint64_t size_ = 0;
  uint64_t sample_bytes_ = 0;
  std::vector<int64_t> labels_;
};

}  // namespace distsampler

#endif  // DISTSAMPLER_LOADER_NPY_H_
