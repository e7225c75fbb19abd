// feistel.h: a keyed pseudorandom permutation of [0, n), random access in O(1), any n <= 2^63.
#ifndef DISTSAMPLER_FEISTEL_H_
#define DISTSAMPLER_FEISTEL_H_

#include <cstdint>

#include "distsampler/hash.h"

namespace distsampler {

namespace detail {
// The instruction sets FeistelPermutation::gather has a kernel for. Every kernel produces the same
// bits as operator(); they differ only in speed. kPortable is plain C++ and runs everywhere;
// kSse41 is the same code built for SSE4.1 (x86-64; version 1 runs its portable kernel there).
enum class SimdLevel { kPortable, kAvx2, kAvx512, kSse41 };
// Whether this build has a kernel for `level` and this CPU can run it.
bool simd_level_supported(SimdLevel level);
// The fastest supported level, detected once; gather(first, stride, count, out) uses it.
SimdLevel best_simd_level();
}  // namespace detail

// A bijection of [0, n) chosen by (seed, epoch): the element at any position costs O(1) time and
// memory, so one rank reading its n / W positions pays O(n / W) and never builds the whole order.
// Two versions, both kept bit for bit (a checkpoint names the one it was written with):
//
// Version 1: an alternating (possibly unbalanced) Feistel network over k = bit_width(n - 1)
// bits, the left part ceil(k / 2) bits and the right part floor(k / 2); even rounds XOR the right
// part with a keyed hash of the left, odd rounds the left with a keyed hash of the right. Each
// round is a bijection of [0, 2^k) whatever the widths, so the network is too; cycle walking
// (re-encrypt until the value is below n) restricts it to a bijection of [0, n). Because
// 2^(k - 1) < n <= 2^k, fewer than two encryptions are needed on average. The width is
// bit_width(n - 1), not ceil(log2(n)) computed in floating point or bit_width(n): the latter is
// one bit too wide at exact powers of two, and tests check every size around each power of two.
//
// Round keys come from derive_key(seed, epoch) once, at construction. Its measured flaws (issue
// 13): every XOR round is an even permutation, so parity depends on n alone; sizes of 3 to 10 bits
// are measurably non-uniform; and n is not in the key, so the orders of n and n + 1 nearly agree.
//
// Version 2 (the default; reasoning and references in src/feistel.cc): a Feistel network over
// a domain barely above n, [0, L * 2^s) with s = ceil(k / 2) and L = ceil(n / 2^s), so cycle
// walking almost never runs (a fraction below 2^(1 - floor(k / 2)) of the positions walk, against
// up to one half in version 1). Rounds alternate: even ones XOR the right part (s bits) with the
// top s bits of h = mix(left, a_r, b_r), odd ones add h = mix(right, a_r, b_r), scaled to [0, L) as
// floor(h * L / 2^32), to the left part modulo L. mix keys the half with two 32-bit words and
// mixes it (multiply, xorshift, multiply: every output bit depends on every input bit), the same
// 32-bit integer operations in every SIMD kernel. It also has (a) n hashed into the key, (b) a
// keyed parity correction, the transposition of the values 0 and 1 applied with probability 1/2,
// which makes odd and even permutations equally likely, and (c) sizes up to kExactSize exact: a
// Fisher-Yates shuffle drawn from a counter-based hash with unbiased (Lemire, rejection) integer
// draws, held as a 64-byte table; sizes up to 2^16 run at least 24 rounds.
class FeistelPermutation {
 public:
  // The rounds most users should take, per version. Version 1: 8 keep the cost per index at a few
  // nanoseconds, and pairs of positions land uniformly for every size above 64 (tests check 64
  // to 257). Version 2: 8, twice the most rounds the battery breaks (4: its structure-aware
  // statistics, tools/quality_structure.cc, fail 4 rounds and pass 5 to 8; src/feistel.cc).
  // Fewer rounds are faster and measurably less uniform.
  static constexpr int kVersion1Rounds = 8;
  static constexpr int kVersion2Rounds = 8;
  // Passed as rounds: the version's default (default_rounds).
  static constexpr int kVersionDefaultRounds = 0;
  static constexpr int kMaxRounds = 32;
  // Halves of one to three bits mix slowly: with 8 rounds some permutations of 5 elements appear
  // 10x too often. Sizes up to kSmallSize therefore run at least kSmallSizeRounds rounds, after
  // which every permutation of 2 to 6 elements is equally likely (chi-square tests). Their cost
  // is irrelevant; the rounds a caller asks for apply as given above kSmallSize.
  static constexpr uint64_t kSmallSize = 64;
  static constexpr int kSmallSizeRounds = 24;
  static constexpr uint64_t kMaxSize = uint64_t{1} << 63;
  // The versions of the construction; new orders take kDefaultVersion.
  static constexpr int kVersion1 = 1;
  static constexpr int kVersion2 = 2;
  static constexpr int kDefaultVersion = kVersion2;
  // kVersion1Rounds or kVersion2Rounds (version is 1 or 2).
  static constexpr int default_rounds(int version) {
    return version == kVersion1 ? kVersion1Rounds : kVersion2Rounds;
  }
  // Version 2 shuffles sizes up to this exactly (a table of this many bytes).
  static constexpr uint64_t kExactSize = 64;
  // Version 2 runs at least kSmallSizeRounds rounds up to this size (parts of at most 8 bits):
  // with 8 rounds the 4 + 3-bit halves of n = 100 left a measurable correlation between the
  // positions of the values v and v + 8 (the battery's inverse serial test: z = 7.6 at lag 8 in
  // 500,000 permutations, on the first version 2 network; 12 rounds passed). The cost stays
  // below a millisecond per epoch.
  static constexpr uint64_t kSmallDomainVersion2 = uint64_t{1} << 16;
  // Above that and up to this size (a left part of at most 8 bits, L <= 256), version 2 runs at
  // least kNarrowDomainRounds: with 6 the battery's pair-difference statistic read z = 3.8 at
  // n = 65,537 (L = 129, 2000 permutations), against |z| < 1 with 8 there and with 6 at
  // n = 131,073 (L = 257) and 1,000,003.
  static constexpr uint64_t kNarrowDomainVersion2 = uint64_t{1} << 17;
  static constexpr int kNarrowDomainRounds = 8;
  // Version 2's round function (mix): lowbias32's multipliers and shift (Hash Prospector).
  static constexpr uint32_t kMixMultiplier1 = 0x7feb352du;
  static constexpr uint32_t kMixMultiplier2 = 0x846ca68bu;
  static constexpr int kMixShift = 15;

  FeistelPermutation() : FeistelPermutation(0, 0, 0) {}
  // rounds = kVersionDefaultRounds (0) takes default_rounds(version). Throws
  // std::invalid_argument when n > 2^63, rounds is outside [0, 32] or version is not 1 or 2.
  FeistelPermutation(uint64_t n, uint64_t seed, uint64_t epoch, int rounds = kVersionDefaultRounds,
                     int version = kDefaultVersion);

  uint64_t size() const { return n_; }
  // The rounds actually run: the requested ones, or at least kSmallSizeRounds for size() <=
  // kSmallSize (version 1) or kSmallDomainVersion2 (version 2, which reads its table instead up
  // to kExactSize).
  int rounds() const { return rounds_; }
  int version() const { return version_; }

  // The element at `position`; requires position < size().
  uint64_t operator()(uint64_t position) const {
    if (exact_) return table_[position];
    uint64_t x = position;
    if (version_ == kVersion1) {
      do {
        x = encrypt(x);
      } while (x >= n_);
      return x;
    }
    return correct_parity(network_value(x));
  }
  // As operator(), but throws std::out_of_range when position >= size().
  uint64_t at(uint64_t position) const;

  // The position holding `index`: inverse((*this)(p)) == p. Requires index < size().
  uint64_t inverse(uint64_t index) const {
    if (exact_) return inverse_table_[index];
    if (version_ == kVersion1) {
      uint64_t x = index;
      do {
        x = decrypt(x);
      } while (x >= n_);
      return x;
    }
    return network_inverse(correct_parity(index));
  }

  // out[j] = (*this)(first + j * stride) for j in [0, count); every such position must be below
  // size(). Evaluates lanes in blocks with the widest SIMD kernel this CPU runs (cycle walking
  // included); same bits as operator(). No allocation: O(1) memory beyond `out`.
  void gather(uint64_t first, uint64_t stride, uint64_t count, uint64_t* out) const;
  // As above with the kernel of `level`, which must be supported (tests and benchmarks compare
  // the kernels with each other); throws std::invalid_argument when it is not.
  void gather(uint64_t first, uint64_t stride, uint64_t count, uint64_t* out,
              detail::SimdLevel level) const;

  // Version 2 (size() > kExactSize) without its parity correction: the walked network's value at
  // `position`. What the gather kernels compute; gather applies the correction afterwards, at
  // the two positions it concerns. Not an API.
  uint64_t network_value(uint64_t position) const {
    uint64_t x = position;
    do {
      x = encrypt2(x);
    } while (x >= n_);
    return x;
  }
  // Version 2's parameters as its gather kernels read them (src/feistel_gather_v2.h); not an API.
  struct Network {
    uint64_t n;
    int rounds;
    int right_bits;       // s
    uint32_t right_mask;  // 2^s - 1
    uint32_t left_size;   // L
    int right_shift;      // 32 - s
    const uint32_t* keys;
    const uint32_t* keys2;
  };

 private:
  // gather for version 2 (src/feistel_gather_v2.cc); level is supported, size() > kExactSize.
  void gather_version2(uint64_t first, uint64_t stride, uint64_t count, uint64_t* out,
                       detail::SimdLevel level) const;
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
  // Version 2's network over [0, left_size_ * 2^right_bits_) (the header comment above).
  uint64_t encrypt2(uint64_t x) const {
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
  // Version 2's round function: the half keyed by two words a, b, mixed (multiply, xorshift,
  // multiply). Its high bits depend on every bit of the half; rounds use the top s of them (XOR
  // rounds) or scale them to [0, L) (modular rounds).
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
  // The position where the walked version 2 network (before the parity correction) puts `value`.
  uint64_t network_inverse(uint64_t value) const {
    uint64_t x = value;
    do {
      x = decrypt2(x);
    } while (x >= n_);
    return x;
  }
  uint64_t decrypt2(uint64_t x) const {
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
  // Version 2's parity correction, its own inverse: swaps the values 0 and 1 when flip_ is 1
  // (always 0 in version 1). gather applies it at parity_positions_ instead.
  uint64_t correct_parity(uint64_t x) const { return x ^ (flip_ & static_cast<uint64_t>(x < 2)); }
  // Fills table_ and inverse_table_ with a uniform permutation of [0, n_) drawn from `key`.
  void shuffle_exactly(uint64_t key);

  uint64_t n_;
  int version_;
  bool exact_ = false;  // version 2 with n_ <= kExactSize: table_ holds the order
  uint64_t flip_ = 0;   // version 2: 1 when the values 0 and 1 trade places
  int rounds_;
  int right_bits_;
  uint32_t left_mask_;
  uint32_t right_mask_;
  uint32_t keys_[kMaxRounds];
  // Version 2 only: the left part's range L (<= 2^31), the shift that keeps the top s bits of a
  // hash (right rounds), and the rounds' second key words (mix's b; keys_ holds its a).
  uint32_t left_size_ = 0;
  int right_shift_ = 0;
  uint32_t keys2_[kMaxRounds];
  // Version 2 with flip_ == 1: the positions where the network puts the values 0 and 1, which the
  // parity correction swaps.
  uint64_t parity_positions_[2] = {0, 0};
  uint8_t table_[kExactSize];
  uint8_t inverse_table_[kExactSize];
};

}  // namespace distsampler

#endif  // DISTSAMPLER_FEISTEL_H_
