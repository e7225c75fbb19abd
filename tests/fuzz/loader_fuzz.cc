// libFuzzer target for the loader's file decoders (idx.h, npy.h, indexed.h): the input's first
// byte picks the decoder (modulo 3: IDX, .npy, Megatron indexed), the rest becomes the file's
// bytes (an in-memory file from memfd_create, read through its /proc path as a user's file would
// be; for indexed.h, after two bytes n (little-endian), a PREFIX.idx of n bytes and a PREFIX.bin of the rest,
// in a folder of this process, then a token plan over the documents as one source). On any input each decoder either throws
// std::runtime_error (FormatError included) or std::invalid_argument, or returns an array whose
// sizes agree with its header and whose every sample can be read. Anything else (a crash, another
// exception, a sanitizer report, a hang past -timeout) is a finding.
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include <fstream>

#include "distsampler/loader/idx.h"
#include "distsampler/loader/npy.h"
#include "distsampler/loader/tokens.h"

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

void write_file(const std::string& path, const uint8_t* bytes, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes), static_cast<std::streamsize>(size));
  if (!out) std::abort();
}

// The documents read whole, then a few sequences of each packing planned and read.
void fuzz_indexed(const uint8_t* data, size_t size) {
  static const std::string prefix = [] {
    const std::string dir = "/tmp/distsampler_fuzz_" + std::to_string(getpid());
    if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) std::abort();
    return dir + "/source";
  }();
  if (size < 2) return;
  const size_t idx = std::min<size_t>(size - 2, size_t{data[0]} | (size_t{data[1]} << 8));
  write_file(prefix + ".idx", data + 2, idx);
  write_file(prefix + ".bin", data + 2 + idx, size - 2 - idx);
  const auto sources = distsampler::open_token_sources({{prefix}});
  const distsampler::IndexedSource& source = sources[0]->source();
  std::vector<int64_t> tokens;
  for (uint64_t d = 0; d < source.documents() && d < 256; ++d) {
    tokens.resize(source.check_read(d, 0, source.length(d)));  // the entry checked first
    source.read(d, 0, tokens.size(), tokens.data());
  }
  for (auto packing : {distsampler::Packing::kConcat, distsampler::Packing::kBestFit}) {
    distsampler::TokenPlanOptions o;
    o.weights = {1};
    o.seq_len = 7;
    o.global_batch = 2;
    o.packing = packing;
    o.window = 5;
    distsampler::TokenPlan plan({sources.begin(), sources.end()}, o);
    for (int step = 0; step < 4; ++step) {
      const auto rows = distsampler::read_token_rows(sources, plan.next_step(1, 0), 8, 0);
      if (rows.rows != 2) std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > (1u << 20)) return 0;
  const MemoryFile file(data + 1, size - 1);
  try {
    if (data[0] % 3 == 0) {
      fuzz_idx(file.path());
    } else if (data[0] % 3 == 1) {
      fuzz_npy(file.path());
    } else {
      fuzz_indexed(data + 1, size - 1);
    }
  } catch (const std::runtime_error&) {
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
