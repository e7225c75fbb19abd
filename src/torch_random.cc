// torch.randperm on the CPU, reproduced bit for bit.
//
// Generator: MT19937 (Matsumoto and Nishimura 1998) seeded with init_genrand from the low 32 bits
// of the seed, as in PyTorch's aten/src/ATen/core/MT19937RNGEngine.h.
//
// Classic randperm (aten/src/ATen/native/TensorFactories.cpp, randperm_cpu, PyTorch <= 2.5 and
// every version for small n): identity, then for i in [0, n-1): z = random() % (n - i), swap
// elements i and i + z. Inside-out variant (PR 143875) for n >= 214,748,364: for i in [0, n):
// z = random64() % (i + 1); out[i] = out[z]; out[z] = i.
//
// Speed, without changing a bit: the draws do not depend on the data, so the swap targets are
// drawn a block ahead of the swaps and each one is prefetched 256 swaps before its own, across
// block boundaries; the array is asked for 2 MiB pages; and on CPUs with AVX2 the classic
// targets' remainders are computed four at a time (classic_targets_avx2). A Fisher-Yates pass over
// an array larger than the caches is bound by those misses (and, with 4 KiB pages, by TLB misses).
#include "distsampler/torch_random.h"

#include <algorithm>
#include <cassert>
#include <charconv>
#include <cstring>
#include <stdexcept>
#include <string>
#include <system_error>

#include "distsampler/feistel.h"  // detail::simd_level_supported
#include "feistel_internal.h"     // DISTSAMPLER_X86_KERNELS

#if defined(__linux__)
#include <sys/mman.h>
#endif
#if DISTSAMPLER_X86_KERNELS
#include <immintrin.h>
#endif

namespace distsampler {
namespace {

// Swap targets are computed a block at a time, one block ahead of the swaps, so that a target can
// be prefetched kPrefetchAhead swaps before its swap, across block boundaries too.
constexpr uint64_t kBlock = 1024;
constexpr uint64_t kRing = 2 * kBlock;  // targets of the block being swapped and of the next one
constexpr uint64_t kPrefetchAhead = 256;  // tried 48 to 1000 at n = 10^8: 256 to 512 best
static_assert((kRing & (kRing - 1)) == 0 && kPrefetchAhead <= kBlock, "ring of targets");

inline void prefetch(const void* p) {
#if defined(__GNUC__) || defined(__clang__)
  __builtin_prefetch(p, 1, 3);
#else
  (void)p;
#endif
}

// Asks the kernel to back [data, data + bytes) with 2 MiB pages where it can (Linux's transparent
// huge pages in "madvise" mode): a Fisher-Yates pass over an array larger than the caches takes a
// TLB miss on nearly every swap with 4 KiB pages. Only a hint: the bits do not depend on it.
void advise_huge_pages(void* data, uint64_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHuge = uintptr_t{1} << 21;
  if (bytes < 8 * kHuge) return;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(kHuge - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)data;
  (void)bytes;
#endif
}

#if DISTSAMPLER_X86_KERNELS
// targets[j] = i + r[j] % (n - i) with i = first + j, for j in [0, count & ~3), four lanes at a
// time in double precision; requires n - first < 2^32. Returns the j it stopped at. Exact: r and
// m = n - i are integers below 2^32, so the rounded quotient fl(r / m) is within
// (r / m) 2^-53 < 2^-21 / m of r / m, closer than the 1 / m that separates a non-integer r / m
// from the next integer: its truncation is floor(r / m) = q, and r - q m (in [0, m)) is exact.
// A 32-bit division per draw costs about 3 times as much.
__attribute__((target("avx2"))) uint64_t classic_targets_avx2(const uint32_t* r, uint64_t n,
                                                              uint64_t first, uint64_t count,
                                                              uint64_t* targets) {
  const __m128i sign = _mm_set1_epi32(INT32_MIN);
  const __m256d two31 = _mm256_set1_pd(2147483648.0);
  __m256d m = _mm256_sub_pd(_mm256_set1_pd(static_cast<double>(n - first)),
                            _mm256_setr_pd(0.0, 1.0, 2.0, 3.0));
  const __m256d four = _mm256_set1_pd(4.0);
  __m256i i = _mm256_add_epi64(_mm256_set1_epi64x(static_cast<int64_t>(first)),
                               _mm256_setr_epi64x(0, 1, 2, 3));
  const __m256i four_i = _mm256_set1_epi64x(4);
  uint64_t j = 0;
  for (; j + 4 <= count; j += 4) {
    // uint32 -> double: flip the sign bit, convert as int32, add 2^31 back.
    const __m128i rj = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + j));
    const __m256d rd = _mm256_add_pd(_mm256_cvtepi32_pd(_mm_xor_si128(rj, sign)), two31);
    const __m256d q =
        _mm256_round_pd(_mm256_div_pd(rd, m), _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256d z = _mm256_sub_pd(rd, _mm256_mul_pd(q, m));
    // double in [0, 2^32) -> uint32: subtract 2^31, convert as int32, flip the sign bit back.
    const __m128i z32 = _mm_xor_si128(_mm256_cvttpd_epi32(_mm256_sub_pd(z, two31)), sign);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(targets + j),
                        _mm256_add_epi64(i, _mm256_cvtepu32_epi64(z32)));
    m = _mm256_sub_pd(m, four);
    i = _mm256_add_epi64(i, four_i);
  }
  return j;
}
#endif

// Classic: for i in [0, n - 1): z = random() % (n - i), swap out[i] and out[i + z].
template <typename T>
class ClassicTargets {
 public:
  // vector_remainders: use classic_targets_avx2 where the CPU has AVX2.
  ClassicTargets(uint64_t n, TorchGenerator& gen, bool vector_remainders) : n_(n), gen_(gen) {
#if DISTSAMPLER_X86_KERNELS
    avx2_ = vector_remainders && detail::simd_level_supported(detail::SimdLevel::kAvx2);
#else
    (void)vector_remainders;
#endif
  }
  uint64_t swaps() const { return n_ - 1; }
  // Writes the targets of swaps [first, first + count) to ring.
  void draw(uint64_t first, uint64_t count, uint64_t* ring) {
    gen_.fill(draws_, count);
    // A block starts at a multiple of kBlock: its targets are contiguous in the ring.
    assert(first % kBlock == 0 && count <= kBlock);
    uint64_t* targets = ring + (first & (kRing - 1));
    uint64_t j = 0;
#if DISTSAMPLER_X86_KERNELS
    if (avx2_ && n_ - first < (uint64_t{1} << 32)) {
      j = classic_targets_avx2(draws_, n_, first, count, targets);
    }
#endif
    for (; j < count; ++j) {
      const uint64_t i = first + j;
      const uint64_t m = n_ - i;
      // r % m for a 32-bit r: when m >= 2^32 the remainder is r itself.
      const uint64_t z = m < (uint64_t{1} << 32) ? draws_[j] % static_cast<uint32_t>(m) : draws_[j];
      targets[j] = i + z;
    }
  }
  static void swap(T* out, uint64_t i, uint64_t target) {
    const T saved = out[i];
    out[i] = out[target];
    out[target] = saved;
  }

 private:
  uint64_t n_;
  TorchGenerator& gen_;
  bool avx2_ = false;
  uint32_t draws_[kBlock];
};

// Inside-out: for i in [0, n): z = random64() % (i + 1); out[i] = out[z]; out[z] = i.
template <typename T>
class InsideOutTargets {
 public:
  InsideOutTargets(uint64_t n, TorchGenerator& gen) : n_(n), gen_(gen) {}
  uint64_t swaps() const { return n_; }
  void draw(uint64_t first, uint64_t count, uint64_t* ring) {
    gen_.fill(draws_, 2 * count);
    for (uint64_t j = 0; j < count; ++j) {
      const uint64_t r = (static_cast<uint64_t>(draws_[2 * j]) << 32) | draws_[2 * j + 1];
      ring[(first + j) & (kRing - 1)] = r % (first + j + 1);
    }
  }
  static void swap(T* out, uint64_t i, uint64_t z) {
    // PyTorch writes out[i] = out[z] before out[z] = i; when z == i that reads the element it
    // is about to set. The result is out[i] = i either way, without the read.
    if (z != i) out[i] = out[z];
    out[z] = static_cast<T>(i);
  }

 private:
  uint64_t n_;
  TorchGenerator& gen_;
  uint32_t draws_[2 * kBlock];
};

// Runs the swaps of `Targets` over out: block b + 1's targets are drawn before block b is swapped,
// and every target is prefetched kPrefetchAhead swaps before its own swap.
template <typename T, typename Targets>
void run_swaps(Targets& targets, T* out) {
  const uint64_t swaps = targets.swaps();
  uint64_t ring[kRing];
  uint64_t drawn = std::min(kBlock, swaps);
  targets.draw(0, drawn, ring);
  for (uint64_t j = 0; j < std::min(kPrefetchAhead, drawn); ++j) prefetch(out + ring[j]);
  for (uint64_t base = 0; base < swaps; base += kBlock) {
    const uint64_t end = std::min(base + kBlock, swaps);
    if (drawn < swaps) {
      const uint64_t count = std::min(kBlock, swaps - drawn);
      targets.draw(drawn, count, ring);
      drawn += count;
    }
    // Swaps whose target kPrefetchAhead later is drawn, then the last ones, which have none.
    const uint64_t prefetched_end = std::min(end, drawn - std::min(drawn, kPrefetchAhead));
    uint64_t i = base;
    for (; i < prefetched_end; ++i) {
      prefetch(out + ring[(i + kPrefetchAhead) & (kRing - 1)]);
      Targets::swap(out, i, ring[i & (kRing - 1)]);
    }
    for (; i < end; ++i) Targets::swap(out, i, ring[i & (kRing - 1)]);
  }
}

template <typename T>
void classic_randperm(uint64_t n, TorchGenerator& gen, T* out, bool vector_remainders = true) {
  advise_huge_pages(out, n * sizeof(T));
  for (uint64_t i = 0; i < n; ++i) out[i] = static_cast<T>(i);
  if (n < 2) return;
  ClassicTargets<T> targets(n, gen, vector_remainders);
  run_swaps(targets, out);
}

template <typename T>
void inside_out_randperm(uint64_t n, TorchGenerator& gen, T* out) {
  advise_huge_pages(out, n * sizeof(T));
  InsideOutTargets<T> targets(n, gen);
  run_swaps(targets, out);
}

}  // namespace

TorchGenerator::TorchGenerator(uint64_t seed) {
  state_[0] = static_cast<uint32_t>(seed);
  for (int j = 1; j < kStateSize; ++j) {
    state_[j] = 1812433253u * (state_[j - 1] ^ (state_[j - 1] >> 30)) + static_cast<uint32_t>(j);
  }
  index_ = kStateSize;
}

void TorchGenerator::twist() {
  constexpr int kShift = 397;
  constexpr uint32_t kMatrix = 0x9908b0dfu;
  auto mix = [](uint32_t upper, uint32_t lower, uint32_t far) {
    const uint32_t y = (upper & 0x80000000u) | (lower & 0x7fffffffu);
    return far ^ (y >> 1) ^ ((y & 1u) ? kMatrix : 0u);
  };
  int k = 0;
  for (; k < kStateSize - kShift; ++k)
    state_[k] = mix(state_[k], state_[k + 1], state_[k + kShift]);
  for (; k < kStateSize - 1; ++k) {
    state_[k] = mix(state_[k], state_[k + 1], state_[k + kShift - kStateSize]);
  }
  state_[kStateSize - 1] = mix(state_[kStateSize - 1], state_[0], state_[kShift - 1]);
  index_ = 0;
}

void TorchGenerator::fill(uint32_t* out, uint64_t count) {
  while (count > 0) {
    if (index_ == kStateSize) twist();
    const uint64_t take = std::min<uint64_t>(count, static_cast<uint64_t>(kStateSize - index_));
    // Through a local pointer: a store to out[j] could otherwise change index_ (out may alias
    // *this as far as the compiler knows), which keeps the loop scalar (3x slower).
    const uint32_t* state = state_ + index_;
    for (uint64_t j = 0; j < take; ++j) out[j] = temper(state[j]);
    index_ += static_cast<int>(take);
    out += take;
    count -= take;
  }
}

template <typename T>
void torch_randperm(uint64_t n, uint64_t seed, RandpermVariant variant, T* out) {
  assert(sizeof(T) == 8 || n <= (uint64_t{1} << 32));  // every value must fit in T
  TorchGenerator gen(seed);
  if (randperm_uses_inside_out(n, variant)) {
    inside_out_randperm(n, gen, out);
  } else {
    classic_randperm(n, gen, out);
  }
}

namespace detail {
template <typename T>
void randperm_classic(uint64_t n, uint64_t seed, T* out, bool vector_remainders) {
  TorchGenerator gen(seed);
  classic_randperm(n, gen, out, vector_remainders);
}
template <typename T>
void randperm_inside_out(uint64_t n, uint64_t seed, T* out) {
  TorchGenerator gen(seed);
  inside_out_randperm(n, gen, out);
}
template void randperm_classic<uint64_t>(uint64_t, uint64_t, uint64_t*, bool);
template void randperm_inside_out<uint64_t>(uint64_t, uint64_t, uint64_t*);
}  // namespace detail

constexpr std::string_view kRandpermNoun = "a variant";

std::string_view to_string(RandpermVariant variant) {
  return detail::variant_name(kRandpermVariants, variant);
}

RandpermVariant parse_randperm_variant(std::string_view text, std::string_view parameter) {
  return detail::parse_variant(kRandpermVariants, text, parameter, kRandpermNoun).value;
}

RandpermVariant randperm_variant_of_torch(std::string_view torch_version) {
  uint64_t major = 0;
  uint64_t minor = 0;
  const char* end = torch_version.data() + torch_version.size();
  const auto first = std::from_chars(torch_version.data(), end, major);
  const bool dot = first.ec == std::errc() && first.ptr != end && *first.ptr == '.';
  if (!dot || std::from_chars(first.ptr + 1, end, minor).ec != std::errc()) {
    throw std::invalid_argument("torch version = '" + std::string(torch_version) +
                                "'; allowed: MAJOR.MINOR[.PATCH][+LOCAL]");
  }
  return major < 2 || (major == 2 && minor < 6) ? RandpermVariant::kClassic
                                                : RandpermVariant::kCurrent;
}

void check_randperm_variant(RandpermVariant variant, std::string_view parameter) {
  detail::check_variant(kRandpermVariants, variant, parameter, kRandpermNoun);
}

template void torch_randperm<uint32_t>(uint64_t, uint64_t, RandpermVariant, uint32_t*);
template void torch_randperm<uint64_t>(uint64_t, uint64_t, RandpermVariant, uint64_t*);

std::vector<uint64_t> torch_randperm(uint64_t n, uint64_t seed, RandpermVariant variant) {
  std::vector<uint64_t> out(n);
  torch_randperm(n, seed, variant, out.data());
  return out;
}

}  // namespace distsampler
