// feistel_internal.h: what the sources of the Feistel orders share, private to src/: whether this
// build has the x86 gather kernels, and the width of a domain.
#ifndef DISTSAMPLER_SRC_FEISTEL_INTERNAL_H_
#define DISTSAMPLER_SRC_FEISTEL_INTERNAL_H_

#include <cstdint>

// The x86 kernels (SSE4.1, AVX2, AVX-512) are compiled with GCC/Clang target attributes, so the
// build itself stays baseline x86-64; other compilers and architectures get the portable kernels
// only. detail::simd_level_supported (src/feistel.cc) decides which kernel a CPU may run.
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define DISTSAMPLER_X86_KERNELS 1
#else
#define DISTSAMPLER_X86_KERNELS 0
#endif

namespace distsampler {
namespace detail {

// k = bit_width(n - 1), the bits of the largest position, 0 for n <= 1. Not ceil(log2(n)) in
// floating point, nor bit_width(n), which is one bit too wide at exact powers of two.
inline int feistel_width(uint64_t n) {
  int w = 0;
  for (uint64_t x = n <= 1 ? 0 : n - 1; x != 0; x >>= 1) ++w;
  return w;
}

}  // namespace detail
}  // namespace distsampler

#endif  // DISTSAMPLER_SRC_FEISTEL_INTERNAL_H_
