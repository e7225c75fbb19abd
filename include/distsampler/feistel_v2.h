// feistel_v2.h: version 2 of the Feistel order, the default construction of FeistelPermutation.
// FeistelPermutation (feistel.h) is the API; this type is what it holds for version 2.
#ifndef DISTSAMPLER_FEISTEL_V2_H_
#define DISTSAMPLER_FEISTEL_V2_H_

#include <cstdint>

namespace distsampler {
namespace detail {

enum class SimdLevel;  // feistel.h

// A Feistel network over a domain barely above n, [0, L * 2^s) with k = bit_width(n - 1),
// s = ceil(k / 2) and L = ceil(n / 2^s), restricted to [0, n) by cycle walking, which therefore
// almost never runs (a fraction below 2^(1 - floor(k / 2)) of the positions walk). Rounds
// alternate: even ones XOR the right part (s bits) with the top s bits of h = mix(left, a_r, b_r),
// odd ones add h = mix(right, a_r, b_r), scaled to [0, L) as floor(h * L / 2^32), to the left
// part modulo L. mix keys the half with two 32-bit words and mixes it (multiply, xorshift,
// multiply: every output bit depends on every input bit). Then:
// (a) n is hashed into the key with (seed, epoch);
// (b) a keyed parity correction, the transposition of the values 0 and 1 applied with
//     probability 1/2, makes odd and even permutations equally likely;
// (c) sizes up to kExactSize are a Fisher-Yates shuffle drawn from a counter-based hash with
//     unbiased integer draws, held as a 64-byte table.
// The reasoning and references are at the top of src/feistel_v2.cc.
class FeistelV2 {
 public:
  // Twice the most rounds the quality battery's structure-aware statistics break (4).
  static constexpr int kDefaultRounds = 8;
  static constexpr int kMaxRounds = 32;
  // Sizes up to this are shuffled exactly (a table of this many bytes).
  static constexpr uint64_t kExactSize = 64;
  // Up to kSmallDomain (parts of at most 8 bits) at least kSmallDomainRounds rounds run, and up to
  // kNarrowDomain (a left part range L <= 256) at least kNarrowDomainRounds: narrow parts mix
  // slowly (src/feistel_v2.cc). The cost is irrelevant at these sizes.
  static constexpr uint64_t kSmallDomain = uint64_t{1} << 16;
  static constexpr int kSmallDomainRounds = 24;
  static constexpr uint64_t kNarrowDomain = uint64_t{1} << 17;
  static constexpr int kNarrowDomainRounds = 8;
  // The round function mix: lowbias32's multipliers and shift (Hash Prospector).
  static constexpr uint32_t kMixMultiplier1 = 0x7feb352du;
  static constexpr uint32_t kMixMultiplier2 = 0x846ca68bu;
  static constexpr int kMixShift = 15;

  // Requires n <= 2^63 and rounds in [1, kMaxRounds]; raises rounds to the minimums above.
  FeistelV2(uint64_t n, uint64_t seed, uint64_t epoch, int rounds);

  uint64_t size() const { return n_; }
  int rounds() const { return rounds_; }

  // The element at `position`; requires position < size().
  uint64_t operator()(uint64_t position) const {
    if (exact_) return table_[position];
    return correct_parity(network_value(position));
  }
  // The position holding `index`; requires index < size().
  uint64_t inverse(uint64_t index) const {
    if (exact_) return inverse_table_[index];
    return network_inverse(correct_parity(index));
  }
  // out[j] = (*this)(first + j * stride) for j in [0, count), with the kernel of `level`, which
  // must be supported (src/feistel_v2_gather.cc).
  void gather(uint64_t first, uint64_t stride, uint64_t count, uint64_t* out,
              SimdLevel level) const;

 private:
  // The gather kernels' view of the network (src/feistel_v2_gather.h).
  friend struct FeistelV2Network;

  // The walked network's value at `position`, before the parity correction.
  uint64_t network_value(uint64_t position) const {
    uint64_t x = position;
    do {
      x = encrypt(x);
    } while (x >= n_);
    return x;
  }
  // The position where the walked network (before the parity correction) puts `value`.
  uint64_t network_inverse(uint64_t value) const {
    uint64_t x = value;
    do {
      x = decrypt(x);
    } while (x >= n_);
    return x;
  }
  uint64_t encrypt(uint64_t x) const {
    uint32_t left = static_cast<uint32_t>(x >> right_bits_);
    uint32_t right = static_cast<uint32_t>(x) & right_mask_;
    for (int r = 0; r < rounds_; r += 2) {
      right ^= mix(left, keys_[r], keys2_[r]) >> right_shift_;
      if (r + 1 < rounds_) {
        const uint32_t y = left + scale(mix(right, keys_[r + 1], keys2_[r + 1]), left_size_);
        left = y >= left_size_ ? y - left_size_ : y;
      }
    }
    return (static_cast<uint64_t>(left) << right_bits_) | right;
  }
  uint64_t decrypt(uint64_t x) const {
    uint32_t left = static_cast<uint32_t>(x >> right_bits_);
    uint32_t right = static_cast<uint32_t>(x) & right_mask_;
    for (int r = rounds_ - 1; r >= 0; --r) {
      if (r % 2 == 1) {
        const uint32_t c = scale(mix(right, keys_[r], keys2_[r]), left_size_);
        left = left < c ? left - c + left_size_ : left - c;
      } else {
        right ^= mix(left, keys_[r], keys2_[r]) >> right_shift_;
      }
    }
    return (static_cast<uint64_t>(left) << right_bits_) | right;
  }
  // The round function: the half keyed by two words a, b, mixed (multiply, xorshift, multiply).
  // Its high bits depend on every bit of the half; rounds use the top s of them (XOR rounds) or
  // scale them to [0, L) (modular rounds).
  static uint32_t mix(uint32_t half, uint32_t a, uint32_t b) {
    uint32_t h = (half ^ a) * kMixMultiplier1;
    h ^= (h >> kMixShift) ^ b;
    return h * kMixMultiplier2;
  }
  // floor(h * size / 2^32): a 32-bit hash scaled to [0, size), every value reached by
  // floor(2^32 / size) or one more words.
  static uint32_t scale(uint32_t h, uint32_t size) {
    return static_cast<uint32_t>((static_cast<uint64_t>(h) * size) >> 32);
  }
  // The parity correction, its own inverse: swaps the values 0 and 1 when flip_ is 1. gather
  // applies it at parity_positions_ instead.
  uint64_t correct_parity(uint64_t x) const { return x ^ (flip_ & static_cast<uint64_t>(x < 2)); }
  // Fills table_ and inverse_table_ with a uniform permutation of [0, n_) drawn from `key`.
  void shuffle_exactly(uint64_t key);

  uint64_t n_;
  int rounds_;
  bool exact_ = false;   // n_ <= kExactSize: table_ holds the order
  uint64_t flip_ = 0;    // 1 when the values 0 and 1 trade places
  int right_bits_;       // s
  uint32_t right_mask_;  // 2^s - 1
  uint32_t left_size_;   // L (<= 2^31)
  int right_shift_;      // 32 - s: keeps the top s bits of a hash (XOR rounds)
  // The rounds' key words: mix's a and b.
  uint32_t keys_[kMaxRounds];
  uint32_t keys2_[kMaxRounds];
  // With flip_ == 1: the positions where the network puts the values 0 and 1.
  uint64_t parity_positions_[2] = {0, 0};
  uint8_t table_[kExactSize];
  uint8_t inverse_table_[kExactSize];
};

}  // namespace detail
}  // namespace distsampler

#endif  // DISTSAMPLER_FEISTEL_V2_H_
