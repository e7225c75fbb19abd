// Adversarial: deterministic mutants of valid IDX (raw and gzip) and .npy files, loaded through
// read_idx / load_idx_dataset, NpyArray / NpyDataset and a DataLoader epoch, meant for the
// AddressSanitizer + UBSan build (scripts/sanitize.sh) as well as the normal one. Each mutant is
// either refused with std::runtime_error (FormatError included) or std::invalid_argument and a
// one-line message, or accepted with sizes that agree with its header, in which case every sample
// of a whole epoch can be read. A crash, a sanitizer report, another exception or a refused read of
// an accepted file is a failure.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "distsampler/loader/data_loader.h"
#include "distsampler/loader/idx.h"
#include "distsampler/loader/npy.h"
#include "distsampler/sampler.h"
#include "mutate.h"
#include "temp_dir.h"

namespace distsampler {
namespace {

using adversarial::Rng;
using testing_util::TempDir;
using Bytes = std::vector<unsigned char>;

constexpr int kIdxMutantsPerBase = 250;  // each loaded raw and gzipped: 2 files
constexpr int kNpyMutantsPerBase = 400;

Bytes to_bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }

// gzip of `raw` in memory (one member), so that the compressed bytes can be mutated too.
std::string gzip(const std::string& raw) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, raw.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
  z.avail_in = static_cast<uInt>(raw.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

std::string idx_file(unsigned char type, const std::vector<uint32_t>& dims, size_t element) {
  std::string s = {0, 0, static_cast<char>(type), static_cast<char>(dims.size())};
  uint64_t n = 1;
  for (uint32_t d : dims) {
    s.resize(s.size() + 4);
    adversarial::put_be(s, s.size() - 4, d, 4);
    n *= d;
  }
  for (uint64_t i = 0; i < n * element; ++i) s += static_cast<char>(i * 37 + 11);
  return s;
}

std::string npy_file(const std::string& dict, size_t data_bytes, unsigned major = 1) {
  const size_t prefix = major == 1 ? 10 : 12;
  std::string header = dict;
  while ((prefix + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string s = {static_cast<char>(0x93), 'N', 'U', 'M', 'P', 'Y', static_cast<char>(major), 0};
  s.resize(prefix);
  adversarial::put_le(s, 8, header.size(), static_cast<int>(prefix - 8));
  s += header;
  for (size_t i = 0; i < data_bytes; ++i) s += static_cast<char>(i * 53 + 5);
  return s;
}

// Refused as documented: a runtime_error or invalid_argument with a one-line message.
void expect_documented(const std::exception& e, const std::string& what) {
  const std::string message = e.what();
  EXPECT_FALSE(message.empty()) << what;
  EXPECT_EQ(message.find('\n'), std::string::npos) << what << ": " << message;
}

// A whole epoch of `dataset` through a DataLoader (2 ranks, rank 1, 2 threads): every batch holds
// its samples' bytes. The dataset was accepted, so no read may fail.
void read_an_epoch(std::shared_ptr<const Dataset> dataset, const std::string& what) {
  if (dataset->size() == 0 || dataset->size() > 4096) return;
  SamplerOptions options;
  options.size = dataset->size();
  options.world_size = 2;
  options.rank = 1;
  options.seed = Seed(uint64_t{7});
  const DistributedSampler sampler(options);
  DataLoader loader(dataset, sampler.epoch(1), {3, false, 2, 2});
  uint64_t samples = 0;
  try {
    for (Batch batch; loader.next(batch);) {
      ASSERT_EQ(batch.data.size(), batch.size() * dataset->spec().bytes()) << what;
      ASSERT_EQ(batch.labels.size(), dataset->has_labels() ? batch.size() : 0) << what;
      samples += batch.size();
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": an accepted dataset failed to read: " << e.what();
  }
  EXPECT_EQ(samples, sampler.epoch(1).size()) << what;
}

uint64_t product(const std::vector<uint64_t>& dims) {
  uint64_t p = 1;
  for (uint64_t d : dims) p *= d;
  return p;
}

// Loads one IDX mutant every documented way. Returns true when read_idx accepted it.
bool load_idx(const std::string& path, const std::string& labels, const std::string& what) {
  bool accepted = false;
  try {
    const IdxArray a = read_idx(path);
    accepted = true;
    EXPECT_FALSE(a.dims.empty()) << what;
    EXPECT_EQ(a.data.size(), product(a.dims) * dtype_size(a.dtype)) << what;
    auto dataset = std::make_shared<InMemoryDataset>(load_idx_dataset(path));
    read_an_epoch(dataset, what);
    auto labelled = std::make_shared<InMemoryDataset>(load_idx_dataset(path, labels));
    read_an_epoch(labelled, what + " (labelled)");
  } catch (const std::runtime_error& e) {
    expect_documented(e, what);
  } catch (const std::invalid_argument& e) {
    expect_documented(e, what);
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": unexpected exception " << e.what();
  }
  return accepted;
}

// Loads one .npy mutant every documented way. Returns true when NpyArray accepted it.
bool load_npy(const std::string& path, const std::string& labels, const std::string& what) {
  bool accepted = false;
  try {
    uint64_t rows = 0;
    {
      const NpyArray a(path);
      accepted = true;
      EXPECT_EQ(a.data_bytes(), product(a.shape()) * dtype_size(a.dtype())) << what;
      unsigned sum = 0;  // every mapped byte is readable
      for (uint64_t i = 0; i < a.data_bytes(); ++i) sum += a.data()[i];
      (void)sum;
      if (a.shape().empty()) return accepted;
      rows = a.shape()[0];
    }
    auto dataset = std::make_shared<NpyDataset>(path);
    EXPECT_EQ(dataset->size(), rows) << what;
    read_an_epoch(dataset, what);
    auto labelled = std::make_shared<NpyDataset>(path, labels);
    read_an_epoch(labelled, what + " (labelled)");
  } catch (const std::runtime_error& e) {
    expect_documented(e, what);
  } catch (const std::invalid_argument& e) {
    expect_documented(e, what);
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": unexpected exception " << e.what();
  }
  return accepted;
}

// One random edit of `s`; `header` bytes at the front are where most decoding happens, so half of
// the bit flips land there.
void mutate_bytes(std::string& s, Rng& rng, size_t header) {
  switch (rng.below(6)) {
    case 0:
      adversarial::flip_bits(s, rng, 0, header);
      break;
    case 1:
      adversarial::flip_bits(s, rng);
      break;
    case 2:
      adversarial::truncate(s, rng);
      break;
    case 3:
      adversarial::insert_bytes(s, rng);
      break;
    case 4:
      adversarial::erase_bytes(s, rng);
      break;
    default:
      s += std::string(1 + rng.below(16), static_cast<char>(rng.below(256)));
      break;
  }
}

TEST(LoaderMutation, IdxMutantsRawAndGzip) {
  const TempDir dir;
  Rng rng(20260103);
  struct Base {
    unsigned char type;
    std::vector<uint32_t> dims;
    size_t element;
  };
  const std::vector<Base> bases = {{0x08, {5, 3, 2}, 1}, {0x08, {5}, 1},   {0x09, {5, 4}, 1},
                                   {0x0B, {5, 3}, 2},    {0x0C, {5}, 4},   {0x0D, {5, 2, 2}, 4},
                                   {0x0E, {5, 1}, 8},    {0x08, {0, 7}, 1}};
  const std::string labels = dir.write("labels.idx", to_bytes(idx_file(0x08, {5}, 1)));
  uint64_t accepted = 0, files = 0;
  for (size_t b = 0; b < bases.size(); ++b) {
    const std::string original = idx_file(bases[b].type, bases[b].dims, bases[b].element);
    const size_t header = 4 + 4 * bases[b].dims.size();
    for (int m = 0; m < kIdxMutantsPerBase; ++m) {
      std::string raw = original;
      if (rng.below(3) == 0) {  // a header field at a limit: type, rank or one dimension
        const uint64_t field = rng.below(2 + bases[b].dims.size());
        if (field < 2) {
          raw[2 + field] = static_cast<char>(rng.below(4) == 0 ? rng.below(256) : rng.below(8));
        } else {
          adversarial::put_be(raw, 4 + 4 * (field - 2), adversarial::edge_value(rng), 4);
        }
      } else {
        mutate_bytes(raw, rng, header);
      }
      const std::string what = "IDX base " + std::to_string(b) + " mutant " + std::to_string(m);
      accepted += load_idx(dir.write("m.idx", to_bytes(raw)), labels, what);
      // The same content gzipped; or, one time in three, the original's compressed bytes mutated.
      const bool mutate_gz = rng.below(3) == 0;
      std::string gz = gzip(mutate_gz ? original : raw);
      if (mutate_gz) {
        switch (rng.below(4)) {
          case 0:
            adversarial::flip_bits(gz, rng);
            break;
          case 1:
            adversarial::truncate(gz, rng);
            break;
          case 2:
            gz += gzip(raw);
            break;  // a second member: accepted when both are valid
          default:
            gz += std::string(1 + rng.below(8), static_cast<char>(rng.below(256)));
            break;
        }
      }
      accepted += load_idx(dir.write("m.idx.gz", to_bytes(gz)), labels, what + " (gzip)");
      files += 2;
      if (HasFailure()) return;
    }
  }
  EXPECT_GT(accepted, 50u);
  EXPECT_LT(accepted, files - 1000);
  RecordProperty("files", std::to_string(files));
  RecordProperty("accepted", std::to_string(accepted));
}

TEST(LoaderMutation, NpyMutants) {
  const TempDir dir;
  Rng rng(20260104);
  struct Base {
    std::string dict;
    size_t data_bytes;
    unsigned major;
  };
  const std::vector<Base> bases = {
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (4, 3), }", 48, 1},
      {"{'descr': '|u1', 'fortran_order': False, 'shape': (4,), }", 4, 1},
      {"{'descr': '<i8', 'fortran_order': False, 'shape': (4, 2, 2), }", 128, 1},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (4, 1), }", 32, 2},
      {"{'descr': '<i2', 'fortran_order': False, 'shape': (0, 5), }", 0, 1},
      {"{'descr': '|i1', 'fortran_order': False, 'shape': (4, 0), }", 0, 1}};
  const std::string labels = dir.write(
      "labels.npy",
      to_bytes(npy_file("{'descr': '<i8', 'fortran_order': False, 'shape': (4,), }", 32)));
  // (descr, item size): the supported ones, and others numpy writes or no one does.
  const std::vector<std::pair<std::string, uint64_t>> descrs = {
      {"<f4", 4}, {"<f8", 8},  {"|u1", 1}, {"|i1", 1}, {"<i2", 2}, {"<i4", 4},
      {"<i8", 8}, {">f4", 4},  {"<u1", 1}, {"<u8", 8}, {"<f2", 2}, {"<c8", 8},
      {"|b1", 1}, {"<U3", 12}, {"O", 8},   {"=f4", 4}, {"", 1},    {"<f16", 16}};
  const std::vector<std::string> small_dims = {"0", "1", "2", "3", "4"};
  constexpr uint64_t kUnknown = ~uint64_t{0};
  const std::vector<std::string> dims = {"0",
                                         "1",
                                         "4",
                                         "5",
                                         "-1",
                                         "3.0",
                                         "2147483648",
                                         "4294967297",
                                         "9223372036854775807",
                                         "18446744073709551615",
                                         "18446744073709551616",
                                         "4611686018427387905",
                                         ""};
  uint64_t accepted = 0, files = 0;
  for (size_t b = 0; b < bases.size(); ++b) {
    const Base& base = bases[b];
    const std::string original = npy_file(base.dict, base.data_bytes, base.major);
    for (int m = 0; m < kNpyMutantsPerBase; ++m) {
      std::string s;
      const uint64_t kind = rng.below(6);
      if (kind <= 2) {  // the dictionary's values changed, the file rebuilt around it
        // Half the time the data is as long as a small shape says, so that some mutants are
        // valid files of another type or shape; else of a random length.
        const auto& [descr, itemsize] = rng.pick(descrs);
        std::string shape = "(";
        const uint64_t rank = rng.below(4);
        uint64_t elements = 1;
        for (uint64_t d = 0; d < rank; ++d) {
          const std::string dim = rng.below(2) ? rng.pick(small_dims) : rng.pick(dims);
          const bool small = dim.size() == 1 && dim[0] >= '0' && dim[0] <= '9';
          elements = small && elements != kUnknown ? elements * static_cast<uint64_t>(dim[0] - '0')
                                                   : kUnknown;
          shape += dim + (rank == 1 ? "," : ", ");
        }
        shape += ")";
        const std::string dict = "{'descr': '" + descr +
                                 "', 'fortran_order': " + (rng.below(4) == 0 ? "True" : "False") +
                                 ", 'shape': " + shape + ", }";
        const bool exact = elements != kUnknown && rng.below(2) == 0;
        s = npy_file(dict, exact ? elements * itemsize : rng.below(300), base.major);
      } else if (kind == 3) {  // the header length at a limit
        s = original;
        adversarial::put_le(s, 8, adversarial::edge_value(rng), base.major == 1 ? 2 : 4);
      } else {
        s = original;
        mutate_bytes(s, rng, 128);
      }
      const std::string what = "npy base " + std::to_string(b) + " mutant " + std::to_string(m);
      accepted += load_npy(dir.write("m.npy", to_bytes(s)), labels, what);
      ++files;
      if (HasFailure()) return;
    }
  }
  EXPECT_GT(accepted, 50u);
  EXPECT_LT(accepted, files - 500);
  RecordProperty("files", std::to_string(files));
  RecordProperty("accepted", std::to_string(accepted));
}

}  // namespace
}  // namespace distsampler
