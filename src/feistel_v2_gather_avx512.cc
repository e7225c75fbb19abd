// Version 2's AVX-512 gather kernel (feistel_v2_gather.h): 16 lanes of 32 bits per vector and 8
// vectors in flight, every round of a lane in registers, the round keys as broadcast memory
// operands. Each lane's position is carried as its left and right parts from vector to vector;
// the output unpacks (left << s) | right into 64-bit values. A step whose largest left part
// reaches walk_bound goes through fix_step.
//
// Chosen by the dispatch on AVX-512 CPUs since it matched operator() on one (the rule:
// kAvx512Verified in src/feistel.cc; the check: scripts/device_check_avx512.sh); an explicit
// gather(..., SimdLevel::kAvx512) runs it too. Compiled with a target attribute, so the build stays
// baseline.
#include "feistel_v2_gather.h"

#if DISTSAMPLER_X86_KERNELS
#include <immintrin.h>

#define DISTSAMPLER_TARGET_AVX512 __attribute__((target("avx2,avx512f,avx512vl,avx512bw,avx512dq")))

// GCC 12's AVX-512 headers start some intrinsics from _mm512_undefined_*, which its own
// -Wmaybe-uninitialized then reports (GCC bug 105593, fixed in GCC 13); no value here is read
// uninitialized.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace distsampler {
namespace detail {
namespace v2 {
namespace {

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
  uint32_t key[FeistelV2::kMaxRounds];   // even rounds: the key XORed into left
  uint32_t fold[FeistelV2::kMaxRounds];  // even rounds: P_before ^ P_after
  uint32_t key2[FeistelV2::kMaxRounds];
  uint32_t last;  // P after the last round
};

// floor(h * size / 2^32) per 32-bit lane, as avx2_scale.
DISTSAMPLER_TARGET_AVX512 inline __m512i avx512_scale(__m512i h, __m512i size) {
  const __m512i even = _mm512_mul_epu32(h, size);
  const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(h, 32), size);
  // The even lanes take the high words of their products (one masked in-lane shuffle).
  return _mm512_mask_shuffle_epi32(odd, 0x5555, even, _MM_PERM_DDBB);
}

template <int V, int R>
DISTSAMPLER_TARGET_AVX512 inline void avx512_rounds(const Network& net, const Avx512Keys& k,
                                                    __m512i* left, __m512i* right) {
  const int rounds = rounds_of(R, net);
  const __m128i rs = _mm_cvtsi32_si128(net.right_shift);
  const __m512i size = _mm512_set1_epi32(static_cast<int>(net.left_size));
  const __m512i m1 = _mm512_set1_epi32(static_cast<int>(FeistelV2::kMixMultiplier1));
  const __m512i m2 = _mm512_set1_epi32(static_cast<int>(FeistelV2::kMixMultiplier2));
  for (int r = 0; r < rounds; r += 2) {
    for (int v = 0; v < V; ++v) {
      __m512i g = _mm512_mullo_epi32(
          _mm512_xor_si512(left[v], _mm512_set1_epi32(static_cast<int>(k.key[r]))), m1);
      g = _mm512_ternarylogic_epi32(g, _mm512_srli_epi32(g, FeistelV2::kMixShift),
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
        g = _mm512_ternarylogic_epi32(g, _mm512_srli_epi32(g, FeistelV2::kMixShift),
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
DISTSAMPLER_TARGET_AVX512 inline uint64_t avx512_steps(const Network& net, const Avx512Keys& k,
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
    if (_mm512_cmpge_epu32_mask(flags, bound) != 0) fix_step(net, first, stride, j, 16 * V, out);
  }
  return j;
}

template <int R>
DISTSAMPLER_TARGET_AVX512 void avx512_all(const Network& net, const Avx512Keys& k, uint64_t first,
                                          uint64_t stride, uint64_t count, uint64_t* out) {
  uint64_t j = 0;
  if (net.n <= (uint64_t{1} << 32)) {
    j = avx512_steps<kAvx512Vectors, R, false>(net, k, first, stride, j, count, out);
    j = avx512_steps<1, R, false>(net, k, first, stride, j, count, out);
  } else {
    j = avx512_steps<kAvx512Vectors, R, true>(net, k, first, stride, j, count, out);
    j = avx512_steps<1, R, true>(net, k, first, stride, j, count, out);
  }
  for (; j < count; ++j) out[j] = net.value(first + j * stride);
}

}  // namespace

DISTSAMPLER_TARGET_AVX512 void gather_avx512(const Network& net, uint64_t first, uint64_t stride,
                                             uint64_t count, uint64_t* out) {
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
  if (net.rounds == FeistelV2::kDefaultRounds) {
    avx512_all<FeistelV2::kDefaultRounds>(net, k, first, stride, count, out);
  } else {
    avx512_all<0>(net, k, first, stride, count, out);
  }
}

}  // namespace v2
}  // namespace detail
}  // namespace distsampler

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif  // DISTSAMPLER_X86_KERNELS
