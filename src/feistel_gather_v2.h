// feistel_gather_v2.h: version 2's gather kernels, one file per instruction set
// (feistel_gather_v2_portable.cc, _avx2.cc, _avx512.cc), and what they share; the dispatch among
// them is FeistelPermutation::gather_version2 (feistel_gather_v2.cc). Private to src/.
//
// Every kernel's contract: out[j] = p.network_value(first + j * stride) for j in [0, count), the
// walked network's value without the parity correction (gather_version2 applies it afterwards);
// every position below net.n. They compute the scalar encrypt2's integer operations, so all give
// the same bits (feistel_test compares each with operator()).
#ifndef DISTSAMPLER_SRC_FEISTEL_GATHER_V2_H_
#define DISTSAMPLER_SRC_FEISTEL_GATHER_V2_H_

#include <cstdint>

#include "distsampler/feistel.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define DISTSAMPLER_X86_KERNELS 1
#else
#define DISTSAMPLER_X86_KERNELS 0
#endif

namespace distsampler {
namespace detail {
namespace v2 {

using Network = FeistelPermutation::Network;

// The portable kernel (any CPU, any compiler).
void gather_portable(const FeistelPermutation& p, const Network& net, uint64_t first,
                     uint64_t stride, uint64_t count, uint64_t* out);
#if DISTSAMPLER_X86_KERNELS
// The portable kernel built for SSE4.1.
void gather_sse41(const FeistelPermutation& p, const Network& net, uint64_t first, uint64_t stride,
                  uint64_t count, uint64_t* out);
// 8 lanes of 32 bits per vector; the CPU must have AVX2.
void gather_avx2(const FeistelPermutation& p, const Network& net, uint64_t first, uint64_t stride,
                 uint64_t count, uint64_t* out);
// 16 lanes of 32 bits per vector; the CPU must have AVX-512 F, VL, BW and DQ.
void gather_avx512(const FeistelPermutation& p, const Network& net, uint64_t first, uint64_t stride,
                   uint64_t count, uint64_t* out);
#endif

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

// R > 0: the rounds as a constant (the default kVersion2Rounds, unrolled by the compiler); 0:
// net.rounds.
inline int rounds_of(int R, const Network& net) { return R > 0 ? R : net.rounds; }

#if defined(__GNUC__) || defined(__clang__)
// The round constants, read through a pointer the compiler cannot see through: they stay memory
// operands (AVX-512: embedded broadcasts) instead of being hoisted out of the loop into the
// registers the lanes need, whose spills cost more than the loads. The portable and AVX-512
// kernels use it; the AVX2 kernel, slower with it, does not.
template <typename Keys>
inline __attribute__((always_inline)) const Keys& opaque(const Keys& k) {
  const Keys* p = &k;
  __asm__("" : "+r"(p));
  return *p;
}
#endif

}  // namespace v2
}  // namespace detail
}  // namespace distsampler

#endif  // DISTSAMPLER_SRC_FEISTEL_GATHER_V2_H_
