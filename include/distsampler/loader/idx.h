// idx.h: IDX files (the MNIST / Fashion-MNIST format), gzip-compressed or raw, read through zlib.
#ifndef DISTSAMPLER_LOADER_IDX_H_
#define DISTSAMPLER_LOADER_IDX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "distsampler/loader/dataset.h"

namespace distsampler {

// An IDX array: big-endian on disk, native byte order here.
struct IdxArray {
  std::vector<uint64_t> dims;  // dims[0] is the number of items
  DType dtype = DType::kUInt8;
  std::vector<unsigned char> data;
};

// Reads an IDX file, gzip-compressed (detected by its magic bytes) or not. The format: bytes
// 0-1 zero, byte 2 the element type (0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32,
// 0x0E float64), byte 3 the number of dimensions (>= 1), then each dimension as a big-endian
// uint32 (the element size times the non-zero dimensions at most 2^63 - 1 bytes), then the
// elements, big-endian, nothing after them; a gzip file may hold several members (concatenated)
// and nothing after the last. Throws FormatError naming the file and the offset (in the
// decompressed stream) of a bad header, an oversized dimension, truncated data, trailing bytes,
// bytes after the gzip stream, or a corrupt gzip stream (a bad CRC or length at the offset where
// its member's data ends); std::runtime_error naming the file when it cannot be opened or read
// (with the errno text) or is not a regular file (a FIFO, directory or device; a FIFO does not
// block).
IdxArray read_idx(const std::string& path);

// The images of `images_path` (one sample per item, shape dims[1:]) with the labels of
// `labels_path` (a 1-D integer IDX file of the same length); no labels when labels_path is empty.
// Throws FormatError as read_idx does, std::invalid_argument when the lengths differ or the labels
// are not a 1-D integer array.
InMemoryDataset load_idx_dataset(const std::string& images_path,
                                 const std::string& labels_path = "");

}  // namespace distsampler

#endif  // DISTSAMPLER_LOADER_IDX_H_
