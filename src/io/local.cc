// Local files as byte sources (bytes.h): the file mapped whole, its bytes the view.
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

#include "bytes.h"
#include "file.h"

namespace distsampler {
namespace detail {
namespace {

class LocalSource : public ByteSource {
 public:
  // Read at random (MADV_RANDOM): a fault reads its page, not the read-ahead window around it.
  explicit LocalSource(const std::string& path) : file_(path, /*random_access=*/true) {}
  const std::string& name() const override { return file_.path(); }
  uint64_t size() const override { return file_.size(); }
  std::string version() const override { return file_.path(); }
  const unsigned char* view() const override { return file_.data(); }
  bool remote() const override { return false; }
  void read(uint64_t offset, uint64_t n, unsigned char* out) const override {
    if (offset > file_.size() || n > file_.size() - offset) {
      throw std::out_of_range(file_.path() + ": bytes [" + std::to_string(offset) + ", " +
                              std::to_string(offset + n) + ") asked of a file of " +
                              std::to_string(file_.size()) + " bytes");
    }
    if (n > 0) std::memcpy(out, file_.data() + offset, n);
  }
  std::string cache_name() const override { return ""; }

 private:
  MappedFile file_;
};

}  // namespace

std::shared_ptr<const ByteSource> open_local(const std::string& path) {
  return std::make_shared<const LocalSource>(path);
}

}  // namespace detail
}  // namespace distsampler
