// .npy reader. The format (numpy's NEP 1, numpy.lib.format): "\x93NUMPY", a major and minor
// version byte, the header length (little-endian uint16 in 1.0, uint32 in 2.0 and 3.0), then the
// header: a Python dict literal {'descr': ..., 'fortran_order': ..., 'shape': (...), } padded with
// spaces and ended by '\n', then the data. The parser below accepts exactly that grammar and
// reports the offset of the first byte it cannot accept.
#include "distsampler/loader/npy.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "file.h"
#include "integers.h"

namespace distsampler {
namespace {

class HeaderParser {
 public:
  HeaderParser(const std::string& path, const char* text, uint64_t length, uint64_t base)
      : path_(path), text_(text), length_(length), base_(base) {}

  // Fills the dtype, the shape and the offset of each dimension's first digit in the file.
  void parse(DType* dtype, std::vector<uint64_t>* shape, std::vector<uint64_t>* dim_offsets) {
    bool have_descr = false, have_order = false, have_shape = false;
    skip_spaces();
    expect('{');
    skip_spaces();
    while (!at('}')) {
      const uint64_t key_at = pos_;
      const std::string key = quoted();
      skip_spaces();
      expect(':');
      skip_spaces();
      if (key == "descr") {
        once(&have_descr, key, key_at);
        const uint64_t value_at = pos_;
        *dtype = descr(quoted(), value_at);
      } else if (key == "fortran_order") {
        once(&have_order, key, key_at);
        const uint64_t value_at = pos_;
        if (word("True")) fail(value_at, "fortran_order True; allowed: False (C order)");
        if (!word("False")) fail(value_at, "fortran_order must be True or False");
      } else if (key == "shape") {
        once(&have_shape, key, key_at);
        *shape = tuple(dim_offsets);
      } else {
        fail(key_at, "unknown key '" + key + "'; allowed: 'descr', 'fortran_order', 'shape'");
      }
      skip_spaces();
      if (at(',')) {
        ++pos_;
        skip_spaces();
      } else if (!at('}')) {
        fail(pos_, "expected ',' or '}'");
      }
    }
    ++pos_;
    if (!have_descr || !have_order || !have_shape) {
      fail(pos_ - 1, std::string("missing key '") +
                         (!have_descr   ? "descr"
                          : !have_order ? "fortran_order"
                                        : "shape") +
                         "'");
    }
    while (pos_ < length_ && text_[pos_] == ' ') ++pos_;
    if (pos_ + 1 != length_ || text_[pos_] != '\n') {
      fail(pos_, "the header must end with spaces and one '\\n' after the dict");
    }
  }

 private:
  [[noreturn]] void fail(uint64_t at, const std::string& problem) const {
    throw FormatError(path_, base_ + at, "bad .npy header: " + problem);
  }
  bool at(char c) const { return pos_ < length_ && text_[pos_] == c; }
  void expect(char c) {
    if (!at(c)) fail(pos_, std::string("expected '") + c + "'");
    ++pos_;
  }
  void skip_spaces() {
    while (pos_ < length_ && text_[pos_] == ' ') ++pos_;
  }
  bool word(const char* w) {
    const uint64_t n = std::strlen(w);
    if (length_ - pos_ < n || std::memcmp(text_ + pos_, w, n) != 0) return false;
    pos_ += n;
    return true;
  }
  std::string quoted() {
    expect('\'');
    const uint64_t start = pos_;
    while (pos_ < length_ && text_[pos_] != '\'' && text_[pos_] != '\n') ++pos_;
    if (!at('\'')) fail(start - 1, "unterminated string");
    ++pos_;
    return std::string(text_ + start, pos_ - 1 - start);
  }
  void once(bool* seen, const std::string& key, uint64_t key_at) {
    if (*seen) fail(key_at, "key '" + key + "' appears twice");
    *seen = true;
  }
  DType descr(const std::string& d, uint64_t value_at) {
    if (d == "|u1") return DType::kUInt8;
    if (d == "|i1") return DType::kInt8;
    if (d == "<i2") return DType::kInt16;
    if (d == "<i4") return DType::kInt32;
    if (d == "<i8") return DType::kInt64;
    if (d == "<f4") return DType::kFloat32;
    if (d == "<f8") return DType::kFloat64;
    fail(value_at, "descr '" + d + "'; allowed: '|u1', '|i1', '<i2', '<i4', '<i8', '<f4', '<f8'");
  }
  std::vector<uint64_t> tuple(std::vector<uint64_t>* offsets) {
    std::vector<uint64_t> dims;
    offsets->clear();
    expect('(');
    skip_spaces();
    bool comma_after_last = false;
    while (!at(')')) {
      const uint64_t start = pos_;
      uint64_t v = 0;
      while (pos_ < length_ && text_[pos_] >= '0' && text_[pos_] <= '9') {
        const uint64_t digit = static_cast<uint64_t>(text_[pos_] - '0');
        if (v > (std::numeric_limits<uint64_t>::max() - digit) / 10)
          fail(start, "dimension overflows");
        v = v * 10 + digit;
        ++pos_;
      }
      if (pos_ == start) fail(pos_, "expected a dimension (a non-negative integer)");
      dims.push_back(v);
      offsets->push_back(base_ + start);
      skip_spaces();
      comma_after_last = at(',');
      if (comma_after_last) {
        ++pos_;
        skip_spaces();
      } else if (!at(')')) {
        fail(pos_, "expected ',' or ')' in the shape");
      }
    }
    if (dims.size() == 1 && !comma_after_last) fail(pos_, "a 1-tuple needs a trailing comma");
    ++pos_;
    return dims;
  }

  const std::string& path_;
  const char* text_;
  uint64_t length_;
  uint64_t base_;
  uint64_t pos_ = 0;
};

// The header fields of a .npy file, checked against the file's size.
struct NpyHeader {
  std::vector<uint64_t> shape;
  DType dtype = DType::kUInt8;
  uint64_t data_offset = 0;
  uint64_t data_bytes = 0;
};

// Reads exactly n bytes at offset; a short read means the file shrank since it was measured.
void read_exact(const detail::ReadOnlyFile& file, void* out, uint64_t n, uint64_t offset) {
  const uint64_t got = file.read_at(out, n, offset);
  if (got < n) {
    throw FormatError(file.path(), offset + got,
                      "the file shrank while it was being opened: " + std::to_string(n) +
                          " bytes from offset " + std::to_string(offset) + " were expected");
  }
}

// Reads and checks the magic, version, header and length of `file`, `file_size` bytes long.
NpyHeader read_header(const detail::ReadOnlyFile& file, uint64_t file_size) {
  const std::string& path = file.path();
  static const unsigned char kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (file_size < 8) {
    throw FormatError(path, file_size,
                      "truncated: a .npy file starts with 8 bytes of magic and version, the "
                      "file has " +
                          std::to_string(file_size));
  }
  unsigned char prefix[12];
  read_exact(file, prefix, std::min<uint64_t>(file_size, sizeof prefix), 0);
  if (std::memcmp(prefix, kMagic, 6) != 0) {
    throw FormatError(path, 0, "bad magic: expected \"\\x93NUMPY\" (not a .npy file)");
  }
  const unsigned major = prefix[6], minor = prefix[7];
  if (major < 1 || major > 3 || minor != 0) {
    throw FormatError(path, 6,
                      "format version " + std::to_string(major) + "." + std::to_string(minor) +
                          "; allowed: 1.0, 2.0, 3.0");
  }
  const uint64_t len_bytes = major == 1 ? 2 : 4;
  if (file_size < 8 + len_bytes) {
    throw FormatError(path, file_size, "truncated inside the header length");
  }
  uint64_t header_len = 0;
  for (uint64_t b = 0; b < len_bytes; ++b) header_len |= uint64_t{prefix[8 + b]} << (8 * b);
  const uint64_t header_at = 8 + len_bytes;
  if (header_len > file_size - header_at) {
    throw FormatError(path, file_size,
                      "truncated: the header needs " + std::to_string(header_len) +
                          " bytes from offset " + std::to_string(header_at) + ", the file ends " +
                          "after " + std::to_string(file_size - header_at));
  }
  std::string text(header_len, '\0');
  read_exact(file, text.data(), header_len, header_at);
  NpyHeader h;
  std::vector<uint64_t> dim_offsets;
  HeaderParser(path, text.data(), header_len, header_at).parse(&h.dtype, &h.shape, &dim_offsets);
  h.data_offset = header_at + header_len;
  // Every size computed from the shape (a row's bytes, an offset) then fits, also for an empty
  // array whose zero rows would hide a huge row.
  const size_t k = detail::first_oversized_dimension(h.shape, dtype_size(h.dtype));
  if (k < h.shape.size()) {
    throw FormatError(path, dim_offsets[k],
                      "shape dimension " + std::to_string(k) + " = " + std::to_string(h.shape[k]) +
                          " is too large: " + std::string(to_string(h.dtype)) +
                          " elements times the non-zero dimensions up to it exceed 2^63 - 1 bytes "
                          "(numpy's limit)");
  }
  uint64_t elements = 1;
  for (uint64_t d : h.shape) elements *= d;  // cannot wrap: bounded above, or 0
  h.data_bytes = elements * dtype_size(h.dtype);
  const uint64_t have = file_size - h.data_offset;
  if (have < h.data_bytes) {
    throw FormatError(path, file_size,
                      "truncated: the data needs " + std::to_string(h.data_bytes) +
                          " bytes from offset " + std::to_string(h.data_offset) +
                          ", the file ends after " + std::to_string(have));
  }
  if (have > h.data_bytes) {
    throw FormatError(
        path, h.data_offset + h.data_bytes,
        std::to_string(have - h.data_bytes) + " trailing bytes after the data the shape describes");
  }
  return h;
}

}  // namespace

NpyArray::NpyArray(const std::string& path) : path_(path) {
  static_assert(sizeof(void*) == 8, "64-bit only");
  const uint16_t one = 1;
  unsigned char little;
  std::memcpy(&little, &one, 1);
  if (little != 1) throw std::runtime_error("NpyArray: big-endian hosts are not supported");

  const detail::ReadOnlyFile file(path);
  const uint64_t file_size = file.size();
  NpyHeader h = read_header(file, file_size);
  void* m = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, file.fd(), 0);
  if (m == MAP_FAILED) {
    throw std::runtime_error("file '" + path + "': cannot map: " + std::strerror(errno));
  }
  base_ = static_cast<const unsigned char*>(m);
  mapped_bytes_ = file_size;  // the mapping keeps the file once the descriptor is closed
  shape_ = std::move(h.shape);
  dtype_ = h.dtype;
  data_offset_ = h.data_offset;
  data_bytes_ = h.data_bytes;
}

NpyArray::~NpyArray() { unmap(); }

NpyArray::NpyArray(NpyArray&& other) noexcept
    : path_(std::move(other.path_)),
      shape_(std::move(other.shape_)),
      dtype_(other.dtype_),
      data_offset_(other.data_offset_),
      data_bytes_(other.data_bytes_),
      base_(std::exchange(other.base_, nullptr)),
      mapped_bytes_(std::exchange(other.mapped_bytes_, 0)) {}

NpyArray& NpyArray::operator=(NpyArray&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    shape_ = std::move(other.shape_);
    dtype_ = other.dtype_;
    data_offset_ = other.data_offset_;
    data_bytes_ = other.data_bytes_;
    base_ = std::exchange(other.base_, nullptr);
    mapped_bytes_ = std::exchange(other.mapped_bytes_, 0);
  }
  return *this;
}

void NpyArray::unmap() {
  if (base_ != nullptr) ::munmap(const_cast<unsigned char*>(base_), mapped_bytes_);
  base_ = nullptr;
  mapped_bytes_ = 0;
}

namespace {

// The labels of a 1-D integer .npy, `expected` of them, read into memory.
std::vector<int64_t> load_labels(const std::string& path, uint64_t expected) {
  const detail::ReadOnlyFile file(path);
  const NpyHeader h = read_header(file, file.size());
  if (h.shape.size() != 1 || !detail::is_integer(h.dtype)) {
    throw std::invalid_argument(
        "labels_path: '" + path + "' holds a " + std::to_string(h.shape.size()) + "-D " +
        std::string(to_string(h.dtype)) + " array; allowed: a 1-D integer array");
  }
  if (h.shape[0] != expected) {
    throw std::invalid_argument("labels_path: '" + path + "' has " + std::to_string(h.shape[0]) +
                                " labels; allowed: one per row, " + std::to_string(expected));
  }
  std::vector<unsigned char> data(h.data_bytes);
  read_exact(file, data.data(), h.data_bytes, h.data_offset);
  return detail::widen_integers(data.data(), h.dtype, expected);
}

}  // namespace

NpyDataset::NpyDataset(const std::string& path, const std::string& labels_path)
    : file_(std::make_shared<const detail::ReadOnlyFile>(path)) {
  file_size_ = file_->size();
  const NpyHeader h = read_header(*file_, file_size_);
  if (h.shape.empty()) {
    throw std::invalid_argument("path: '" + path +
                                "' holds a 0-D array; allowed: at least 1 dimension (the rows)");
  }
  data_offset_ = h.data_offset;
  spec_.shape.assign(h.shape.begin() + 1, h.shape.end());
  spec_.dtype = h.dtype;
  size_ = h.shape[0];
  sample_bytes_ = spec_.bytes();  // cannot wrap: read_header bounds the non-zero dimensions
  if (sample_bytes_ == 0) {
    throw std::invalid_argument("path: '" + path +
                                "' has rows of 0 bytes; allowed: non-zero dimensions");
  }
  if (!labels_path.empty()) labels_ = load_labels(labels_path, size_);
}

void NpyDataset::check_unchanged() const {
  const uint64_t now = file_->size();
  if (now != file_size_) {
    throw FormatError(file_->path(), std::min(now, file_size_),
                      "the file changed size while open: " + std::to_string(file_size_) +
                          " bytes when opened, " + std::to_string(now) + " now");
  }
}

void NpyDataset::read_row(uint64_t i, void* out) const {
  const uint64_t offset = data_offset_ + i * sample_bytes_;
  const uint64_t got = file_->read_at(out, sample_bytes_, offset);
  if (got < sample_bytes_) {
    throw FormatError(file_->path(), offset + got,
                      "the file shrank while open: row " + std::to_string(i) + " needs bytes " +
                          std::to_string(offset) + " to " + std::to_string(offset + sample_bytes_) +
                          ", the file now ends at " + std::to_string(offset + got) + " (" +
                          std::to_string(file_size_) + " bytes when opened)");
  }
}

void NpyDataset::read(uint64_t i, void* out) const {
  check_index(i);
  check_unchanged();
  read_row(i, out);
}

int64_t NpyDataset::label(uint64_t i) const { return label_at(labels_, i); }

void NpyDataset::read_batch(const uint64_t* indices, uint64_t count, void* out,
                            int64_t* labels) const {
  for (uint64_t j = 0; j < count; ++j) check_index(indices[j]);
  check_unchanged();
  auto* dst = static_cast<unsigned char*>(out);
  for (uint64_t j = 0; j < count; ++j) read_row(indices[j], dst + j * sample_bytes_);
  if (!labels_.empty()) {
    for (uint64_t j = 0; j < count; ++j) labels[j] = labels_[indices[j]];
  }
}

}  // namespace distsampler
