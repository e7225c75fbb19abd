// FeistelPermutation::gather for version 2: every round of a lane in registers, 8 (AVX2) or 16
// (AVX-512) 32-bit lanes per vector and several vectors in flight, the round function's two 32-bit
// multiplies per round (FeistelPermutation::mix) and a 32 x 32 -> 64-bit one more per modular
// round.
//
// Version 2's domain [0, L * 2^s) is barely above n, so the kernels do not walk cycles in SIMD at
// all: a lane's value can reach n only if its left part is at least floor(n / 2^s). One unsigned
// max over a step's vectors and one compare flag a step holding such a lane (about 1 lane in L:
// 1 in 6,000 at n = 10^8); the values >= n of that step are then recomputed by the scalar
// network_value, which walks. The parity correction (the values 0 and 1 trade places, on one key
// bit) is applied last, at the two positions it concerns, which the constructor computed.
//
// Positions below 2^32 (n <= 2^32) are 32-bit lanes from the start; larger ones are produced as
// 64-bit lanes, split into left (>> s) and right (& (2^s - 1)) parts and packed into 32-bit lanes
// (AVX-512, and the portable kernel below n = 2^60, carry the two parts from vector to vector
// instead), which the output unpacks again.
// The kernels compute the scalar encrypt2's integer operations, so every kernel gives the same bits
// (feistel_test compares each with operator()). Speed per kernel and per round: docs/benchmarks.md
// (the first version 2, one multiply per round and 6 rounds, ran at 0.66 to 0.71 ns per index with
// AVX2 and 0.47 to 0.49 with AVX-512 on an AMD EPYC, Zen 4; the mix round costs more, and 8 of them
// are the price of a round function the battery cannot break).
#include <algorithm>

#include "distsampler/feistel.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define DISTSAMPLER_X86_KERNELS 1
#include <immintrin.h>
#else
#define DISTSAMPLER_X86_KERNELS 0
#endif

namespace distsampler {
namespace {

using Network = FeistelPermutation::Network;

// The kernels store the network's values (FeistelPermutation::network_value) and leave the parity
// correction to gather_version2. A lane's value is final unless it is >= n, which takes left >=
// floor(n / 2^s): walk_bound.
inline uint32_t walk_bound(const Network& net) {
  return static_cast<uint32_t>(net.n >> net.right_bits);
}

// After a step of `lanes` outputs at out[j...] flagged one or more lanes: the values >= n are
// recomputed by the scalar network_value, which walks.
inline void fix_step(const FeistelPermutation& p, uint64_t n, uint64_t first, uint64_t stride,
                     uint64_t j, int lanes, uint64_t* out) {
  for (int i = 0; i < lanes; ++i) {
    const uint64_t o = j + static_cast<uint64_t>(i);
    if (out[o] >= n) out[o] = p.network_value(first + o * stride);
  }
}

#if defined(__GNUC__) || defined(__clang__)
// The round constants, read through a pointer the compiler cannot see through: they stay memory
// operands (AVX-512: embedded broadcasts) instead of being hoisted out of the loop into the
// registers the lanes need, whose spills cost more than the loads (measured: AVX-512 3-4%, the
// portable kernel 5-10%). Not for AVX2, which measured 7% slower with it.
template <typename Keys>
inline __attribute__((always_inline)) const Keys& opaque(const Keys& k) {
  const Keys* p = &k;
  __asm__("" : "+r"(p));
  return *p;
}
#endif

// The portable kernel, for every CPU. With GCC or Clang it is written in their generic vector
// extension (4 x 32-bit lanes: SSE2 on baseline x86-64, NEON on ARM, scalar code elsewhere), 7
// vectors in flight, all rounds in registers; other compilers get the same lanes in plain loops.
#if defined(__GNUC__) || defined(__clang__)
typedef uint32_t Lanes __attribute__((vector_size(16)));
typedef int32_t Mask __attribute__((vector_size(16)));
typedef uint64_t Wide __attribute__((vector_size(32)));
constexpr int kPortableVectors = 7;
constexpr int kPortableLanes = 4 * kPortableVectors;

// floor(h * size / 2^32) per lane, h = x * m mod 2^32: the modular round's scaled hash. On
// x86-64 from SSE2's 32 x 32 -> 64-bit multiply (pmuludq) alone, four of them: the low words of
// the even and odd lanes' x * m are h, which the next multiply reads as it is (the compilers'
// generic vector code would emulate a 32-bit multiply in six instructions and a 64-bit one in
// more); elsewhere the generic vector code.
typedef uint64_t Pairs __attribute__((vector_size(16)));
#if defined(__SSE2__)
// Lanes (a.w, b.w, a.w', b.w') from two vectors of 64-bit products a (of lanes 0 and 2) and b (of
// lanes 1 and 3): their low words (kHigh false) or high words, in two shuffles.
template <bool kHigh>
inline __attribute__((always_inline)) __m128i interleave_words(__m128i a, __m128i b) {
  const __m128 words = _mm_shuffle_ps(_mm_castsi128_ps(a), _mm_castsi128_ps(b),
                                      kHigh ? _MM_SHUFFLE(3, 1, 3, 1) : _MM_SHUFFLE(2, 0, 2, 0));
  return _mm_shuffle_epi32(_mm_castps_si128(words), _MM_SHUFFLE(3, 1, 2, 0));
}
#endif

inline __attribute__((always_inline)) Lanes portable_scaled_hash(Lanes x, Lanes m, uint32_t size) {
#if defined(__SSE2__)
  const __m128i xv = reinterpret_cast<__m128i>(x);
  const __m128i mv = reinterpret_cast<__m128i>(m);
  const __m128i sv = _mm_set1_epi32(static_cast<int>(size));
  const __m128i even = _mm_mul_epu32(_mm_mul_epu32(xv, mv), sv);
  const __m128i odd = _mm_mul_epu32(_mm_mul_epu32(_mm_srli_epi64(xv, 32), mv), sv);
  return reinterpret_cast<Lanes>(interleave_words<true>(even, odd));
#else
  const Pairs hp = reinterpret_cast<Pairs>(x * m);
  const Pairs even = (hp & 0xffffffffu) * size;
  const Pairs odd = (hp >> 32) * size;
  return reinterpret_cast<Lanes>((even >> 32) | (odd & 0xffffffff00000000u));
#endif
}

// x * m mod 2^32 per lane, m the same in every lane. SSE2 has no 32-bit multiply: two pmuludq
// (the odd lanes' x shifted down; m needs no shift, being the same in both words) and two
// shuffles, two instructions fewer than the compilers' generic vector code, which cannot know
// that m is a splat.
// kNative: the target has a 32-bit multiply (SSE4.1's pmulld, NEON), which x * m compiles to.
template <bool kNative>
inline __attribute__((always_inline)) Lanes portable_mullo(Lanes x, Lanes m) {
  if (kNative) return x * m;
#if defined(__SSE2__)
  const __m128i xv = reinterpret_cast<__m128i>(x);
  const __m128i mv = reinterpret_cast<__m128i>(m);
  const __m128i even = _mm_mul_epu32(xv, mv);
  const __m128i odd = _mm_mul_epu32(_mm_srli_epi64(xv, 32), mv);
  return reinterpret_cast<Lanes>(interleave_words<false>(even, odd));
#else
  return x * m;
#endif
}

// The round constants as vectors, read as memory operands (opaque).
struct PortableKeys {
  Lanes key[FeistelPermutation::kMaxRounds];
  Lanes key2[FeistelPermutation::kMaxRounds];
};

// The round function's first multiply and xorshift (FeistelPermutation::mix without its last
// multiply, which the callers fuse with what they do next).
template <bool kNative>
inline __attribute__((always_inline)) Lanes portable_premix(Lanes x, Lanes a, Lanes b) {
  const Lanes h = portable_mullo<kNative>(x ^ a, Lanes{} + FeistelPermutation::kMixMultiplier1);
  return h ^ (h >> FeistelPermutation::kMixShift) ^ b;
}

// kSmall: L <= 2^30, so left + c < 2^31 and a signed compare (all SSE2 has) decides.
template <int R, bool kSmall, bool kNative>
inline __attribute__((always_inline)) void portable_rounds(const Network& net,
                                                           const PortableKeys& k, Lanes* left,
                                                           Lanes* right) {
  const int rs = net.right_shift, rounds = R > 0 ? R : net.rounds;
  const uint32_t size = net.left_size;
  int r = 0;
#pragma GCC unroll 16
  for (; r + 1 < rounds; r += 2) {
    for (int v = 0; v < kPortableVectors; ++v) {
      right[v] ^= portable_mullo<kNative>(portable_premix<kNative>(left[v], k.key[r], k.key2[r]),
                                          Lanes{} + FeistelPermutation::kMixMultiplier2) >>
                  rs;
      const Lanes c =
          portable_scaled_hash(portable_premix<kNative>(right[v], k.key[r + 1], k.key2[r + 1]),
                               Lanes{} + FeistelPermutation::kMixMultiplier2, size);
      if (kSmall) {
        const Lanes y = left[v] + c;
        left[v] =
            y - (reinterpret_cast<Lanes>(reinterpret_cast<Mask>(y) >= static_cast<int32_t>(size)) &
                 size);
      } else {
        // Without an unsigned compare: z = left + c - L lies in [-L, L), so its sign says
        // whether to add L back.
        const Lanes z = left[v] + c - size;
        left[v] = z + (reinterpret_cast<Lanes>(reinterpret_cast<Mask>(z) >> 31) & size);
      }
    }
  }
  if (r < rounds) {
    for (int v = 0; v < kPortableVectors; ++v) {
      right[v] ^= portable_mullo<kNative>(portable_premix<kNative>(left[v], k.key[r], k.key2[r]),
                                          Lanes{} + FeistelPermutation::kMixMultiplier2) >>
                  rs;
    }
  }
}

// Recomputes the lanes of a step whose value may be >= n (left >= walk_bound; left < 2^31, so a
// signed compare decides).
inline void portable_fix(const FeistelPermutation& p, const Network& net, const Lanes* left,
                         uint64_t first, uint64_t stride, uint64_t j, uint64_t* out) {
  const int32_t last = static_cast<int32_t>(walk_bound(net)) - 1;
  Mask any = {0, 0, 0, 0};
  for (int v = 0; v < kPortableVectors; ++v) any |= reinterpret_cast<const Mask&>(left[v]) > last;
  if ((any[0] | any[1] | any[2] | any[3]) == 0) return;
  fix_step(p, net.n, first, stride, j, kPortableLanes, out);
}

// R as for the x86 kernels: the rounds as a constant, or 0 for net.rounds.
// The rounds, the 64-bit output and the fix of one step of positions above 2^32.
template <int R, bool kSmall, bool kNative>
inline __attribute__((always_inline)) void portable_wide_step(
    const FeistelPermutation& p, const Network& net, const PortableKeys& keys, Lanes* left,
    Lanes* right, uint64_t first, uint64_t stride, uint64_t j, uint64_t* out) {
  portable_rounds<R, kSmall, kNative>(net, keys, left, right);
  const int s = net.right_bits;
  for (int v = 0; v < kPortableVectors; ++v) {
    const Wide x =
        (__builtin_convertvector(left[v], Wide) << s) | __builtin_convertvector(right[v], Wide);
    __builtin_memcpy(out + j + 4 * v, &x, sizeof x);
  }
  portable_fix(p, net, left, first, stride, j, out);
}

// Inlined into each entry point below, so that it compiles for that entry's instruction set.
template <int R, bool kSmall, bool kNative>
inline __attribute__((always_inline)) void portable_all(const FeistelPermutation& p,
                                                        const Network& net, uint64_t first,
                                                        uint64_t stride, uint64_t count,
                                                        uint64_t* out) {
  PortableKeys keys;
  for (int r = 0; r < net.rounds; ++r) {
    keys.key[r] = Lanes{} + net.keys[r];
    keys.key2[r] = Lanes{} + net.keys2[r];
  }
  const int s = net.right_bits;
  const uint32_t rmask = net.right_mask;
  uint64_t j = 0;
  Lanes left[kPortableVectors], right[kPortableVectors];
  if (net.n <= (uint64_t{1} << 32)) {
    // 32-bit positions, as in the AVX2 kernel.
    Lanes pos[kPortableVectors];
    for (int v = 0; v < kPortableVectors; ++v) {
      for (int i = 0; i < 4; ++i) pos[v][i] = static_cast<uint32_t>(first + (4 * v + i) * stride);
    }
    const uint32_t step = static_cast<uint32_t>(stride * kPortableLanes);
    for (; j + kPortableLanes <= count; j += kPortableLanes) {
      for (int v = 0; v < kPortableVectors; ++v) {
        left[v] = pos[v] >> s;
        right[v] = pos[v] & rmask;
        pos[v] += step;
      }
      portable_rounds<R, kSmall, kNative>(net, opaque(keys), left, right);
      for (int v = 0; v < kPortableVectors; ++v) {
        const Wide x = __builtin_convertvector((left[v] << s) | right[v], Wide);
        __builtin_memcpy(out + j + 4 * v, &x, sizeof x);
      }
      portable_fix(p, net, left, first, stride, j, out);
    }
  } else if (s <= 30) {
    // Larger positions carried as their two parts (as the AVX-512 kernel does), which spares the
    // 64-bit shifts and narrowing shuffles per vector; s <= 30 keeps the right parts and their
    // sums below 2^31, where the signed compare decides (n < 2^60).
    Lanes lpos, rpos;
    for (int i = 0; i < 4; ++i) {
      const uint64_t x = first + static_cast<uint64_t>(i) * stride;
      lpos[i] = static_cast<uint32_t>(x >> s);
      rpos[i] = static_cast<uint32_t>(x & rmask);
    }
    const uint64_t delta = 4 * stride;
    const uint32_t dr = static_cast<uint32_t>(delta & rmask);
    const uint32_t dl = static_cast<uint32_t>(delta >> s);
    const uint64_t step_dr = uint64_t{kPortableVectors} * dr;
    const bool carry_free = step_dr <= rmask;
    // No lane carries within a step if its right part is at most rmask - V * dr.
    const int32_t no_carry = carry_free ? static_cast<int32_t>(rmask - step_dr) : -1;
    for (; j + kPortableLanes <= count; j += kPortableLanes) {
      const Mask over = reinterpret_cast<Mask>(rpos) > no_carry;
      if (carry_free && (over[0] | over[1] | over[2] | over[3]) == 0) {
        for (int v = 0; v < kPortableVectors; ++v) {
          left[v] = lpos;
          right[v] = rpos;
          rpos += dr;
          lpos += dl;
        }
      } else {
        for (int v = 0; v < kPortableVectors; ++v) {
          left[v] = lpos;
          right[v] = rpos;
          rpos += dr;
          // All ones where the right part passed 2^s: it wraps, and the left part takes 1.
          const Lanes carry =
              reinterpret_cast<Lanes>(reinterpret_cast<Mask>(rpos) > static_cast<int32_t>(rmask));
          rpos -= carry & (rmask + 1);
          lpos += dl - carry;
        }
      }
      portable_wide_step<R, kSmall, kNative>(p, net, opaque(keys), left, right, first, stride, j,
                                             out);
    }
  } else {
    Wide pos[kPortableVectors];
    for (int v = 0; v < kPortableVectors; ++v) {
      for (int i = 0; i < 4; ++i) pos[v][i] = first + (4 * v + i) * stride;
    }
    const uint64_t step = stride * kPortableLanes;
    for (; j + kPortableLanes <= count; j += kPortableLanes) {
      for (int v = 0; v < kPortableVectors; ++v) {
        left[v] = __builtin_convertvector(pos[v] >> s, Lanes);
        right[v] = __builtin_convertvector(pos[v] & rmask, Lanes);
        pos[v] += step;
      }
      portable_wide_step<R, kSmall, kNative>(p, net, opaque(keys), left, right, first, stride, j,
                                             out);
    }
  }
  for (; j < count; ++j) out[j] = p.network_value(first + j * stride);
}

template <bool kNative>
inline __attribute__((always_inline)) void portable_entry(const FeistelPermutation& p,
                                                          const Network& net, uint64_t first,
                                                          uint64_t stride, uint64_t count,
                                                          uint64_t* out) {
  constexpr int kDefault = FeistelPermutation::kVersion2Rounds;
  if (net.left_size > (uint32_t{1} << 30)) {
    portable_all<0, false, kNative>(p, net, first, stride, count, out);
  } else if (net.rounds == kDefault) {
    portable_all<kDefault, true, kNative>(p, net, first, stride, count, out);
  } else {
    portable_all<0, true, kNative>(p, net, first, stride, count, out);
  }
}

void gather_portable(const FeistelPermutation& p, const Network& net, uint64_t first,
                     uint64_t stride, uint64_t count, uint64_t* out) {
#if defined(__SSE2__)
  portable_entry<false>(p, net, first, stride, count, out);
#else
  portable_entry<true>(p, net, first, stride, count, out);
#endif
}

#if DISTSAMPLER_X86_KERNELS
// The portable kernel built for SSE4.1 (every x86-64 CPU since 2008 has it; AVX2 came in 2013):
// its 32-bit multiply (pmulld) replaces SSE2's two pmuludq and three shuffles. Same source, same
// bits.
__attribute__((target("sse4.1"))) void gather_sse41(const FeistelPermutation& p, const Network& net,
                                                    uint64_t first, uint64_t stride, uint64_t count,
                                                    uint64_t* out) {
  portable_entry<true>(p, net, first, stride, count, out);
}
#endif
#else
// Other compilers: the scalar network_value per position.
void gather_portable(const FeistelPermutation& p, const Network&, uint64_t first, uint64_t stride,
                     uint64_t count, uint64_t* out) {
  for (uint64_t j = 0; j < count; ++j) out[j] = p.network_value(first + j * stride);
}
#endif

#if DISTSAMPLER_X86_KERNELS
#define DISTSAMPLER_TARGET_AVX2 __attribute__((target("avx2")))
#define DISTSAMPLER_TARGET_AVX512 __attribute__((target("avx2,avx512f,avx512vl,avx512bw,avx512dq")))

// The output offset (within 8) of 32-bit lane i: lanes are ordered so that the in-lane
// _mm256_unpacklo/hi_epi32 that widen them to 64 bits store offsets 0-3 and 4-7 in order (and it
// is the order _mm256_shuffle_ps leaves when it packs the low halves of two 64-bit vectors).
constexpr int32_t kAvx2Lane[8] = {0, 1, 4, 5, 2, 3, 6, 7};

// Vectors in flight per step: one vector alone is bound by the latency of its chain of rounds
// (about 16 cycles per pair), which the out-of-order window cannot hide.
constexpr int kAvx2Vectors = 8;

// Round constants, broadcast once (AVX2 has no broadcast memory operands for integers).
struct Avx2Keys {
  __m256i key[FeistelPermutation::kMaxRounds];
  __m256i key2[FeistelPermutation::kMaxRounds];
};

// FeistelPermutation::mix per 32-bit lane.
DISTSAMPLER_TARGET_AVX2 inline __m256i avx2_mix(__m256i x, __m256i a, __m256i b) {
  __m256i h =
      _mm256_mullo_epi32(_mm256_xor_si256(x, a),
                         _mm256_set1_epi32(static_cast<int>(FeistelPermutation::kMixMultiplier1)));
  h = _mm256_xor_si256(_mm256_xor_si256(h, _mm256_srli_epi32(h, FeistelPermutation::kMixShift)), b);
  return _mm256_mullo_epi32(
      h, _mm256_set1_epi32(static_cast<int>(FeistelPermutation::kMixMultiplier2)));
}

// floor(h * size / 2^32) per 32-bit lane: the even lanes' 64-bit products keep their high words
// after a shift, the odd lanes' already sit in place.
DISTSAMPLER_TARGET_AVX2 inline __m256i avx2_scale(__m256i h, __m256i size) {
  const __m256i even = _mm256_srli_epi64(_mm256_mul_epu32(h, size), 32);
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(h, 32), size);
  return _mm256_blend_epi32(even, odd, 0xaa);
}

// R > 0: the rounds as a constant (the default 8, unrolled by the compiler); 0: net.rounds.
inline int rounds_of(int R, const Network& net) { return R > 0 ? R : net.rounds; }

template <int V, int R>
DISTSAMPLER_TARGET_AVX2 inline void avx2_rounds(const Network& net, const Avx2Keys& k,
                                                __m256i* left, __m256i* right) {
  const int rounds = rounds_of(R, net);
  const __m128i rs = _mm_cvtsi32_si128(net.right_shift);
  const __m256i size = _mm256_set1_epi32(static_cast<int>(net.left_size));
  for (int r = 0; r < rounds; r += 2) {
    for (int v = 0; v < V; ++v) {
      right[v] =
          _mm256_xor_si256(right[v], _mm256_srl_epi32(avx2_mix(left[v], k.key[r], k.key2[r]), rs));
    }
    if (r + 1 < rounds) {
      for (int v = 0; v < V; ++v) {
        const __m256i h = avx2_mix(right[v], k.key[r + 1], k.key2[r + 1]);
        const __m256i y = _mm256_add_epi32(left[v], avx2_scale(h, size));
        left[v] = _mm256_min_epu32(y, _mm256_sub_epi32(y, size));
      }
    }
  }
}

// Whether a lane of the step may need the scalar path: the largest left against walk_bound.
DISTSAMPLER_TARGET_AVX2 inline bool avx2_flagged(__m256i flags, __m256i bound) {
  return _mm256_testz_si256(_mm256_cmpeq_epi32(_mm256_max_epu32(flags, bound), flags),
                            _mm256_set1_epi32(-1)) == 0;
}

// Positions below 2^32 (n <= 2^32): 8 lanes per vector, V vectors per step, from j while
// j + 8V <= count; returns the next j.
template <int V, int R>
DISTSAMPLER_TARGET_AVX2 inline uint64_t avx2_narrow(const FeistelPermutation& p, const Network& net,
                                                    const Avx2Keys& k, uint64_t first,
                                                    uint64_t stride, uint64_t j, uint64_t count,
                                                    uint64_t* out) {
  const __m256i bound = _mm256_set1_epi32(static_cast<int>(walk_bound(net)));
  const __m256i zero = _mm256_setzero_si256();
  const __m128i s = _mm_cvtsi32_si128(net.right_bits);
  const __m256i rmask = _mm256_set1_epi32(static_cast<int>(net.right_mask));
  // 32-bit positions, in kAvx2Lane order; they wrap only past 2^32, beyond every position here.
  __m256i pos = _mm256_add_epi32(
      _mm256_set1_epi32(static_cast<int>(first + j * stride)),
      _mm256_mullo_epi32(_mm256_set1_epi32(static_cast<int>(stride)),
                         _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kAvx2Lane))));
  const __m256i step = _mm256_set1_epi32(static_cast<int>(stride * 8));
  for (; j + 8 * V <= count; j += 8 * V) {
    __m256i left[V], right[V];
    for (int v = 0; v < V; ++v) {
      left[v] = _mm256_srl_epi32(pos, s);
      right[v] = _mm256_and_si256(pos, rmask);
      pos = _mm256_add_epi32(pos, step);
    }
    avx2_rounds<V, R>(net, k, left, right);
    __m256i flags = zero;  // the largest left of the step
    for (int v = 0; v < V; ++v) {
      const __m256i x = _mm256_or_si256(_mm256_sll_epi32(left[v], s), right[v]);
      uint64_t* o = out + j + 8 * v;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o), _mm256_unpacklo_epi32(x, zero));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 4), _mm256_unpackhi_epi32(x, zero));
      flags = _mm256_max_epu32(flags, left[v]);
    }
    if (avx2_flagged(flags, bound)) fix_step(p, net.n, first, stride, j, 8 * V, out);
  }
  return j;
}

// Any positions: 64-bit lanes split into parts and packed into 32-bit lanes (kAvx2Lane order).
template <int V, int R>
DISTSAMPLER_TARGET_AVX2 inline uint64_t avx2_wide(const FeistelPermutation& p, const Network& net,
                                                  const Avx2Keys& k, uint64_t first,
                                                  uint64_t stride, uint64_t j, uint64_t count,
                                                  uint64_t* out) {
  const __m256i bound = _mm256_set1_epi32(static_cast<int>(walk_bound(net)));
  const __m128i s = _mm_cvtsi32_si128(net.right_bits);
  const __m128i hs = _mm_cvtsi32_si128(32 - net.right_bits);
  const __m256i rmask = _mm256_set1_epi64x(static_cast<int64_t>(net.right_mask));
  const uint64_t x0 = first + j * stride;
  __m256i pos0 = _mm256_setr_epi64x(static_cast<int64_t>(x0), static_cast<int64_t>(x0 + stride),
                                    static_cast<int64_t>(x0 + 2 * stride),
                                    static_cast<int64_t>(x0 + 3 * stride));
  __m256i pos1 = _mm256_add_epi64(pos0, _mm256_set1_epi64x(static_cast<int64_t>(4 * stride)));
  const __m256i step = _mm256_set1_epi64x(static_cast<int64_t>(8 * stride));
  for (; j + 8 * V <= count; j += 8 * V) {
    __m256i left[V], right[V];
    for (int v = 0; v < V; ++v) {
      left[v] = _mm256_castps_si256(
          _mm256_shuffle_ps(_mm256_castsi256_ps(_mm256_srl_epi64(pos0, s)),
                            _mm256_castsi256_ps(_mm256_srl_epi64(pos1, s)), 0x88));
      right[v] = _mm256_castps_si256(
          _mm256_shuffle_ps(_mm256_castsi256_ps(_mm256_and_si256(pos0, rmask)),
                            _mm256_castsi256_ps(_mm256_and_si256(pos1, rmask)), 0x88));
      pos0 = _mm256_add_epi64(pos0, step);
      pos1 = _mm256_add_epi64(pos1, step);
    }
    avx2_rounds<V, R>(net, k, left, right);
    __m256i flags = _mm256_setzero_si256();
    for (int v = 0; v < V; ++v) {
      // The value's low and high 32 bits, interleaved back into 64-bit lanes (s = 32: the shifts
      // by 32 and 0 leave right and left).
      const __m256i lo = _mm256_or_si256(_mm256_sll_epi32(left[v], s), right[v]);
      const __m256i hi = _mm256_srl_epi32(left[v], hs);
      uint64_t* o = out + j + 8 * v;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o), _mm256_unpacklo_epi32(lo, hi));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 4), _mm256_unpackhi_epi32(lo, hi));
      flags = _mm256_max_epu32(flags, left[v]);
    }
    if (avx2_flagged(flags, bound)) fix_step(p, net.n, first, stride, j, 8 * V, out);
  }
  return j;
}

template <int R>
DISTSAMPLER_TARGET_AVX2 void avx2_all(const FeistelPermutation& p, const Network& net,
                                      const Avx2Keys& k, uint64_t first, uint64_t stride,
                                      uint64_t count, uint64_t* out) {
  uint64_t j = 0;
  if (net.n <= (uint64_t{1} << 32)) {
    j = avx2_narrow<kAvx2Vectors, R>(p, net, k, first, stride, j, count, out);
    j = avx2_narrow<1, R>(p, net, k, first, stride, j, count, out);
  } else {
    j = avx2_wide<kAvx2Vectors, R>(p, net, k, first, stride, j, count, out);
    j = avx2_wide<1, R>(p, net, k, first, stride, j, count, out);
  }
  for (; j < count; ++j) out[j] = p.network_value(first + j * stride);
}

DISTSAMPLER_TARGET_AVX2 void gather_avx2(const FeistelPermutation& p, const Network& net,
                                         uint64_t first, uint64_t stride, uint64_t count,
                                         uint64_t* out) {
  Avx2Keys k;
  for (int r = 0; r < net.rounds; ++r) {
    k.key[r] = _mm256_set1_epi32(static_cast<int>(net.keys[r]));
    k.key2[r] = _mm256_set1_epi32(static_cast<int>(net.keys2[r]));
  }
  if (net.rounds == FeistelPermutation::kVersion2Rounds) {
    avx2_all<FeistelPermutation::kVersion2Rounds>(p, net, k, first, stride, count, out);
  } else {
    avx2_all<0>(p, net, k, first, stride, count, out);
  }
}

// GCC 12's AVX-512 headers start some intrinsics from _mm512_undefined_*, which its own
// -Wmaybe-uninitialized then reports (GCC bug 105593, fixed in GCC 13); no value here is read
// uninitialized.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
constexpr int kAvx512Vectors = 8;

// The output offset (within 16) of 32-bit lane i: lanes are ordered so that the in-lane
// _mm512_unpacklo/hi_epi32 that widen them to 64 bits store offsets 0-7 and 8-15 in order.
constexpr int kAvx512Lane[16] = {0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15};

// Keys with version 2's odd-round XOR folded in: the right part is carried as right ^ P, P the key
// of the next odd round, so that round needs no XOR of its own and the even round's update is one
// three-way XOR (right ^ hash ^ (P_before ^ P_after)).
// Scalars, broadcast by the instructions that read them (AVX-512's embedded broadcast), which
// leaves the 32 vector registers to the lanes.
struct Avx512Keys {
  uint32_t key[FeistelPermutation::kMaxRounds];   // even rounds: the key XORed into left
  uint32_t fold[FeistelPermutation::kMaxRounds];  // even rounds: P_before ^ P_after
  uint32_t key2[FeistelPermutation::kMaxRounds];
  uint32_t last;  // P after the last round
};

// floor(h * size / 2^32) per 32-bit lane, as avx2_scale.
DISTSAMPLER_TARGET_AVX512 inline __m512i avx512_scale(__m512i h, __m512i size) {
  const __m512i even = _mm512_mul_epu32(h, size);
  const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(h, 32), size);
  // The even lanes take the high words of their products (one masked in-lane shuffle).
  return _mm512_mask_shuffle_epi32(odd, 0x5555, even, _MM_PERM_DDBB);
}

// R > 0: the rounds as a constant (the default 8, unrolled by the compiler); 0: net.rounds.
template <int V, int R>
DISTSAMPLER_TARGET_AVX512 inline void avx512_rounds(const Network& net, const Avx512Keys& k,
                                                    __m512i* left, __m512i* right) {
  const int rounds = rounds_of(R, net);
  const __m128i rs = _mm_cvtsi32_si128(net.right_shift);
  const __m512i size = _mm512_set1_epi32(static_cast<int>(net.left_size));
  const __m512i m1 = _mm512_set1_epi32(static_cast<int>(FeistelPermutation::kMixMultiplier1));
  const __m512i m2 = _mm512_set1_epi32(static_cast<int>(FeistelPermutation::kMixMultiplier2));
  for (int r = 0; r < rounds; r += 2) {
    for (int v = 0; v < V; ++v) {
      __m512i g = _mm512_mullo_epi32(
          _mm512_xor_si512(left[v], _mm512_set1_epi32(static_cast<int>(k.key[r]))), m1);
      g = _mm512_ternarylogic_epi32(g, _mm512_srli_epi32(g, FeistelPermutation::kMixShift),
                                    _mm512_set1_epi32(static_cast<int>(k.key2[r])), 0x96);
      const __m512i h = _mm512_srl_epi32(_mm512_mullo_epi32(g, m2), rs);
      right[v] =
          _mm512_ternarylogic_epi32(right[v], h, _mm512_set1_epi32(static_cast<int>(k.fold[r])),
                                    0x96);  // a ^ b ^ c
    }
    if (r + 1 < rounds) {
      for (int v = 0; v < V; ++v) {
        // right[v] carries the round's first key already (Avx512Keys).
        __m512i g = _mm512_mullo_epi32(right[v], m1);
        g = _mm512_ternarylogic_epi32(g, _mm512_srli_epi32(g, FeistelPermutation::kMixShift),
                                      _mm512_set1_epi32(static_cast<int>(k.key2[r + 1])), 0x96);
        const __m512i h = _mm512_mullo_epi32(g, m2);
        const __m512i y = _mm512_add_epi32(left[v], avx512_scale(h, size));
        left[v] = _mm512_min_epu32(y, _mm512_sub_epi32(y, size));
      }
    }
  }
}

// V vectors of 16 lanes per step, from j while j + 16V <= count; returns the next j. The lanes'
// positions are carried as their two parts, 32-bit lanes: lane i of the first vector holds
// position first + (j + kAvx512Lane[i]) * stride, and each vector moves on by 16 * stride (below
// 2^63 whenever a vector fits in count), adding dl to the left part and dr to the right one. A
// step none of whose lanes carries from the right part into the left one (almost every step at
// small strides) takes two additions per vector; the others add with the carry. kWide: n > 2^32,
// whose values need a high word.
template <int V, int R, bool kWide>
DISTSAMPLER_TARGET_AVX512 inline uint64_t avx512_steps(const FeistelPermutation& p,
                                                       const Network& net, const Avx512Keys& k,
                                                       uint64_t first, uint64_t stride, uint64_t j,
                                                       uint64_t count, uint64_t* out) {
  const __m512i bound = _mm512_set1_epi32(static_cast<int>(walk_bound(net)));
  const int bits = net.right_bits;
  const __m128i s = _mm_cvtsi32_si128(bits);
  const __m128i hs = _mm_cvtsi32_si128(32 - bits);
  const uint32_t mask = net.right_mask;
  alignas(64) uint32_t left0[16], right0[16];
  for (int i = 0; i < 16; ++i) {
    const uint64_t x = first + (j + static_cast<uint64_t>(kAvx512Lane[i])) * stride;
    left0[i] = static_cast<uint32_t>(x >> bits);
    right0[i] = static_cast<uint32_t>(x & mask);
  }
  __m512i lpos = _mm512_load_si512(left0), rpos = _mm512_load_si512(right0);
  const uint64_t delta = 16 * stride;
  const uint32_t dr32 = static_cast<uint32_t>(delta & mask);
  const __m512i dl = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(delta >> bits)));
  const __m512i dr = _mm512_set1_epi32(static_cast<int>(dr32));
  const __m512i rmask = _mm512_set1_epi32(static_cast<int>(mask));
  // 2^s modulo 2^32: s = 32's right parts carry by wrapping, and subtract nothing.
  const __m512i radix =
      _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(uint64_t{1} << bits)));
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i zero = _mm512_setzero_si512();
  // No lane carries within a step if its right part is at most mask - V * dr.
  const uint64_t step_dr = static_cast<uint64_t>(V) * dr32;
  const bool carry_free = step_dr <= mask;
  const __m512i no_carry =
      _mm512_set1_epi32(static_cast<int>(carry_free ? static_cast<uint32_t>(mask - step_dr) : 0));
  for (; j + 16 * V <= count; j += 16 * V) {
    __m512i left[V], right[V];
    if (carry_free && _mm512_cmpgt_epu32_mask(rpos, no_carry) == 0) {
      for (int v = 0; v < V; ++v) {
        left[v] = lpos;
        right[v] = rpos;
        rpos = _mm512_add_epi32(rpos, dr);
        lpos = _mm512_add_epi32(lpos, dl);
      }
    } else {
      for (int v = 0; v < V; ++v) {
        left[v] = lpos;
        right[v] = rpos;
        rpos = _mm512_add_epi32(rpos, dr);
        const __mmask16 carry =
            _mm512_cmpgt_epu32_mask(rpos, rmask) | _mm512_cmplt_epu32_mask(rpos, dr);
        rpos = _mm512_mask_sub_epi32(rpos, carry, rpos, radix);
        lpos = _mm512_add_epi32(lpos, dl);
        lpos = _mm512_mask_add_epi32(lpos, carry, lpos, one);
      }
    }
    avx512_rounds<V, R>(net, opaque(k), left, right);
    __m512i flags = zero;  // the largest left of the step
    for (int v = 0; v < V; ++v) {
      // (left << s) | (right ^ last), the carried key removed in the same instruction; for
      // n > 2^32 also the high word (s = 32: left itself, which the shift by 0 gives).
      const __m512i lo =
          _mm512_ternarylogic_epi32(_mm512_sll_epi32(left[v], s), right[v],
                                    _mm512_set1_epi32(static_cast<int>(k.last)), 0xf6);
      const __m512i hi = kWide ? _mm512_srl_epi32(left[v], hs) : zero;
      uint64_t* o = out + j + 16 * v;
      _mm512_storeu_si512(o, _mm512_unpacklo_epi32(lo, hi));
      _mm512_storeu_si512(o + 8, _mm512_unpackhi_epi32(lo, hi));
      flags = _mm512_max_epu32(flags, left[v]);
    }
    if (_mm512_cmpge_epu32_mask(flags, bound) != 0)
      fix_step(p, net.n, first, stride, j, 16 * V, out);
  }
  return j;
}

template <int R>
DISTSAMPLER_TARGET_AVX512 void avx512_all(const FeistelPermutation& p, const Network& net,
                                          const Avx512Keys& k, uint64_t first, uint64_t stride,
                                          uint64_t count, uint64_t* out) {
  uint64_t j = 0;
  if (net.n <= (uint64_t{1} << 32)) {
    j = avx512_steps<kAvx512Vectors, R, false>(p, net, k, first, stride, j, count, out);
    j = avx512_steps<1, R, false>(p, net, k, first, stride, j, count, out);
  } else {
    j = avx512_steps<kAvx512Vectors, R, true>(p, net, k, first, stride, j, count, out);
    j = avx512_steps<1, R, true>(p, net, k, first, stride, j, count, out);
  }
  for (; j < count; ++j) out[j] = p.network_value(first + j * stride);
}

// Not dispatched (see gather_version2): kept compiling, waiting for a run on an AVX-512 CPU.
[[maybe_unused]] DISTSAMPLER_TARGET_AVX512 void gather_avx512(const FeistelPermutation& p,
                                                              const Network& net, uint64_t first,
                                                              uint64_t stride, uint64_t count,
                                                              uint64_t* out) {
  Avx512Keys k{};
  uint32_t carried = 0;
  for (int r = 0; r < net.rounds; r += 2) {
    const uint32_t next = r + 1 < net.rounds ? net.keys[r + 1] : 0;
    k.key[r] = net.keys[r];
    k.fold[r] = carried ^ next;
    k.key2[r] = net.keys2[r];
    if (r + 1 < net.rounds) k.key2[r + 1] = net.keys2[r + 1];
    carried = next;
  }
  k.last = carried;
  if (net.rounds == FeistelPermutation::kVersion2Rounds) {
    avx512_all<FeistelPermutation::kVersion2Rounds>(p, net, k, first, stride, count, out);
  } else {
    avx512_all<0>(p, net, k, first, stride, count, out);
  }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

}  // namespace

void FeistelPermutation::gather_version2(uint64_t first, uint64_t stride, uint64_t count,
                                         uint64_t* out, detail::SimdLevel level) const {
  const Network net{n_, rounds_, right_bits_, right_mask_, left_size_, right_shift_, keys_, keys2_};
  switch (level) {
#if DISTSAMPLER_X86_KERNELS
    // The AVX-512 kernel of the two-multiply round function has not yet run on an AVX-512 CPU
    // against operator() (feistel_test does that wherever the CPU has AVX-512): until it has,
    // AVX-512 CPUs take the AVX2 kernel, whose bits are verified. Same bits on every machine.
    case detail::SimdLevel::kAvx512:
    case detail::SimdLevel::kAvx2:
      gather_avx2(*this, net, first, stride, count, out);
      break;
    case detail::SimdLevel::kSse41:
      gather_sse41(*this, net, first, stride, count, out);
      break;
#endif
    default:
      gather_portable(*this, net, first, stride, count, out);
      break;
  }
  // The parity correction: the values 0 and 1 trade places, at the two positions holding them.
  if (flip_ != 0) {
    for (uint64_t q : parity_positions_) {
      if (stride == 0) {
        if (q == first) {
          for (uint64_t j = 0; j < count; ++j) out[j] ^= 1;
        }
      } else if (q >= first && (q - first) % stride == 0 && (q - first) / stride < count) {
        out[(q - first) / stride] ^= 1;
      }
    }
  }
}

}  // namespace distsampler
