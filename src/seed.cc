#include "distsampler/seed.h"

#include <stdexcept>

namespace distsampler {

Seed Seed::parse(std::string_view text, std::string_view parameter) {
  auto fail = [&]() -> Seed {
    throw std::invalid_argument(std::string(parameter) + " = '" + std::string(text) +
                                "' is not an integer in [-9223372036854775808, "
                                "18446744073709551615]");
  };
  std::string_view digits = text;
  bool minus = false;
  if (!digits.empty() && (digits.front() == '-' || digits.front() == '+')) {
    minus = digits.front() == '-';
    digits.remove_prefix(1);
  }
  if (digits.empty() || digits.size() > 20) return fail();
  uint64_t magnitude = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return fail();
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (magnitude > (UINT64_MAX - digit) / 10) return fail();
    magnitude = magnitude * 10 + digit;
  }
  if (!minus || magnitude == 0) return Seed(magnitude);
  if (magnitude > (uint64_t{1} << 63)) return fail();
  Seed s;
  s.bits_ = ~magnitude + 1;  // two's complement of -magnitude
  s.negative_ = true;
  return s;
}

std::string Seed::to_string() const {
  if (!negative_) return std::to_string(bits_);
  return "-" + std::to_string(~bits_ + 1);
}

uint64_t Seed::plus_epoch(uint64_t epoch) const {
  const uint64_t sum = bits_ + epoch;
  // A negative seed plus any epoch in [0, 2^64 - 1] stays within [-2^63, 2^64 - 1]; a
  // non-negative one overflows exactly when the unsigned sum wraps.
  if (!negative_ && sum < bits_) {
    throw std::out_of_range("seed + epoch = " + to_string() + " + " + std::to_string(epoch) +
                            " exceeds 2^64 - 1, the largest seed PyTorch's generator accepts");
  }
  return sum;
}

}  // namespace distsampler
