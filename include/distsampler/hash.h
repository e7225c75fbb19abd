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
  kDomainFeistelOrder = 0x46656973'74656c31ull,  // "Feistel1"
};

}  // namespace distsampler

#endif  // DISTSAMPLER_HASH_H_
