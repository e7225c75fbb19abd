// FeistelV1::gather: version 1 (feistel_v1.h) evaluated for many positions at once, with SIMD.
//
// Lanes are evaluated in blocks of kBlock: rounds outside, lanes inside, so every inner loop is
// straight-line 32-bit arithmetic (XOR, shifts, 32-bit multiplies) that the compiler vectorizes.
// Cycle walking stays vectorized too: after a pass, the offsets (into the output) of the lanes
// whose value is still >= n are compacted into a short list of 32-bit offsets, and only those
// lanes are read back, encrypted again and rewritten, until none is left. For 2^(k - 1) < n <= 2^k
// that costs fewer than one extra pass on average, never a pass per lane.
//
// One source, one kernel per instruction set: the kernel is a force-inlined template instantiated
// in functions carrying GCC/Clang target attributes (AVX2, AVX-512), each with its own compaction
// (CompactAvx2, CompactAvx512); other compilers or architectures get the portable instantiation.
// The AVX-512 one has matched operator() on an AVX-512 CPU (scripts/device_check_avx512.sh), so
// the dispatch chooses it there (kAvx512Verified, src/feistel.cc).
// Every kernel runs the same integer operations in the same order, so all give the bits of the
// scalar operator(); feistel_test compares each with it.
#include <algorithm>

#include "distsampler/feistel.h"
#include "distsampler/feistel_v1.h"
#include "distsampler/hash.h"
#include "feistel_internal.h"

#if DISTSAMPLER_X86_KERNELS
#define DISTSAMPLER_ALWAYS_INLINE inline __attribute__((always_inline))
#include <immintrin.h>
#else
#define DISTSAMPLER_ALWAYS_INLINE inline
#endif
#if defined(__GNUC__) || defined(__clang__)
// Keeps a loop scalar: a vectorized scatter (vpscatterqq) is microcoded and slow on AMD cores.
#define DISTSAMPLER_SCALAR_LOOP() __asm__ volatile("" ::: "memory")
#else
#define DISTSAMPLER_SCALAR_LOOP()
#endif

namespace distsampler {
namespace detail {
namespace {

constexpr int kBlock = 256;  // lanes per block: 2 KB of halves, resident in L1
// Lanes per inner step, a multiple of every vector width: lane counts are rounded up to it, so no
// scalar remainder loop ever runs (the extra lanes compute values nobody reads).
constexpr int kStep = 16;

int round_up_to_step(int count) { return (count + kStep - 1) / kStep * kStep; }

struct Key {
  uint64_t n;
  int rounds;
  int right_bits;
  uint32_t left_mask;
  uint32_t right_mask;
  const uint32_t* keys;
};

// Runs every round on lanes [0, round_up_to_step(count)) of (left, right).
DISTSAMPLER_ALWAYS_INLINE void encrypt_lanes(const Key& key, uint32_t* left, uint32_t* right,
                                             int count) {
  const uint32_t lm = key.left_mask;
  const uint32_t rm = key.right_mask;
  const int padded = round_up_to_step(count);
  int r = 0;
  for (; r + 1 < key.rounds; r += 2) {
    const uint32_t k0 = key.keys[r];
    const uint32_t k1 = key.keys[r + 1];
    for (int b = 0; b < padded; b += kStep) {
      uint32_t* __restrict lb = left + b;
      uint32_t* __restrict rb = right + b;
      for (int j = 0; j < kStep; ++j) {
        const uint32_t rr = rb[j] ^ (mix32(lb[j] ^ k0) & rm);
        lb[j] ^= mix32(rr ^ k1) & lm;
        rb[j] = rr;
      }
    }
  }
  if (r < key.rounds) {
    const uint32_t k0 = key.keys[r];
    for (int b = 0; b < padded; b += kStep) {
      for (int j = 0; j < kStep; ++j) right[b + j] ^= mix32(left[b + j] ^ k0) & rm;
    }
  }
}

// The cycle-walking queue: offsets into `out` whose value there is still >= n.
struct Queue {
  // Walking passes run while kBlock or more are queued, and a block adds at most kBlock, so it
  // never holds 2 * kBlock (plus 16 entries of slack that Compact may write past the end).
  uint32_t position[2 * kBlock + 16];
  int size = 0;
};

// A kernel call covers at most this many outputs, so that every offset fits the queue's 32 bits.
constexpr uint64_t kMaxWindow = uint64_t{1} << 31;

// Compact*::run appends to q the offset of lane j for each j in [0, lanes) with values[j] >= n,
// in order of j; the offset of lane j is positions[j], or base + j when positions is null. n is
// below 2^63. Which lanes walk, and in what order, changes no value.
struct CompactScalar {
  static void run(const uint64_t* values, const uint32_t* positions, uint32_t base, int lanes,
                  uint64_t n, Queue& q) {
    int size = q.size;
    for (int j = 0; j < lanes; ++j) {
      q.position[size] = positions ? positions[j] : base + static_cast<uint32_t>(j);
      size += values[j] >= n;
    }
    q.size = size;
  }
};

// gather for count <= kMaxWindow.
template <class Compact>
DISTSAMPLER_ALWAYS_INLINE void gather_window(const Key& key, uint64_t first, uint64_t stride,
                                             uint64_t count, uint64_t* out) {
  // Zeroed once: lanes past a walking pass's count (rounded up to kStep) read defined values.
  alignas(64) uint32_t left[kBlock] = {};
  alignas(64) uint32_t right[kBlock] = {};
  alignas(64) uint64_t value[kBlock];
  alignas(64) uint32_t position[kBlock];
  Queue q;
  const int rb = key.right_bits;
  const uint32_t rm = key.right_mask;
  const uint64_t n = key.n;
  // Re-encrypts the values at the last `lanes` queued offsets, stores them back, and queues
  // those still >= n again.
  auto walk = [&](int lanes) {
    q.size -= lanes;
    std::copy(q.position + q.size, q.position + q.size + lanes, position);
    for (int i = 0; i < lanes; ++i) {
      const uint64_t v = out[position[i]];
      left[i] = static_cast<uint32_t>(v >> rb);
      right[i] = static_cast<uint32_t>(v) & rm;
      DISTSAMPLER_SCALAR_LOOP();  // scalar loads: a vectorized gather is slower here
    }
    encrypt_lanes(key, left, right, lanes);
    for (int i = 0; i < lanes; ++i) value[i] = (static_cast<uint64_t>(left[i]) << rb) | right[i];
    for (int i = 0; i < lanes; ++i) {
      out[position[i]] = value[i];
      DISTSAMPLER_SCALAR_LOOP();
    }
    Compact::run(value, position, 0, lanes, n, q);
  };
  // No value can reach n when n is a power of two, the only n that does not fit in 63 bits.
  const bool walks = (n & (n - 1)) != 0;
  for (uint64_t base = 0; base < count; base += kBlock) {
    const int lanes = static_cast<int>(std::min<uint64_t>(kBlock, count - base));
    const uint64_t x0 = first + base * stride;
    for (int j = 0; j < round_up_to_step(lanes); ++j) {
      const uint64_t x = x0 + static_cast<uint64_t>(j) * stride;
      left[j] = static_cast<uint32_t>(x >> rb);
      right[j] = static_cast<uint32_t>(x) & rm;
    }
    encrypt_lanes(key, left, right, lanes);
    uint64_t* o = out + base;
    for (int j = 0; j < lanes; ++j) {
      o[j] = (static_cast<uint64_t>(left[j]) << rb) | right[j];
    }
    if (!walks) continue;
    // Cycle walking, batched across blocks so that its passes are full vectors too. The lanes of
    // the previous block are queued, not this one's: their stores have long retired.
    if (base > 0)
      Compact::run(o - kBlock, nullptr, static_cast<uint32_t>(base - kBlock), kBlock, n, q);
    while (q.size >= kBlock) walk(kBlock);
  }
  if (walks && count > 0) {
    const uint64_t last = (count - 1) / kBlock * kBlock;
    Compact::run(out + last, nullptr, static_cast<uint32_t>(last), static_cast<int>(count - last),
                 n, q);
  }
  while (q.size > 0) walk(std::min(q.size, kBlock));
}

template <class Compact>
DISTSAMPLER_ALWAYS_INLINE void gather_kernel(const Key& key, uint64_t first, uint64_t stride,
                                             uint64_t count, uint64_t* out) {
  for (uint64_t done = 0; done < count; done += kMaxWindow) {
    gather_window<Compact>(key, first + done * stride, stride, std::min(kMaxWindow, count - done),
                           out + done);
  }
}

void gather_portable(const Key& key, uint64_t first, uint64_t stride, uint64_t count,
                     uint64_t* out) {
  gather_kernel<CompactScalar>(key, first, stride, count, out);
}

#if DISTSAMPLER_X86_KERNELS
#define DISTSAMPLER_TARGET_AVX2 __attribute__((target("avx2")))
// prefer-vector-width is GCC's; clang (the fuzz build) ignores the whole attribute if it sees it.
#if defined(__clang__)
#define DISTSAMPLER_TARGET_AVX512 __attribute__((target("avx2,avx512f,avx512vl,avx512bw,avx512dq")))
#else
#define DISTSAMPLER_TARGET_AVX512 \
  __attribute__((target("avx2,avx512f,avx512vl,avx512bw,avx512dq,prefer-vector-width=512")))
#endif

// For each 8-bit mask, the permutation of eight 32-bit lanes that moves the selected ones first.
struct CompactTable {
  alignas(32) int32_t perm[256][8];
  constexpr CompactTable() : perm{} {
    for (int m = 0; m < 256; ++m) {
      int k = 0;
      for (int b = 0; b < 8; ++b) {
        if (m & (1 << b)) perm[m][k++] = b;
      }
    }
  }
};
constexpr CompactTable kCompactTable{};

// 8 lanes at a time: two signed 64-bit compares (values and n are below 2^63), an 8-bit mask, and
// the permutation of kCompactTable that moves the selected offsets first.
struct CompactAvx2 {
  DISTSAMPLER_TARGET_AVX2 static void run(const uint64_t* values, const uint32_t* positions,
                                          uint32_t base, int lanes, uint64_t n, Queue& q) {
    const __m256i limit = _mm256_set1_epi64x(static_cast<int64_t>(n) - 1);
    __m256i iota = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int32_t>(base)),
                                    _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256i eight = _mm256_set1_epi32(8);
    int size = q.size;
    int j = 0;
    for (; j + 8 <= lanes; j += 8) {
      const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(values + j));
      const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(values + j + 4));
      const int mask =
          _mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpgt_epi64(v0, limit))) |
          (_mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpgt_epi64(v1, limit))) << 4);
      const __m256i p =
          positions ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(positions + j)) : iota;
      const __m256i perm =
          _mm256_load_si256(reinterpret_cast<const __m256i*>(kCompactTable.perm[mask]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q.position + size),
                          _mm256_permutevar8x32_epi32(p, perm));
      size += __builtin_popcount(static_cast<unsigned>(mask));
      iota = _mm256_add_epi32(iota, eight);
    }
    q.size = size;
    CompactScalar::run(values + j, positions ? positions + j : nullptr,
                       base + static_cast<uint32_t>(j), lanes - j, n, q);
  }
};

// 16 lanes at a time: two compares into mask registers, joined, and one compress of the 16
// offsets (in registers; the compressing store to memory is slow on some AMD cores).
struct CompactAvx512 {
  DISTSAMPLER_TARGET_AVX512 static void run(const uint64_t* values, const uint32_t* positions,
                                            uint32_t base, int lanes, uint64_t n, Queue& q) {
    const __m512i limit = _mm512_set1_epi64(static_cast<int64_t>(n));
    __m512i iota =
        _mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(base)),
                         _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    const __m512i sixteen = _mm512_set1_epi32(16);
    int size = q.size;
    int j = 0;
    for (; j + 16 <= lanes; j += 16) {
      const __mmask8 low = _mm512_cmpge_epu64_mask(_mm512_loadu_si512(values + j), limit);
      const __mmask8 high = _mm512_cmpge_epu64_mask(_mm512_loadu_si512(values + j + 8), limit);
      const __mmask16 mask = _mm512_kunpackb(high, low);
      const __m512i p = positions ? _mm512_loadu_si512(positions + j) : iota;
      _mm512_storeu_si512(q.position + size, _mm512_maskz_compress_epi32(mask, p));
      size += __builtin_popcount(static_cast<unsigned>(mask));
      iota = _mm512_add_epi32(iota, sixteen);
    }
    q.size = size;
    CompactScalar::run(values + j, positions ? positions + j : nullptr,
                       base + static_cast<uint32_t>(j), lanes - j, n, q);
  }
};

DISTSAMPLER_TARGET_AVX2 void gather_avx2(const Key& key, uint64_t first, uint64_t stride,
                                         uint64_t count, uint64_t* out) {
  gather_kernel<CompactAvx2>(key, first, stride, count, out);
}

DISTSAMPLER_TARGET_AVX512 void gather_avx512(const Key& key, uint64_t first, uint64_t stride,
                                             uint64_t count, uint64_t* out) {
  gather_kernel<CompactAvx512>(key, first, stride, count, out);
}
#endif

}  // namespace

void FeistelV1::gather(uint64_t first, uint64_t stride, uint64_t count, uint64_t* out,
                       SimdLevel level) const {
  const Key key{n_, rounds_, right_bits_, left_mask_, right_mask_, keys_};
  switch (level) {
#if DISTSAMPLER_X86_KERNELS
    // Dispatch (detail::select_simd_level) never asks for an unverified kernel; an explicit
    // level runs its own kernel, so that a check can compare it with operator().
    case SimdLevel::kAvx512:
      gather_avx512(key, first, stride, count, out);
      break;
    case SimdLevel::kAvx2:
      gather_avx2(key, first, stride, count, out);
      break;
#endif
    default:
      gather_portable(key, first, stride, count, out);
      break;
  }
}

}  // namespace detail
}  // namespace distsampler
