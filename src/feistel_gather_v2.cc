// FeistelPermutation::gather for version 2: the choice of kernel per instruction set (the kernels:
// feistel_gather_v2.h) and the parity correction.
//
// Version 2's domain [0, L * 2^s) is barely above n, so the kernels do not walk cycles in SIMD at
// all: a lane's value can reach n only if its left part is at least floor(n / 2^s), about 1 lane
// in L; the values >= n of a step holding such a lane are recomputed by the scalar network_value,
// which walks. The parity correction (the values 0 and 1 trade places, on one key bit) is applied
// last, here, at the two positions it concerns, which the constructor computed.
#include "feistel_gather_v2.h"

#include "distsampler/feistel.h"

namespace distsampler {

void FeistelPermutation::gather_version2(uint64_t first, uint64_t stride, uint64_t count,
                                         uint64_t* out, detail::SimdLevel level) const {
  const Network net{n_, rounds_, right_bits_, right_mask_, left_size_, right_shift_, keys_, keys2_};
  switch (level) {
#if DISTSAMPLER_X86_KERNELS
    // The AVX-512 kernel has not yet been compared with operator() on an AVX-512 CPU: until it
    // has, AVX-512 CPUs take the AVX2 kernel, whose bits are verified. Same bits on every machine.
    case detail::SimdLevel::kAvx512:
    case detail::SimdLevel::kAvx2:
      detail::v2::gather_avx2(*this, net, first, stride, count, out);
      break;
    case detail::SimdLevel::kSse41:
      detail::v2::gather_sse41(*this, net, first, stride, count, out);
      break;
#endif
    default:
      detail::v2::gather_portable(*this, net, first, stride, count, out);
      break;
  }
  // The parity correction: the values 0 and 1 trade places, at the two positions holding them.
  if (flip_ != 0) {
    for (uint64_t q : parity_positions_) {
      if (stride == 0) {
        if (q == first) {
          for (uint64_t j = 0; j < count; ++j) out[j] ^= 1;
        }
      } else if (q >= first && (q - first) % stride == 0 && (q - first) / stride < count) {
        out[(q - first) / stride] ^= 1;
      }
    }
  }
}

}  // namespace distsampler
