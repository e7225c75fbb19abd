// IDX reader. The format (LeCun's MNIST page): a 4-byte magic {0, 0, type, ndims}, ndims
// big-endian uint32 dimensions, then the elements big-endian in row-major order. A file that
// starts with gzip's magic (1f 8b) is inflated with zlib's inflate() (members one after another,
// as gzip concatenates them), anything else read as is. inflate() rather than zlib's gz* API:
// gzread ignores bytes after the last member that are not one (trailing garbage), and reports a
// corrupt stream without saying where in the decompressed data it was found.
#include "distsampler/loader/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "file.h"
#include "integers.h"

namespace distsampler {
namespace {

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

// The bytes of an IDX file, decompressed when it is gzip. Offsets are in that byte stream.
class Reader {
 public:
  explicit Reader(std::string path) : file_(std::move(path)), in_(size_t{1} << 18) {
    ensure_input(2);
    gzip_ = z_.avail_in >= 2 && z_.next_in[0] == 0x1f && z_.next_in[1] == 0x8b;
    if (gzip_ && inflateInit2(&z_, 16 + MAX_WBITS) != Z_OK) {
      throw std::runtime_error("file '" + file_.path() + "': cannot start zlib: " +
                               (z_.msg != nullptr ? z_.msg : "out of memory"));
    }
  }
  ~Reader() {
    if (gzip_) inflateEnd(&z_);
  }
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  uint64_t offset() const { return offset_; }

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

  // Throws FormatError when anything follows the data: more bytes, or, after the last gzip
  // member, bytes that are not one. Checks the last member's CRC and length on the way.
  void expect_end() {
    unsigned char extra;
    if (produce(&extra, 1, offset_) > 0) {
      throw FormatError(file_.path(), offset_,
                        "trailing bytes after the data; the header's dimensions say the " +
                            stream_kind() + " ends here");
    }
  }

 private:
  void read_into(unsigned char* p, std::vector<unsigned char>* grow, uint64_t n,
                 const std::string& what) {
    // 1 MiB, then doubling: a header that lies costs at most 1 MiB before the truncation error
    // (64 MiB made each of tests/adversarial's lying mutants zero-fill 64 MiB), and a real file
    // pays a few reallocations (Fashion-MNIST's 47 MB: 6, copying under 64 MB in all).
    constexpr uint64_t kFirstBlock = uint64_t{1} << 20;
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
      const uint64_t r = produce(p + got, end - got, start + got);
      got += r;
      if (got < end) {
        offset_ = start + got;
        throw FormatError(file_.path(), offset_,
                          "truncated: " + what + " needs " + std::to_string(n) +
                              " bytes from offset " + std::to_string(start) + ", the " +
                              stream_kind() + " ends after " + std::to_string(got));
      }
    }
    offset_ = start + n;
  }

  // Up to n bytes of the stream to p, whose first byte is at `at` in the stream; fewer only where
  // the stream ends. Throws FormatError at the offset where a gzip stream turns out corrupt.
  uint64_t produce(unsigned char* p, uint64_t n, uint64_t at) {
    uint64_t got = 0;
    while (got < n) {
      if (!gzip_) {
        if (!ensure_input(1)) break;
        const uint64_t k = std::min<uint64_t>(z_.avail_in, n - got);
        std::memcpy(p + got, z_.next_in, k);
        z_.next_in += k;
        z_.avail_in -= static_cast<uInt>(k);
        got += k;
        continue;
      }
      if (member_ended_) {
        if (!ensure_input(1)) break;  // the end of the file: the end of the stream
        if (!ensure_input(2) || z_.next_in[0] != 0x1f || z_.next_in[1] != 0x8b) {
          throw FormatError(file_.path(), at + got,
                            "trailing bytes after the gzip stream: file offset " +
                                std::to_string(file_offset()) +
                                " is neither the end of the file nor another gzip member");
        }
        if (inflateReset(&z_) != Z_OK) corrupt(at + got);
        member_ended_ = false;
      }
      if (!ensure_input(1)) {
        throw FormatError(file_.path(), at + got,
                          "corrupt gzip stream (offset in the decompressed data): the file ends "
                          "inside it (truncated)");
      }
      z_.next_out = p + got;
      z_.avail_out = static_cast<uInt>(std::min<uint64_t>(n - got, uint64_t{1} << 30));
      const uInt before = z_.avail_out;
      const int r = inflate(&z_, Z_NO_FLUSH);
      got += before - z_.avail_out;
      if (r == Z_STREAM_END) {
        member_ended_ = true;
      } else if (r != Z_OK && r != Z_BUF_ERROR) {
        corrupt(at + got);  // CRC and length errors too, found at the member's end
      }
    }
    return got;
  }

  [[noreturn]] void corrupt(uint64_t at) const {
    throw FormatError(file_.path(), at,
                      std::string("corrupt gzip stream (offset in the decompressed data): ") +
                          (z_.msg != nullptr ? z_.msg : "unknown zlib error"));
  }

  // At least k (<= 2) unread input bytes, reading more of the file when fewer are buffered;
  // false when the file ends first.
  bool ensure_input(uInt k) {
    if (z_.avail_in >= k) return true;
    if (z_.avail_in > 0) std::memmove(in_.data(), z_.next_in, z_.avail_in);  // 1 byte
    const uint64_t got =
        file_.read_at(in_.data() + z_.avail_in, in_.size() - z_.avail_in, read_at_);
    read_at_ += got;
    z_.next_in = in_.data();
    z_.avail_in += static_cast<uInt>(got);
    return z_.avail_in >= k;
  }
  uint64_t file_offset() const { return read_at_ - z_.avail_in; }
  std::string stream_kind() const { return gzip_ ? "decompressed stream" : "file"; }

  detail::ReadOnlyFile file_;
  std::vector<unsigned char> in_;
  z_stream z_{};          // next_in/avail_in: the unread input, in both modes
  uint64_t read_at_ = 0;  // the file offset after the input read so far
  bool gzip_ = false;
  bool member_ended_ = false;
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
  const size_t width = dtype_size(array.dtype);
  uint64_t elements = 1;  // cannot wrap: the non-zero dimensions are bounded, or it is 0
  for (unsigned d = 0; d < magic[3]; ++d) {
    unsigned char be[4];
    in.read(be, 4, "dimension " + std::to_string(d));
    const uint64_t dim = (uint64_t{be[0]} << 24) | (uint64_t{be[1]} << 16) |
                         (uint64_t{be[2]} << 8) | uint64_t{be[3]};
    array.dims.push_back(dim);
    if (detail::first_oversized_dimension(array.dims, width) == d) {
      throw FormatError(path, in.offset() - 4,
                        "dimension " + std::to_string(d) + " = " + std::to_string(dim) +
                            " is too large: " + std::string(to_string(array.dtype)) +
                            " elements times the non-zero dimensions up to it exceed 2^63 - 1 "
                            "bytes");
    }
    elements *= dim;
  }
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
