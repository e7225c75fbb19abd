// IDX reader. The format (LeCun's MNIST page): a 4-byte magic {0, 0, type, ndims}, ndims
// big-endian uint32 dimensions, then the elements big-endian in row-major order. zlib's gz* API
// reads compressed and raw files alike (gzread passes a non-gzip file through unchanged).
#include "distsampler/loader/idx.h"

#include <zlib.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "integers.h"

namespace distsampler {
namespace {

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

bool host_is_little_endian() {
  const uint16_t one = 1;
  unsigned char first;
  std::memcpy(&first, &one, 1);
  return first == 1;
}

// Big-endian elements of `width` bytes to native order, in place.
void to_native(unsigned char* data, uint64_t count, size_t width) {
  if (width == 1 || !host_is_little_endian()) return;
  for (uint64_t i = 0; i < count; ++i) std::reverse(data + i * width, data + (i + 1) * width);
}

class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {
    file_.reset(gzopen(path_.c_str(), "rb"));
    if (!file_) throw std::runtime_error("file '" + path_ + "': cannot open");
    gzbuffer(file_.get(), 1 << 18);
  }

  uint64_t offset() const { return offset_; }
  const std::string& path() const { return path_; }

  // Reads exactly n bytes of `what`; throws FormatError at the offset where the data ran out.
  void read(void* out, uint64_t n, const std::string& what) {
    read_into(static_cast<unsigned char*>(out), nullptr, n, what);
  }

  // Reads exactly n bytes of `what` into *out, which grows as the bytes arrive: a corrupt header
  // claiming terabytes costs no more memory than the stream holds before the truncation error.
  void read_growing(std::vector<unsigned char>* out, uint64_t n, const std::string& what) {
    out->clear();
    read_into(nullptr, out, n, what);
  }

  // Throws FormatError when anything follows the data.
  void expect_end() {
    unsigned char extra;
    const int r = gzread(file_.get(), &extra, 1);
    if (r < 0) stream_error(offset_);
    if (r > 0) {
      throw FormatError(path_, offset_,
                        "trailing bytes after the data; the header's dimensions say the " +
                            stream_kind() + " ends here");
    }
    stream_error_if_any(offset_);
  }

 private:
  void read_into(unsigned char* p, std::vector<unsigned char>* grow, uint64_t n,
                 const std::string& what) {
    constexpr uint64_t kFirstBlock = uint64_t{1} << 26;  // 64 MiB, then doubling
    const uint64_t start = offset_;
    uint64_t got = 0;
    while (got < n) {
      if (grow != nullptr && got == grow->size()) {
        const uint64_t size = got + std::min(n - got, std::max(kFirstBlock, got));
        grow->reserve(size);  // exactly size: resize alone may double the capacity past n
        grow->resize(size);
        p = grow->data();
      }
      const uint64_t end = grow != nullptr ? grow->size() : n;
      const unsigned chunk = static_cast<unsigned>(std::min<uint64_t>(end - got, 1u << 30));
      const int r = gzread(file_.get(), p + got, chunk);
      if (r < 0) stream_error(start + got);
      if (r == 0) {
        stream_error_if_any(start + got);
        offset_ = start + got;
        throw FormatError(path_, offset_,
                          "truncated: " + what + " needs " + std::to_string(n) +
                              " bytes from offset " + std::to_string(start) + ", the " +
                              stream_kind() + " ends after " + std::to_string(got));
      }
      got += static_cast<uint64_t>(r);
    }
    offset_ = start + n;
  }

  std::string stream_kind() const { return gzdirect(file_.get()) ? "file" : "decompressed stream"; }
  void stream_error_if_any(uint64_t at) {
    int code = Z_OK;
    gzerror(file_.get(), &code);
    if (code != Z_OK && code != Z_STREAM_END) stream_error(at);
  }
  [[noreturn]] void stream_error(uint64_t at) {
    int code = Z_OK;
    const char* message = gzerror(file_.get(), &code);
    throw FormatError(path_, at,
                      std::string("corrupt gzip stream (offset in the decompressed data): ") +
                          (message != nullptr ? message : "unknown zlib error"));
  }

  std::string path_;
  GzFile file_;
  uint64_t offset_ = 0;
};

DType idx_dtype(unsigned char code, const std::string& path) {
  switch (code) {
    case 0x08:
      return DType::kUInt8;
    case 0x09:
      return DType::kInt8;
    case 0x0B:
      return DType::kInt16;
    case 0x0C:
      return DType::kInt32;
    case 0x0D:
      return DType::kFloat32;
    case 0x0E:
      return DType::kFloat64;
    default:
      break;
  }
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02X", code);
  throw FormatError(
      path, 2,
      std::string("element type ") + hex + "; allowed: 0x08, 0x09, 0x0B, 0x0C, 0x0D, 0x0E");
}

}  // namespace

IdxArray read_idx(const std::string& path) {
  Reader in(path);
  unsigned char magic[4];
  in.read(magic, 4, "the magic number");
  if (magic[0] != 0 || magic[1] != 0) {
    throw FormatError(path, 0, "bad magic: the first two bytes must be zero (not an IDX file)");
  }
  IdxArray array;
  array.dtype = idx_dtype(magic[2], path);
  if (magic[3] == 0) throw FormatError(path, 3, "0 dimensions; allowed: 1 to 255");
  uint64_t elements = 1;
  for (unsigned d = 0; d < magic[3]; ++d) {
    unsigned char be[4];
    in.read(be, 4, "dimension " + std::to_string(d));
    const uint64_t dim = (uint64_t{be[0]} << 24) | (uint64_t{be[1]} << 16) |
                         (uint64_t{be[2]} << 8) | uint64_t{be[3]};
    if (dim != 0 && elements > std::numeric_limits<uint64_t>::max() / 16 / dim) {
      throw FormatError(path, in.offset() - 4, "dimensions overflow 64 bits");
    }
    elements *= dim;
    array.dims.push_back(dim);
  }
  const size_t width = dtype_size(array.dtype);
  in.read_growing(&array.data, elements * width, "the data");
  in.expect_end();
  to_native(array.data.data(), elements, width);
  return array;
}

InMemoryDataset load_idx_dataset(const std::string& images_path, const std::string& labels_path) {
  IdxArray images = read_idx(images_path);
  SampleSpec spec{std::vector<uint64_t>(images.dims.begin() + 1, images.dims.end()), images.dtype};
  std::vector<int64_t> labels;
  if (!labels_path.empty()) {
    const IdxArray l = read_idx(labels_path);
    if (l.dims.size() != 1 || !detail::is_integer(l.dtype)) {
      throw std::invalid_argument(
          "labels_path: '" + labels_path + "' holds a " + std::to_string(l.dims.size()) + "-D " +
          std::string(to_string(l.dtype)) + " array; allowed: a 1-D integer array");
    }
    if (l.dims[0] != images.dims[0]) {
      throw std::invalid_argument("labels_path: '" + labels_path + "' has " +
                                  std::to_string(l.dims[0]) + " labels; allowed: one per image, " +
                                  std::to_string(images.dims[0]));
    }
    labels = detail::widen_integers(l.data.data(), l.dtype, l.dims[0]);
  }
  if (spec.bytes() == 0) {
    throw std::invalid_argument("images_path: '" + images_path +
                                "' has samples of 0 bytes; allowed: non-zero dimensions");
  }
  return InMemoryDataset(std::move(spec), std::move(images.data), std::move(labels));
}

}  // namespace distsampler
