// torch_random.h: PyTorch's CPU generator (MT19937) and torch.randperm, bit for bit.
#ifndef DISTSAMPLER_TORCH_RANDOM_H_
#define DISTSAMPLER_TORCH_RANDOM_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "distsampler/variants.h"

namespace distsampler {

// The 32-bit Mersenne Twister behind torch.Generator on the CPU. Seeding follows
// Generator.manual_seed: only the low 32 bits of the 64-bit seed reach init_genrand, so seeds s
// and s + 2^32 give the same stream. random() equals std::mt19937's output; random64() is two
// draws, the first one the high word (torch's CPUGeneratorImpl::random64).
class TorchGenerator {
 public:
  explicit TorchGenerator(uint64_t seed);

  uint32_t random() {
    if (index_ == kStateSize) twist();
    return temper(state_[index_++]);
  }
  uint64_t random64() {
    const uint64_t hi = random();
    return (hi << 32) | random();
  }
  // Writes the next `count` draws of random() to out: the same values as calling it count times.
  void fill(uint32_t* out, uint64_t count);

 private:
  static constexpr int kStateSize = 624;
  static uint32_t temper(uint32_t y) {
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
  }
  void twist();

  uint32_t state_[kStateSize];
  int index_;
};

// Which torch.randperm the torch-exact order reproduces. The two agree for n < 214,748,364.
enum class RandpermVariant {
  // PyTorch since the inside-out change (upstream PR 143875, first released in 2.6): n >=
  // 214,748,364 uses inside-out Fisher-Yates with 64-bit draws. The default. Equal to torch
  // 2.13's torch.randperm at n = 214,748,365 and 300,000,007 (test_torch2_randperm.py).
  kCurrent,
  // torch.randperm as in PyTorch 1.13 (Debian's python3-torch): classic Fisher-Yates with 32-bit
  // draws for every n.
  kClassic,
};

// The variants by name ("current", "classic": --randperm, Python's randperm=, the JSON
// checkpoint) and byte code (the binary checkpoint's randperm byte): one row per variant.
inline constexpr VariantRow<RandpermVariant> kRandpermVariants[] = {
    {RandpermVariant::kCurrent, "current", 0},
    {RandpermVariant::kClassic, "classic", 1},
};

// "current" / "classic" ("unknown" for a value that is no row), and back: parse throws
// std::invalid_argument "<parameter> = '<text>' is not a variant; allowed: current, classic".
std::string_view to_string(RandpermVariant variant);
RandpermVariant parse_randperm_variant(std::string_view text,
                                       std::string_view parameter = "randperm");
// Throws std::invalid_argument "<parameter> = 5 is not a variant; allowed: ..." unless `variant`
// is a row of kRandpermVariants.
void check_randperm_variant(RandpermVariant variant, std::string_view parameter = "randperm");

// The variant torch.randperm of PyTorch `torch_version` ("2.13.0+cpu", torch.__version__) uses:
// kClassic before 2.6, the first release with upstream PR 143875 (Python's randperm="auto").
// Throws std::invalid_argument when the text does not start with MAJOR.MINOR.
RandpermVariant randperm_variant_of_torch(std::string_view torch_version);

// The first n for which RandpermVariant::kCurrent switches algorithm: floor((2^32 - 1) / 20).
inline constexpr uint64_t kRandpermInsideOutThreshold = 214748364;

// Whether torch.randperm(n) of `variant` uses the inside-out algorithm.
constexpr bool randperm_uses_inside_out(uint64_t n, RandpermVariant variant) {
  return variant == RandpermVariant::kCurrent && n >= kRandpermInsideOutThreshold;
}

// Writes torch.randperm(n, generator=g) with g.manual_seed(seed) to out[0..n), exactly. T is
// uint32_t (n <= 2^32) or uint64_t. Time O(n), no memory beyond `out`.
template <typename T>
void torch_randperm(uint64_t n, uint64_t seed, RandpermVariant variant, T* out);

extern template void torch_randperm<uint32_t>(uint64_t, uint64_t, RandpermVariant, uint32_t*);
extern template void torch_randperm<uint64_t>(uint64_t, uint64_t, RandpermVariant, uint64_t*);

namespace detail {
// One algorithm regardless of n, so that tests can reach the inside-out code at small n.
// vector_remainders = false keeps the classic targets' remainders scalar on CPUs with AVX2 too,
// so that tests reach the code other CPUs run.
template <typename T>
void randperm_classic(uint64_t n, uint64_t seed, T* out, bool vector_remainders = true);
template <typename T>
void randperm_inside_out(uint64_t n, uint64_t seed, T* out);
}  // namespace detail

// Convenience: torch.randperm as a vector.
std::vector<uint64_t> torch_randperm(uint64_t n, uint64_t seed,
                                     RandpermVariant variant = RandpermVariant::kCurrent);

}  // namespace distsampler

#endif  // DISTSAMPLER_TORCH_RANDOM_H_
