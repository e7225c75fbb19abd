// FeistelPermutation: the checks at the boundary, the choice of version, and the choice of gather
// kernel per instruction set. The versions are src/feistel_v1*.cc and src/feistel_v2*.cc.
#include "distsampler/feistel.h"

#include <stdexcept>
#include <string>

#include "feistel_internal.h"

namespace distsampler {
namespace {

const char* level_name(detail::SimdLevel level) {
  switch (level) {
    case detail::SimdLevel::kPortable:
      return "portable";
    case detail::SimdLevel::kAvx2:
      return "avx2";
    case detail::SimdLevel::kAvx512:
      return "avx512";
    case detail::SimdLevel::kSse41:
      return "sse4.1";
  }
  return "unknown";
}

}  // namespace

namespace detail {

bool simd_level_supported(SimdLevel level) {
  switch (level) {
    case SimdLevel::kPortable:
      return true;
#if DISTSAMPLER_X86_KERNELS
    case SimdLevel::kSse41:
      return __builtin_cpu_supports("sse4.1");
    case SimdLevel::kAvx2:
      return __builtin_cpu_supports("avx2");
    case SimdLevel::kAvx512:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq");
#else
    case SimdLevel::kSse41:
    case SimdLevel::kAvx2:
    case SimdLevel::kAvx512:
      return false;
#endif
  }
  return false;
}

SimdLevel best_simd_level() {
  static const SimdLevel best = [] {
    for (SimdLevel level : {SimdLevel::kAvx512, SimdLevel::kAvx2, SimdLevel::kSse41}) {
      if (simd_level_supported(level)) return level;
    }
    return SimdLevel::kPortable;
  }();
  return best;
}

}  // namespace detail

FeistelPermutation::Impl FeistelPermutation::make(uint64_t n, uint64_t seed, uint64_t epoch,
                                                  int rounds, int version) {
  if (n > kMaxSize) {
    throw std::invalid_argument(
        "size = " + std::to_string(n) +
        " is too large for the Feistel order; allowed: size <= 2^63 = " + std::to_string(kMaxSize));
  }
  if (rounds < 0 || rounds > kMaxRounds) {
    throw std::invalid_argument("rounds = " + std::to_string(rounds) +
                                " is out of range; allowed: 1 <= rounds <= " +
                                std::to_string(kMaxRounds) + ", or 0 for the version's default");
  }
  if (version != kVersion1 && version != kVersion2) {
    throw std::invalid_argument("version = " + std::to_string(version) +
                                " is not a Feistel order version; allowed: 1, 2");
  }
  if (rounds == kVersionDefaultRounds) rounds = default_rounds(version);
  if (version == kVersion1) return Impl(std::in_place_index<0>, n, seed, epoch, rounds);
  return Impl(std::in_place_index<1>, n, seed, epoch, rounds);
}

FeistelPermutation::FeistelPermutation(uint64_t n, uint64_t seed, uint64_t epoch, int rounds,
                                       int version)
    : impl_(make(n, seed, epoch, rounds, version)) {}

uint64_t FeistelPermutation::at(uint64_t position) const {
  if (position >= size()) {
    throw std::out_of_range(
        "position = " + std::to_string(position) +
        " is out of range; allowed: position < size = " + std::to_string(size()));
  }
  return (*this)(position);
}

void FeistelPermutation::gather(uint64_t first, uint64_t stride, uint64_t count,
                                uint64_t* out) const {
  gather(first, stride, count, out, detail::best_simd_level());
}

void FeistelPermutation::gather(uint64_t first, uint64_t stride, uint64_t count, uint64_t* out,
                                detail::SimdLevel level) const {
  if (!detail::simd_level_supported(level)) {
    throw std::invalid_argument(std::string("level = ") + level_name(level) +
                                " is not supported by this build or CPU; allowed: a level for "
                                "which detail::simd_level_supported is true");
  }
  visit([&](const auto& p) { p.gather(first, stride, count, out, level); });
}

}  // namespace distsampler
