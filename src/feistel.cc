// FeistelPermutation: the checks at the boundary, the choice of version, and the choice of gather
// kernel per instruction set (which kernels a CPU runs, which of them the dispatch may choose).
// The versions are src/feistel_v1*.cc and src/feistel_v2*.cc.
#include "distsampler/feistel.h"

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>

#include "feistel_internal.h"

namespace distsampler {
namespace detail {

// The dispatch's rule besides "the fastest kernel the CPU runs", owned here alone: a level is
// chosen only once its kernels have been seen to give operator()'s bits on a CPU with its
// instructions. The tests compare only the kernels the machine running them has; the same bits
// on every machine come before speed.
// AVX-512 (issue 28): verified. `bash scripts/device_check_avx512.sh` (a standalone checker built
// from src/feistel*.cc, -O3, every kernel of versions 1 and 2 against operator() on sizes around
// powers of two up to 10^7 and windows up to 2^63) passed on "AMD EPYC, 2 cores" with avx512f,
// avx512vl, avx512bw and avx512dq, built by "g++ (Debian 12.2.0-14+deb12u1) 12.2.0": every kernel
// of both versions, avx512 included (src/feistel_v1_gather.cc's gather_avx512,
// src/feistel_v2_gather_avx512.cc), matched on 6522 cases (145,587,218 indices), in three runs
// (the last with this set to true, the checker's dispatch line reading avx512). So a CPU with
// AVX2 and AVX-512 F, VL, BW and DQ (cpu_runs) gets kAvx512; one missing any of them gets AVX2.
// If a mismatch is ever seen (the checker's MISMATCH lines on another CPU or compiler, or
// feistel_test's FeistelKernel/*.avx512 failing): set this back to false at once (AVX-512 CPUs
// then take AVX2, whose bits are checked), turn Feistel.DispatchChoosesAvx512OnlyWithEveryFeature's
// expectation for the full set back to kAvx2, record the CPU, compiler and MISMATCH lines in
// CHANGELOG.md, and fix the kernel before enabling it again.
constexpr bool kAvx512Verified = true;

const char* simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::kPortable:
      return "portable";
    case SimdLevel::kAvx2:
      return "avx2";
    case SimdLevel::kAvx512:
      return "avx512";
    case SimdLevel::kSse41:
      return "sse4.1";
  }
  return "unknown";
}

CpuFeatures cpu_features() {
  static const CpuFeatures features = [] {
    CpuFeatures f;
#if DISTSAMPLER_X86_KERNELS
    f.sse41 = __builtin_cpu_supports("sse4.1");
    f.avx2 = __builtin_cpu_supports("avx2");
    f.avx512f = __builtin_cpu_supports("avx512f");
    f.avx512vl = __builtin_cpu_supports("avx512vl");
    f.avx512bw = __builtin_cpu_supports("avx512bw");
    f.avx512dq = __builtin_cpu_supports("avx512dq");
#endif
    return f;
  }();
  return features;
}

bool cpu_runs(SimdLevel level, const CpuFeatures& f) {
  switch (level) {
    case SimdLevel::kPortable:
      return true;
    case SimdLevel::kSse41:
      return DISTSAMPLER_X86_KERNELS && f.sse41;
    case SimdLevel::kAvx2:
      return DISTSAMPLER_X86_KERNELS && f.avx2;
    case SimdLevel::kAvx512:
      return DISTSAMPLER_X86_KERNELS && f.avx2 && f.avx512f && f.avx512vl && f.avx512bw &&
             f.avx512dq;
  }
  return false;
}

bool simd_level_supported(SimdLevel level) { return cpu_runs(level, cpu_features()); }

bool simd_level_verified(SimdLevel level) {
  return level != SimdLevel::kAvx512 || kAvx512Verified;
}

SimdLevel select_simd_level(const CpuFeatures& features) {
  for (SimdLevel level : {SimdLevel::kAvx512, SimdLevel::kAvx2, SimdLevel::kSse41}) {
    if (cpu_runs(level, features) && simd_level_verified(level)) return level;
  }
  return SimdLevel::kPortable;
}

SimdLevel best_simd_level() {
  static const SimdLevel best = select_simd_level(cpu_features());
  return best;
}

}  // namespace detail

namespace {

constexpr std::string_view kVersionNoun = "a version";

// Impl's alternative `index` (kFeistelVersions' row `index`), constructed in place.
template <class Impl, size_t I = 0>
Impl construct_alternative(size_t index, uint64_t n, uint64_t seed, uint64_t epoch, int rounds) {
  if constexpr (I + 1 < std::variant_size_v<Impl>) {
    if (index != I) return construct_alternative<Impl, I + 1>(index, n, seed, epoch, rounds);
  }
  return Impl(std::in_place_index<I>, n, seed, epoch, rounds);
}

}  // namespace

const FeistelVersionRow& check_feistel_version(int version, std::string_view parameter) {
  return detail::check_variant(kFeistelVersions, version, parameter, kVersionNoun);
}

int parse_feistel_version(std::string_view text, std::string_view parameter) {
  return detail::parse_variant(kFeistelVersions, text, parameter, kVersionNoun).value;
}

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
  const FeistelVersionRow& row = check_feistel_version(version, "version");
  if (rounds == kVersionDefaultRounds) rounds = row.default_rounds;
  return construct_alternative<Impl>(static_cast<size_t>(&row - kFeistelVersions), n, seed, epoch,
                                     rounds);
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
    throw std::invalid_argument(std::string("level = ") + detail::simd_level_name(level) +
                                " is not supported by this build or CPU; allowed: a level for "
                                "which detail::simd_level_supported is true");
  }
  visit([&](const auto& p) { p.gather(first, stride, count, out, level); });
}

}  // namespace distsampler
