// seed.h: a PyTorch-compatible seed, any integer in [-2^63, 2^64 - 1].
#ifndef DISTSAMPLER_SEED_H_
#define DISTSAMPLER_SEED_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

namespace distsampler {

// PyTorch's Generator.manual_seed accepts a Python int in [-2^63, 2^64 - 1] and keeps its
// two's-complement 64-bit pattern. Seed holds such a value exactly: the 64-bit pattern plus the
// sign, which is needed to decide whether seed + epoch still fits PyTorch's range.
class Seed {
 public:
  constexpr Seed() = default;

  // Any built-in integer; a negative value is kept as its two's complement.
  template <typename T,
            typename = std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>>>
  constexpr Seed(T value)  // NOLINT(google-explicit-constructor): a seed is an integer.
      : bits_(static_cast<uint64_t>(value)), negative_(std::is_signed_v<T> && value < 0) {}

  // Parses a decimal integer (optional sign) in [-2^63, 2^64 - 1]. Throws std::invalid_argument
  // naming `parameter` when the text is not such an integer.
  static Seed parse(std::string_view text, std::string_view parameter = "seed");

  // The value's 64-bit two's-complement pattern.
  constexpr uint64_t bits() const { return bits_; }
  constexpr bool negative() const { return negative_; }

  // The decimal value, sign included.
  std::string to_string() const;

  // (seed + epoch) mod 2^64: what PyTorch's DistributedSampler passes to manual_seed. PyTorch adds
  // Python integers, so the sum must stay within [-2^63, 2^64 - 1]; a larger sum is an overflow
  // error there and std::out_of_range here.
  uint64_t plus_epoch(uint64_t epoch) const;

  friend constexpr bool operator==(Seed a, Seed b) {
    return a.bits_ == b.bits_ && a.negative_ == b.negative_;
  }
  friend constexpr bool operator!=(Seed a, Seed b) { return !(a == b); }

 private:
  uint64_t bits_ = 0;
  bool negative_ = false;
};

}  // namespace distsampler

#endif  // DISTSAMPLER_SEED_H_
