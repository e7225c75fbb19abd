// libFuzzer target for the loader's file decoders (idx.h, npy.h): the input's first byte picks
// the decoder, the rest becomes the file's bytes (an in-memory file from memfd_create, read
// through its /proc path as a user's file would be). On any input each decoder either throws
// std::runtime_error (FormatError included) or std::invalid_argument, or returns an array whose
// sizes agree with its header and whose every sample can be read. Anything else (a crash, another
// exception, a sanitizer report, a hang past -timeout) is a finding.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "distsampler/loader/idx.h"
#include "distsampler/loader/npy.h"

namespace {

// An anonymous in-memory file holding `bytes`, closed on destruction.
class MemoryFile {
 public:
  MemoryFile(const uint8_t* bytes, size_t size) : fd_(memfd_create("fuzz", 0)) {
    if (fd_ < 0) std::abort();
    size_t written = 0;
    while (written < size) {
      const ssize_t n = write(fd_, bytes + written, size - written);
      if (n <= 0) std::abort();
      written += static_cast<size_t>(n);
    }
  }
  ~MemoryFile() { close(fd_); }
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

uint64_t product(const std::vector<uint64_t>& dims, size_t from) {
  uint64_t p = 1;
  for (size_t i = from; i < dims.size(); ++i) p *= dims[i];
  return p;
}

void fuzz_idx(const std::string& path) {
  const distsampler::IdxArray a = distsampler::read_idx(path);
  if (a.dims.empty()) std::abort();
  const uint64_t elements = product(a.dims, 0);
  if (a.data.size() != elements * distsampler::dtype_size(a.dtype)) std::abort();
}

void fuzz_npy(const std::string& path) {
  const distsampler::NpyArray a(path);
  const uint64_t elements = product(a.shape(), 0);
  if (a.data_bytes() != elements * distsampler::dtype_size(a.dtype())) std::abort();
  if (a.shape().empty() || a.shape()[0] == 0) return;
  const distsampler::NpyDataset rows(path);
  if (rows.size() != a.shape()[0]) std::abort();
  std::vector<unsigned char> sample(rows.spec().bytes() + 1);
  for (uint64_t i = 0; i < rows.size() && i < 64; ++i) rows.read(i, sample.data());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > (1u << 20)) return 0;
  const MemoryFile file(data + 1, size - 1);
  try {
    if (data[0] % 2 == 0) {
      fuzz_idx(file.path());
    } else {
      fuzz_npy(file.path());
    }
  } catch (const std::runtime_error&) {
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
