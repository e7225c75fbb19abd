// reference_shuffle.cc: the reference uniform shuffle (reference_shuffle.h).
#include "reference_shuffle.h"

#include <utility>

#include "distsampler/hash.h"

namespace quality {
namespace {

// Philox4x32-10: the 64-bit word at `counter` under `key`.
uint64_t philox(uint64_t counter, uint64_t key) {
  uint32_t c[4] = {static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0, 0};
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int r = 0; r < 10; ++r) {
    const uint64_t p0 = uint64_t{0xD2511F53u} * c[0];
    const uint64_t p1 = uint64_t{0xCD9E8D57u} * c[2];
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k0;
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k1;
    c[1] = static_cast<uint32_t>(p1);
    c[3] = static_cast<uint32_t>(p0);
    c[0] = n0;
    c[2] = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return (static_cast<uint64_t>(c[1]) << 32) | c[0];
}

}  // namespace

void reference_shuffle(uint64_t n, uint64_t seed, uint64_t epoch, uint64_t* out) {
  const uint64_t key =
      distsampler::mix64(distsampler::derive_key(seed, epoch, 0x5265666572656e63ull) ^ n);
  uint64_t counter = 0;
  for (uint64_t i = 0; i < n; ++i) out[i] = i;
  for (uint64_t i = n; i > 1; --i) {
    // Lemire: the high word of x * i, rejecting low words below 2^64 mod i.
    uint64_t x = philox(counter++, key);
    uint64_t low = x * i;
    if (low < i) {
      const uint64_t threshold = (0 - i) % i;
      while (low < threshold) {
        x = philox(counter++, key);
        low = x * i;
      }
    }
    std::swap(out[i - 1], out[distsampler::detail::mul_high64(x, i)]);
  }
}

}  // namespace quality
