// token_sources.h: Megatron indexed sources for the token tests, written as megatron-core's
// IndexedDatasetBuilder writes them (uint16 tokens, one sequence per document), with tokens that
// are a function of (source, document, offset).
#ifndef DISTSAMPLER_TESTS_CPP_TOKEN_SOURCES_H_
#define DISTSAMPLER_TESTS_CPP_TOKEN_SOURCES_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "temp_dir.h"

namespace distsampler {

inline int64_t token(uint64_t source, uint64_t document, uint64_t offset) {
  return static_cast<int64_t>((source * 7919 + document * 131 + offset * 17) % 60000);
}

template <typename T>
inline void append(std::vector<unsigned char>& out, T value) {
  unsigned char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // little-endian hosts, as the format
  out.insert(out.end(), bytes, bytes + sizeof(T));
}

// The files megatron-core's IndexedDatasetBuilder writes (uint16 tokens, one sequence per
// document).
inline std::string write_source(const testing_util::TempDir& dir, const std::string& name,
                                uint64_t source, const std::vector<uint32_t>& lengths) {
  std::vector<unsigned char> bin, idx;
  for (uint64_t d = 0; d < lengths.size(); ++d) {
    for (uint64_t t = 0; t < lengths[d]; ++t) {
      append(bin, static_cast<uint16_t>(token(source, d, t)));
    }
  }
  const char magic[] = "MMIDIDX\0\0";
  idx.insert(idx.end(), magic, magic + 9);
  append<uint64_t>(idx, 1);
  append<uint8_t>(idx, 8);  // uint16
  append<uint64_t>(idx, lengths.size());
  append<uint64_t>(idx, lengths.size() + 1);
  for (uint32_t n : lengths) append<int32_t>(idx, static_cast<int32_t>(n));
  int64_t pointer = 0;
  for (uint32_t n : lengths) {
    append<int64_t>(idx, pointer);
    pointer += 2 * static_cast<int64_t>(n);
  }
  for (uint64_t i = 0; i <= lengths.size(); ++i) append<int64_t>(idx, static_cast<int64_t>(i));
  dir.write(name + ".bin", bin);
  dir.write(name + ".idx", idx);
  return dir.file(name);
}

}  // namespace distsampler

#endif  // DISTSAMPLER_TESTS_CPP_TOKEN_SOURCES_H_
