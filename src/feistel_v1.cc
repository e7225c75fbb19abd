// Version 1 of the Feistel order (feistel_v1.h): its parameters and round keys. The gather
// kernels are src/feistel_v1_gather.cc.
#include "distsampler/feistel_v1.h"

#include <algorithm>

#include "distsampler/hash.h"
#include "feistel_internal.h"

namespace distsampler {
namespace detail {

FeistelV1::FeistelV1(uint64_t n, uint64_t seed, uint64_t epoch, int rounds)
    : n_(n), rounds_(n <= kSmallSize ? std::max(rounds, kSmallSizeRounds) : rounds), keys_{} {
  const int width = feistel_width(n);
  right_bits_ = width / 2;
  right_mask_ = static_cast<uint32_t>((uint64_t{1} << right_bits_) - 1);
  left_mask_ = static_cast<uint32_t>((uint64_t{1} << (width - right_bits_)) - 1);
  uint64_t state = derive_key(seed, epoch, kDomainFeistelOrder);
  for (int r = 0; r < rounds_; ++r) {
    state = mix64(state);
    keys_[r] = static_cast<uint32_t>(state >> 32);
  }
}

}  // namespace detail
}  // namespace distsampler
