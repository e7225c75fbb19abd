// Version 2 of the Feistel order (feistel_v2.h): its parameters, keys and exact small sizes. The
// gather kernels are src/feistel_v2_gather*.cc.
//
// Why each piece:
// - The network. A Feistel network over a domain barely above n: [0, L * 2^s), s = ceil(k / 2)
//   for k = bit_width(n - 1) and L = ceil(n / 2^s), restricted to [0, n) by cycle walking (Black
//   and Rogaway, "Ciphers with Arbitrary Finite Domains", CT-RSA 2002). The right part (s bits)
//   takes XOR rounds, the left part (range L) modular-addition rounds: a bijection whatever L,
//   as in mixed-radix format-preserving encryption (the "FF1" family, NIST SP 800-38G, adds
//   modulo a radix power the same way). Since D = L * 2^s < n + 2^s, a fraction below
//   2^(1 - floor(k / 2)) of the positions walk at all (1 in 12,600 at n = 10^8), where version 1's
//   power-of-two domain walks up to half of them: the SIMD kernels need no walking pass, only a
//   scalar redo of the rare flagged lane. Pseudorandom permutations from Feistel networks: Luby
//   and Rackoff (SIAM J. Comput. 1988); unbalanced and small-domain ones: Morris, Rogaway and
//   Stegers ("How to Encipher Messages on a Small Domain", CRYPTO 2009). Those bounds assume
//   random round functions; ours are keyed mixing functions, so the rounds are set by measurement
//   (below) with the generic attacks' margin in mind.
// - The round function: mix(x, a, b) = ((((x ^ a) * M1) ^ ((x ^ a) * M1 >> 15)) ^ b) * M2 mod
//   2^32, M1 and M2 the multipliers of lowbias32 (Hash Prospector, a 32-bit hash with full
//   avalanche), keyed by two words per round. An XOR round keeps the top s bits; a modular round
//   adds the hash scaled to [0, L), floor(h * L / 2^32) (Lemire's multiply-shift), never the top
//   floor(log2 L) bits, which reach only [0, 2^t), as little as half of Z_L. One keyed multiply,
//   (x ^ a) * m, would not do: a one-bit difference of x becomes one of two additive differences
//   of the product, so a round after an unchanged part maps a difference to a few differences and
//   the differences of p(x) and p(x XOR 2^j) repeat. The second multiply, after the xorshift
//   folds the high bits into the low ones, spreads every difference over the whole word;
//   quality/feistel_structure.cc checks exactly this (and fails a linear variant of mix, its
//   multiplies carry-less, and the one-multiply round).
// - Parity. An XOR round of a half of b bits translates that half, for each value l of the other
//   half, by f(l); a nonzero translation is 2^(b - 1) disjoint transpositions, even once b >= 2.
//   So a network of XOR rounds only (version 1) yields only even permutations once both halves
//   have 2 bits or more, and its restriction by cycle walking has a parity fixed by n more than by
//   the key. Here the modular rounds (rotations of Z_L) have a parity that varies with L and the
//   key, so nothing makes the two classes equally likely by itself. The correction: after the
//   walk, with probability 1/2 (a key bit), swap the values 0 and 1. If the walked network is
//   uniform within each parity class, with any split p : 1 - p between them, the corrected order is
//   exactly uniform: a permutation pi is reached as itself (1/2 of the time) or from tau pi (the
//   other 1/2), whose parities differ, so its probability is p/(n!/2)/2 + (1 - p)/(n!/2)/2 = 1/n!.
//   The swap is its own inverse, O(1) and branch-free.
// - Small n. Halves of 1 to 3 bits mix slowly (n = 8 fails with 32 rounds): the round
//   functions then form a small group (affine maps over GF(2)^3 show up 1.15x too often). Up to
//   kExactSize the order is instead a Fisher-Yates shuffle (Durstenfeld 1964) drawn from the
//   counter-based hash hash_at(key, counter), each draw in [0, i] by Lemire's multiply-shift with
//   rejection ("Fast Random Integer Generation in an Interval", ACM TOMACS 2019), so exactly
//   uniform given uniform words. The order and its inverse are held in two 64-byte tables, still
//   O(1) memory; construction costs kExactSize draws.
// - Rounds. 8 by default, twice the most the battery breaks. Its structure-aware statistics
//   (quality/feistel_structure.cc: collisions of output differences for single-bit XOR and small
//   additive input differences in both halves, per key, and linear correlations) fail 4 rounds
//   and pass 5 to 8; the generic attacks on Feistel networks with random round functions
//   (Patarin, ASIACRYPT 2001 and CRYPTO 2004) need about N^((r - 4) / 2) work for r >= 6 rounds
//   over N values, so 8 rounds leave an O(N^2) attack, far beyond a test that reads one
//   permutation per key. Narrow parts run more: up to kSmallDomain (parts of up to 8 bits) at
//   least kSmallDomainRounds (with 8 rounds of the one-multiply round function the battery's
//   inverse serial test found the positions of v and v + 8 correlated at n = 100, 4 + 3-bit
//   parts); up to kNarrowDomain (L <= 256) at least kNarrowDomainRounds (with 6 rounds its
//   pair-difference statistic read z = 3.8 at n = 65,537, L = 129).
// - The key. (seed, epoch) are hashed under their own domain, then n is hashed in, so the orders
//   of n and n + 1 are unrelated.
// Nothing here depends on the platform: 64-bit integer arithmetic and the hashes of hash.h.
#include "distsampler/feistel_v2.h"

#include <algorithm>

#include "distsampler/hash.h"
#include "feistel_internal.h"

namespace distsampler {
namespace detail {
namespace {

// A uniform draw from [0, bound) (bound >= 1) from the stream hash_at(key, *counter), by
// Lemire's method: the high word of x * bound, rejecting the x whose low word falls below
// 2^64 mod bound, which leaves exactly floor(2^64 / bound) words per outcome.
uint64_t uniform_below(uint64_t key, uint64_t* counter, uint64_t bound) {
  uint64_t x = hash_at(key, (*counter)++);
  uint64_t low = x * bound;
  if (low < bound) {
    const uint64_t threshold = (0 - bound) % bound;
    while (low < threshold) {
      x = hash_at(key, (*counter)++);
      low = x * bound;
    }
  }
  return mul_high64(x, bound);
}

int rounds_for(uint64_t n, int rounds) {
  if (n <= FeistelV2::kSmallDomain) return std::max(rounds, FeistelV2::kSmallDomainRounds);
  if (n <= FeistelV2::kNarrowDomain) return std::max(rounds, FeistelV2::kNarrowDomainRounds);
  return rounds;
}

}  // namespace

FeistelV2::FeistelV2(uint64_t n, uint64_t seed, uint64_t epoch, int rounds)
    : n_(n), rounds_(rounds_for(n, rounds)), keys_{}, keys2_{}, table_{}, inverse_table_{} {
  // The right part takes s = ceil(k / 2) <= 32 bits and the left part ranges over [0, L),
  // L = ceil(n / 2^s) <= 2^floor(k / 2) <= 2^31, so left + c < 2L never wraps.
  right_bits_ = (feistel_width(n) + 1) / 2;
  right_mask_ = static_cast<uint32_t>((uint64_t{1} << right_bits_) - 1);
  left_size_ = n <= 1 ? 1 : static_cast<uint32_t>(((n - 1) >> right_bits_) + 1);
  right_shift_ = 32 - right_bits_;
  uint64_t state =
      mix64(derive_key(seed, epoch, kDomainFeistelOrder2) ^ mix64(n ^ 0x6e2d73697a65ull));
  // Independent of the round keys below: they come from mix64 iterated on state itself.
  flip_ = hash_at(state, 0x70617269747900ull) >> 63;
  if (n <= kExactSize) {
    exact_ = true;
    flip_ = 0;
    shuffle_exactly(hash_at(state, 0x65786163740000ull));
    return;
  }
  for (int r = 0; r < rounds_; ++r) {
    state = mix64(state);
    keys_[r] = static_cast<uint32_t>(state >> 32);
    keys2_[r] = static_cast<uint32_t>(state);
  }
  if (flip_ != 0) {
    // inverse() without its correction, of the two values the correction swaps.
    for (uint64_t v = 0; v < 2; ++v) parity_positions_[v] = network_inverse(v);
  }
}

void FeistelV2::shuffle_exactly(uint64_t key) {
  for (uint64_t i = 0; i < n_; ++i) table_[i] = static_cast<uint8_t>(i);
  uint64_t counter = 0;
  for (uint64_t i = n_; i > 1; --i) {
    const uint64_t j = uniform_below(key, &counter, i);
    std::swap(table_[i - 1], table_[j]);
  }
  for (uint64_t i = 0; i < n_; ++i) inverse_table_[table_[i]] = static_cast<uint8_t>(i);
}

}  // namespace detail
}  // namespace distsampler
