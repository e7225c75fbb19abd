// feistel_v1.h: version 1 of the Feistel order, FeistelPermutation's first construction.
// FeistelPermutation (feistel.h) is the API; this type is what it holds for version 1.
#ifndef DISTSAMPLER_FEISTEL_V1_H_
#define DISTSAMPLER_FEISTEL_V1_H_

#include <cstdint>

#include "distsampler/hash.h"

namespace distsampler {
namespace detail {

enum class SimdLevel;  // feistel.h

// An alternating (possibly unbalanced) Feistel network over k = bit_width(n - 1) bits, the left
// part ceil(k / 2) bits and the right part floor(k / 2); even rounds XOR the right part with a
// keyed hash of the left, odd rounds the left with a keyed hash of the right. Each round is a
// bijection of [0, 2^k) whatever the widths, so the network is too; cycle walking (re-encrypt
// until the value is below n) restricts it to a bijection of [0, n). Because 2^(k - 1) < n <= 2^k,
// fewer than two encryptions are needed on average. The width is bit_width(n - 1), not
// ceil(log2(n)) computed in floating point or bit_width(n): the latter is one bit too wide at
// exact powers of two.
//
// The round keys come from derive_key(seed, epoch) alone. Known flaws, kept bit for bit because
// checkpoints name this version: every XOR round is an even permutation, so the parity depends
// on n alone; sizes of 3 to 10 bits are measurably non-uniform; n is not in the key, so the orders
// of n and n + 1 nearly agree (version 2, feistel_v2.h, fixes all three).
class FeistelV1 {
 public:
  static constexpr int kDefaultRounds = 8;
  static constexpr int kMaxRounds = 32;
  // Sizes up to kSmallSize run at least kSmallSizeRounds rounds: halves of one to three bits mix
  // slowly (with 8 rounds some permutations of 5 elements appear 10x too often).
  static constexpr uint64_t kSmallSize = 64;
  static constexpr int kSmallSizeRounds = 24;

  // Requires n <= 2^63 and rounds in [1, kMaxRounds]; runs max(rounds, kSmallSizeRounds) rounds
  // when n <= kSmallSize.
  FeistelV1(uint64_t n, uint64_t seed, uint64_t epoch, int rounds);

  uint64_t size() const { return n_; }
  int rounds() const { return rounds_; }

  // The element at `position`; requires position < size().
  uint64_t operator()(uint64_t position) const {
    uint64_t x = position;
    do {
      x = encrypt(x);
    } while (x >= n_);
    return x;
  }
  // The position holding `index`; requires index < size().
  uint64_t inverse(uint64_t index) const {
    uint64_t x = index;
    do {
      x = decrypt(x);
    } while (x >= n_);
    return x;
  }
  // out[j] = (*this)(first + j * stride) for j in [0, count), with the kernel of `level`, which
  // must be supported (src/feistel_v1_gather.cc).
  void gather(uint64_t first, uint64_t stride, uint64_t count, uint64_t* out,
              SimdLevel level) const;

 private:
  uint64_t encrypt(uint64_t x) const {
    uint32_t left = static_cast<uint32_t>(x >> right_bits_);
    uint32_t right = static_cast<uint32_t>(x) & right_mask_;
    for (int r = 0; r < rounds_; r += 2) {
      right ^= round(left, keys_[r]) & right_mask_;
      if (r + 1 < rounds_) left ^= round(right, keys_[r + 1]) & left_mask_;
    }
    return (static_cast<uint64_t>(left) << right_bits_) | right;
  }
  uint64_t decrypt(uint64_t x) const {
    uint32_t left = static_cast<uint32_t>(x >> right_bits_);
    uint32_t right = static_cast<uint32_t>(x) & right_mask_;
    for (int r = rounds_ - 1; r >= 0; --r) {
      if (r % 2 == 1) {
        left ^= round(right, keys_[r]) & left_mask_;
      } else {
        right ^= round(left, keys_[r]) & right_mask_;
      }
    }
    return (static_cast<uint64_t>(left) << right_bits_) | right;
  }
  static uint32_t round(uint32_t half, uint32_t key) { return mix32(half ^ key); }

  uint64_t n_;
  int rounds_;
  int right_bits_;
  uint32_t left_mask_;
  uint32_t right_mask_;
  uint32_t keys_[kMaxRounds];
};

}  // namespace detail
}  // namespace distsampler

#endif  // DISTSAMPLER_FEISTEL_V1_H_
