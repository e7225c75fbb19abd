// .npy reader. The format (numpy's NEP 1, numpy.lib.format): "\x93NUMPY", a major and minor
// version byte, the header length (little-endian uint16 in 1.0, uint32 in 2.0 and 3.0), then the
// header: a Python dict literal {'descr': ..., 'fortran_order': ..., 'shape': (...), } padded with
// spaces and ended by '\n', then the data. The parser below accepts exactly that grammar and
// reports the offset of the first byte it cannot accept.
#include "distsampler/loader/npy.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "integers.h"

namespace distsampler {
namespace {

class HeaderParser {
 public:
  HeaderParser(const std::string& path, const char* text, uint64_t length, uint64_t base)
      : path_(path), text_(text), length_(length), base_(base) {}

  void parse(DType* dtype, std::vector<uint64_t>* shape) {
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
        *shape = tuple();
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
  std::vector<uint64_t> tuple() {
    std::vector<uint64_t> dims;
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

std::string errno_text() { return std::strerror(errno); }

}  // namespace

NpyArray::NpyArray(const std::string& path) : path_(path) {
  static_assert(sizeof(void*) == 8, "64-bit only");
  const uint16_t one = 1;
  unsigned char little;
  std::memcpy(&little, &one, 1);
  if (little != 1) throw std::runtime_error("NpyArray: big-endian hosts are not supported");

  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("file '" + path + "': cannot open: " + errno_text());
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const std::string e = errno_text();
    ::close(fd);
    throw std::runtime_error("file '" + path + "': cannot stat: " + e);
  }
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size > 0) {
    void* m = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      const std::string e = errno_text();
      ::close(fd);
      throw std::runtime_error("file '" + path + "': cannot map: " + e);
    }
    base_ = static_cast<const unsigned char*>(m);
    mapped_bytes_ = file_size;
  }
  ::close(fd);  // the mapping keeps the file

  try {
    static const unsigned char kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
    if (file_size < 8) {
      throw FormatError(path, file_size,
                        "truncated: a .npy file starts with 8 bytes of magic and version, the "
                        "file has " +
                            std::to_string(file_size));
    }
    if (std::memcmp(base_, kMagic, 6) != 0) {
      throw FormatError(path, 0, "bad magic: expected \"\\x93NUMPY\" (not a .npy file)");
    }
    const unsigned major = base_[6], minor = base_[7];
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
    for (uint64_t b = 0; b < len_bytes; ++b) header_len |= uint64_t{base_[8 + b]} << (8 * b);
    const uint64_t header_at = 8 + len_bytes;
    if (header_len > file_size - header_at) {
      throw FormatError(path, file_size,
                        "truncated: the header needs " + std::to_string(header_len) +
                            " bytes from offset " + std::to_string(header_at) + ", the file ends " +
                            "after " + std::to_string(file_size - header_at));
    }
    HeaderParser(path, reinterpret_cast<const char*>(base_ + header_at), header_len, header_at)
        .parse(&dtype_, &shape_);
    data_offset_ = header_at + header_len;
    uint64_t elements = 1;
    for (uint64_t d : shape_) {
      if (d != 0 && elements > std::numeric_limits<uint64_t>::max() / 16 / d) {
        throw FormatError(path, header_at, "the shape's element count overflows 64 bits");
      }
      elements *= d;
    }
    data_bytes_ = elements * dtype_size(dtype_);
    const uint64_t have = file_size - data_offset_;
    if (have < data_bytes_) {
      throw FormatError(path, file_size,
                        "truncated: the data needs " + std::to_string(data_bytes_) +
                            " bytes from offset " + std::to_string(data_offset_) +
                            ", the file ends after " + std::to_string(have));
    }
    if (have > data_bytes_) {
      throw FormatError(path, data_offset_ + data_bytes_,
                        std::to_string(have - data_bytes_) +
                            " trailing bytes after the data the shape describes");
    }
  } catch (...) {
    unmap();
    throw;
  }
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

std::vector<int64_t> load_labels(const std::string& path, uint64_t expected) {
  const NpyArray a(path);
  const DType t = a.dtype();
  if (a.shape().size() != 1 || !detail::is_integer(t)) {
    throw std::invalid_argument("labels_path: '" + path + "' holds a " +
                                std::to_string(a.shape().size()) + "-D " +
                                std::string(to_string(t)) + " array; allowed: a 1-D integer array");
  }
  if (a.shape()[0] != expected) {
    throw std::invalid_argument("labels_path: '" + path + "' has " + std::to_string(a.shape()[0]) +
                                " labels; allowed: one per row, " + std::to_string(expected));
  }
  return detail::widen_integers(a.data(), t, expected);
}

}  // namespace

NpyDataset::NpyDataset(const std::string& path, const std::string& labels_path)
    : array_(path), size_(0), sample_bytes_(0) {
  if (array_.shape().empty()) {
    throw std::invalid_argument("path: '" + path +
                                "' holds a 0-D array; allowed: at least 1 dimension (the rows)");
  }
  spec_.shape.assign(array_.shape().begin() + 1, array_.shape().end());
  spec_.dtype = array_.dtype();
  size_ = array_.shape()[0];
  sample_bytes_ = spec_.bytes();
  if (sample_bytes_ == 0) {
    throw std::invalid_argument("path: '" + path +
                                "' has rows of 0 bytes; allowed: non-zero dimensions");
  }
  if (!labels_path.empty()) labels_ = load_labels(labels_path, size_);
}

void NpyDataset::read(uint64_t i, void* out) const {
  copy_row(array_.data(), sample_bytes_, i, out);
}

int64_t NpyDataset::label(uint64_t i) const { return label_at(labels_, i); }

}  // namespace distsampler
