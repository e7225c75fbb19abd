// mutate.h: the adversarial tests' deterministic mutations: a SplitMix64 stream (no std::
// distributions, the same cases on every platform) and the byte-level edits they apply.
#ifndef DISTSAMPLER_TESTS_ADVERSARIAL_MUTATE_H_
#define DISTSAMPLER_TESTS_ADVERSARIAL_MUTATE_H_

#include <cstdint>
#include <string>
#include <vector>

namespace distsampler::adversarial {

// SplitMix64 (Steele, Lea and Flood 2014): one multiply-xorshift step per value.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform enough in [0, n) for picking test cases (n > 0; the modulo bias is irrelevant here).
  uint64_t below(uint64_t n) { return next() % n; }
  template <class T>
  const T& pick(const std::vector<T>& v) {
    return v[below(v.size())];
  }

 private:
  uint64_t state_;
};

// Flips 1..3 random bits among bytes [from, to) (the whole string when to is 0).
inline void flip_bits(std::string& s, Rng& rng, size_t from = 0, size_t to = 0) {
  if (s.empty()) return;
  if (to == 0 || to > s.size()) to = s.size();
  if (from >= to) from = 0;
  const uint64_t flips = 1 + rng.below(3);
  for (uint64_t k = 0; k < flips; ++k) {
    s[from + rng.below(to - from)] ^= static_cast<char>(1u << rng.below(8));
  }
}

// Replaces one byte with a random one.
inline void set_byte(std::string& s, Rng& rng) {
  if (!s.empty()) s[rng.below(s.size())] = static_cast<char>(rng.below(256));
}

// Cuts the string at a random length below its own.
inline void truncate(std::string& s, Rng& rng) { s.resize(s.empty() ? 0 : rng.below(s.size())); }

// Inserts 1..4 bytes (random, or from `alphabet` when it is not empty) at a random place.
inline void insert_bytes(std::string& s, Rng& rng, const std::string& alphabet = "") {
  const uint64_t n = 1 + rng.below(4);
  std::string add;
  for (uint64_t k = 0; k < n; ++k) {
    add +=
        alphabet.empty() ? static_cast<char>(rng.below(256)) : alphabet[rng.below(alphabet.size())];
  }
  s.insert(rng.below(s.size() + 1), add);
}

// Erases 1..8 bytes at a random place.
inline void erase_bytes(std::string& s, Rng& rng) {
  if (s.empty()) return;
  const size_t at = rng.below(s.size());
  s.erase(at, 1 + rng.below(8));
}

// Writes `value` little-endian over bytes [offset, offset + width).
inline void put_le(std::string& s, size_t offset, uint64_t value, int width) {
  for (int b = 0; b < width && offset + b < s.size(); ++b) {
    s[offset + b] = static_cast<char>((value >> (8 * b)) & 0xff);
  }
}

// Writes `value` big-endian over bytes [offset, offset + width).
inline void put_be(std::string& s, size_t offset, uint64_t value, int width) {
  for (int b = 0; b < width && offset + b < s.size(); ++b) {
    s[offset + b] = static_cast<char>((value >> (8 * (width - 1 - b))) & 0xff);
  }
}

// Values at and around the limits a decoder checks: 0, 1, powers of two and their neighbours,
// the signed and unsigned maxima.
inline uint64_t edge_value(Rng& rng) {
  const uint64_t shift = rng.below(64);
  const uint64_t base = uint64_t{1} << shift;
  switch (rng.below(5)) {
    case 0:
      return base;
    case 1:
      return base - 1;
    case 2:
      return base + 1;
    case 3:
      return ~uint64_t{0} - rng.below(3);
    default:
      return rng.below(300);
  }
}

}  // namespace distsampler::adversarial

#endif  // DISTSAMPLER_TESTS_ADVERSARIAL_MUTATE_H_
