// FeistelV2::gather: the choice of kernel per instruction set (the kernels: feistel_v2_gather.h)
// and the parity correction.
//
// Version 2's domain [0, L * 2^s) is barely above n, so the kernels do not walk cycles in SIMD at
// all: a lane's value can reach n only if its left part is at least floor(n / 2^s), about 1 lane
// in L; the values >= n of a step holding such a lane are recomputed by the scalar network value,
// which walks. The parity correction (the values 0 and 1 trade places, on one key bit) is applied
// last, here, at the two positions it concerns, which the constructor computed.
#include "feistel_v2_gather.h"

#include "distsampler/feistel.h"
#include "distsampler/feistel_v2.h"

namespace distsampler {
namespace detail {

void FeistelV2::gather(uint64_t first, uint64_t stride, uint64_t count, uint64_t* out,
                       SimdLevel level) const {
  if (exact_) {
    for (uint64_t j = 0; j < count; ++j) out[j] = table_[first + j * stride];
    return;
  }
  const FeistelV2Network net(*this);
  switch (level) {
#if DISTSAMPLER_X86_KERNELS
    // Dispatch (detail::select_simd_level) never asks for an unverified kernel; an explicit
    // level runs its own kernel, so that a check can compare it with operator().
    case SimdLevel::kAvx512:
      v2::gather_avx512(net, first, stride, count, out);
      break;
    case SimdLevel::kAvx2:
      v2::gather_avx2(net, first, stride, count, out);
      break;
    case SimdLevel::kSse41:
      v2::gather_sse41(net, first, stride, count, out);
      break;
#endif
    default:
      v2::gather_portable(net, first, stride, count, out);
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

}  // namespace detail
}  // namespace distsampler
