// docs/loader.md shows two FormatError messages; this program makes the two files they describe
// (in the current directory) and prints what opening each throws. Run by the docs test.
#include <distsampler/loader/dataset.h>
#include <distsampler/loader/idx.h>
#include <distsampler/loader/npy.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <string>

namespace {

void print_error(const std::function<void()>& open) {
  try {
    open();
    std::printf("no error\n");
  } catch (const distsampler::FormatError& e) {
    std::printf("%s\n", e.what());
  }
}

}  // namespace

int main() {
  // IDX: 3 x 4 uint8 (12 bytes of data from offset 12), cut after 7 of them.
  const std::string idx(
      "\x00\x00\x08\x02\x00\x00\x00\x03\x00\x00\x00\x04"
      "abcdefg",
      19);
  std::ofstream("train.idx", std::ios::binary) << idx;
  print_error([] { distsampler::read_idx("train.idx"); });

  // .npy, version 1.0, a Fortran-ordered array (header padded to 128 bytes as numpy does).
  std::string header = "{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }";
  header += std::string(128 - 10 - 1 - header.size(), ' ') + "\n";
  std::string npy = std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(header.size()) + '\0';
  std::ofstream("x.npy", std::ios::binary) << npy << header << std::string(4, '\0');
  print_error([] { distsampler::NpyArray array("x.npy"); });
  return 0;
}
