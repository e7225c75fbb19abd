// Version 2's AVX2 gather kernel (feistel_v2_gather.h): 8 lanes of 32 bits per vector and 8
// vectors in flight, every round of a lane in registers; per round the round function's two 32-bit
// multiplies (FeistelV2::mix), and one 32 x 32 -> 64-bit multiply more per modular round.
//
// Positions below 2^32 (n <= 2^32) are 32-bit lanes from the start; larger ones are produced as
// 64-bit lanes, split into left (>> s) and right (& (2^s - 1)) parts and packed into 32-bit lanes,
// which the output unpacks again. A step whose largest left part reaches walk_bound (one unsigned
// max over its vectors, one compare) goes through fix_step. Compiled with a target attribute, so
// the build stays baseline; FeistelV2::gather calls it only where the CPU has AVX2.
#include "feistel_v2_gather.h"

#if DISTSAMPLER_X86_KERNELS
#include <immintrin.h>

#define DISTSAMPLER_TARGET_AVX2 __attribute__((target("avx2")))

namespace distsampler {
namespace detail {
namespace v2 {
namespace {

// The output offset (within 8) of 32-bit lane i: lanes are ordered so that the in-lane
// _mm256_unpacklo/hi_epi32 that widen them to 64 bits store offsets 0-3 and 4-7 in order (and it
// is the order _mm256_shuffle_ps leaves when it packs the low halves of two 64-bit vectors).
constexpr int32_t kAvx2Lane[8] = {0, 1, 4, 5, 2, 3, 6, 7};

// Vectors in flight per step: one vector alone is bound by the latency of its chain of rounds,
// which the out-of-order window cannot hide.
constexpr int kAvx2Vectors = 8;

// Round constants, broadcast once (AVX2 has no broadcast memory operands for integers).
struct Avx2Keys {
  __m256i key[FeistelV2::kMaxRounds];
  __m256i key2[FeistelV2::kMaxRounds];
};

// FeistelV2::mix per 32-bit lane.
DISTSAMPLER_TARGET_AVX2 inline __m256i avx2_mix(__m256i x, __m256i a, __m256i b) {
  __m256i h = _mm256_mullo_epi32(_mm256_xor_si256(x, a),
                                 _mm256_set1_epi32(static_cast<int>(FeistelV2::kMixMultiplier1)));
  h = _mm256_xor_si256(_mm256_xor_si256(h, _mm256_srli_epi32(h, FeistelV2::kMixShift)), b);
  return _mm256_mullo_epi32(h, _mm256_set1_epi32(static_cast<int>(FeistelV2::kMixMultiplier2)));
}

// floor(h * size / 2^32) per 32-bit lane: the even lanes' 64-bit products keep their high words
// after a shift, the odd lanes' already sit in place.
DISTSAMPLER_TARGET_AVX2 inline __m256i avx2_scale(__m256i h, __m256i size) {
  const __m256i even = _mm256_srli_epi64(_mm256_mul_epu32(h, size), 32);
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(h, 32), size);
  return _mm256_blend_epi32(even, odd, 0xaa);
}

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
DISTSAMPLER_TARGET_AVX2 inline uint64_t avx2_narrow(const Network& net, const Avx2Keys& k,
                                                    uint64_t first, uint64_t stride, uint64_t j,
                                                    uint64_t count, uint64_t* out) {
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
    if (avx2_flagged(flags, bound)) fix_step(net, first, stride, j, 8 * V, out);
  }
  return j;
}

// Any positions: 64-bit lanes split into parts and packed into 32-bit lanes (kAvx2Lane order).
template <int V, int R>
DISTSAMPLER_TARGET_AVX2 inline uint64_t avx2_wide(const Network& net, const Avx2Keys& k,
                                                  uint64_t first, uint64_t stride, uint64_t j,
                                                  uint64_t count, uint64_t* out) {
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
    if (avx2_flagged(flags, bound)) fix_step(net, first, stride, j, 8 * V, out);
  }
  return j;
}

template <int R>
DISTSAMPLER_TARGET_AVX2 void avx2_all(const Network& net, const Avx2Keys& k, uint64_t first,
                                      uint64_t stride, uint64_t count, uint64_t* out) {
  uint64_t j = 0;
  if (net.n <= (uint64_t{1} << 32)) {
    j = avx2_narrow<kAvx2Vectors, R>(net, k, first, stride, j, count, out);
    j = avx2_narrow<1, R>(net, k, first, stride, j, count, out);
  } else {
    j = avx2_wide<kAvx2Vectors, R>(net, k, first, stride, j, count, out);
    j = avx2_wide<1, R>(net, k, first, stride, j, count, out);
  }
  for (; j < count; ++j) out[j] = net.value(first + j * stride);
}

}  // namespace

DISTSAMPLER_TARGET_AVX2 void gather_avx2(const Network& net, uint64_t first, uint64_t stride,
                                         uint64_t count, uint64_t* out) {
  Avx2Keys k;
  for (int r = 0; r < net.rounds; ++r) {
    k.key[r] = _mm256_set1_epi32(static_cast<int>(net.keys[r]));
    k.key2[r] = _mm256_set1_epi32(static_cast<int>(net.keys2[r]));
  }
  if (net.rounds == FeistelV2::kDefaultRounds) {
    avx2_all<FeistelV2::kDefaultRounds>(net, k, first, stride, count, out);
  } else {
    avx2_all<0>(net, k, first, stride, count, out);
  }
}

}  // namespace v2
}  // namespace detail
}  // namespace distsampler

#endif  // DISTSAMPLER_X86_KERNELS
