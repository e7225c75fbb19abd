#include "distsampler/feistel.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "distsampler/hash.h"

namespace distsampler {
namespace {

int bit_width(uint64_t x) {
  int w = 0;
  while (x != 0) {
    ++w;
    x >>= 1;
  }
  return w;
}

}  // namespace

FeistelPermutation::FeistelPermutation(uint64_t n, uint64_t seed, uint64_t epoch, int rounds)
    : n_(n), rounds_(rounds), keys_{} {
  if (n > kMaxSize) {
    throw std::invalid_argument(
        "size = " + std::to_string(n) +
        " is too large for the Feistel order; allowed: size <= 2^63 = " + std::to_string(kMaxSize));
  }
  if (rounds < 1 || rounds > kMaxRounds) {
    throw std::invalid_argument(
        "rounds = " + std::to_string(rounds) +
        " is out of range; allowed: 1 <= rounds <= " + std::to_string(kMaxRounds));
  }
  if (n <= kSmallSize) rounds_ = std::max(rounds_, kSmallSizeRounds);
  const int width = n <= 1 ? 0 : bit_width(n - 1);
  right_bits_ = width / 2;
  const int left_bits = width - right_bits_;
  right_mask_ = static_cast<uint32_t>((uint64_t{1} << right_bits_) - 1);
  left_mask_ = static_cast<uint32_t>((uint64_t{1} << left_bits) - 1);
  uint64_t state = derive_key(seed, epoch, kDomainFeistelOrder);
  for (int r = 0; r < rounds_; ++r) {
    state = mix64(state);
    keys_[r] = static_cast<uint32_t>(state >> 32);
  }
}

uint64_t FeistelPermutation::at(uint64_t position) const {
  if (position >= n_) {
    throw std::out_of_range("position = " + std::to_string(position) +
                            " is out of range; allowed: position < size = " + std::to_string(n_));
  }
  return (*this)(position);
}

}  // namespace distsampler
