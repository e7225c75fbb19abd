// hash.h: counter-based hashing, value = f(counter, key), for keys derived from (seed, epoch).
#ifndef DISTSAMPLER_HASH_H_
#define DISTSAMPLER_HASH_H_

#include <cstdint>

namespace distsampler {

// The splitmix64 finalizer (Steele, Lea and Flood 2014): a bijection on 64-bit words whose output
// bits each depend on every input bit. Used as f(counter) with the key folded in by the caller.
constexpr uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A 32-bit avalanche mix (the "lowbias32" family found by Hash Prospector; constants of the
// variant with the lowest measured bias). Cheap enough for a Feistel round on 32-bit lanes.
constexpr uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x21f0aaadu;
  x ^= x >> 15;
  x *= 0x735a2d97u;
  x ^= x >> 15;
  return x;
}

// Independent streams of keys per (seed, epoch, purpose). The pair is hashed, never summed, so
// seed s at epoch e + 1 is unrelated to seed s + 1 at epoch e. `domain` separates purposes (the
// Feistel order, weighted draws, blending, ...) so that they never share a key.
constexpr uint64_t derive_key(uint64_t seed, uint64_t epoch, uint64_t domain) {
  return mix64(mix64(mix64(seed ^ 0x6a09e667f3bcc908ull) ^ epoch) ^ domain);
}

// Domains for derive_key. New purposes take new values; existing ones never change, since a
// change alters every order derived from them.
enum KeyDomain : uint64_t {
  kDomainFeistelOrder = 0x46656973'74656c31ull,   // "Feistel1"
  kDomainFeistelOrder2 = 0x46656973'74656c32ull,  // "Feistel2": version 2, with n in the key
  kDomainWeighted = 0x57656967'68746564ull,       // "Weighted"
  kDomainBlend = 0x426c656e'64446174ull,          // "BlendDat": per-dataset orders of a blend
  kDomainBatches = 0x42617463'68657331ull,        // "Batches1": the order of batches
  kDomainShards = 0x53686172'64733031ull,         // "Shards01": shard order and windows
  kDomainTokens = 0x546f6b65'6e537263ull,         // "TokenSrc": token sources' document orders
  kDomainTokensAppend = 0x546f6b41'70706e64ull,   // "TokAppnd": a source's rest after an append
  kDomainTokensSplit = 0x546f6b53'706c6974ull,    // "TokSplit": held-out splits of documents
};

// A counter-based stream: the value at `counter` under `key`, uniform over 64-bit words.
constexpr uint64_t hash_at(uint64_t key, uint64_t counter) {
  return mix64(mix64(counter ^ key) + key);
}

namespace detail {

// The high 64 bits of the 128-bit product x * n, from four 32 x 32 -> 64 products: the
// fallback where the compiler has no 128-bit integer. No sum below can overflow.
constexpr uint64_t mul_high64_portable(uint64_t x, uint64_t n) {
  const uint64_t x_lo = x & 0xffffffffu, x_hi = x >> 32;
  const uint64_t n_lo = n & 0xffffffffu, n_hi = n >> 32;
  const uint64_t lo_lo = x_lo * n_lo, hi_lo = x_hi * n_lo, lo_hi = x_lo * n_hi;
  const uint64_t cross = (lo_lo >> 32) + (hi_lo & 0xffffffffu) + lo_hi;
  return x_hi * n_hi + (hi_lo >> 32) + (cross >> 32);
}

#if defined(__SIZEOF_INT128__)
// __extension__: a public header must compile under -Wpedantic, which rejects __int128.
__extension__ typedef unsigned __int128 Uint128;
__extension__ typedef __int128 Int128;
#endif

// The high 64 bits of x * n; the same bits on either path (hash_test).
constexpr uint64_t mul_high64(uint64_t x, uint64_t n) {
#if defined(__SIZEOF_INT128__)
  return static_cast<uint64_t>((static_cast<Uint128>(x) * n) >> 64);
#else
  return mul_high64_portable(x, n);
#endif
}

}  // namespace detail

// floor(x * n / 2^64): maps a uniform 64-bit word to [0, n) (Lemire's multiply-shift; the bias is
// at most n / 2^64).
inline uint64_t scale_to(uint64_t x, uint64_t n) { return detail::mul_high64(x, n); }

}  // namespace distsampler

#endif  // DISTSAMPLER_HASH_H_
