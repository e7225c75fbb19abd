// feistel_model.cc: the model of version 2's network (feistel_model.h).
#include "feistel_model.h"

#include "distsampler/hash.h"

namespace quality {
namespace {

using distsampler::FeistelPermutation;

// The carry-less product x * m mod 2^32 (GF(2)[t] modulo t^32), by bytes of x.
struct ClmulTable {
  uint32_t t[4][256];
  explicit ClmulTable(uint32_t m) {
    for (int b = 0; b < 4; ++b) {
      for (uint32_t v = 0; v < 256; ++v) {
        uint32_t r = 0;
        const uint32_t x = v << (8 * b);
        for (int i = 0; i < 32; ++i) {
          if ((x >> i) & 1) r ^= m << i;
        }
        t[b][v] = r;
      }
    }
  }
  uint32_t operator()(uint32_t x) const {
    return t[0][x & 255] ^ t[1][(x >> 8) & 255] ^ t[2][(x >> 16) & 255] ^ t[3][x >> 24];
  }
};

}  // namespace

Model::Model(uint64_t n_, uint64_t seed, int rounds_, RoundKind kind_, int64_t keys_override)
    : n(n_), rounds(rounds_), kind(kind_) {
  const int k = bit_width(n - 1);
  s = (k + 1) / 2;
  mask = static_cast<uint32_t>((uint64_t{1} << s) - 1);
  size = static_cast<uint32_t>(((n - 1) >> s) + 1);
  uint64_t state =
      distsampler::mix64(distsampler::derive_key(seed, 0, distsampler::kDomainFeistelOrder2) ^
                         distsampler::mix64(n ^ 0x6e2d73697a65ull));
  for (int r = 0; r < rounds; ++r) {
    state = distsampler::mix64(state);
    key[r] = static_cast<uint32_t>(state >> 32);
    key2[r] = static_cast<uint32_t>(state);
    if (keys_override >= 0) key[r] = key2[r] = static_cast<uint32_t>(keys_override);
  }
}

uint32_t Model::f(uint32_t x, int r) const {
  static const ClmulTable m1(FeistelPermutation::kMixMultiplier1);
  static const ClmulTable m2(FeistelPermutation::kMixMultiplier2);
  switch (kind) {
    case RoundKind::kMultiply:
      return (x ^ key[r]) * (key2[r] | 1u);
    case RoundKind::kMix: {
      uint32_t h = (x ^ key[r]) * FeistelPermutation::kMixMultiplier1;
      h ^= (h >> FeistelPermutation::kMixShift) ^ key2[r];
      return h * FeistelPermutation::kMixMultiplier2;
    }
    case RoundKind::kLinear: {
      uint32_t h = m1(x ^ key[r]);
      h ^= (h >> FeistelPermutation::kMixShift) ^ key2[r];
      return m2(h);
    }
  }
  return 0;
}

uint64_t Model::encrypt(uint64_t x) const {
  uint32_t left = static_cast<uint32_t>(x >> s), right = static_cast<uint32_t>(x) & mask;
  for (int r = 0; r < rounds; r += 2) {
    right ^= static_cast<uint32_t>(f(left, r) >> (32 - s));
    if (r + 1 < rounds) {
      const uint32_t c =
          static_cast<uint32_t>((static_cast<uint64_t>(f(right, r + 1)) * size) >> 32);
      left += c;
      if (left >= size) left -= size;
    }
  }
  return (static_cast<uint64_t>(left) << s) | right;
}

uint64_t Model::operator()(uint64_t x) const {
  do {
    x = encrypt(x);
  } while (x >= n);
  return x;
}

Fill model(RoundKind kind, int rounds, int64_t keys_override) {
  return [kind, rounds, keys_override](uint64_t n, uint64_t seed, uint64_t* out) {
    const Model m(n, seed, rounds, kind, keys_override);
    for (uint64_t i = 0; i < n; ++i) out[i] = m(i);
  };
}

}  // namespace quality
