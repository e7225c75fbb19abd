// Version 2's portable gather kernel (feistel_v2_gather.h), for every CPU, and the same source
// built for SSE4.1. With GCC or Clang it is written in their generic vector extension (4 x 32-bit
// lanes: SSE2 on baseline x86-64, NEON on ARM, scalar code elsewhere), 7 vectors in flight, every
// round of a lane in registers; other compilers get the scalar net.value per position.
//
// A lane holds a position as its left (>> s) and right (& (2^s - 1)) parts, 32 bits each: split
// from 32-bit positions when n <= 2^32; carried from vector to vector as the two parts (the right
// part's carry added into the left one) when n < 2^60; split from 64-bit positions above. The
// output widens (left << s) | right to 64 bits; a step holding a lane whose left part reaches
// walk_bound goes through fix_step.
#include "feistel_v2_gather.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace distsampler {
namespace detail {
namespace v2 {

#if defined(__GNUC__) || defined(__clang__)
namespace {

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
  Lanes key[FeistelV2::kMaxRounds];
  Lanes key2[FeistelV2::kMaxRounds];
};

// The round function's first multiply and xorshift (FeistelV2::mix without its last
// multiply, which the callers fuse with what they do next).
template <bool kNative>
inline __attribute__((always_inline)) Lanes portable_premix(Lanes x, Lanes a, Lanes b) {
  const Lanes h = portable_mullo<kNative>(x ^ a, Lanes{} + FeistelV2::kMixMultiplier1);
  return h ^ (h >> FeistelV2::kMixShift) ^ b;
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
                                          Lanes{} + FeistelV2::kMixMultiplier2) >>
                  rs;
      const Lanes c =
          portable_scaled_hash(portable_premix<kNative>(right[v], k.key[r + 1], k.key2[r + 1]),
                               Lanes{} + FeistelV2::kMixMultiplier2, size);
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
                                          Lanes{} + FeistelV2::kMixMultiplier2) >>
                  rs;
    }
  }
}

// Recomputes the lanes of a step whose value may be >= n (left >= walk_bound; left < 2^31, so a
// signed compare decides).
inline void portable_fix(const Network& net, const Lanes* left, uint64_t first, uint64_t stride,
                         uint64_t j, uint64_t* out) {
  const int32_t last = static_cast<int32_t>(walk_bound(net)) - 1;
  Mask any = {0, 0, 0, 0};
  for (int v = 0; v < kPortableVectors; ++v) any |= reinterpret_cast<const Mask&>(left[v]) > last;
  if ((any[0] | any[1] | any[2] | any[3]) == 0) return;
  fix_step(net, first, stride, j, kPortableLanes, out);
}

// R as for the x86 kernels: the rounds as a constant, or 0 for net.rounds.
// The rounds, the 64-bit output and the fix of one step of positions above 2^32.
template <int R, bool kSmall, bool kNative>
inline __attribute__((always_inline)) void portable_wide_step(const Network& net,
                                                              const PortableKeys& keys, Lanes* left,
                                                              Lanes* right, uint64_t first,
                                                              uint64_t stride, uint64_t j,
                                                              uint64_t* out) {
  portable_rounds<R, kSmall, kNative>(net, keys, left, right);
  const int s = net.right_bits;
  for (int v = 0; v < kPortableVectors; ++v) {
    const Wide x =
        (__builtin_convertvector(left[v], Wide) << s) | __builtin_convertvector(right[v], Wide);
    __builtin_memcpy(out + j + 4 * v, &x, sizeof x);
  }
  portable_fix(net, left, first, stride, j, out);
}

// Inlined into each entry point below, so that it compiles for that entry's instruction set.
template <int R, bool kSmall, bool kNative>
inline __attribute__((always_inline)) void portable_all(const Network& net, uint64_t first,
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
      portable_fix(net, left, first, stride, j, out);
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
      portable_wide_step<R, kSmall, kNative>(net, opaque(keys), left, right, first, stride, j, out);
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
      portable_wide_step<R, kSmall, kNative>(net, opaque(keys), left, right, first, stride, j, out);
    }
  }
  for (; j < count; ++j) out[j] = net.value(first + j * stride);
}

template <bool kNative>
inline __attribute__((always_inline)) void portable_entry(const Network& net, uint64_t first,
                                                          uint64_t stride, uint64_t count,
                                                          uint64_t* out) {
  constexpr int kDefault = FeistelV2::kDefaultRounds;
  if (net.left_size > (uint32_t{1} << 30)) {
    portable_all<0, false, kNative>(net, first, stride, count, out);
  } else if (net.rounds == kDefault) {
    portable_all<kDefault, true, kNative>(net, first, stride, count, out);
  } else {
    portable_all<0, true, kNative>(net, first, stride, count, out);
  }
}

}  // namespace

void gather_portable(const Network& net, uint64_t first, uint64_t stride, uint64_t count,
                     uint64_t* out) {
#if defined(__SSE2__)
  portable_entry<false>(net, first, stride, count, out);
#else
  portable_entry<true>(net, first, stride, count, out);
#endif
}

#if DISTSAMPLER_X86_KERNELS
// The portable kernel built for SSE4.1: its 32-bit multiply (pmulld) replaces SSE2's two pmuludq
// and three shuffles. Same source, same bits.
__attribute__((target("sse4.1"))) void gather_sse41(const Network& net, uint64_t first,
                                                    uint64_t stride, uint64_t count,
                                                    uint64_t* out) {
  portable_entry<true>(net, first, stride, count, out);
}
#endif
#else
// Other compilers: the scalar net.value per position.
void gather_portable(const Network& net, uint64_t first, uint64_t stride, uint64_t count,
                     uint64_t* out) {
  for (uint64_t j = 0; j < count; ++j) out[j] = net.value(first + j * stride);
}
#endif

}  // namespace v2
}  // namespace detail
}  // namespace distsampler
