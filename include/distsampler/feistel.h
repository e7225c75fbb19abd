// feistel.h: a keyed pseudorandom permutation of [0, n), random access in O(1), any n <= 2^63.
#ifndef DISTSAMPLER_FEISTEL_H_
#define DISTSAMPLER_FEISTEL_H_

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string_view>
#include <utility>
#include <variant>

#include "distsampler/feistel_v1.h"
#include "distsampler/feistel_v2.h"
#include "distsampler/variants.h"

namespace distsampler {

namespace detail {
// The instruction sets FeistelPermutation::gather has a kernel for. Every kernel produces the same
// bits as operator(); they differ only in speed. kPortable is plain C++ and runs everywhere (on
// x86-64 it is built for SSE2, the baseline); kSse41 is the same code built for SSE4.1 (x86-64;
// version 1 runs its portable kernel there).
enum class SimdLevel { kPortable, kAvx2, kAvx512, kSse41 };
// Every level, slowest first.
inline constexpr SimdLevel kSimdLevels[] = {SimdLevel::kPortable, SimdLevel::kSse41,
                                            SimdLevel::kAvx2, SimdLevel::kAvx512};
// "portable", "sse4.1", "avx2", "avx512".
const char* simd_level_name(SimdLevel level);

// What a CPU offers the kernels. cpu_features() detects this one's; tests pass made-up ones.
struct CpuFeatures {
  bool sse41 = false;
  bool avx2 = false;
  bool avx512f = false;
  bool avx512vl = false;
  bool avx512bw = false;
  bool avx512dq = false;
};
// This CPU's features, detected once; all false in a build without the x86 kernels (other
// compilers or architectures), which therefore runs the portable kernel only.
CpuFeatures cpu_features();
// Whether this build has kernels for `level` and a CPU with `features` can run them (AVX-512:
// F, VL, BW, DQ and AVX2).
bool cpu_runs(SimdLevel level, const CpuFeatures& features);
// Whether this build has a kernel for `level` and this CPU can run it: cpu_runs(level,
// cpu_features()). What the explicit gather(..., level) accepts.
bool simd_level_supported(SimdLevel level);
// Whether the dispatch may choose `level`: its kernels (both versions') have run and matched
// operator() on a CPU that has the instruction set. Every level is; AVX-512 since
// scripts/device_check_avx512.sh passed on an AVX-512 machine (src/feistel.cc: where, and what to
// do on a mismatch).
bool simd_level_verified(SimdLevel level);
// The level gather(first, stride, count, out) runs on a CPU with `features`: the fastest one that
// CPU runs and that is verified. A pure function, the one place the dispatch is decided.
SimdLevel select_simd_level(const CpuFeatures& features);
// select_simd_level(cpu_features()), computed once.
SimdLevel best_simd_level();
}  // namespace detail

// A version of the Feistel order: a VariantRow (the number, as a name for --feistel-version and
// the JSON checkpoint, and its byte code) and the rounds it runs by default. Code 0 is the version
// a checkpoint without the field means: states written before versions existed, and the torch
// order's normalized value; it is written as byte 0 and no JSON key, every other version as its
// code and its key.
struct FeistelVersionRow {
  int value;
  const char* name;
  uint8_t code;
  int default_rounds;
};

// The versions, one row each; row i is built by FeistelPermutation's construction i (its Impl:
// detail::FeistelV1, detail::FeistelV2). A new version is a row here and its type there.
inline constexpr FeistelVersionRow kFeistelVersions[] = {
    {1, "1", 0, detail::FeistelV1::kDefaultRounds},
    {2, "2", 2, detail::FeistelV2::kDefaultRounds},
};

// The row of `version`, or std::invalid_argument
// "<parameter> = 3 is not a version; allowed: 1, 2".
const FeistelVersionRow& check_feistel_version(int version,
                                               std::string_view parameter = "feistel_version");
// The version named `text` ("2"), or std::invalid_argument
// "<parameter> = '3' is not a version; allowed: 1, 2".
int parse_feistel_version(std::string_view text, std::string_view parameter = "feistel_version");

// A bijection of [0, n) chosen by (seed, epoch): the element at any position costs O(1) time and
// memory, so one rank reading its n / W positions pays O(n / W) and never builds the whole order.
// Two versions, each its own type, both kept bit for bit (a checkpoint names the one it was
// written with):
// - version 1 (detail::FeistelV1, feistel_v1.h): a Feistel network over bit_width(n - 1) bits
//   with cycle walking; its parity depends on n alone, sizes of 3 to 10 bits are measurably
//   non-uniform, and the orders of n and n + 1 nearly agree.
// - version 2 (detail::FeistelV2, feistel_v2.h; the default): a Feistel network over a domain
//   barely above n with XOR and modular-addition rounds, n in the key, a keyed parity correction
//   that makes odd and even permutations equally likely, and sizes up to kExactSize shuffled
//   exactly.
class FeistelPermutation {
 public:
  // The rounds most users should take, per version: 8 for either. Fewer rounds are faster and
  // measurably less uniform. Version 1: pairs of positions land uniformly for every size above
  // 64. Version 2: twice the most rounds the quality battery's structure-aware statistics break
  // (quality/feistel_structure.cc).
  static constexpr int kVersion1Rounds = detail::FeistelV1::kDefaultRounds;
  static constexpr int kVersion2Rounds = detail::FeistelV2::kDefaultRounds;
  // Passed as rounds: the version's default (default_rounds).
  static constexpr int kVersionDefaultRounds = 0;
  static constexpr int kMaxRounds = 32;
  // Sizes up to kSmallSize (version 1) run at least kSmallSizeRounds rounds, after which every
  // permutation of 2 to 6 elements is equally likely; the rounds a caller asks for apply as given
  // above kSmallSize.
  static constexpr uint64_t kSmallSize = detail::FeistelV1::kSmallSize;
  static constexpr int kSmallSizeRounds = detail::FeistelV1::kSmallSizeRounds;
  static constexpr uint64_t kMaxSize = uint64_t{1} << 63;
  // The versions of the construction (kFeistelVersions' rows); new orders take kDefaultVersion.
  static constexpr int kVersion1 = 1;
  static constexpr int kVersion2 = 2;
  static constexpr int kDefaultVersion = kVersion2;
  // The version's default rounds (its kFeistelVersions row); 0 for a version that is no row.
  static constexpr int default_rounds(int version) {
    const FeistelVersionRow* row = detail::find_variant(kFeistelVersions, version);
    return row != nullptr ? row->default_rounds : 0;
  }
  // Version 2 shuffles sizes up to this exactly (a table of this many bytes).
  static constexpr uint64_t kExactSize = detail::FeistelV2::kExactSize;
  // Version 2 runs at least kSmallSizeRounds rounds up to kSmallDomainVersion2 (parts of at most
  // 8 bits), and at least kNarrowDomainRounds above that up to kNarrowDomainVersion2 (a left part
  // of at most 8 bits).
  static constexpr uint64_t kSmallDomainVersion2 = detail::FeistelV2::kSmallDomain;
  static constexpr uint64_t kNarrowDomainVersion2 = detail::FeistelV2::kNarrowDomain;
  static constexpr int kNarrowDomainRounds = detail::FeistelV2::kNarrowDomainRounds;
  // Version 2's round function (mix): lowbias32's multipliers and shift (Hash Prospector).
  static constexpr uint32_t kMixMultiplier1 = detail::FeistelV2::kMixMultiplier1;
  static constexpr uint32_t kMixMultiplier2 = detail::FeistelV2::kMixMultiplier2;
  static constexpr int kMixShift = detail::FeistelV2::kMixShift;
  static_assert(detail::FeistelV2::kSmallDomainRounds == kSmallSizeRounds,
                "both versions' small sizes run kSmallSizeRounds");
  static_assert(detail::FeistelV1::kMaxRounds >= kMaxRounds &&
                    detail::FeistelV2::kMaxRounds >= kMaxRounds,
                "each version holds kMaxRounds round keys");

  FeistelPermutation() : FeistelPermutation(0, 0, 0) {}
  // rounds = kVersionDefaultRounds (0) takes default_rounds(version). Throws
  // std::invalid_argument when n > 2^63, rounds is outside [0, 32] or version is no row of
  // kFeistelVersions.
  FeistelPermutation(uint64_t n, uint64_t seed, uint64_t epoch, int rounds = kVersionDefaultRounds,
                     int version = kDefaultVersion);

  uint64_t size() const {
    return visit([](const auto& p) { return p.size(); });
  }
  // The rounds actually run: the requested ones, or at least kSmallSizeRounds for size() <=
  // kSmallSize (version 1) or kSmallDomainVersion2 (version 2, which reads its table instead up
  // to kExactSize), and at least kNarrowDomainRounds up to kNarrowDomainVersion2 (version 2).
  int rounds() const {
    return visit([](const auto& p) { return p.rounds(); });
  }
  int version() const { return kFeistelVersions[impl_.index()].value; }

  // The element at `position`; requires position < size().
  uint64_t operator()(uint64_t position) const {
    return visit([position](const auto& p) { return p(position); });
  }
  // As operator(), but throws std::out_of_range when position >= size().
  uint64_t at(uint64_t position) const;

  // The position holding `index`: inverse((*this)(p)) == p. Requires index < size().
  uint64_t inverse(uint64_t index) const {
    return visit([index](const auto& p) { return p.inverse(index); });
  }

  // out[j] = (*this)(first + j * stride) for j in [0, count); every such position must be below
  // size(). Evaluates lanes in blocks with the kernel of detail::best_simd_level(), the widest
  // verified one this CPU runs (cycle walking included); same bits as operator(). No allocation:
  // O(1) memory beyond `out`.
  void gather(uint64_t first, uint64_t stride, uint64_t count, uint64_t* out) const;
  // As above with the kernel of `level`, verified or not, which must be supported: the path by
  // which tests, benchmarks and scripts/device_check_avx512.sh run a named kernel against
  // operator(). Throws std::invalid_argument when `level` is not supported.
  void gather(uint64_t first, uint64_t stride, uint64_t count, uint64_t* out,
              detail::SimdLevel level) const;

 private:
  // Alternative i builds kFeistelVersions[i].
  using Impl = std::variant<detail::FeistelV1, detail::FeistelV2>;
  static_assert(std::variant_size_v<Impl> == std::size(kFeistelVersions),
                "one construction per row of kFeistelVersions");
  static Impl make(uint64_t n, uint64_t seed, uint64_t epoch, int rounds, int version);
  // f(the version's type): a branch per version, inlined (operator() is on the hot path).
  template <size_t I = 0, class F>
  auto visit(F&& f) const -> decltype(f(std::declval<const detail::FeistelV1&>())) {
    if constexpr (I + 1 == std::variant_size_v<Impl>) {
      return f(*std::get_if<I>(&impl_));
    } else {
      return impl_.index() == I ? f(*std::get_if<I>(&impl_)) : visit<I + 1>(std::forward<F>(f));
    }
  }

  Impl impl_;
};

}  // namespace distsampler

#endif  // DISTSAMPLER_FEISTEL_H_
